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


def test_the_reading_depth_of_auto_leaves_a_cpu_s_cores_to_the_step(monkeypatch):
    import ems.training.batches as batches

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert batches.prefetch_depth(3, cpu) == 3 and batches.prefetch_depth(0, gpu) == 0  # a number as given
    monkeypatch.setattr(batches, "usable_cores", lambda: 2)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert batches.prefetch_depth("auto", cpu) == 0  # the step's threads take both cores: read between steps
    assert batches.prefetch_depth("auto", gpu) == 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert batches.prefetch_depth("auto", cpu) == 2  # a core to spare: read ahead on it


@pytest.mark.parametrize("value", ["fast", -1, True, 1.5])
def test_a_bad_prefetch_setting_is_one_error_naming_it(value):
    from ems.configs import ConfigError
    from ems.training.config import TrainConfig

    with pytest.raises(ConfigError, match="prefetch_batches must be auto or a whole number >= 0"):
        TrainConfig(prefetch_batches=value)
