"""When an invocation of the trainer stops: at the schedule's end (max_steps, or max_epochs passes
over the data), at stop_at_step, after max_minutes, or on a pre-emption request, a SIGUSR1/SIGTERM
(SLURM's warning) or a SIGINT (Ctrl-C) on any rank or a STOP file in the run directory.

In: a TrainConfig, the run directory, the signals held since start-up (ems.stop_signals); out:
the invocation's last step and, before each step, whether to stop (the same on every rank).
"""

from __future__ import annotations

import enum
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ems.stop_signals import STOP_SIGNALS, held_signals, interrupt_again
from ems.training.batch_order import BatchOrder
from ems.training.config import TrainConfig
from ems.training.runtime import any_rank

PREEMPTED_EXIT_CODE = 99  # slurm/train.sh turns it into `scontrol requeue`
INTERRUPTED_EXIT_CODE = 130  # stopped by a SIGINT (Ctrl-C): a shell's status for it; not requeued
STOP_FILE = "STOP"  # in `out`: stop at the next step boundary, checkpoint, exit PREEMPTED_EXIT_CODE


class StopRequest:
    """Set by SIGUSR1/SIGTERM/SIGINT (the handler only records the signal; one held since start-up
    counts too; a second SIGINT raises KeyboardInterrupt); restored handlers on close. `signal`: the
    last one received; `exit_code`: an invocation's status when it stops on the request."""

    def __init__(self) -> None:
        self.received: list[int] = list(held_signals)
        self.signal: int | None = held_signals[-1] if held_signals else None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}

    def _handle(self, signum, frame) -> None:
        interrupt_again(signum, self.received)
        self.received.append(signum)
        self.signal = signum

    @property
    def exit_code(self) -> int:
        """INTERRUPTED_EXIT_CODE after a SIGINT (not to be requeued), else PREEMPTED_EXIT_CODE."""
        return INTERRUPTED_EXIT_CODE if signal.SIGINT in self.received else PREEMPTED_EXIT_CODE

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> StopRequest:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Stop(enum.Enum):
    """Why an invocation stopped before its last step."""

    # a stop signal or the STOP file: checkpoint and exit PREEMPTED_EXIT_CODE (INTERRUPTED_EXIT_CODE on a SIGINT)
    PREEMPTED = "pre-empted"
    OUT_OF_TIME = "out of time"  # max_minutes: validate, checkpoint, export and exit 0


def planned_steps(cfg: TrainConfig, order: BatchOrder) -> int:
    """The schedule's end: max_steps, or max_epochs passes over the data in `order`."""
    return cfg.max_steps if cfg.max_epochs is None else math.ceil(cfg.max_epochs * order.batches_per_epoch())


@dataclass
class Stopping:
    """The stop conditions of one invocation (see the module's docstring)."""

    request: StopRequest
    out: Path
    rank: int
    world_size: int
    device: torch.device
    stop_at_step: int | None
    max_minutes: float | None

    def last_step(self, max_steps: int) -> int:
        """Where this invocation ends: the schedule's end, or stop_at_step when sooner."""
        return min(max_steps, self.stop_at_step or max_steps)

    def requested(self, step: int, started: float) -> Stop | None:
        """Before the step after `step` of an invocation that started its loop at `started`: why to
        stop now, announced on rank 0, or None (one all-reduce: the same answer on every rank)."""
        preempted, out_of_time = any_rank(
            self.world_size,
            self.device,
            self.request.signal is not None or (self.rank == 0 and (self.out / STOP_FILE).exists()),
            self.rank == 0 and self.max_minutes is not None and time.time() - started > 60 * self.max_minutes,
        )
        if not (preempted or out_of_time):
            return None
        if self.rank == 0:
            reason = (
                f"signal {self.request.signal} or {self.out / STOP_FILE}"
                if preempted
                else f"max_minutes={self.max_minutes}"
            )
            print(f"stopping at step {step}: {reason}", flush=True)
        return Stop.PREEMPTED if preempted else Stop.OUT_OF_TIME

    def honoured(self, step: int) -> None:
        """After the checkpoint of a pre-empted invocation: the STOP file is removed (so that the
        requeued run trains on) and the exit announced (rank 0)."""
        if self.rank == 0:
            (self.out / STOP_FILE).unlink(missing_ok=True)
            code = self.request.exit_code
            then = "to be requeued" if code == PREEMPTED_EXIT_CODE else "(interrupted; rerun to resume)"
            print(f"checkpointed step {step}; exiting with status {code} {then}", flush=True)
