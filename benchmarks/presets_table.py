"""The model presets side by side: parameters, training FLOPs per pair on a real corpus, and (with
--time) the seconds of one training step on this machine.

    python -m benchmarks.presets_table --shards runs/ml/data/shards/train [--time tiny small base] [--out DIR]

FLOPs per pair (ems.flops.step_flops, real tokens only) are averaged over --batches random batches
of --batch-size pairs drawn from the shards, so they follow the corpus's sentence lengths (each cut
at the preset's max_len, as training cuts them); with --xtr-vocabulary batch (the recipes' setting)
the XTR softmax's size is each batch's number of distinct tokens. --time runs --steps training steps
(forward, backward, AdamW; fp32 unless --bf16) of the named presets on one of those batches, after
2 warm-up steps, and reports the median: compare presets within one run on one machine only.
Writes presets.md and presets.json to --out; prints the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.bare_step import bare_step, median_seconds
from benchmarks.report_files import give_result
from ems.flops import batch_tensors, encoder_parameters, flops_per_pair, sample_batches
from ems.model_config import PRESETS, config_from_preset
from ems.shards import PairShards


def truncated_share(shards: PairShards, max_len: int) -> float:
    """The share of the corpus's sentences longer than max_len tokens."""
    return float((shards.side_lengths() > max_len).mean())


def step_seconds(cfg, batch: dict[str, torch.Tensor], steps: int, bf16: bool) -> float:
    """Median seconds of one training step (benchmarks.bare_step) of a fresh model of `cfg` on `batch`,
    after two warm-up steps."""
    step = bare_step(cfg, batch, torch.device("cpu"), dtype="bf16" if bf16 else "fp32")
    return median_seconds(step, torch.device("cpu"), warmup=2, repeats=steps)


def preset_config(name: str, shards: PairShards, batch_vocabulary: bool):
    """The preset with the corpus's vocabulary and languages (ems-paper's own 60k + 62 replaced too)."""
    return config_from_preset(
        name,
        vocab_size=shards.index["vocab_size"],
        n_languages=len(shards.languages),
        xtr_vocabulary="batch" if batch_vocabulary else "full",
    )


def run(args: argparse.Namespace) -> list[dict]:
    shards = PairShards(args.shards)
    batches = sample_batches(shards, args.batch_size, args.batches)
    batch_vocabulary = args.xtr_vocabulary == "batch"
    rows = []
    for name in PRESETS:
        cfg = preset_config(name, shards, batch_vocabulary)
        params = encoder_parameters(cfg)
        row = {
            "preset": name,
            **{k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "d_ffn", "max_len", "vocab_size")},
            "params": params,
            "train_flops_per_pair": flops_per_pair(cfg, shards, batches, batch_vocabulary),
            "truncated_share": truncated_share(shards, cfg.max_len),
        }
        if name in args.time:
            seconds = step_seconds(cfg, batch_tensors(shards, batches[0], cfg.max_len), args.steps, args.bf16)
            row["step_seconds"] = seconds
            row["pairs_per_second"] = args.batch_size / seconds
        rows.append(row)
        print(f"{name}: {json.dumps(row)}", flush=True)
    return rows


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"Corpus: {args.shards}; FLOPs per pair averaged over {args.batches} random batches of {args.batch_size} "
        f"pairs, XTR softmax over {'each batch' if args.xtr_vocabulary == 'batch' else 'the whole vocabulary'}.",
        "",
        "| preset | d_model | layers | heads | d_ffn | max_len | params (embeddings + layers) | train GFLOPs per pair "
        "| sentences over max_len | s/step (pairs/s) |",
        "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        p = r["params"]
        timed = f"{r['step_seconds']:.3f} ({r['pairs_per_second']:.0f})" if "step_seconds" in r else "–"
        lines.append(
            f"| {r['preset']} | {r['d_model']} | {r['n_layers']} | {r['n_heads']} | {r['d_ffn']} | {r['max_len']} | "
            f"{p['total'] / 1e6:.1f}M ({p['embeddings'] / 1e6:.1f}M + {p['layers'] / 1e6:.2f}M) | "
            f"{r['train_flops_per_pair'] / 1e9:.3f} | {100 * r['truncated_share']:.3f}% | {timed} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=Path, required=True, help="a training shard directory (data_prep binarize)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--xtr-vocabulary", choices=("batch", "full"), default="batch")
    parser.add_argument("--time", nargs="*", default=[], choices=list(PRESETS), help="presets to time")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = run(args)
    give_result(markdown(rows, args), rows, args.out, "presets")
    return rows


if __name__ == "__main__":
    main()
