"""The files between mining stages: each written whole or not at all, and checked before it is read.

In: arrays (or chunks of rows) and JSON-able mappings to write; paths to read. Out: the files,
written to a partial name beside the target (unique per host and process, so a duplicate job
never writes into another's file) and renamed into place once complete (`atomic`); a write that
fails (a full disk) leaves nothing behind and raises `WriteFailed`, one line naming the file; the
partial file of a writer killed on this host is removed by the next writer of that file. Readers see a
side's shard files as one array (`ShardedRows`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ems.cli import UserError
from ems.mapped import release_mapped_pages

# what a write fails with when the file system cannot take the file (not a missing input, say)
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EACCES)


class WriteFailed(UserError):
    """A stage's output file could not be written (a full disk, a quota, permissions)."""


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """Yield a partial path to write `path`'s content to; on success it is renamed to `path` (a
    reader sees the whole file or none), on any error it is removed and an OSError becomes
    `WriteFailed` naming `path` when the file system could not take it (WRITE_ERRNOS)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    partial = path.with_name(f".{path.name}.{host}-{os.getpid()}.partial")
    try:
        yield partial
        if partial.is_dir() and path.is_dir():
            shutil.rmtree(path)  # a directory (an on-disk index) replaces a stale one whole
        os.replace(partial, path)
    except BaseException as error:
        _remove(partial)
        if isinstance(error, OSError) and error.errno in WRITE_ERRNOS:
            reason = error.strerror or type(error).__name__
            raise WriteFailed(f"could not write {path}: {reason}; nothing of it was kept (rerun to finish)") from error
        raise
    for stale in path.parent.glob(f".{path.name}.{host}-*.partial"):  # left by a killed writer on this host
        if not _alive(int(stale.name.rsplit("-", 1)[1].removesuffix(".partial"))):
            _remove(stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def save_array(path: Path, array: np.ndarray) -> int:
    """`array` as a .npy file at `path`, atomically; returns its size in bytes."""
    with atomic(path) as partial, open(partial, "wb") as f:
        np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)
    return path.stat().st_size


def save_arrays(arrays: dict[Path, np.ndarray]) -> dict[Path, int]:
    """Each array at its path (`save_array`); returns {path: size}."""
    return {path: save_array(path, array) for path, array in arrays.items()}


def save_rows(path: Path, n_rows: int, chunks: Iterable[np.ndarray], dtype: str) -> int:
    """The row chunks (n_rows rows in all, every chunk as wide as the first) as a `dtype` .npy file
    at `path`, atomically, written as they come (never all in memory); returns its size in bytes."""
    written, dim = 0, None
    with atomic(path) as partial, open(partial, "wb") as f:
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype=dtype)
            if dim is None:
                dim = chunk.shape[1]
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
                np.lib.format.write_array_header_1_0(f, {**header, "shape": (n_rows, dim)})
            if chunk.ndim != 2 or chunk.shape[1] != dim:
                raise ValueError(f"embedding chunk of shape {chunk.shape} after chunks of width {dim}")
            f.write(chunk.tobytes())
            written += len(chunk)
        if written != n_rows or dim is None:
            raise ValueError(f"{written} embedding rows made for {path}; expected {n_rows}")
    return path.stat().st_size


def save_bytes(path: Path, data) -> int:
    """`data` (bytes or a uint8 array: a faiss.serialize_index) at `path`, atomically; returns its size."""
    with atomic(path) as partial, open(partial, "wb") as f:
        f.write(memoryview(data))
    return path.stat().st_size


def save_json(path: Path, data: dict) -> None:
    """`data` as indented JSON at `path`, atomically."""
    with atomic(path) as partial:
        partial.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class ShardedRows:
    """Shard arrays (each (n_i, ...) with the same trailing shape; memory-mapped files, typically)
    seen as one array of sum(n_i) rows: `len`, `shape`, `dtype`, and indexing by a slice or an
    integer array, which copies the rows (ems.mining.index_kinds and .search read it as they read one
    memory-mapped array) and releases the mapped pages it read."""

    def __init__(self, parts: Sequence[np.ndarray]):
        if not parts:
            raise ValueError("no shards")
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [len(part) for part in self.parts])
        self.shape = (int(self.starts[-1]), *self.parts[0].shape[1:])
        self.dtype = self.parts[0].dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            return self._range(*key.indices(len(self)))
        rows = np.asarray(key, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"row ids must be in 0..{len(self) - 1}")
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        shard = np.searchsorted(self.starts, rows, side="right") - 1
        for part in np.unique(shard).tolist():
            where = shard == part
            out[where] = self.parts[part][rows[where] - self.starts[part]]
            release_mapped_pages(self.parts[part])
        return out

    def _range(self, start: int, stop: int, step: int) -> np.ndarray:
        if step != 1:
            raise IndexError("ShardedRows takes slices with step 1")
        pieces = []
        for part, first in zip(self.parts, self.starts[:-1].tolist()):
            if first < stop and start < first + len(part):
                pieces.append(np.array(part[max(start - first, 0) : stop - first]))
                release_mapped_pages(part)
        return np.concatenate(pieces) if pieces else np.empty((0, *self.shape[1:]), dtype=self.dtype)
