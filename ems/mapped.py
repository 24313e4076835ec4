"""Memory-mapped arrays without the resident-set growth of random reads. No torch import, so
eval's mining commands that use it start fast."""

from __future__ import annotations

import mmap

import numpy as np


def release_mapped_pages(x: np.ndarray | None) -> None:
    """Unmap the pages that reading a read-only memory-mapped `x` (np.load(..., mmap_mode="r"))
    brought into this process. They stay in the OS page cache, so a later read is a cheap minor
    fault, but the process's resident set (what a SLURM memory limit watches) no longer grows
    with the size of the file. Anything else: no-op."""
    mapping = getattr(x, "_mmap", None)  # np.memmap's mapping; numpy has no public handle for it
    if isinstance(x, np.memmap) and x.mode == "r" and mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)  # read-only shared mapping: nothing can be lost


def shrunk_size(x: np.ndarray | None) -> int | None:
    """The size in bytes of the file that a memory-mapped `x` (np.load(..., mmap_mode="r")) maps, when
    it is now shorter than the array needs (truncated or overwritten since it was opened: reading past
    its new end would kill the process with SIGBUS), else None. One fstat of the mapped file; anything
    but such an array: None."""
    mapping = getattr(x, "_mmap", None)  # np.memmap's mapping (an mmap.mmap, which keeps the file open)
    if not isinstance(x, np.memmap) or mapping is None:
        return None
    size = mapping.size()
    return size if size < x.offset + x.nbytes else None
