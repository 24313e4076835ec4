"""Bytes of a shard directory in the current format (narrow token ids, lengths.npy) against the
same shards with int32 token ids and no lengths.npy (the wide layout), which this writes beside them.

    python -m benchmarks.shard_bytes SHARDS [--work /tmp/ems_shard_bytes]

Prints each array's size in both layouts and the totals.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from ems.shards import SHARD_FORMAT


def wide_copy(directory: Path, out: Path) -> Path:
    """`directory`'s shards with int32 token ids and no lengths.npy, in `out` (replaced)."""
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
    if json.loads((args.shards / "index.json").read_text()).get("format") != SHARD_FORMAT:
        raise SystemExit(f"{args.shards} is not shard format {SHARD_FORMAT}: binarize it again to compare")
    old = wide_copy(args.shards, args.work / "wide")
    names = sorted({p.name for p in args.shards.iterdir()} | {p.name for p in old.iterdir()})
    print(f"{'file':20} {'wide':>14} {'current':>14}")
    totals = [0, 0]
    for name in names:
        sizes = [(d / name).stat().st_size if (d / name).is_file() else 0 for d in (old, args.shards)]
        totals = [t + s for t, s in zip(totals, sizes)]
        print(f"{name:20} {sizes[0]:14,} {sizes[1]:14,}")
    print(f"{'total':20} {totals[0]:14,} {totals[1]:14,}  ({totals[1] / totals[0]:.2f}x)")


if __name__ == "__main__":
    main()
