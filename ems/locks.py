"""One writer per directory: an exclusive `flock` on DIR/.lock (or .DIR.lock beside it), held for the writer's life.

    with exclusive(out, "training run"):
        ...  # write into out/

The kernel releases the lock when the holding process ends, however it ends (a kill, a crash, a
pre-emption), so a stale lock file never blocks a later writer; the file keeps the last holder's
pid, host, start time and command line, which a refused writer names in its one-line error.
`flock` locks are per open file description: a second `exclusive` on the same directory in the
same process is refused too. On NFS, flock works between hosts only where the mount supports it
(Linux's NFSv4 client emulates it with byte-range locks).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ems.cli import UserError

LOCK_FILE = ".lock"


class DirectoryInUse(UserError):
    """Another live process holds the directory's lock."""


def lock_path(directory: Path, inside: bool) -> Path:
    """DIR/.lock, or beside DIR as .DIR.lock (a writer whose output must not exist until it writes)."""
    return directory / LOCK_FILE if inside else directory.with_name(f".{directory.name}{LOCK_FILE}")


def holder(path: Path) -> dict:
    """What the lock file says about its last holder ({} when unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def describe_holder(info: dict) -> str:
    if not info:
        return "another process"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')} (since {started}: {info.get('command', '?')})"


@contextlib.contextmanager
def exclusive(directory: str | Path, what: str, inside: bool = True) -> Iterator[Path]:
    """Hold DIR/.lock (DIR created if missing) for the block, or with `inside=False` .DIR.lock beside
    it (DIR left as it is); `what` names the writer in the error a second writer gets ("training
    run", "export", ...). Yields the directory."""
    directory = Path(directory)
    path = lock_path(directory, inside)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DirectoryInUse(
                f"{directory} is in use by another {what}: {describe_holder(holder(path))}; "
                f"wait for it to end or choose another directory"
            ) from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:500],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield directory
    finally:
        os.close(fd)  # releases the lock
