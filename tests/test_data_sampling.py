"""Batching for multi-process training: temperature sampling over language pairs, length
bucketing, the per-rank split of a global batch, and exact data positions."""

import numpy as np
import pytest
import torch

from ems.packing import Packer
from ems.shards import PairShards
from ems.text import PAD_ID
from ems.training.batch_order import BatchOrder, temperature_proportions
from ems.training.batches import collate, iterate_batches, packed, real_and_padded_tokens, sub_batch


def test_temperature_sampling_draws_each_language_pair_in_its_tempered_share():
    groups = {"de-en": np.arange(0, 900), "en-fr": np.arange(900, 990), "en-sw": np.arange(990, 1000)}
    lengths = np.ones(1000, dtype=np.int64)
    order = BatchOrder(lengths, global_batch_size=100, seed=0, groups=groups, pair_sampling_temperature=5.0)
    drawn = np.concatenate(order.epoch(0))
    # hand-computed: q_i ∝ (n_i / N)^(1/5) for n = 900, 90, 10 of N = 1000
    q = np.array([0.9, 0.09, 0.01]) ** 0.2
    q /= q.sum()
    counts = [np.isin(drawn, members).sum() for members in groups.values()]
    assert np.abs(np.array(counts) - 1000 * q).max() <= 1 and sum(counts) == 1000
    assert counts[0] < 900 and counts[2] > 10 * 19  # the big pair is subsampled, the small one repeated
    assert (
        np.bincount(drawn[np.isin(drawn, groups["en-sw"])]).max()
        - np.bincount(drawn[np.isin(drawn, groups["en-sw"])])[990:].min()
        <= 1
    )
    assert not np.array_equal(np.concatenate(order.epoch(1)), drawn)
    # T = 1 is proportional sampling; temperature off is every pair exactly once
    np.testing.assert_allclose(temperature_proportions(np.array([900, 90, 10]), 1.0), [0.9, 0.09, 0.01])
    once = np.concatenate(BatchOrder(lengths, 100, seed=0).epoch(0))
    assert sorted(once.tolist()) == list(range(1000))
    with pytest.raises(ValueError, match="needs the language-pair groups"):
        BatchOrder(lengths, 100, pair_sampling_temperature=5.0)


def test_a_sampling_floor_draws_small_language_pairs_as_if_they_had_that_many_pairs():
    groups = {"de-en": np.arange(0, 900), "en-fr": np.arange(900, 990), "en-sw": np.arange(990, 1000)}
    lengths = np.ones(1000, dtype=np.int64)
    # hand-computed: sizes 900, 90, 10 with a floor of 50 count as 900, 90, 50 (of 1040)
    expected = np.array([900, 90, 50]) / 1040
    np.testing.assert_allclose(temperature_proportions(np.array([900, 90, 10]), 1.0, 50), expected)
    order = BatchOrder(lengths, global_batch_size=100, seed=0, groups=groups, pair_sampling_floor=50)
    drawn = np.concatenate(order.epoch(0))
    counts = [int(np.isin(drawn, members).sum()) for members in groups.values()]
    assert np.abs(np.array(counts) - 1000 * expected).max() <= 1 and sum(counts) == 1000
    with pytest.raises(ValueError, match="needs the language-pair groups"):
        BatchOrder(lengths, 100, pair_sampling_floor=50)


def test_batches_mix_language_pairs_and_groups_come_from_the_index(tiny_pipeline):
    shards = PairShards(tiny_pipeline / "shards")
    groups = shards.language_pair_groups()
    assert list(groups) == ["de-en", "en-fr", "en-ja"]
    assert sum(map(len, groups.values())) == len(shards)
    order = BatchOrder(shards.pair_lengths(), 32, seed=0, groups=groups, pair_sampling_temperature=5.0)
    mixed = [len({tuple(shards.langs[i]) for i in batch}) for batch in order.epoch(0)]
    assert np.mean(mixed) > 2  # most batches hold all three language pairs


def _real_token_ratio(shards, order):
    totals = np.array([real_and_padded_tokens(collate(shards, b, 120)) for b in order.epoch(0)]).sum(axis=0)
    return totals[0] / totals[1]


def _flores_pair_lengths(data_dir) -> np.ndarray:
    """(n, 2) word counts of real FLORES-200 devtest pairs, every spaced language against English
    (~200k pairs: realistic joint length statistics of translation pairs)."""
    devtest = data_dir / "flores200" / "devtest"
    english = [len(line.split()) for line in (devtest / "eng.devtest").read_text(encoding="utf-8").splitlines()]
    rows = []
    for path in sorted(devtest.glob("*.devtest")):
        other = [len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]
        if path.name != "eng.devtest" and np.median(other) >= 5:  # languages written without spaces have no word counts
            rows += zip(other, english)
    return np.array(rows)


def _length_ratio(lengths: np.ndarray, order: BatchOrder) -> float:
    """Real tokens over padded slots when each side of each batch is padded to its longest sentence."""
    batches = np.stack(order.epoch(0))
    return lengths[batches].sum() / (lengths[batches].max(axis=1) * batches.shape[1]).sum()


def test_bucketing_on_both_sides_leaves_under_5_percent_padding_on_real_pair_lengths(data_dir):
    lengths = np.minimum(_flores_pair_lengths(data_dir), 120)
    assert len(lengths) > 150_000
    snake = _length_ratio(lengths, BatchOrder(lengths, 152, seed=0))
    longer_side = _length_ratio(lengths, BatchOrder(lengths.max(axis=1), 152, seed=0))
    unbucketed = _length_ratio(lengths, BatchOrder(lengths, 152, seed=0, bucket_batches=1))
    # measured: 0.964 snake, 0.904 sorting by the longer side only, ~0.5 unsorted
    assert snake >= 0.95 and longer_side < 0.92 and unbucketed < 0.6


def test_a_packed_batch_counts_the_slots_its_attention_layouts_compute_over():
    # rows [src; tgt] of 1, 4, 2 and 3 real tokens: 10 real tokens, padded to 4 wide
    src = torch.tensor([[5, PAD_ID, PAD_ID, PAD_ID], [5, 6, 7, 8]])
    tgt = torch.tensor([[5, 6, PAD_ID, PAD_ID], [5, 6, 7, PAD_ID]])
    batch = {"src": src, "tgt": tgt}
    assert real_and_padded_tokens(batch) == (10, 16)
    # groups of 2 length-sorted rows: (1, 2) in a 2 x 2 layout and (3, 4) in a 2 x 4 layout
    assert real_and_padded_tokens(packed(batch, Packer(PAD_ID, 16, group_rows=2))) == (10, 4 + 8)
    assert real_and_padded_tokens(packed(batch, Packer(PAD_ID, 16))) == (10, 16)  # one 4 x 4 layout
    # variable-length attention: the packed tokens alone
    assert real_and_padded_tokens(packed(batch, Packer(PAD_ID, 16, varlen=True))) == (10, 10)
    # static shapes: rows of 5, 4, 4 and 4 tokens in one 4 x 5 layout, plus the filler token the layers
    # compute over (17 real tokens: the token count is bucketed to 18)
    odd = {"src": torch.tensor([[5] * 5, [5] * 4 + [PAD_ID]]), "tgt": torch.tensor([[5] * 4 + [PAD_ID]] * 2)}
    static = packed(odd, Packer(PAD_ID, 6, static_shapes=True))
    assert static["packing"].fill == 1
    assert real_and_padded_tokens(static) == (17, 4 * 5 + 1)


def test_length_ratio_arithmetic_is_what_collate_pads(tiny_pipeline):
    shards = PairShards(tiny_pipeline / "shards")
    lengths = np.minimum(shards.side_lengths(), 120)  # collate truncates at max_len
    order = BatchOrder(lengths, 32, seed=0)
    assert _length_ratio(lengths, order) == pytest.approx(_real_token_ratio(shards, order))
    unbucketed = BatchOrder(lengths, 32, seed=0, bucket_batches=1)
    assert _real_token_ratio(shards, order) > _real_token_ratio(shards, unbucketed) + 0.2
    with pytest.raises(ValueError, match="shape"):
        BatchOrder(np.ones((100, 3)), 10)


def test_rank_and_micro_step_shares_are_disjoint_and_make_up_the_global_batch(tiny_pipeline):
    batch = np.arange(100, 124)
    shares = [sub_batch(batch, m, r, world_size=2, accumulation=3) for m in range(3) for r in range(2)]
    assert sorted(np.concatenate(shares).tolist()) == batch.tolist() and all(len(s) == 4 for s in shares)
    with pytest.raises(ValueError, match="does not split into 5 equal"):
        sub_batch(batch, 0, 0, world_size=5)

    shards = PairShards(tiny_pipeline / "shards")
    order = BatchOrder(shards.pair_lengths(), 16, seed=1)
    [whole] = next(iterate_batches(shards, order, 120))[1]
    per_rank = [next(iterate_batches(shards, order, 120, rank=r, world_size=2, accumulation=2))[1] for r in range(2)]
    rows = lambda t: [tuple(x for x in row if x) for row in t.tolist()]  # noqa: E731
    gathered = [row for micro in per_rank for batch in micro for row in rows(batch["src"])]
    assert sorted(gathered) == sorted(rows(whole["src"])) and len(gathered) == 16
    assert rows(per_rank[1][0]["tgt"]) == rows(whole["tgt"])[1::4]  # micro-step 0, rank 1: sub-batch 1 of 4


def test_data_position_replays_exactly_with_temperature_sampling(tiny_pipeline):
    shards = PairShards(tiny_pipeline / "shards")
    order = BatchOrder(
        shards.pair_lengths(), 24, seed=2, groups=shards.language_pair_groups(), pair_sampling_temperature=5.0
    )
    stream = iterate_batches(shards, order, 120, rank=1, world_size=2)
    seen = [next(stream) for _ in range(order.batches_per_epoch() + 3)]
    position, micro = next(iterate_batches(shards, order, 120, start=(1, 2), rank=1, world_size=2))
    assert position == seen[-1][0] == (1, 2)
    assert all(np.array_equal(micro[0][k], seen[-1][1][0][k]) for k in micro[0])
