"""Artifact directories that are whole or absent.

    with staged_directory(out) as staging:
        ...  # write every file into staging
    # out now holds all of them, or (an exception, a kill) nothing new

The files are written into a sibling `.NAME.partial` (same filesystem, so the final step is one
rename) that the writer holds an exclusive lock on (ems.locks), then renamed to NAME. A killed writer
leaves only the hidden staging directory, which no loader reads and the next writer clears; a second
writer of the same directory at the same time is refused, naming the first. Replacing a directory
(`replace`: a run's model, written again on resume) renames the old one to `.NAME.old`, the new one
into place, then removes the old one; a kill between the two renames leaves only `.NAME.old`, which
the next writer (or `recover_replaced`, which a run calls when it starts) renames back, and a kill
after them a stale `.NAME.old` that it removes. `replaced_hint` is what a loader of a missing
directory says about it.

`write_text` and `write_json` write one file whole or not at all (a reader never sees half of it),
and `update_json` is the read-modify-write of a JSON report that writers running side by side merge
their entries into. `file_fingerprint` and `same_file` record a file's content and check it later (a
stage's record of the inputs it read and the outputs it wrote); `file_record` and `read_manifest_files`
are the entries of a manifest.json ({"files": {path: {"bytes", "sha256"}}}: a checkpoint's, a model
directory's).

A write the file system refuses (full, over quota, read-only, failing: WRITE_ERRNOS, or a numpy
short write; the same from safetensors or torch's serializer) inside `writing`, `staged_directory`,
`write_text` or `write_json` is `WriteFailed`: one line naming what was written and where, the reason and the space
left, which ems.cli.run_main prints as `error: ...` with status 2.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from ems.cli import UserError
from ems.locks import LOCK_FILE, exclusive, locked

# what a write fails with when the file system cannot take it (not a missing input, say)
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)
# torch's zip writer reports a failed write as a RuntimeError with one of these in its message
TORCH_WRITE_FAILURE_WORDS = ("inline_container", "PytorchStreamWriter", "file write failed")
LOW_SPACE_BYTES = 64 * 2**20  # below this much free space a failed write says "(no space left)"
# numpy's `tofile` when the C library wrote fewer items than asked (a full disk), an OSError without errno
NUMPY_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


class WriteFailed(UserError):
    """A file or directory could not be written: the file system is full, over quota, read-only or
    failing. Nothing half-written is left where a reader would take it for whole."""


def write_failure(error: BaseException) -> str | None:
    """The one-line reason when `error` is a write the file system refused (an OSError of
    WRITE_ERRNOS, numpy's `tofile` writing fewer items than asked: its OSError carries no errno,
    safetensors' or torch's serializer failing on one), else None."""
    if isinstance(error, OSError):
        short = NUMPY_SHORT_WRITE.fullmatch(str(error)) if error.errno is None else None
        if short:
            requested, written = short.groups()
            return f"the disk is full (ENOSPC) or over quota: a short write, {written} of {requested} items written"
        if error.errno not in WRITE_ERRNOS:
            return None
        return f"{error.strerror or os.strerror(error.errno)} [errno {error.errno}]"
    text = " ".join(str(error).split())
    if type(error).__name__ == "SafetensorError" and ("I/O error" in text or "os error" in text):
        return text[:300]
    if isinstance(error, RuntimeError) and any(word in text for word in TORCH_WRITE_FAILURE_WORDS):
        return text[:300]
    return None


def free_space(path: str | Path) -> str:
    """'N MiB free on the filesystem of DIR' (with ' (no space left)' when nearly none) for the
    nearest existing directory at or above `path`."""
    directory = Path(path)
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return f"the free space on the filesystem of {directory} is unknown"
    low = " (no space left)" if free < LOW_SPACE_BYTES else ""
    return f"{free / 2**20:.0f} MiB free on the filesystem of {directory}{low}"


def write_failed(
    error: BaseException, path: str | Path, what: str, then: str = "nothing half-written was kept"
) -> WriteFailed | None:
    """WriteFailed for `error` when it is a refused write (write_failure) of `what` (e.g. "model
    export") into `path`, else None: "could not write PATH (WHAT): REASON; N MiB free on the
    filesystem of DIR; THEN: free space and rerun"."""
    reason = write_failure(error)
    if reason is None:
        return None
    return WriteFailed(f"could not write {path} ({what}): {reason}; {free_space(path)}; {then}: free space and rerun")


@contextlib.contextmanager
def writing(path: str | Path, what: str, then: str = "nothing half-written was kept") -> Iterator[None]:
    """Inside: a refused write becomes WriteFailed naming `path` and `what` (write_failed); any
    other error passes unchanged."""
    try:
        yield
    except BaseException as error:
        failed = write_failed(error, path, what, then)
        if failed is None:
            raise
        raise failed from error


def staging_dir(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


def old_dir(final: Path) -> Path:
    """Where a replaced directory waits while its successor is renamed into place."""
    return final.with_name(f".{final.name}.old")


def recover_replaced(final: str | Path) -> None:
    """Finish a replacement of `final` that a kill cut short: without `final`, its `.NAME.old`
    (whole: it was `final` until the first rename) is renamed back; beside `final`, it is removed.
    The caller holds the lock of whoever writes `final` (its staging directory's, or the run's)."""
    final = Path(final)
    old = old_dir(final)
    if not old.is_dir():
        return
    if final.exists():
        shutil.rmtree(old)
    else:
        old.rename(final)
        fsync_path(final.parent)


def replaced_hint(final: str | Path) -> str:
    """For the error of a loader that finds no `final`: what its `.NAME.old` means, or ''."""
    final = Path(final)
    old = old_dir(final)
    if final.exists() or not old.is_dir():
        return ""
    return (
        f"; {old} holds the previous one (a write that replaced it was killed half-way): rerun the "
        f"writer (a training run restores it when it starts) or rename {old.name} to {final.name}"
    )


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory: so that renames in it survive a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clear(staging: Path) -> None:
    """Remove everything in `staging` but its lock file."""
    for path in staging.iterdir():
        if path.name != LOCK_FILE:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


@contextlib.contextmanager
def staged_directory(final: str | Path, what: str, replace: bool = False) -> Iterator[Path]:
    """Yields the staging directory of `final`; when the block ends without an exception its files
    become `final`. `final` must be absent or an empty directory, unless `replace` (a run's own
    model directory, written again on resume): then the old directory is swapped out only after the
    new one is complete. `what` names the writer in the error a concurrent one gets."""
    final = Path(final)
    if final.exists() and not replace and (not final.is_dir() or any(final.iterdir())):
        raise FileExistsError(f"{final} exists and is not an empty directory; choose a new output directory")
    staging = staging_dir(final)
    with exclusive(staging, what):
        recover_replaced(final)  # a replacement a kill cut short
        _clear(staging)  # a killed writer's files
        replacing = replace and final.is_dir() and any(final.iterdir())
        try:
            yield staging
            _fsync_tree(staging)
        except BaseException as error:
            _clear(staging)
            kept = "nothing of it was kept" + (", the previous one is in place" if replacing else "")
            failed = write_failed(error, final, what, kept)
            if failed is None:
                raise
            raise failed from error
        if final.exists():
            if replacing:
                old = old_dir(final)
                final.rename(old)
                staging.rename(final)  # a kill before this: the next writer renames `old` back
                fsync_path(final.parent)
                shutil.rmtree(old)  # a kill before this: the next writer removes it
            else:
                final.rmdir()  # empty, checked above
                staging.rename(final)
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(final)
        (final / LOCK_FILE).unlink()


def write_text(path: str | Path, text: str, what: str = "a file") -> None:
    """`text` in `path`, through a temporary file of its own renamed into place: a reader sees the
    old file or the new one, and a refused write (a full disk) is WriteFailed naming `what` and
    `path`, with nothing half-written left."""
    path = Path(path)
    with writing(path, what):
        path.parent.mkdir(parents=True, exist_ok=True)
        # a name of its own (not mkstemp's: its files are private to the owner)
        partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
        try:
            with open(partial, "x", encoding="utf-8") as file:
                file.write(text)
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise


def write_json(path: str | Path, value, what: str = "a JSON file") -> None:
    """`value` as indented JSON in `path`, whole or not at all (write_text)."""
    write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n", what)


def update_json(path: str | Path, update: Callable[[dict], None]) -> dict:
    """Read the JSON object in `path` ({} when there is none), let `update` change it in place and
    write it back (write_json), all under the file's lock (ems.locks.locked), so that writers running
    side by side keep each other's entries. Returns the object written."""
    path = Path(path)
    with locked(path):
        value = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        update(value)
        write_json(path, value)
    return value


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_record(path: Path) -> dict:
    """{"bytes", "sha256"} of a file: its entry in a manifest (`read_manifest_files`)."""
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def read_manifest_files(manifest_path: Path) -> dict[str, dict]:
    """{relative path: {"bytes": int, "sha256": str}}: the `files` of a manifest.json (a checkpoint's,
    a model directory's); ValueError if it is not that (not UTF-8, not JSON, another shape)."""
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    files = manifest.get("files") if isinstance(manifest, dict) else None
    entries_ok = isinstance(files, dict) and all(
        isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)
        for entry in files.values()
    )
    if not entries_ok:
        raise ValueError('expected {"files": {path: {"bytes": int, "sha256": str}}}')
    return files


def file_fingerprint(path: Path, digest: str | None = None) -> dict:
    """{"size", "mtime_ns", "blake2b"}: the file's size and modification time, and the blake2b
    digest of its bytes (`digest` when the caller has just computed it, else read here)."""
    stat = os.stat(path)
    if digest is None:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "blake2b").hexdigest()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "blake2b": digest}


def same_file(fingerprint: dict, path: Path) -> bool:
    """Whether `path` still has the content `fingerprint` (of `file_fingerprint`) describes: the
    same size and modification time, or the same size and digest (a copy, a `touch`)."""
    stat = os.stat(path)
    if stat.st_size != fingerprint["size"]:
        return False
    return stat.st_mtime_ns == fingerprint["mtime_ns"] or file_fingerprint(path)["blake2b"] == fingerprint["blake2b"]
