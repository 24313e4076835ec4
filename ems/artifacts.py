"""Artifact directories that are whole or absent.

    with staged_directory(out) as staging:
        ...  # write every file into staging
    # out now holds all of them, or (an exception, a kill) nothing new

The files are written into a sibling `.NAME.partial` (same filesystem, so the final step is one
rename) that the writer holds an exclusive lock on (ems.locks), then renamed to NAME. A killed writer
leaves only the hidden staging directory, which no loader reads and the next writer clears; a second
writer of the same directory at the same time is refused, naming the first.

`write_json` writes one file whole or not at all (a reader never sees half of it), and `update_json`
is the read-modify-write of a JSON report that writers running side by side merge their entries into.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ems.locks import LOCK_FILE, exclusive, locked


def staging_dir(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


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
        _clear(staging)  # a killed writer's files
        try:
            yield staging
        except BaseException:
            _clear(staging)
            raise
        _fsync_tree(staging)
        if final.exists():
            if replace and final.is_dir() and any(final.iterdir()):
                old = final.with_name(f".{final.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                final.rename(old)
                staging.rename(final)
                shutil.rmtree(old)
            else:
                final.rmdir()  # empty, checked above
                staging.rename(final)
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(final)
        (final / LOCK_FILE).unlink()


def write_json(path: str | Path, value) -> None:
    """`value` as indented JSON in `path`, through a temporary file of its own renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


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
