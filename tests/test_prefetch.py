"""ems.training.batches.Prefetcher: the same items in the same order as the source, read ahead; the time
blocked is counted; an error in the reading thread reaches the consumer; close stops it."""

import time

import pytest
import torch

from ems.training.batches import Prefetcher


def _batches(n, delay=0.0):
    for i in range(n):
        time.sleep(delay)
        yield (0, i), [{"src": torch.full((2, 3), i)}]


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_same_items_in_order(depth):
    items = list(Prefetcher(_batches(7), depth))
    assert [position for position, _ in items] == [(0, i) for i in range(7)]
    assert all(torch.equal(batches[0]["src"], torch.full((2, 3), i)) for i, (_, batches) in enumerate(items))


def test_reading_overlaps_the_step_and_waits_are_counted():
    slow = Prefetcher(_batches(6, delay=0.05), depth=2)
    time.sleep(0.3)  # a "step" while the thread reads ahead
    next(slow), next(slow)
    assert slow.wait_seconds < 0.03  # both were ready
    sync = Prefetcher(_batches(3, delay=0.05), depth=0)
    list(sync)
    assert sync.wait_seconds >= 0.15


def test_an_error_in_the_thread_is_raised_by_next_and_close_stops_it():
    def broken():
        yield (0, 0), []
        raise ValueError("bad shard")

    reader = Prefetcher(broken(), depth=2)
    assert next(reader) == ((0, 0), [])
    with pytest.raises(ValueError, match="bad shard"):
        next(reader)
    endless = Prefetcher(_batches(10**9), depth=2)
    next(endless)
    endless.close()
    assert not endless._thread.is_alive()
