"""Running a stage of the GPU acceptance run: the context every stage reads and writes (Context), the
command's minutes (Clock), a stage's time cap (time_cap: OutOfTime by SIGALRM) and run_stage, which runs a
stage under its cap, records it as done, cut or failed, and writes the report after (write_report).
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.gpu import report as gpu_report
from benchmarks.gpu.prepared import Prepared
from benchmarks.gpu.profiles import Profile
from ems.cli import one_line

STAGES = ("environment", "mfu", "train", "evaluate", "report")


def now() -> str:
    """The current UTC time, ISO 8601 to the second (a stage's start, the run's)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- time ----------------------------------------------------------------------------------------


class OutOfTime(BaseException):
    """A stage's time cap passed (SIGALRM). A BaseException: no `except Exception` on the way swallows it."""


@dataclass
class Clock:
    """The command's minutes (--total-minutes), counted from its start."""

    minutes: float
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return (time.monotonic() - self.started) / 60

    def left(self) -> float:
        return self.minutes - self.elapsed()


@contextmanager
def time_cap(minutes: float):
    """OutOfTime raised in this (the main) thread once `minutes` have passed; at once if none are left."""
    if minutes <= 0:
        raise OutOfTime("no time left")

    def fire(signum, frame):
        raise OutOfTime(f"over its cap of {minutes:.2f} min")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, minutes * 60)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the run's context ---------------------------------------------------------------------------


@dataclass
class Context:
    """Everything a stage reads and writes."""

    work: Path
    report_dirs: list[Path]
    device: str
    profile: Profile
    clock: Clock
    prepared: Prepared
    train_data: Path  # the unpacked vocab/, shards/, corpus/
    eval_data: Path  # the unpacked evaluation sets
    settings: dict
    segmenters: dict
    stages: dict = field(default_factory=dict)  # stage -> {"status", "cap_minutes", "seconds", "output", ...}

    @property
    def run_dir(self) -> Path:
        return self.work / "run"

    @property
    def eval_dir(self) -> Path:
        return self.work / "eval"

    def output(self, stage: str) -> dict:
        return self.stages.get(stage, {}).get("output", {})

    def reserve(self, after: str) -> float:
        """Minutes the stages after `after` keep for themselves: their caps, and training's minimum."""
        later = STAGES[STAGES.index(after) + 1 :]
        caps = {**self.profile.caps, "train": self.profile.min_train_minutes}
        return sum(caps.get(stage, 0.0) for stage in later)


def write_report(ctx: Context) -> None:
    """report.json and report.md of what is done so far, in --work and every --report-dir."""
    report = gpu_report.build_report(ctx)
    markdown = gpu_report.report_markdown(report)
    for directory in ctx.report_dirs:
        directory.mkdir(parents=True, exist_ok=True)
        gpu_report.write_json(directory / gpu_report.REPORT_JSON, report)
        gpu_report.write_atomically(directory / gpu_report.REPORT_MD, markdown)


def run_stage(ctx: Context, stage: str, cap: float, function) -> None:
    """`function(ctx, output)` under a time cap of `cap` minutes: done, cut (OutOfTime) or failed (an
    error: a finding of the run, reported; the next stage still runs). The report is written after."""
    record = ctx.stages.setdefault(stage, {})
    record.update(status="running", cap_minutes=round(cap, 2), started=now(), output={})
    print(
        f"\n=== {stage} (cap {cap:.2f} min; {ctx.clock.left():.2f} of {ctx.clock.minutes:g} min left) ===", flush=True
    )
    started = time.monotonic()
    try:
        with time_cap(cap):
            function(ctx, record["output"])
        record["status"] = "done"
    except OutOfTime as cut:
        record.update(status="cut", why=str(cut))
    except Exception as error:  # any failure is a finding of the run: reported beside the others
        record.update(status="failed", why=f"{type(error).__name__}: {one_line(error)}")
    record["seconds"] = round(time.monotonic() - started, 1)
    if record["status"] != "done":
        print(f"{stage}: {record['status']}: {record['why']}", flush=True)
    write_report(ctx)
