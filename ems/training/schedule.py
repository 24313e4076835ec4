"""The learning-rate schedule and the time budget it may be fitted to.

In: a TrainConfig and the run's global batch; out: the peak lr and warm-up steps at that batch
(effective_schedule), the lr factor of each step (LambdaLR's function: LinearSchedule, or
WSDSchedule with its branch points, build_schedule), and, with time_budget_minutes, the schedule's
end that fits the budget (TimeBudget).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ems.training.config import TrainConfig
from ems.training.runtime import from_rank_0


@dataclass
class LinearSchedule:
    """lr factor: linear warm-up to the peak lr, then linear decay to zero at max_steps
    (mutable, for a schedule fitted to a time budget)."""

    warmup_steps: int
    max_steps: int

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        return max(0.0, (self.max_steps - step) / max(1, self.max_steps - self.warmup_steps))


def wsd_decay_start(max_steps: int, decay_fraction: float) -> int:
    """The step where a wsd schedule ending at `max_steps` starts its decay: max_steps -
    round(decay_fraction * max_steps) (Python's round). It is also the branch point of budget
    `max_steps`: a longer wsd run is still on its plateau there, with the same state."""
    return max_steps - round(decay_fraction * max_steps)


@dataclass
class WSDSchedule:
    """lr factor of a warmup-stable-decay schedule (TrainConfig.lr_schedule "wsd"): in, a step
    (0-based, as LambdaLR counts); out, (step + 1) / warmup_steps during the warm-up, 1 on the
    plateau, then (max_steps - step) / (decay steps) from wsd_decay_start(max_steps, decay_fraction),
    0 at max_steps; the smaller of warm-up and decay where they overlap. Nothing before the decay
    start depends on max_steps (mutable: a time budget's fitted end moves the decay start with it)."""

    warmup_steps: int
    max_steps: int
    decay_fraction: float

    @property
    def decay_start(self) -> int:
        return wsd_decay_start(self.max_steps, self.decay_fraction)

    def __call__(self, step: int) -> float:
        warm = (step + 1) / self.warmup_steps if step < self.warmup_steps else 1.0
        start = self.decay_start
        if step < start:
            return warm
        return min(warm, max(0.0, (self.max_steps - step) / max(1, self.max_steps - start)))


Schedule = LinearSchedule | WSDSchedule


def build_schedule(cfg: TrainConfig, warmup_steps: int, max_steps: int) -> Schedule:
    """The lr factor of cfg.lr_schedule with `warmup_steps` (effective_schedule's) ending at `max_steps`."""
    if cfg.lr_schedule == "wsd":
        return WSDSchedule(warmup_steps, max_steps, cfg.decay_fraction)
    return LinearSchedule(warmup_steps, max_steps)


@dataclass(frozen=True)
class EffectiveSchedule:
    """The peak lr and warm-up steps a run uses at its global batch (effective_schedule)."""

    lr: float
    warmup_steps: int
    global_batch: int

    def describe(self, cfg: TrainConfig, max_steps: int, world_size: int, accumulation: int) -> str:
        """One line for the start of a run: the global batch, the lr and warm-up and where they come from."""
        ratio = self.global_batch / cfg.reference_global_batch
        lr_from = (
            f"lr {cfg.lr:g} x {ratio:g}{'' if cfg.lr_scaling == 'linear' else ' ** 0.5'} "
            f"({cfg.lr_scaling} scaling from "
            f"{cfg.reference_global_batch} pairs)"
            if cfg.lr_scaling != "none"
            else "lr as configured"
        )
        warm_from = (
            f"warmup_samples {cfg.warmup_samples:,} / {self.global_batch}"
            if cfg.warmup_samples is not None
            else "warmup_steps as configured"
        )
        share = 100.0 * min(self.warmup_steps, max_steps) / max_steps
        decay = ""
        if cfg.lr_schedule == "wsd":
            start = wsd_decay_start(max_steps, cfg.decay_fraction)
            decay = f"; wsd: constant, then to 0 over steps {start}-{max_steps} (decay_fraction {cfg.decay_fraction:g})"
        return (
            f"schedule: global batch {self.global_batch} pairs ({world_size} ranks x {accumulation} accumulation x "
            f"{cfg.batch_size}); peak lr {self.lr:.3g} ({lr_from}); warm-up {self.warmup_steps} steps = "
            f"{self.warmup_steps * self.global_batch:,} pairs ({warm_from}), {share:.1f}% of {max_steps} steps{decay}"
        )


def effective_schedule(cfg: TrainConfig, global_batch: int) -> EffectiveSchedule:
    """The peak lr and warm-up steps for `global_batch` pairs per optimizer step: lr scaled from
    cfg.reference_global_batch by cfg.lr_scaling, warm-up from cfg.warmup_samples when set."""
    ratio = global_batch / cfg.reference_global_batch
    lr = cfg.lr * (ratio if cfg.lr_scaling == "linear" else math.sqrt(ratio) if cfg.lr_scaling == "sqrt" else 1.0)
    warmup = cfg.warmup_steps if cfg.warmup_samples is None else math.ceil(cfg.warmup_samples / global_batch)
    return EffectiveSchedule(lr=lr, warmup_steps=warmup, global_batch=global_batch)


def steps_within_budget(step: int, seconds_per_step: float, elapsed_minutes: float, budget_minutes: float) -> int:
    """The final step count of a run at `step` after `elapsed_minutes` that goes on at
    `seconds_per_step` and must end within `budget_minutes` (at least one more step)."""
    remaining = 60.0 * (budget_minutes - elapsed_minutes)
    return step + max(1, int(remaining / seconds_per_step))


WARMUP_WARNING_SHARE = 0.5  # of a fitted schedule (a warm-up is usually 3-10% of a run)


@dataclass
class TimeBudget:
    """Fits the schedule's end to TrainConfig.time_budget_minutes (`minutes`; None: no budget):
    times steps [first, first + steps) of this invocation, then gives, once, the number of steps
    that fit the budget (rank 0's timing, the same on every rank). A run whose end was fitted
    before (RunState.budget_fitted, kept on resume) is never timed again."""

    minutes: float | None
    first: int
    steps: int
    rank: int
    world_size: int
    device: torch.device
    warmup_steps: int = 0  # the schedule's: a fitted end that leaves it most of the run is warned about
    started: float | None = None  # when step `first` ended

    def fitted_end(self, step: int, max_steps: int, fitted: bool, run_started: float) -> int | None:
        """Call after each step (the run now at `step`, started at `run_started`): the fitted
        schedule end (at most max_steps) after the last timed step, else None."""
        if self.minutes is None or fitted:
            return None
        if step == self.first:
            self.started = time.time()
        if step != self.first + self.steps or self.started is None:
            return None
        seconds_per_step = (time.time() - self.started) / self.steps
        elapsed = (time.time() - run_started) / 60
        # 5% more per step: validation and checkpoints take time the probe did not see
        end = from_rank_0(
            min(max_steps, steps_within_budget(step, 1.05 * seconds_per_step, elapsed, self.minutes)),
            self.world_size,
            self.device,
        )
        if self.rank == 0:
            print(
                f"time budget {self.minutes} min: {seconds_per_step:.3f} s/step, schedule fitted to {end} steps",
                flush=True,
            )
            if self.warmup_steps > WARMUP_WARNING_SHARE * end:
                print(
                    f"warning: the warm-up ({self.warmup_steps} steps) is over half of the {end} steps that fit "
                    f"{self.minutes} min, so the peak lr comes late or never: lower warmup_steps (or "
                    "warmup_samples) for this budget",
                    flush=True,
                )
        return end
