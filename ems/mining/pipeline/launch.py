"""Running a planned mining run's steps: one unit (what a SLURM array task runs), or every step in
order on this machine (the local launcher, `mine_files`).

In: a work dir holding a plan (ems.mining.pipeline.plan), or MineOptions to plan. Out: each
step's files (see its module), then the TSV. A unit already finished (its done record whole) is
skipped, so a rerun after a kill, a full disk or a pre-emption redoes only what was not finished.
The local launcher runs each step's pending units in `options.workers` processes (spawned, each
loading the encoder once), then the next step; with one worker, in this process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path

import faiss

from ems.cli import UserError
from ems.encoder_kinds import load_encoder
from ems.locks import exclusive
from ems.mining.pipeline.embed import embed_unit
from ems.mining.pipeline.index import merge_unit, populate_unit, train_unit
from ems.mining.pipeline.knn import knn_unit
from ems.mining.pipeline.manifest import done_record
from ems.mining.pipeline.options import MineOptions
from ems.mining.pipeline.plan import SIDES, STEPS, Plan, load_plan, plan
from ems.mining.pipeline.score import score_unit, write_unit

STEP_FUNCTIONS = {
    "embed": embed_unit,
    "train": train_unit,
    "populate": populate_unit,
    "merge": merge_unit,
    "knn": knn_unit,
    "score": score_unit,
    "write": write_unit,
}


def run_unit(plan: Plan, step: str, unit: str, encoder=None) -> bool:
    """Run `unit` of `step` unless it is finished; True if it ran. `encoder`: the embed step's
    (None: the plan's, loaded once per process)."""
    if done_record(plan.work, step, unit, note=True) is not None:
        return False
    start = time.perf_counter()
    if step == "embed":
        embed_unit(plan, unit, encoder)
    else:
        STEP_FUNCTIONS[step](plan, unit)
    print(f"{step} {unit}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return True


def run_step(work_dir: Path, step: str, index: int | None = None) -> None:
    """Unit `index` of `step` of the plan in `work_dir` (a SLURM array task), or all its units."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}; got {step!r}")
    planned = load_plan(work_dir)
    units = planned.units(step)
    if index is not None and not 0 <= index < len(units):
        raise UserError(f"{step} has {len(units)} units (0-{len(units) - 1}) in {planned.work}; got unit {index}")
    for unit in units if index is None else [units[index]]:
        if not run_unit(planned, step, unit):
            print(f"{step} {unit}: finished before, skipped", file=sys.stderr, flush=True)


def _start_worker(threads: int) -> None:
    if "OMP_NUM_THREADS" not in os.environ:  # the user's choice stands; else the cores are shared out
        faiss.omp_set_num_threads(threads)


def _pool_unit(work_dir: str, step: str, unit: str) -> bool:
    return run_unit(load_plan(Path(work_dir)), step, unit)


def run_steps(planned: Plan, encoder=None) -> dict[str, int]:
    """Every step's pending units, step after step; {step: units run}. `encoder` (an object, not
    a spec) makes the embed step run here, whatever the workers."""
    workers = planned.options.workers
    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")  # no fork of a process that may run torch threads
    ran = {}
    pool = ProcessPoolExecutor(workers, context, _start_worker, (threads,)) if workers > 1 else None
    with pool or contextlib.nullcontext():
        for step in STEPS:
            units = planned.units(step)
            pending = [unit for unit in units if done_record(planned.work, step, unit) is None]
            if len(pending) < len(units):
                print(f"{step}: {len(units) - len(pending)} of {len(units)} units finished before", file=sys.stderr)
            if pool is None or (step == "embed" and encoder is not None):
                for unit in pending:
                    run_unit(planned, step, unit, encoder)
            else:
                futures = [pool.submit(_pool_unit, str(planned.work), step, unit) for unit in pending]
                finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((future for future in finished if future.exception() is not None), None)
                if failed is not None:
                    for future in futures:
                        future.cancel()
                    raise failed.exception()
            ran[step] = len(pending)
    return ran


def counts(planned: Plan) -> dict:
    """Per side: lines, distinct, empty and skipped lines; pairs written (once the TSV is)."""
    found = {}
    for side in SIDES:
        info = planned.sides[side]
        found.update({f"{side}_{name}": info[name] for name in ("lines", "distinct", "empty")})
        found[f"{side}_skipped"] = sum(info["skipped"].values())
    record = done_record(planned.work, "write", "all")
    if record is not None:
        found["written"] = record["written"]
    return found


def mine_files(options: MineOptions, encoder=None) -> dict:
    """The local launcher: plan `options` and run every step on this machine; returns `counts`.
    `encoder`: an encoder object to embed with (default: options.encoder loaded here, and in
    each worker process). Without options.work_dir the stages' files go to a temporary
    directory, removed afterwards. One launcher at a time per work dir (ems.locks)."""
    if options.work_dir is None:
        with tempfile.TemporaryDirectory(prefix="ems-mine-") as temporary:
            return mine_files(dataclasses.replace(options, work_dir=temporary), encoder)
    in_process = encoder is not None or options.workers == 1
    if encoder is None and options.encoder is not None:
        encoder = load_encoder(options.encoder, options.cache_dir, options.device)
    with exclusive(Path(options.work_dir), "mining run"):
        planned = plan(options, encoder)
        run_steps(planned, encoder if in_process else None)
        return counts(planned)
