"""The trainer's stop signals, held from a process's first line until ems.training.stopping.StopRequest
takes over: a SIGUSR1/SIGTERM (SLURM's pre-emption warning) that arrives during the seconds of
start-up imports must end in a checkpoint and exit 99 (requeued), not in status 143, which
slurm/train.sh does not requeue; a SIGINT (Ctrl-C) in a checkpoint and exit 130, not in a
KeyboardInterrupt traceback. A second SIGINT raises KeyboardInterrupt, Python's default, for a user
who will not wait. Importing this module imports nothing heavy."""

from __future__ import annotations

import signal

# SIGTERM's handler is installed last: a process that catches it catches them all (Python catches SIGINT
# from its start, so /proc's SigCgt shows no change for it)
STOP_SIGNALS = (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM)
held_signals: list[int] = []  # stop signals that arrived before StopRequest was installed


def interrupt_again(signum: int, earlier: list[int]) -> None:
    """KeyboardInterrupt for a SIGINT when `earlier` (the stop signals received before) holds one."""
    if signum == signal.SIGINT and signal.SIGINT in earlier:
        raise KeyboardInterrupt


def _hold_signal(signum, frame) -> None:
    interrupt_again(signum, held_signals)
    held_signals.append(signum)


def hold_stop_signals() -> None:
    """Record STOP_SIGNALS in `held_signals` instead of dying of them (until StopRequest)."""
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _hold_signal)
