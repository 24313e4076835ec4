"""Throughput and peak memory of `ems-prep import --format hf` on parquet sources of 250k and 1M+ pairs,
to show that the import streams (its memory does not grow with the source); and the local
parallel-sentences layout of the distillation recipe in docs/data.md.

    python -m benchmarks.import_hf --data-dir ../shared/data --work runs/bench_hf [--sizes 250000 1200000]
    python -m benchmarks.import_hf --data-dir ../shared/data --parallel-sentences runs/parallel-sentences \\
        --languages de fr es

The source: every English pair of the Tatoeba Challenge release (tatoeba_challenge/: ~570k real pairs,
every folder of the release, each row tagged with its folder's language code), shuffled (seed 0) and
repeated, each repetition shuffled again, until it has the size asked; written as parquet files of
100k rows with columns src, tgt, src_lang, tgt_lang (the importer finds the layout and the ~120
language pairs from them). Each size is imported by `python -m data_prep import --format hf` in a
process of its own (streamed, the default); printed: rows/s over the command's wall time and over
its CPU time (the machine may be shared), the command's peak resident set (`os.wait4`) and the
machine's 1-minute load average when it ended. `--parallel-sentences DIR` instead writes
sentence-transformers' parallel-sentences layout (fixtures/hf_datasets.py) from the real pairs of
`--languages` and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ems.languages import lang_to_tatoeba_code
from fixtures.hf_datasets import TATOEBA_CHALLENGE_RELEASE, write_parallel_sentences
from fixtures.hf_datasets import tatoeba_challenge_pairs as folder_pairs

REPO_ROOT = Path(__file__).resolve().parents[1]

SHARD_ROWS = 100_000


def real_rows(data_dir: Path) -> list[tuple[str, str, str, str]]:
    """(English, other, "eng", the folder's other code) for every line pair of every English folder."""
    rows = []
    for folder in sorted((data_dir / "tatoeba_challenge").iterdir()):
        codes = folder.name.split("-")
        if len(codes) != 2 or "eng" not in codes or codes[0] == codes[1]:
            continue
        code = codes[1] if codes[0] == "eng" else codes[0]
        if (folder / f"{TATOEBA_CHALLENGE_RELEASE}.{code}").is_file():
            rows += [(e, o, "eng", code) for e, o in folder_pairs(data_dir, code)]
    return rows


def write_source(rows: list, size: int, out: Path) -> None:
    """`size` rows: `rows` shuffled, repeated (each pass shuffled again) as far as needed, in parquet shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    rng, written, shard = random.Random(0), 0, 0
    while written < size:
        order = list(range(len(rows)))
        rng.shuffle(order)
        for start in range(0, len(order), SHARD_ROWS):
            part = [rows[i] for i in order[start : start + SHARD_ROWS]][: size - written]
            if not part:
                break
            columns = dict(zip(("src", "tgt", "src_lang", "tgt_lang"), map(list, zip(*part))))
            pq.write_table(pa.table(columns), out / f"train-{shard:05d}.parquet")
            written, shard = written + len(part), shard + 1
            if written == size:
                break


def measure(source: Path, out: Path) -> dict:
    """Import `source` in a process of its own: wall and CPU seconds, peak RSS, the report's counts."""
    command = [sys.executable, "-m", "data_prep", "import", "--format", "hf", str(source), "--out", str(out)]
    started = time.time()
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.time() - started
    output = process.stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the import of {source} failed:\n{output}")
    entry = next(iter(json.loads((out / "hf_import_report.json").read_text()).values()))
    return {
        "rows": entry["rows_read"],
        "kept": sum(pair["kept"] for pair in entry["pairs"].values()),
        "pairs": len(entry["pairs"]),
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("EMS_DATA_DIR", "../shared/data")))
    parser.add_argument("--work", type=Path, default=Path("runs/bench_hf"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_200_000])
    parser.add_argument("--parallel-sentences", type=Path, help="write the parallel-sentences layout here and exit")
    parser.add_argument("--languages", nargs="+", default=["de", "fr", "es"])
    parser.add_argument("--per-language", type=int, help="pairs per language (default: all)")
    args = parser.parse_args()
    if args.parallel_sentences:
        pairs = {
            lang: folder_pairs(args.data_dir, lang_to_tatoeba_code(lang), args.per_language) for lang in args.languages
        }
        write_parallel_sentences(args.parallel_sentences, pairs)
        print(f"{args.parallel_sentences}: " + ", ".join(f"en-{lang} {len(p)}" for lang, p in pairs.items()))
        return
    rows = real_rows(args.data_dir)
    print(f"{len(rows)} real pairs from {args.data_dir / 'tatoeba_challenge'}", flush=True)
    print("| source rows | language pairs | kept | wall s | rows/s (wall) | CPU s | rows/s (CPU) | peak RSS | load |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for size in args.sizes:
        source, out = args.work / f"source-{size}", args.work / f"out-{size}"
        shutil.rmtree(out, ignore_errors=True)
        if not source.is_dir():
            write_source(rows, size, source)
        result = measure(source, out)
        print(
            f"| {result['rows']:,} | {result['pairs']} | {result['kept']:,} | {result['wall']:.0f} "
            f"| {result['rows'] / result['wall']:,.0f} | {result['cpu']:.0f} | {result['rows'] / result['cpu']:,.0f} "
            f"| {result['peak_rss_mib']:.0f} MiB | {result['load']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
