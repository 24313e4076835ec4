"""The staged miner (ems.mining.pipeline) at scale, measured stage by stage.

    python -m benchmarks.mining_scale --data-dir ../shared/data --n 3000000 --work runs/mining_scale \\
        [--encoder ngram:dim=64] [--index auto] [--shard-lines 1000000] [--workers 2] [--dtype float16] \\
        [--recall-sample 10000] [--f1-subset 1000000]
    # the embed stage alone, with a real EMS encoder, on 1M lines a side
    python -m benchmarks.mining_scale --n 1000000 --encoder ems:runs/demo/run/model --steps embed

Lines (`prepare`): every real sentence of the shared data, split between the sides as
benchmarks.mining_benchmark splits them (Tatoeba, FLORES-200, SIB-200, Tatoeba Challenge,
TICO-19: ~900k a side; gold = the Tatoeba and Tatoeba Challenge translation pairs), then up to
--n lines a side, distractors: two real sentences of the same side joined by a space (seeded).
Written once to WORK/n<N>/{src,tgt}.txt, with the gold as 1-based line-number pairs (gold.npy).

The run goes through the local launcher's steps, each unit in a child process
(`python -m ems.apps.mine stage STEP --unit I`), --workers at a time, after the plan (`python -m
ems.apps.mine plan`, the scan). Per step: wall seconds, CPU seconds of its processes, their largest
peak RSS (os.wait4), the disk the stage holds, and the mean wall and CPU seconds of a unit. Then:
recall@k of the run's neighbours against exact search on --recall-sample rows a direction; P/R/F1
of the mined pairs against the gold at the best threshold; with --f1-subset M, P/R/F1 of the pairs
mined on the first M lines a side against the exact (flat) miner's on the same lines, all pairs
and above each run's best threshold; and the CPU hours projected to 10M and 1B lines a side from
the measured per-line costs (k-NN through an IVF index grows as n^1.5: nprobe * n / n_lists
rows a query with n_lists ~ sqrt(n); exact k-NN as n^2; every other stage as n).
Report: WORK/n<N>/<run>/report.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.mining_benchmark import build_sides
from ems.mining.index_kinds import as_index_spec, chosen_kind
from ems.mining.pipeline.files import ShardedRows
from ems.mining.pipeline.launch import mine_files
from ems.mining.pipeline.options import MineOptions
from ems.mining.pipeline.plan import STEPS, load_plan
from ems.mining.search import blockwise_knn
from eval.evaluators.bucc import best_threshold, precision_recall_f1

REPO = Path(__file__).resolve().parents[1]

REAL_PER_SIDE = 900_000  # the real sentences the shared data holds a side (908k / 903k)
PROJECT_TO = {"10M": 10_000_000, "1B": 1_000_000_000}


def prepare(data_dir: Path, n: int, folder: Path) -> tuple[Path, Path, set[tuple[int, int]]]:
    """src.txt, tgt.txt (n lines each) and the gold line pairs, made once in `folder`."""
    src_path, tgt_path, gold_path = folder / "src.txt", folder / "tgt.txt", folder / "gold.npy"
    if not gold_path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        src, tgt, gold = build_sides(data_dir, min(n, REAL_PER_SIDE))
        rng = np.random.default_rng(0)
        for side in (src, tgt):
            real = len(side)
            for _ in range(n - real):
                a, b = rng.integers(real, size=2).tolist()
                side.append(f"{side[a]} {side[b]}")
        src_path.write_text("".join(f"{line}\n" for line in src), encoding="utf-8")
        tgt_path.write_text("".join(f"{line}\n" for line in tgt), encoding="utf-8")
        first_src, first_tgt = {}, {}
        for number, line in enumerate(src, start=1):
            first_src.setdefault(line, number)
        for number, line in enumerate(tgt, start=1):
            first_tgt.setdefault(line, number)
        np.save(gold_path, np.array(sorted((first_src[a], first_tgt[b]) for a, b in gold), dtype=np.int64))
    return src_path, tgt_path, set(map(tuple, np.load(gold_path).tolist()))


def _expand(units: str) -> list[int]:
    """ "0-2,5" -> [0, 1, 2, 5]; "-" -> []."""
    found = []
    for part in units.split(","):
        if part != "-":
            first, _, last = part.partition("-")
            found += range(int(first), int(last or first) + 1)
    return found


def _children(
    commands: list[list[str]], workers: int, log: Path, stdout: Path | None = None
) -> tuple[float, float, float, list[tuple]]:
    """Run `python -m ems.apps.mine` with each argument list, `workers` at a time, their output appended
    to `log` (stdout to `stdout` if given); (wall s, CPU s, largest peak RSS MiB, per command
    (wall s, CPU s)). Each runs under benchmarks.process_memory, which writes its own peak RSS."""
    running, per_command, cpu, peak = {}, [], 0.0, 0.0
    start = time.perf_counter()
    with open(log, "a") as out, open(stdout or log, "a") as printed:
        pending = list(commands)
        while pending or running:
            while pending and len(running) < workers:
                peak_file = log.with_name(f"{log.name}.peak-{len(pending)}")
                command = [sys.executable, "-m", "benchmarks.process_memory", str(peak_file), "ems.apps.mine"]
                process = subprocess.Popen([*command, *pending.pop(0)], stdout=printed, stderr=out, cwd=REPO)
                running[process.pid] = (process, time.perf_counter(), peak_file)  # held: subprocess reaps no held child
            pid, status, usage = os.wait4(-1, 0)
            process, started, peak_file = running.pop(pid)
            process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by subprocess
            if status != 0:
                raise SystemExit(f"a child failed (status {status}); see {log}")
            used = usage.ru_utime + usage.ru_stime
            per_command.append((time.perf_counter() - started, used))
            cpu, peak = cpu + used, max(peak, int(peak_file.read_text()) / 1024)
            peak_file.unlink()
    return time.perf_counter() - start, cpu, peak, per_command


def measure(run: Path, mining: list[str], steps: list[str], workers: int) -> list[dict]:
    """Plan, then each step's units as child processes; one row per stage."""
    log, units_file = run.parent / f"{run.name}.log", run.parent / "units"
    units_file.unlink(missing_ok=True)
    wall, cpu, peak, _ = _children([["plan", *mining, "--work-dir", str(run)]], 1, log, units_file)
    rows = [{"stage": "plan", "units": 1, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak}]
    rows[0]["disk_mib"] = _mib(run / "embed")
    units = dict(line.split() for line in units_file.read_text().splitlines())
    for step in (s for s in STEPS if s in steps):
        commands = [["stage", step, "--work-dir", str(run), "--unit", str(i)] for i in _expand(units[step])]
        if not commands:
            continue
        wall, cpu, peak, per_unit = _children(commands, workers, log)
        stage = {"train": "index", "populate": "index", "merge": "index", "write": "score"}.get(step, step)
        rows.append(
            {
                "stage": step,
                "units": len(commands),
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_rss_mib": peak,
                "unit_wall_s": float(np.mean([w for w, _ in per_unit])),
                "unit_cpu_s": float(np.mean([c for _, c in per_unit])),
                "disk_mib": _mib(run / stage),
            }
        )
    return rows


def _mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20 if path.exists() else 0.0


def recall(run: Path, sample: int) -> dict:
    """recall@k of the run's k-NN files against exact search, on `sample` random rows a direction."""
    plan, result, rng = load_plan(run), {}, np.random.default_rng(1)
    for side, name in (("src", "fwd"), ("tgt", "bwd")):
        shards = [unit.rsplit("-", 1)[1] for unit in plan.shard_units([side])]
        ids = ShardedRows([np.load(run / "knn" / side / f"{shard}.ids.npy", mmap_mode="r") for shard in shards])
        rows = np.sort(rng.choice(len(ids), size=min(sample, len(ids)), replace=False))
        queries = plan.all_vectors(side)[rows]
        _, exact = blockwise_knn(queries, plan.all_vectors(plan.other(side)), plan.k)
        found = [len(set(a) & set(b)) for a, b in zip(ids[rows].tolist(), exact.tolist())]
        result[f"{name}_recall_at_{plan.k}"] = 100.0 * sum(found) / exact.size
    return result


def mined(tsv: Path) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(scores, (src line, tgt line) pairs) of a TSV written with --line-numbers."""
    scores, pairs = [], []
    with open(tsv, encoding="utf-8") as f:
        for line in f:
            score, rest = line.split("\t", 1)
            src, tgt = rest.rsplit("\t", 2)[1:]
            scores.append(float(score))
            pairs.append((int(src), int(tgt)))
    return np.array(scores), pairs


def against_gold(tsv: Path, gold: set[tuple[int, int]]) -> tuple[dict, set]:
    """P/R/F1 at the best threshold, and the pairs kept there."""
    scores, pairs = mined(tsv)
    threshold = best_threshold(scores, [pair in gold for pair in pairs], len(gold))
    kept = {pair for pair, score in zip(pairs, scores.tolist()) if score >= threshold}
    return {"threshold": threshold, **precision_recall_f1(kept, gold)}, kept


def versus_exact(src: Path, tgt: Path, gold: set, m: int, folder: Path, settings: dict) -> dict:
    """The run's index against exact search on the first m lines a side: P/R/F1 of its pairs
    against the exact miner's, all pairs and above each run's best threshold."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in (src, tgt):
        with open(path, encoding="utf-8") as whole, open(folder / path.name, "w", encoding="utf-8") as part:
            part.writelines(line for _, line in zip(range(m), whole))
    sub_gold = {(a, b) for a, b in gold if a <= m and b <= m}
    found = {}
    for name, index in (("exact", "flat"), ("index", settings["index"])):
        out = folder / f"{name}.tsv"
        paths = (str(folder / src.name), "de", str(folder / tgt.name), "en", str(out))
        mine_files(MineOptions(*paths, line_numbers=True, work_dir=str(folder / name), **{**settings, "index": index}))
        found[name] = (set(mined(out)[1]), against_gold(out, sub_gold)[1])
    every = precision_recall_f1(found["index"][0], found["exact"][0])
    kept = precision_recall_f1(found["index"][1], found["exact"][1])
    return {"lines": m, "all_pairs": every, "above_threshold": kept}


def projection(rows: list[dict], n: int, index: str) -> dict:
    """CPU hours at 10M and 1B lines a side, from each stage's measured CPU seconds at n."""
    kind = chosen_kind(as_index_spec(index), n)
    growth = {"knn": 2.0 if kind == "flat" else 1.5}
    return {
        label: sum(row["cpu_s"] * (size / n) ** growth.get(row["stage"], 1.0) for row in rows) / 3600
        for label, size in PROJECT_TO.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--n", type=int, default=3_000_000, help="lines a side")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "mining_scale")
    parser.add_argument("--encoder", default="ngram:dim=64")
    parser.add_argument("--index", default="auto")
    parser.add_argument("--shard-lines", type=int, default=1_000_000)
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--recall-sample", type=int, default=10_000, help="rows a direction (0: none)")
    parser.add_argument("--f1-subset", type=int, default=0, help="lines a side mined exactly too (0: none)")
    args = parser.parse_args(argv)
    folder = args.work / f"n{args.n}"
    src, tgt, gold = prepare(args.data_dir, args.n, folder)
    name = re.sub(r"[^\w.=-]+", "_", f"{args.encoder}-{args.index}-{args.dtype}-s{args.shard_lines}")
    run = folder / name
    shutil.rmtree(run, ignore_errors=True)  # every figure from a fresh run
    settings = {"encoder": args.encoder, "index": args.index, "shard_lines": args.shard_lines, "dtype": args.dtype}
    mining = ["--src", str(src), "--src-lang", "de", "--tgt", str(tgt), "--tgt-lang", "en"]
    mining += ["--out", str(run / "pairs.tsv"), "--line-numbers"]
    for key, value in settings.items():
        mining += [f"--{key.replace('_', '-')}", str(value)]
    report = {"n": args.n, "settings": settings, "workers": args.workers, "cpus": os.cpu_count()}
    report["load_average_before"] = os.getloadavg()
    report["stages"] = measure(run, mining, args.steps, args.workers)
    report["load_average_after"] = os.getloadavg()
    if "knn" in args.steps and args.recall_sample:
        report["recall"] = recall(run, args.recall_sample)
    if "write" in args.steps:
        report["gold"] = against_gold(run / "pairs.tsv", gold)[0]
        report["cpu_hours_projected"] = projection(report["stages"], args.n, args.index)
    if args.f1_subset:
        report["versus_exact"] = versus_exact(src, tgt, gold, args.f1_subset, folder / f"sub{args.f1_subset}", settings)
    (run / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{'stage':12} {'units':>5} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>12} {'disk MiB':>9}")
    for row in report["stages"]:
        print(
            f"{row['stage']:12} {row['units']:>5} {row['wall_s']:>8.1f} {row['cpu_s']:>8.1f} "
            f"{row['peak_rss_mib']:>12.0f} {row['disk_mib']:>9.1f}"
        )
    print(json.dumps({key: report[key] for key in report if key not in ("stages", "settings")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
