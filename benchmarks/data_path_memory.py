"""Per-rank host memory of the trainer's data path on synthetic shards of N pairs.

    python -m benchmarks.data_path_memory --pairs 10000000 50000000 [--dir /tmp/shards] [--batches 20]

For each N: writes format-2 shards (data_prep.binarize's layout; tokens.npy sparse, since only
the rows of a few batches are read; 8 language pairs; unique content ids; side lengths drawn
around 20 tokens), then, in a fresh process, runs what one rank of ems.training.train does with them and
prints its resident set after each stage, split into anonymous memory (the process's own arrays)
and file-backed pages (the memory-mapped shards, page cache the kernel can drop), and getrusage's
peak: open the shards, `build_order` (side lengths, language-pair groups, duplicate spreading at
the trainer's defaults), the first global batch from `iterate_batches` (which builds the first
bucketing window's order: 1000 batches), and the first `--batches` global batches collated at the
paper's 4 x 152 pairs.
The last line extrapolates the largest resident set linearly to 143M pairs (the paper's corpus).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.process_memory import status_mib

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1 << 22


def write_shards(directory: Path, n_pairs: int, seed: int = 0) -> None:
    """Format-2 shards of `n_pairs` synthetic pairs in `directory` (skipped when index.json says so)."""
    index_path = directory / "index.json"
    if index_path.is_file() and json.loads(index_path.read_text())["n_pairs"] == n_pairs:
        return
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths = np.lib.format.open_memmap(directory / "lengths.npy", "w+", np.uint8, (n_pairs, 2))
    langs = np.lib.format.open_memmap(directory / "langs.npy", "w+", np.int16, (n_pairs, 2))
    ids = np.lib.format.open_memmap(directory / "content_ids.npy", "w+", np.uint64, (n_pairs, 2))
    offsets = np.lib.format.open_memmap(directory / "offsets.npy", "w+", np.int64, (2 * n_pairs + 1,))
    pairs_per_file = -(-n_pairs // 8)
    end = 0
    for start in range(0, n_pairs, CHUNK):
        stop = min(start + CHUNK, n_pairs)
        chunk = np.clip(rng.gamma(4.0, 5.0, size=(stop - start, 2)), 1, 120).astype(np.uint8)
        lengths[start:stop] = chunk
        langs[start:stop, 0] = np.arange(start, stop) // pairs_per_file + 1
        langs[start:stop, 1] = 0
        ids[start:stop] = np.arange(2 * start, 2 * stop, dtype=np.uint64).reshape(-1, 2)
        ends = end + np.cumsum(chunk.reshape(-1).astype(np.int64))
        offsets[2 * start + 1 : 2 * stop + 1] = ends
        end = int(ends[-1])
    for array in (lengths, langs, ids, offsets):
        array.flush()
    del lengths, langs, ids, offsets
    np.lib.format.open_memmap(directory / "tokens.npy", "w+", np.uint16, (end,)).flush()  # sparse: never written
    languages = ["en"] + [f"x{i}" for i in range(1, 9)]
    files = [
        {
            "l1": f"x{i + 1}",
            "l2": "en",
            "sides": [f"x{i + 1}", "en"],
            "name": "synthetic",
            "start": i * pairs_per_file,
            "end": min((i + 1) * pairs_per_file, n_pairs),
        }
        for i in range(8)
    ]
    index = {
        "format": 2,
        "languages": languages,
        "vocab_size": 60000,
        "vocab_sha1": "synthetic",
        "n_pairs": n_pairs,
        "n_tokens": end,
        "pivot": "en",
        "token_dtype": "uint16",
        "length_dtype": "uint8",
        "files": files,
    }
    index_path.write_text(json.dumps(index))


def measure(directory: str, batches: int) -> None:
    """What one rank of the trainer does with the shards in `directory`, in this process (a fresh one:
    `--measure`); prints one JSON list of the memory figures after each stage."""
    from ems.shards import PairShards
    from ems.training.batches import iterate_batches
    from ems.training.config import TrainConfig
    from ems.training.setup import build_order

    stages, start = [], time.time()

    def stage(name: str) -> None:
        stages.append(
            {
                "stage": name,
                "rss_mb": round(status_mib("VmRSS"), 1),
                "anon_mb": round(status_mib("RssAnon"), 1),
                "file_mb": round(status_mib("RssFile"), 1),
                "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "seconds": round(time.time() - start, 1),
            }
        )

    stage("imports")
    shards = PairShards(directory)
    stage("open shards")
    cfg = TrainConfig(data=directory, batch_size=152)
    order = build_order(cfg, shards, 4 * 152, 64)
    stage("build_order")
    stream = iterate_batches(shards, order, 64, rank=0, world_size=4)
    next(stream)
    stage("1st window, 1st batch")
    for _ in range(batches - 1):
        next(stream)
    stage("first batches collated")
    print(json.dumps(stages))


def measured(directory: Path, batches: int) -> list[dict]:
    """`measure`'s stages, run in a fresh process (this module with --measure)."""
    command = [sys.executable, "-m", "benchmarks.data_path_memory", "--measure", str(directory.resolve())]
    command += ["--batches", str(batches)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[10_000_000, 50_000_000])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ems_data_path_memory"))
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--measure", metavar="SHARDS", help=argparse.SUPPRESS)  # the child process of `measured`
    args = parser.parse_args(argv)
    if args.measure:
        measure(args.measure, args.batches)
        return
    peaks, anonymous = {}, {}
    for n in args.pairs:
        directory = args.dir / f"{n}"
        write_shards(directory, n)
        stages = measured(directory, args.batches)
        # ru_maxrss can carry the parent's high-water mark across fork+exec (seen here after the
        # parent wrote the shards), so the figure extrapolated is the largest resident set measured
        peaks[n] = max(s["rss_mb"] for s in stages)
        anonymous[n] = max(s["anon_mb"] for s in stages)
        print(f"{n:,} pairs:")
        for s in stages:
            print(
                f"  {s['stage']:24} rss {s['rss_mb']:8.1f} MB (anonymous {s['anon_mb']:8.1f}, "
                f"file-backed {s['file_mb']:7.1f})"
                f"   peak {s['peak_mb']:8.1f} MB   {s['seconds']:6.1f} s"
            )
    for what, figures in (("resident set", peaks), ("anonymous memory", anonymous)):
        if len(figures) >= 2:
            (n1, p1), (n2, p2) = sorted(figures.items())[:2]
            slope = (p2 - p1) / (n2 - n1)
            print(
                f"the largest {what} per rank grows {slope * 1e6:.1f} MB per million pairs; at 143M pairs: "
                f"{(p1 + slope * (143_000_000 - n1)) / 1024:.1f} GiB"
            )


if __name__ == "__main__":
    main()
