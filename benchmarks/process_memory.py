"""A process's own memory figures, and its peak resident set written at exit.

    python -m benchmarks.process_memory PEAK_FILE MODULE [ARGS ...]

runs MODULE as `python -m MODULE ARGS ...` would and, at exit, writes its peak resident set (VmHWM, in
KiB) to PEAK_FILE: a parent that waits for such a child reads the child's own peak there, whereas the
ru_maxrss of a forked child starts at its parent's peak (VmHWM starts afresh at exec). Benchmarks read
their own figures with `status_mib`.
"""

from __future__ import annotations

import argparse
import atexit
import runpy
import sys
from pathlib import Path


def status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmHWM, VmRSS, RssAnon, RssFile, ...), in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:"))


def status_mib(field: str) -> float:
    """`status_kib(field)` in MiB."""
    return status_kib(field) / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peak_file", type=Path, help="where the peak resident set (KiB) is written at exit")
    parser.add_argument("module", help="the module to run, as `python -m MODULE` would")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the module's arguments")
    args = parser.parse_args(argv)
    atexit.register(lambda: args.peak_file.write_text(str(status_kib("VmHWM"))))
    sys.argv = [args.module, *args.args]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
