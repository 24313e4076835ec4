"""One writer per directory: an exclusive `flock` on DIR/.lock (or .DIR.lock beside it), held for the writer's life.

    with exclusive(out, "training run"):
        ...  # write into out/

The kernel releases the lock when the holding process ends, however it ends (a kill, a crash, a
pre-emption), so a stale lock file never blocks a later writer; the file keeps the last holder's
pid, host, start time and command line, which a refused writer names in its one-line error.
`flock` locks are per open file description: a second `exclusive` on the same directory in the
same process is refused too. On NFS, flock works between hosts only where the mount supports it
(Linux's NFSv4 client emulates it with byte-range locks).

A writer of only some parts of a directory (data_prep's `--pair` tasks, each writing its own
pair folders) passes `parts`: it holds the directory's lock shared, so writers of other parts go on
beside it, and DIR/.PART.lock of each part exclusive; a writer of the whole directory (no `parts`)
is refused while any of them runs, and refuses them while it runs.

    with exclusive(out, "data_prep clean", parts=["de-en"]):
        ...  # write into out/de-en/

`locked(path)` is the short, blocking lock of one shared file (a report that parallel writers merge
their entries into, ems.artifacts.update_json).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
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
def exclusive(
    directory: str | Path, what: str, inside: bool = True, parts: Iterable[str] | None = None
) -> Iterator[Path]:
    """Hold DIR/.lock (DIR created if missing) for the block, or with `inside=False` .DIR.lock beside
    it (DIR left as it is); `what` names the writer in the error a second writer gets ("training
    run", "export", ...). With `parts` (names of entries of DIR) the directory's lock is held shared
    and DIR/.PART.lock of each part exclusive (see the module docstring). Yields the directory."""
    directory = Path(directory)
    with contextlib.ExitStack() as held:
        if parts is None:
            held.enter_context(_flock(lock_path(directory, inside), directory, what, shared=False))
        else:
            held.enter_context(_flock(lock_path(directory, inside), directory, what, shared=True))
            for part in sorted(set(parts)):
                if part in ("", ".", "..") or Path(part).name != part:
                    raise ValueError(f"{part!r} names no entry of {directory}")
                held.enter_context(_flock(lock_path(directory / part, False), directory / part, what, shared=False))
        yield directory


@contextlib.contextmanager
def _flock(path: Path, directory: Path, what: str, shared: bool) -> Iterator[None]:
    """Hold the lock file `path` of `directory`, shared or exclusive, without waiting; DirectoryInUse
    naming the holder when it is taken. Only an exclusive holder writes its record into the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DirectoryInUse(
                f"{directory} is in use by another {_refused_by(fd, path, directory, shared, what)}; "
                f"wait for it to end or choose another directory"
            ) from None
        if not shared:
            record = {
                "what": what,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.time(),
                "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:500],
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _refused_by(fd: int, path: Path, directory: Path, shared: bool, what: str) -> str:
    """Who holds the lock file `path` of `directory` that a request (of the writer `what`) was refused:
    the exclusive holder (its record: what it is, pid, host, command), or, when only shared holders
    have it (it can be taken shared), writers of parts. A record without `what` (a holder of an older
    version) is named as the refused writer."""
    if not shared:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            kinds = sorted({info.get("what") or what for info in _part_holders(directory)}) or [what]
            return f"{' and '.join(kinds)} of only part of it (each names itself in {directory}/.<part>{LOCK_FILE})"
    info = holder(path)
    return f"{info.get('what') or what}: {describe_holder(info)}"


def _part_holders(directory: Path) -> list[dict]:
    """The records of the part locks (DIR/.PART.lock) of `directory` that a live writer holds now."""
    held = []
    for path in sorted(directory.glob(f".*{LOCK_FILE}")) if directory.is_dir() else []:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(holder(path))
        finally:
            os.close(fd)
    return held


@contextlib.contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """Hold .NAME.lock beside the file `path` for the block, waiting for it: for read-modify-writes
    of a file that writers running side by side share, each holding it only for that."""
    path = lock_path(Path(path), inside=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
