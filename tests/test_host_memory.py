"""ems.training.runtime.keep_freed_host_memory: a training process reuses the memory a step frees instead of
faulting fresh pages in every step; the user's own MALLOC_*_ settings stand."""

import ctypes
import ctypes.util
import multiprocessing
import resource
import sys

import pytest
import torch

import ems.training.runtime as runtime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

MB16 = 4 << 20  # float32 elements of a 16 MB tensor


def _page_faults_of_freed_tensors(keep: bool, queue) -> None:
    """In a child process: glibc's fixed 128 KiB mmap threshold (its default before any free), or the trainer's
    setting; then the page faults of 20 rounds of a 16 MB tensor allocated, written and freed."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.mallopt(runtime.M_MMAP_THRESHOLD, 128 << 10)
    if keep:
        assert runtime.keep_freed_host_memory()
    torch.zeros(MB16)  # the first allocation may grow the heap
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        torch.zeros(MB16)
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)


def _faults(keep: bool) -> int:
    context = multiprocessing.get_context("spawn")  # a fresh process: fork after OpenMP threads hangs
    queue = context.Queue()
    child = context.Process(target=_page_faults_of_freed_tensors, args=(keep, queue))
    child.start()
    faults = queue.get(timeout=60)
    child.join()
    return faults


def test_freed_step_memory_is_reused_without_page_faults():
    pages = 20 * (16 << 20) // 4096
    without, kept = _faults(keep=False), _faults(keep=True)
    assert without > pages // 2  # mmap'd and unmapped: every page faulted in again
    # From the heap, kept: a round's pages fault again only where the kernel took them back meanwhile (on a
    # busy machine with a proactive reclaimer, kdamond, up to 4 of the 20 rounds were seen to)
    assert kept < without // 4


def test_the_users_own_malloc_settings_stand(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # not one of the settings this touches
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    assert runtime.keep_freed_host_memory() is False
