"""Duplicate-aware in-batch negatives: the mask of pairs sharing a sentence, the masked and the
multi-positive InfoNCE against brute-force dense computations (one process and all-rank
negatives on 2 gloo processes), and a batch order that spreads translations of one sentence
over different batches."""

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ems.losses import contrastive_loss, duplicate_mask, gather_rows, global_contrastive_loss
from ems.model import EMSModel
from ems.model_config import config_from_preset
from ems.training.batch_order import BatchOrder, rows_with_duplicates, spread_duplicates
from tests.conftest import leave_spawned_rank

TEMPERATURE = 0.1
# Pairs as (side 1, side 2) content ids. Pairs 0, 1, 2 translate one English sentence (id 100):
# 0 and 1 are X-en, 2 is en-X (the shared sentence on the other side); 3 and 4 share their
# German side (id 7); 5 shares nothing; 6 has the same text on both sides.
IDS = torch.tensor([[1, 100], [2, 100], [100, 3], [7, 200], [7, 201], [8, 300], [9, 9]])


def test_duplicate_mask_finds_shared_sentences_on_either_side_and_not_the_pair_itself():
    mask = duplicate_mask(IDS, IDS)
    expected = torch.zeros(7, 7, dtype=torch.bool)
    for group in ([0, 1, 2], [3, 4]):
        for i in group:
            for j in group:
                expected[i, j] = i != j
    assert torch.equal(mask, expected)
    # against a pool where this batch sits at rows 2..8 (another rank's rows first)
    pool = torch.cat([torch.tensor([[100, 50], [60, 61]]), IDS])
    shifted = duplicate_mask(IDS, pool, offset=2)
    assert shifted[0, 0] and not shifted[0, 1]  # pair 0 shares id 100 with the other rank's first pair
    assert torch.equal(shifted[:, 2:], expected)


def brute_force_info_nce(u: np.ndarray, v: np.ndarray, ids: np.ndarray, t: float, handling: str) -> np.ndarray:
    """Per pair i, both directions, written out with loops in float64: negatives are the
    candidates that share no sentence with pair i ("mask"), or those plus the duplicates
    ("keep"); "positive" averages -log p over the gold and the duplicates (Khosla et al. 2020, L_out)."""
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    n = len(ids)
    loss = np.zeros(n)
    for i in range(n):
        duplicates = [j for j in range(n) if j != i and set(ids[i].tolist()) & set(ids[j].tolist())]
        for a, b in ((u, v), (v, u)):
            scores = {j: a[i] @ b[j] / t for j in range(n)}
            denominator_terms = [j for j in range(n) if handling != "mask" or j not in duplicates]
            log_denominator = math.log(sum(math.exp(scores[j]) for j in denominator_terms))
            positives = [i] + (duplicates if handling == "positive" else [])
            loss[i] += sum(log_denominator - scores[j] for j in positives) / len(positives)
    return loss


@pytest.mark.parametrize("handling", ["mask", "positive", "keep"])
def test_in_batch_loss_with_duplicates_matches_brute_force(handling):
    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(7, 5, generator=g), torch.randn(7, 5, generator=g)
    loss = contrastive_loss(u, v, TEMPERATURE, duplicate_mask(IDS, IDS), handling)
    expected = brute_force_info_nce(u.numpy(), v.numpy(), IDS.numpy(), TEMPERATURE, handling)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
    # pair 5 has no duplicate: its loss is the paper's InfoNCE whatever the handling
    plain = contrastive_loss(u, v, TEMPERATURE)
    assert loss[5].item() == pytest.approx(plain[5].item(), rel=1e-6)
    if handling == "keep":
        torch.testing.assert_close(loss, plain)
    if handling == "mask":  # a row with duplicates no longer pays for them as negatives
        assert (loss[:5] < plain[:5]).all()


def test_masking_every_candidate_leaves_nothing_to_learn():
    # Two pairs translating the same English sentence: masked, each row's softmax holds only its gold.
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    loss = contrastive_loss(
        u, u.detach().flip(0), 1.0, duplicate_mask(torch.tensor([[1, 9], [2, 9]]), torch.tensor([[1, 9], [2, 9]]))
    )
    assert loss.tolist() == [0.0, 0.0]
    loss.sum().backward()
    assert torch.all(u.grad == 0) and torch.isfinite(u.grad).all()


def _rank(rank: int, init_file: str, out_dir: str, handling: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    u, v, ids = _global_batch()
    rows = slice(rank * 4, (rank + 1) * 4)
    h_u, h_v = u[rows].clone().requires_grad_(), v[rows].clone().requires_grad_()
    pool, offset = gather_rows(ids[rows])
    loss = global_contrastive_loss(h_u, h_v, TEMPERATURE, duplicate_mask(ids[rows], pool, offset), handling)
    loss.mean().backward()
    np.save(f"{out_dir}/loss{rank}.npy", loss.detach().numpy())
    np.save(f"{out_dir}/grad{rank}.npy", h_u.grad.numpy())
    dist.destroy_process_group()
    leave_spawned_rank()


def _global_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    ids = torch.cat([IDS, torch.tensor([[100, 4]])])  # 8 pairs; pair 7 (rank 1) shares id 100 with pairs 0-2 (rank 0)
    return torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randn(8, 6, generator=g, dtype=torch.float64), ids


@pytest.mark.parametrize("handling", ["mask", "positive"])
def test_all_rank_negatives_with_duplicates_match_brute_force_on_two_processes(tmp_path, handling):
    mp.start_processes(_rank, args=(str(tmp_path / "init"), str(tmp_path), handling), nprocs=2, start_method="spawn")
    u, v, ids = _global_batch()
    expected = brute_force_info_nce(u.numpy(), v.numpy(), ids.numpy(), TEMPERATURE, handling)
    np.testing.assert_allclose(
        np.concatenate([np.load(tmp_path / f"loss{r}.npy") for r in range(2)]), expected, rtol=1e-5
    )
    # gradients: each rank's .grad is 2 x d(global mean loss)/d(its rows) (see test_train_global_negatives)
    u_all = u.clone().requires_grad_()
    contrastive_loss(u_all, v, TEMPERATURE, duplicate_mask(ids, ids), handling).mean().backward()
    grads = np.concatenate([np.load(tmp_path / f"grad{r}.npy") for r in range(2)])
    np.testing.assert_allclose(grads, 2 * u_all.grad.numpy(), rtol=1e-5, atol=1e-7)


@torch.no_grad()
def test_model_masks_duplicates_and_reports_their_share():
    torch.manual_seed(0)
    cfg = config_from_preset(
        "tiny",
        vocab_size=40,
        n_languages=3,
        d_model=16,
        n_heads=2,
        d_ffn=32,
        n_layers=1,
        d_lang=4,
        d_contrastive=8,
        dropout=0.0,
    )
    model = EMSModel(cfg).eval()
    src = torch.randint(3, 40, (7, 5))
    tgt = torch.randint(3, 40, (7, 4))
    langs = torch.zeros(7, dtype=torch.long)
    out = model(src, tgt, langs, langs + 1, content_ids=IDS, per_example=True)
    h_u, h_v = model.contrastive_head(model.encoder(src)), model.contrastive_head(model.encoder(tgt))
    expected = brute_force_info_nce(
        h_u.double().numpy(), h_v.double().numpy(), IDS.numpy(), cfg.contrastive_temperature, "mask"
    )
    np.testing.assert_allclose(out["contrastive_per_example"].numpy(), expected, rtol=1e-4)
    assert out["duplicate_rows"].item() == pytest.approx(5 / 7)
    without = model(src, tgt, langs, langs + 1)
    assert without["duplicate_rows"].item() == 0 and without["contrastive"] > out["contrastive"]


def multi_parallel_toy(n_english: int = 1500, n_languages: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(content ids, lengths) of an English-centric multi-parallel corpus, English on side 2 (as
    binarize stores it): each English sentence translated into 1..n_languages languages, each
    translation's length within 0.7-1.4 times the English length."""
    rng = np.random.default_rng(seed)
    ids, lengths = [], []
    for english in range(n_english):
        n_tokens = int(rng.integers(3, 30))
        for lang in rng.choice(n_languages, rng.integers(1, n_languages + 1), replace=False):
            ids.append((10_000 + english * 100 + lang, english))
            lengths.append((max(1, round(n_tokens * rng.uniform(0.7, 1.4))), n_tokens))
    return np.array(ids, dtype=np.uint64), np.array(lengths)


def _duplicate_rate(batches, ids) -> float:
    return sum(rows_with_duplicates(b, ids) for b in batches) / sum(len(b) for b in batches)


def _real_token_ratio(batches, lengths) -> float:
    return sum(lengths[b].sum() for b in batches) / sum(lengths[b].max(axis=0).sum() * len(b) for b in batches)


def test_batch_order_spreads_translations_of_one_sentence_to_the_random_batch_level():
    ids, lengths = multi_parallel_toy()
    batch = 64
    random_batches = np.random.default_rng(0).permutation(len(ids))[: len(ids) // batch * batch].reshape(-1, batch)
    random_rate = _duplicate_rate(random_batches, ids)
    bucketed = BatchOrder(lengths, batch, seed=0, bucket_batches=1000).epoch(0)
    assert _duplicate_rate(bucketed, ids) > 4 * random_rate  # length bucketing gathers them
    # the default: swaps that cost no padding, then a padding budget of 0.5% of the slots
    spread = BatchOrder(lengths, batch, seed=0, bucket_batches=1000, content_ids=ids).epoch(0)
    assert _duplicate_rate(spread, ids) < 0.6 * _duplicate_rate(bucketed, ids)
    assert _real_token_ratio(spread, lengths) >= _real_token_ratio(bucketed, lengths) - 0.006
    # with a larger padding budget the rate falls below that of random batches
    generous = BatchOrder(lengths, batch, seed=0, bucket_batches=1000, content_ids=ids, padding_budget=0.03).epoch(0)
    assert _duplicate_rate(generous, ids) <= random_rate
    assert _real_token_ratio(generous, lengths) > _real_token_ratio(random_batches, lengths) + 0.3
    # every epoch holds every pair once, and the order is a pure function of (seed, epoch)
    assert sorted(np.concatenate(spread).tolist()) == sorted(np.concatenate(bucketed).tolist())
    again = BatchOrder(lengths, batch, seed=0, bucket_batches=1000, content_ids=ids).epoch(0)
    assert all(np.array_equal(a, b) for a, b in zip(spread, again))


def test_spreading_adds_no_padding_without_a_budget():
    ids, lengths = multi_parallel_toy(seed=1)
    order = BatchOrder(lengths, 64, seed=0, bucket_batches=1000)
    batches = np.stack(order.epoch(0))
    spread = spread_duplicates(batches, ids, lengths, padding_budget=0.0)
    assert _duplicate_rate(spread, ids) < _duplicate_rate(batches, ids)
    assert np.all(lengths[spread].max(axis=1) <= lengths[batches].max(axis=1))  # no batch got wider


def test_batch_order_benchmark_prints_rates_for_real_shards(tiny_pipeline, capsys):
    from benchmarks import batch_order_benchmark as benchmark

    assert (
        benchmark.main(
            [str(tiny_pipeline / "shards"), "--batch", "32", "--bucket-batches", "50", "--padding-budgets", "0"]
        )
        == 0
    )
    rows = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| random") or line.startswith("| bucketed")
    ]
    assert len(rows) == 3 and all("%" in row for row in rows)
