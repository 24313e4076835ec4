"""In-batch duplicates and padding of the trainer's batch order on real shards.

    python -m benchmarks.batch_order_benchmark SHARDS [--batch 256] [--max-len 64] [--bucket-batches 50 1000]
                                               [--padding-budgets 0 0.005 0.01]

For random batches, length-bucketed batches (ems.training.batch_order.BatchOrder without content ids) and bucketed
batches with duplicates spread apart at each padding budget: the share of rows that share a
sentence with another row of their batch, the real-token ratio (each side padded to its longest
sentence, lengths cut at max_len as the trainer does) and the seconds one epoch's order takes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ems.shards import PairShards
from ems.training.batch_order import BatchOrder, rows_with_duplicates


def measure(batches: list[np.ndarray], content_ids: np.ndarray, lengths: np.ndarray) -> tuple[float, float]:
    """(share of rows with an in-batch duplicate, real tokens / padded slots) of a batch list."""
    rows = sum(len(b) for b in batches)
    duplicates = sum(rows_with_duplicates(b, content_ids) for b in batches) / rows
    real = sum(int(lengths[b].sum()) for b in batches)
    slots = sum(int(lengths[b].max(axis=0).sum()) * len(b) for b in batches)
    return duplicates, real / slots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--bucket-batches", type=int, nargs="+", default=[50, 1000])
    parser.add_argument("--padding-budgets", type=float, nargs="+", default=[0.0, 0.005, 0.01])
    args = parser.parse_args(argv)
    shards = PairShards(args.shards)
    if shards.content_ids is None:
        print(f"error: {args.shards} has no content_ids.npy: binarize it again", file=sys.stderr)
        return 1
    ids, lengths = np.asarray(shards.content_ids), np.minimum(shards.side_lengths(), args.max_len)
    n_batches = len(ids) // args.batch
    random_batches = list(
        np.random.default_rng(0).permutation(len(ids))[: n_batches * args.batch].reshape(n_batches, args.batch)
    )
    print(f"{len(ids)} pairs, batch {args.batch}, {n_batches} batches an epoch")
    print("| order | bucket windows | padding budget | rows with an in-batch duplicate | real tokens | s/epoch |")
    print("|:--|--:|--:|--:|--:|--:|")
    duplicates, ratio = measure(random_batches, ids, lengths)
    print(f"| random | | | {100 * duplicates:.2f}% | {ratio:.3f} | |")
    for bucket in args.bucket_batches:
        for budget in [None, *args.padding_budgets]:
            order = BatchOrder(
                lengths,
                args.batch,
                seed=0,
                bucket_batches=bucket,
                content_ids=None if budget is None else ids,
                padding_budget=budget or 0.0,
            )
            started = time.perf_counter()
            batches = order.epoch(0)
            seconds = time.perf_counter() - started
            duplicates, ratio = measure(batches, ids, lengths)
            name = "bucketed" if budget is None else "bucketed, duplicates spread"
            print(
                f"| {name} | {bucket} | {'' if budget is None else budget} | {100 * duplicates:.2f}% | "
                f"{ratio:.3f} | {seconds:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
