"""Training-step throughput of an EMS preset on this machine (forward + backward + AdamW step), fp32 and bf16.

    python -m benchmarks.train_throughput [--preset tiny] [--batch 128] [--length 12] [--steps 10]

Prints, for fp32 and bf16 autocast: seconds per step (the median after two warm-up steps), pairs/s, real
tokens/s and the model FLOP rate (ems.flops), so presets and dtypes can be compared on one machine. The step
is the trainer's without its loop (benchmarks.bare_step); synthetic token ids, every sentence `--length`
tokens.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from benchmarks.bare_step import bare_step, median_seconds
from ems.flops import step_flops
from ems.model_config import config_from_preset


def run(preset: str, batch: int, length: int, steps: int, dtype: str, vocab: int, langs: int) -> dict:
    cfg = config_from_preset(preset, vocab_size=vocab, n_languages=langs)
    generator = torch.Generator().manual_seed(0)
    pairs = {
        "src": torch.randint(2 + langs, vocab, (batch, length), generator=generator),
        "tgt": torch.randint(2 + langs, vocab, (batch, length), generator=generator),
        "src_lang": torch.randint(0, langs, (batch,), generator=generator),
        "tgt_lang": torch.randint(0, langs, (batch,), generator=generator),
    }
    seconds = median_seconds(bare_step(cfg, pairs, torch.device("cpu"), dtype=dtype), torch.device("cpu"), 2, steps)
    lengths = np.full(batch, length)
    return {
        "s_per_step": seconds,
        "pairs_per_s": batch / seconds,
        "tokens_per_s": 2 * batch * length / seconds,
        "gflops": step_flops(cfg, lengths, lengths).total / seconds / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--languages", type=int, default=71)
    args = parser.parse_args()
    print(f"preset={args.preset} batch={args.batch} length={args.length} threads={torch.get_num_threads()}")
    results = {}
    for dtype in ("fp32", "bf16"):
        results[dtype] = r = run(args.preset, args.batch, args.length, args.steps, dtype, args.vocab, args.languages)
        print(
            f"{dtype}: {r['s_per_step']:.3f} s/step  {r['pairs_per_s']:.0f} pairs/s  "
            f"{r['tokens_per_s']:.0f} tokens/s  {r['gflops']:.1f} GFLOP/s"
        )
    print(f"bf16 / fp32 speed-up: {results['fp32']['s_per_step'] / results['bf16']['s_per_step']:.2f}x")


if __name__ == "__main__":
    main()
