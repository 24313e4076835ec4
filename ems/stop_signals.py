"""The trainer's stop signals, held from a process's first line until ems.training.stopping.StopRequest
takes over: a SIGUSR1/SIGTERM (SLURM's pre-emption warning) that arrives during the seconds of
start-up imports must end in a checkpoint and exit 99 (requeued), not in status 143, which
slurm/train.sh does not requeue. Importing this module imports nothing heavy."""

from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
held_signals: list[int] = []  # stop signals that arrived before StopRequest was installed


def _hold_signal(signum, frame) -> None:
    held_signals.append(signum)


def hold_stop_signals() -> None:
    """Record STOP_SIGNALS in `held_signals` instead of dying of them (until StopRequest)."""
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _hold_signal)
