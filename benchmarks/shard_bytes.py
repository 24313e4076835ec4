"""Bytes of a shard directory in the current format (narrow token ids, lengths.npy) against the
same shards in format 1 (int32 token ids, no lengths.npy), which this writes beside them.

    python -m benchmarks.shard_bytes SHARDS [--work /tmp/ems_shard_bytes]

Prints each array's size in both formats and the totals. The format-1 copy is made as
binarize wrote it before format 2 and checked to read back the same batches (ems.training.batches).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from ems.shards import PairShards
from ems.training.batch_order import BatchOrder
from ems.training.batches import collate


def format_1_copy(directory: Path, out: Path) -> Path:
    """`directory`'s shards as format 1 wrote them, in `out` (replaced)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(directory, out)
    np.save(out / "tokens.npy", np.load(directory / "tokens.npy").astype("<i4"))
    (out / "lengths.npy").unlink()
    index = json.loads((out / "index.json").read_text())
    for key in ("format", "token_dtype", "length_dtype"):
        index.pop(key, None)
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")  # as binarize writes it
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ems_shard_bytes"))
    args = parser.parse_args()
    if json.loads((args.shards / "index.json").read_text()).get("format", 1) < 2:
        raise SystemExit(f"{args.shards} is already format 1: binarize it again to compare")
    old = format_1_copy(args.shards, args.work / "format1")
    new_shards, old_shards = PairShards(args.shards), PairShards(old)
    order = BatchOrder(np.minimum(new_shards.side_lengths(), 64), min(64, len(new_shards)), seed=0)
    for batch in order.epoch(0)[:3]:
        a, b = collate(new_shards, batch, 64), collate(old_shards, batch, 64)
        assert all(np.array_equal(a[key], b[key]) for key in ("src", "tgt")), "format-1 copy reads differently"
    names = sorted({p.name for p in args.shards.iterdir()} | {p.name for p in old.iterdir()})
    print(f"{'file':20} {'format 1':>14} {'current':>14}")
    totals = [0, 0]
    for name in names:
        sizes = [(d / name).stat().st_size if (d / name).is_file() else 0 for d in (old, args.shards)]
        totals = [t + s for t, s in zip(totals, sizes)]
        print(f"{name:20} {sizes[0]:14,} {sizes[1]:14,}")
    print(f"{'total':20} {totals[0]:14,} {totals[1]:14,}  ({totals[1] / totals[0]:.2f}x)")


if __name__ == "__main__":
    main()
