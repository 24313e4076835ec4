"""The batch order one window at a time: KeyedPermutation, IndexRanges, O(window) reads, and the
shards' mapped pages released as batches stream (per-rank host memory O(window), not O(corpus))."""

import json

import numpy as np
import pytest

from ems.shards import IndexRanges, PairShards
from ems.training import batch_order
from ems.training.batch_order import BatchOrder, KeyedPermutation
from ems.training.batches import iterate_batches


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 4097])
def test_keyed_permutation_is_a_bijection_evaluated_pointwise(n):
    perm = KeyedPermutation(n, (0, 1))
    values = perm(np.arange(n))
    assert sorted(values.tolist()) == list(range(n))
    some = np.array([n - 1, 0, n // 2])
    assert np.array_equal(perm(some), values[some])


def test_keyed_permutation_depends_on_its_key_and_shuffles():
    n = 10_000
    a, b = KeyedPermutation(n, (0, 0))(np.arange(n)), KeyedPermutation(n, (0, 1))(np.arange(n))
    assert not np.array_equal(a, b)
    assert np.array_equal(a, KeyedPermutation(n, (0, 0))(np.arange(n)))
    assert abs(np.corrcoef(np.arange(n), a)[0, 1]) < 0.05  # no trace of the input order
    assert (a == np.arange(n)).sum() < 10  # ~1 fixed point expected for a random permutation
    with pytest.raises(IndexError):
        KeyedPermutation(n, (0,))(np.array([n]))


def test_index_ranges_stand_for_their_concatenated_aranges():
    ranges = IndexRanges([(10, 13), (20, 20), (5, 7)])
    full = np.array([10, 11, 12, 5, 6])
    assert len(ranges) == 5 and np.array_equal(np.asarray(ranges), full)
    assert np.array_equal(ranges[np.array([4, 0, 3, 2])], full[[4, 0, 3, 2]])
    with pytest.raises(IndexError):
        ranges[np.array([5])]


class RowCounting:
    """An (n, ...) array that counts the rows read through it."""

    def __init__(self, array):
        self.array, self.rows_read = array, 0
        self.ndim, self.shape, self.dtype = array.ndim, array.shape, array.dtype

    def __len__(self):
        return len(self.array)

    def __getitem__(self, rows):
        self.rows_read += len(rows)
        return self.array[rows]


def test_a_window_reads_only_its_own_pairs_and_batch_equals_epoch():
    rng = np.random.default_rng(0)
    n, batch, bucket = 5_000, 16, 10  # 312 batches: 31 full windows and one of 2 batches
    lengths = RowCounting(rng.integers(1, 60, size=(n, 2)))
    ids = RowCounting(rng.integers(0, 3_000, size=(n, 2)).astype(np.uint64))
    order = BatchOrder(lengths, batch, seed=4, bucket_batches=bucket, content_ids=ids, max_len=40)
    first = order.batch(0, 0)
    assert lengths.rows_read == ids.rows_read == bucket * batch  # one window, not the corpus
    assert order.batch(0, 9) is not None and lengths.rows_read == bucket * batch  # same window: cached
    everything = order.epoch(0)
    assert len(everything) == order.batches_per_epoch() == 312 and np.array_equal(everything[0], first)
    flat = np.concatenate(everything)
    assert len(np.unique(flat)) == len(flat) == 312 * batch
    fresh = BatchOrder(lengths, batch, seed=4, bucket_batches=bucket, content_ids=ids, max_len=40)
    for b in (311, 0, 157, 10, 9):  # any order, across window boundaries and the short last window
        assert np.array_equal(fresh.batch(0, b), everything[b])
    assert not np.array_equal(np.concatenate(fresh.epoch(1)), flat)
    # each window is length-bucketed: sorted (max_len-clipped) first-side lengths, batch by batch
    clipped = np.minimum(lengths.array[:, 0], 40)
    window = np.stack(everything[:bucket])
    spans = np.sort([clipped[b].max() - clipped[b].min() for b in window])
    assert spans[-2] <= 6  # spread_duplicates may widen a batch or two a little


def test_temperature_sampling_from_index_ranges_equals_arrays():
    lengths = np.random.default_rng(1).integers(1, 30, size=3_000)
    ranges = {
        "a-en": IndexRanges([(0, 2_500)]),
        "b-en": IndexRanges([(2_500, 2_900), (2_950, 3_000)]),
        "c-en": IndexRanges([(2_900, 2_950)]),
    }
    arrays = {name: np.asarray(r) for name, r in ranges.items()}
    by_ranges = BatchOrder(lengths, 50, seed=0, bucket_batches=7, groups=ranges, pair_sampling_temperature=5.0)
    by_arrays = BatchOrder(lengths, 50, seed=0, bucket_batches=7, groups=arrays, pair_sampling_temperature=5.0)
    drawn = np.concatenate(by_ranges.epoch(0))
    assert np.array_equal(drawn, np.concatenate(by_arrays.epoch(0)))
    counts = by_ranges.group_counts()
    assert np.isin(drawn, arrays["c-en"]).sum() == counts["c-en"] > 50  # the 50-pair group repeats
    small = np.bincount(drawn[np.isin(drawn, arrays["c-en"])] - 2_900)
    assert small.max() - small.min() <= 1  # each pass a full permutation of the group


def test_the_pair_sequence_in_blocks_is_the_sequence_computed_at_once(monkeypatch):
    lengths = np.random.default_rng(2).integers(1, 30, size=3_000)
    groups = {"a-en": np.arange(0, 2_500), "b-en": np.arange(2_500, 2_950), "c-en": np.arange(2_950, 3_000)}
    whole = BatchOrder(lengths, 50, seed=3, bucket_batches=1, groups=groups, pair_sampling_temperature=5.0)
    expected, batches = whole._pairs_at(1, 0, 3_000), whole.epoch(1)  # one block: 3,000 < PAIRS_BLOCK
    monkeypatch.setattr(batch_order, "PAIRS_BLOCK", 37)
    blocked = BatchOrder(lengths, 50, seed=3, bucket_batches=1, groups=groups, pair_sampling_temperature=5.0)
    for start, stop in ((0, 3_000), (30, 40), (36, 38), (70, 150), (2_990, 3_000), (5, 5)):
        assert np.array_equal(blocked.epoch_pairs(1, start, stop), expected[start:stop])
    assert np.array_equal(np.concatenate(blocked.epoch(1)), np.concatenate(batches))  # one-batch windows


def test_one_pair_batches_hold_one_language_pair_each():
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 30, size=(3_000, 2))
    ranges = {
        "a-en": IndexRanges([(0, 1_300)]),
        "b-en": IndexRanges([(1_300, 2_000), (2_950, 3_000)]),
        "c-en": IndexRanges([(2_000, 2_950)]),
    }
    group = np.zeros(3_000, dtype=int)
    group[1_300:2_000] = group[2_950:] = 1
    group[2_000:2_950] = 2
    order = BatchOrder(lengths, 50, seed=0, bucket_batches=20, groups=ranges, one_pair_batches=True)
    for epoch in (0, 1):
        batches = order.epoch(epoch)
        assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(3_000))  # every pair once an epoch
        mixed = [b for b in batches if len(set(group[b])) > 1]
        assert len(mixed) <= 3 * (len(set(group)) - 1)  # 3 windows of 20 batches, a mixed batch per boundary
        assert len(mixed) >= 1  # 3000 pairs do not split into whole batches of each group
    first = {frozenset(b.tolist()) for b in order.epoch(0)}
    assert not first & {frozenset(b.tolist()) for b in order.epoch(1)}  # new company every epoch
    mixed_order = BatchOrder(lengths, 50, seed=0, bucket_batches=20, groups=ranges)
    assert sum(len(set(group[b])) > 1 for b in mixed_order.epoch(0)) > 50  # without it, almost every batch mixes
    arrays = {name: np.asarray(r) for name, r in ranges.items()}
    again = BatchOrder(lengths, 50, seed=0, bucket_batches=20, groups=arrays, one_pair_batches=True)
    assert all(np.array_equal(a, b) for a, b in zip(again.epoch(1), order.epoch(1)))  # a resumed run replays it
    with pytest.raises(ValueError, match="one_pair_batches needs the language-pair groups"):
        BatchOrder(lengths, 50, one_pair_batches=True)


def _write_shards(directory, n_pairs, length):
    """Format-2 shards of n_pairs pairs of `length` tokens per side (tokens.npy sparse)."""
    directory.mkdir()
    np.save(directory / "lengths.npy", np.full((n_pairs, 2), length, dtype=np.uint8))
    np.save(directory / "langs.npy", np.tile(np.array([1, 0], dtype=np.int16), (n_pairs, 1)))  # xx-en, as indexed
    np.save(directory / "content_ids.npy", np.arange(2 * n_pairs, dtype=np.uint64).reshape(-1, 2))
    np.save(directory / "offsets.npy", np.arange(2 * n_pairs + 1, dtype=np.int64) * length)
    np.lib.format.open_memmap(directory / "tokens.npy", "w+", np.uint16, (2 * n_pairs * length,)).flush()
    (directory / "index.json").write_text(
        json.dumps(
            {
                "format": 2,
                "languages": ["en", "xx"],
                "n_pairs": n_pairs,
                "files": [{"l1": "xx", "l2": "en", "sides": ["xx", "en"], "start": 0, "end": n_pairs}],
            }
        )
    )


def _mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="needs madvise(MADV_DONTNEED)")
def test_streaming_batches_keeps_the_mapped_shards_small(tmp_path):
    _write_shards(tmp_path / "shards", n_pairs=200_000, length=32)  # tokens.npy: 25.6 MB
    shards = PairShards(tmp_path / "shards")
    order = BatchOrder(shards.lengths, 64, seed=0, bucket_batches=50, content_ids=shards.content_ids, max_len=32)
    stream = iterate_batches(shards, order, 32)
    for _ in range(60):  # 60 x 64 random pairs would map most of every file without releasing
        next(stream)
    tokens_kib, ids_kib = (
        _mapped_kib(tmp_path / "shards" / "tokens.npy"),
        _mapped_kib(tmp_path / "shards" / "content_ids.npy"),
    )
    assert tokens_kib < 8 * 1024 and ids_kib < 8 * 1024, (tokens_kib, ids_kib)
    np.asarray(shards.tokens[np.random.default_rng(0).integers(0, len(shards.tokens), 4_000)])
    assert _mapped_kib(tmp_path / "shards" / "tokens.npy") > 16 * 1024  # the measure sees unreleased reads
