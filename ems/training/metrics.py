"""The training log: each step's values summed over a window of log_every steps, logged as their
means over all ranks to metrics.jsonl, TensorBoard and the progress bar.

In: each step's StepValues; out: out/metrics.jsonl (one JSON record per line: training records,
and the validator's and probe's) and out/tb/ (TensorBoard scalars), written by rank 0. The
losses are "loss" (the weighted sum) and each of ems.losses.OBJECTIVES: keys "loss", "xtr", ...
in metrics.jsonl, scalars loss/total, loss/xtr, ... in TensorBoard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ems.artifacts import write_text, writing
from ems.losses import OBJECTIVES
from ems.model_config import EMSConfig
from ems.training.runtime import compiled_graphs

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

LOSSES = ("loss", *OBJECTIVES)  # "loss": the weighted sum that is backpropagated
METRICS_FILE = "metrics.jsonl"
# what a refused append (a full disk) leaves: the records before it (a resume drops a half-written last line)
KEPT_UP_TO_THE_FAILURE = "the records before it are kept"


@dataclass
class StepValues:
    """One step on this rank: its losses and share of rows with an in-batch duplicate (means over
    its micro-batches), its real tokens and token slots, the global gradient norm and the lr."""

    losses: dict[str, float]  # {name: value for name in LOSSES}
    grad_norm: float
    lr: float
    duplicate_rows: float = 0.0
    real_tokens: int = 0
    token_slots: int = 0

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (*self.losses.values(), self.grad_norm))


@dataclass
class MetricSums:
    """One rank's sums over the steps since the last log record (summed over ranks to log them)."""

    losses: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOSSES, 0.0))
    duplicate_rows: float = 0.0  # the share of rows with an in-batch duplicate, summed over steps
    grad_norm: float = 0.0  # over the steps with a finite norm
    finite_norm_steps: int = 0
    overflow_steps: int = 0  # fp16: an inf/nan norm, the update dropped by DeepSpeed's loss scaler
    steps: int = 0
    real_tokens: int = 0
    token_slots: int = 0
    data_wait_seconds: float = 0.0  # blocked waiting for the next batch (ems.training.batches.Prefetcher)

    def add(self, values: StepValues, data_wait_seconds: float) -> None:
        for key, value in values.losses.items():
            self.losses[key] += value
        self.duplicate_rows += values.duplicate_rows
        if math.isfinite(values.grad_norm):
            self.grad_norm += values.grad_norm
            self.finite_norm_steps += 1
        else:
            self.overflow_steps += 1
        self.steps += 1
        self.real_tokens += values.real_tokens
        self.token_slots += values.token_slots
        self.data_wait_seconds += data_wait_seconds

    def summed_over_ranks(self, device: torch.device) -> MetricSums:
        import torch.distributed as dist

        counts = [getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "losses"]
        values = torch.tensor([*self.losses.values(), *counts], dtype=torch.float64, device=device)
        dist.all_reduce(values)
        summed = values.tolist()
        return MetricSums(dict(zip(self.losses, summed)), *summed[len(self.losses) :])


def _keep_metrics_up_to(path: Path, step: int) -> None:
    """On resume: drop metrics.jsonl records after the checkpoint's step (and a half-written
    last line of a killed run), so every step appears once."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record["step"] <= step:
            kept.append(line)
    write_text(path, "".join(line + "\n" for line in kept), "metrics")


class MetricsLog:
    """Rank 0's metrics.jsonl and TensorBoard writer (nothing on the other ranks). A resumed run
    (at `resumed_step` > 0) first drops the records after that step, so every step appears once."""

    def __init__(self, out: Path, rank: int, resumed_step: int):
        self.rank = rank
        if rank != 0:
            return
        from torch.utils.tensorboard import SummaryWriter

        if resumed_step:
            _keep_metrics_up_to(out / METRICS_FILE, resumed_step)
        self.path, self.tb = out / METRICS_FILE, out / "tb"
        with writing(self.tb, "TensorBoard log", KEPT_UP_TO_THE_FAILURE):
            self.writer = SummaryWriter(str(self.tb), purge_step=resumed_step + 1 if resumed_step else None)
        with writing(self.path, "metrics", KEPT_UP_TO_THE_FAILURE):
            self.file = self.path.open("a")

    def write(self, record: dict, scalars: dict[str, float]) -> None:
        """Append `record` to metrics.jsonl and `scalars` to TensorBoard at record["step"] (rank 0);
        a refused write (a full disk) is WriteFailed naming the file."""
        if self.rank != 0:
            return
        with writing(self.tb, "TensorBoard log", KEPT_UP_TO_THE_FAILURE):
            for name, value in scalars.items():
                self.writer.add_scalar(name, value, record["step"])
        with writing(self.path, "metrics", KEPT_UP_TO_THE_FAILURE):
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.rank == 0:
            try:
                with writing(self.tb, "TensorBoard log", KEPT_UP_TO_THE_FAILURE):
                    self.writer.close()
            finally:
                with contextlib.suppress(OSError):  # its lines were flushed as written (a failure: raised then)
                    self.file.close()


@dataclass
class TrainingMetrics:
    """The training log's window: `add` each step, `log` every `every` steps and at the last one."""

    metrics_log: MetricsLog
    every: int
    engine: DeepSpeedEngine
    world_size: int
    compiled: bool = False  # the step is compiled: each record counts the graphs compiled so far
    sums: MetricSums = field(default_factory=MetricSums)
    opened: float = field(default_factory=time.time)
    waited: float = 0.0  # the data loader's total wait at the last step (ems.training.batches.Prefetcher.wait_seconds)

    def add(self, values: StepValues, total_wait_seconds: float) -> None:
        """Add a step's values and the data loader's total wait so far (its growth is this step's)."""
        self.sums.add(values, total_wait_seconds - self.waited)
        self.waited = total_wait_seconds

    def should_log(self, step: int, last: int) -> bool:
        return step % self.every == 0 or step == last

    def log(self, step: int, epoch: int) -> dict:
        """The record of the steps summed since the last one (over all ranks), written to
        metrics.jsonl and TensorBoard; a new window opens."""
        seconds = time.time() - self.opened
        total = self.sums.summed_over_ranks(self.engine.device)
        record = {
            "step": step,
            "epoch": epoch,
            **{key: total.losses[key] / total.steps for key in LOSSES},
            "duplicate_rows": total.duplicate_rows / total.steps,
            "lr": float(self.engine.get_lr()[0]),
            "grad_norm": total.grad_norm / total.finite_norm_steps if total.finite_norm_steps else math.nan,
            "overflow_steps": round(total.overflow_steps / self.world_size),
            "tokens_per_s": total.real_tokens / max(seconds, 1e-9),
            "real_token_ratio": total.real_tokens / total.token_slots,
            "data_wait_fraction": total.data_wait_seconds / self.world_size / max(seconds, 1e-9),
            "seconds": seconds,  # the window's wall time (steps, and any validation or checkpoint in it)
        }
        if self.compiled:
            record["compiled_graphs"] = compiled_graphs()
        scalars = {f"loss/{'total' if key == 'loss' else key}": record[key] for key in LOSSES}
        scalars.update(
            {
                key: record[key]
                for key in (
                    "lr",
                    "grad_norm",
                    "overflow_steps",
                    "tokens_per_s",
                    "real_token_ratio",
                    "duplicate_rows",
                    "data_wait_fraction",
                )
            }
        )
        self.metrics_log.write(record, scalars)
        self.sums, self.opened = MetricSums(), time.time()
        return record


def show_losses(bar, record: dict, model_cfg: EMSConfig) -> None:
    """A training log record's losses on the progress bar (tqdm): the total and each objective the
    model trains (weight > 0; metrics.jsonl and TensorBoard keep them all)."""
    shown = ["loss", *(name for name in OBJECTIVES if model_cfg.weight(name) > 0)]
    bar.set_postfix(**{key: f"{record[key]:.3f}" for key in shown}, dup=f"{100 * record['duplicate_rows']:.1f}%")
