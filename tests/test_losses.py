"""The EMS losses against brute-force dense computations written straight from the paper."""

import math

import pytest
import torch
import torch.nn.functional as F

from ems.losses import contrastive_loss, xtr_loss
from ems.model import EMSModel
from ems.model_config import config_from_preset
from ems.packing import BatchVocabulary

PAD = 0


def dense_xtr(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """KL(p || q) with p built as a dense (B, V) count distribution, looping over tokens."""
    b, v = logits.shape
    out = torch.zeros(b, dtype=torch.float64)
    for i in range(b):
        p = torch.zeros(v, dtype=torch.float64)
        tokens = [t for t in targets[i].tolist() if t != PAD]
        for t in tokens:
            p[t] += 1.0 / len(tokens)
        q = torch.softmax(logits[i].double(), dim=0)
        out[i] = sum(p[w] * math.log(p[w] / q[w]) for w in range(v) if p[w] > 0)
    return out


def dense_infonce(hu: torch.Tensor, hv: torch.Tensor, t: float, margin: float = 0.0) -> torch.Tensor:
    b = hu.shape[0]
    out = torch.zeros(b, dtype=torch.float64)
    for i in range(b):
        for a, others in ((hu[i], hv), (hv[i], hu)):
            cosines = [
                F.cosine_similarity(a, o, dim=0).item() - (margin if j == i else 0.0) for j, o in enumerate(others)
            ]
            sims = torch.tensor([c / t for c in cosines], dtype=torch.float64)
            out[i] += -(sims[i] - torch.logsumexp(sims, 0))
    return out


def test_xtr_matches_dense_with_padding_and_repeats():
    torch.manual_seed(0)
    logits = torch.randn(4, 11) * 3
    targets = torch.tensor(
        [
            [3, 3, 3, 5, PAD, PAD],  # a token repeated three times
            [7, 2, 7, 2, 9, 1],  # two repeated tokens, no padding
            [4, PAD, PAD, PAD, PAD, PAD],
            [10, 6, 8, 6, PAD, PAD],
        ]
    )
    torch.testing.assert_close(
        xtr_loss(logits, targets, PAD).double(), dense_xtr(logits, targets), rtol=1e-5, atol=1e-6
    )


def test_xtr_counts_repeated_tokens_not_just_presence():
    # p for [3, 3, 5] is (2/3, 1/3), not the (1/2, 1/2) an index_fill-style target would give.
    logits = torch.zeros(1, 6)
    logits[0, 3] = 5.0
    loss = xtr_loss(logits, torch.tensor([[3, 3, 5]]), PAD)
    q = torch.softmax(logits[0].double(), 0)
    expected = 2 / 3 * math.log((2 / 3) / q[3]) + 1 / 3 * math.log((1 / 3) / q[5])
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_xtr_is_zero_when_q_equals_p():
    targets = torch.tensor([[1, 1, 2, PAD]])
    p = torch.tensor([[0.0, 2 / 3, 1 / 3, 0.0]])
    logits = torch.log(p.clamp(min=1e-30))
    assert xtr_loss(logits, targets, PAD).item() == pytest.approx(0.0, abs=1e-5)


def only_batch_tokens(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """logits with every column that is not a non-pad id of `tokens` set to -inf (q = 0 there)."""
    in_batch = torch.zeros(logits.shape[1], dtype=torch.bool)
    in_batch[tokens[tokens != PAD]] = True
    return logits.masked_fill(~in_batch, float("-inf"))


def test_xtr_batch_vocabulary_is_the_softmax_over_the_batch_tokens():
    torch.manual_seed(1)
    logits = torch.randn(3, 20) * 3
    targets = torch.tensor([[17, 3, 3, PAD], [5, 17, 9, 2], [9, PAD, PAD, PAD]])
    vocabulary = BatchVocabulary.of(targets.numpy(), PAD)
    columns, positions = vocabulary.columns, vocabulary.targets
    assert columns.tolist() == [2, 3, 5, 9, 17] and vocabulary.valid.all()
    assert positions.tolist() == [[4, 1, 1, 5], [2, 4, 3, 0], [3, 5, 5, 5]]
    torch.testing.assert_close(
        xtr_loss(logits[:, columns], positions, len(columns)).double(),
        dense_xtr(only_batch_tokens(logits, targets), targets),
        rtol=1e-5,
        atol=1e-6,
    )


def test_contrastive_matches_dense():
    torch.manual_seed(1)
    hu, hv = torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(contrastive_loss(hu, hv, 0.1).double(), dense_infonce(hu, hv, 0.1), rtol=1e-5, atol=1e-5)


def test_contrastive_margin_matches_dense():
    torch.manual_seed(3)
    hu, hv = torch.randn(6, 8), torch.randn(6, 8)
    loss = contrastive_loss(hu, hv, 0.05, margin=0.2).double()
    torch.testing.assert_close(loss, dense_infonce(hu, hv, 0.05, margin=0.2), rtol=1e-5, atol=1e-5)
    assert torch.all(loss > contrastive_loss(hu, hv, 0.05).double())  # the gold logit only ever drops


def test_contrastive_margin_hand_checked():
    # Orthogonal unit vectors, T=1, margin 0.5: each direction is -log(e^0.5 / (e^0.5 + e^0)).
    hu = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    loss = contrastive_loss(hu, hu.clone(), temperature=1.0, margin=0.5)
    expected = 2 * -math.log(math.exp(0.5) / (math.exp(0.5) + 1))
    torch.testing.assert_close(loss, torch.tensor([expected, expected]), rtol=1e-6, atol=1e-6)


def test_contrastive_hand_checked_two_pairs():
    # Orthogonal unit vectors, T=1: each direction is -log(e^1 / (e^1 + e^0)).
    hu = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    loss = contrastive_loss(hu, hu.clone(), temperature=1.0)
    expected = 2 * -math.log(math.e / (math.e + 1))
    torch.testing.assert_close(loss, torch.tensor([expected, expected]), rtol=1e-6, atol=1e-6)


@torch.no_grad()
def test_model_joint_loss_is_weighted_sum_of_both_directions():
    torch.manual_seed(2)
    cfg = config_from_preset(
        "tiny",
        vocab_size=50,
        n_languages=3,
        d_model=32,
        n_heads=4,
        d_ffn=64,
        n_layers=2,
        d_lang=8,
        d_contrastive=16,
        dropout=0.0,
        xtr_weight=0.5,
        contrastive_weight=2.0,
        contrastive_projection=True,  # the paper's loss: contrastive on h(u), XTR over the whole vocabulary
        xtr_vocabulary="full",
    )
    model = EMSModel(cfg).eval()
    src = torch.tensor([[5, 6, 6, PAD], [7, 8, 9, 10], [11, 11, PAD, PAD]])
    tgt = torch.tensor([[12, 13, PAD], [14, 14, 15], [16, PAD, PAD]])
    src_lang, tgt_lang = torch.tensor([0, 0, 1]), torch.tensor([2, 2, 2])
    out = model(src, tgt, src_lang, tgt_lang)

    u, v = model.encoder(src), model.encoder(tgt)
    xtr = dense_xtr(model.xtr_head(u, tgt_lang), tgt) + dense_xtr(model.xtr_head(v, src_lang), src)
    cntrs = dense_infonce(model.contrastive_head(u), model.contrastive_head(v), cfg.contrastive_temperature)
    torch.testing.assert_close(out["xtr"].double(), xtr.mean(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["contrastive"].double(), cntrs.mean(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["loss"].double(), 0.5 * xtr.mean() + 2.0 * cntrs.mean(), rtol=1e-4, atol=1e-5)


def test_model_batch_vocabulary_xtr_matches_dense_and_trains_only_the_batch_tokens():
    torch.manual_seed(3)
    cfg = config_from_preset(
        "tiny", vocab_size=40, n_languages=3, d_model=32, n_heads=4, d_ffn=64, n_layers=2, d_lang=8,
        dropout=0.0, xtr_weight=1.0, contrastive_weight=0.0, xtr_vocabulary="batch",
    )  # fmt: skip
    model = EMSModel(cfg)
    src = torch.tensor([[5, 6, 6, PAD], [7, 8, 9, 10], [11, 11, PAD, PAD]])
    tgt = torch.tensor([[12, 13, PAD], [14, 14, 15], [16, PAD, PAD]])
    src_lang, tgt_lang = torch.tensor([0, 0, 1]), torch.tensor([2, 2, 2])
    out = model(src, tgt, src_lang, tgt_lang)
    out["loss"].backward()

    with torch.no_grad():
        tokens = torch.cat([src.flatten(), tgt.flatten()])
        u, v = model.encoder(src), model.encoder(tgt)
        xtr = dense_xtr(only_batch_tokens(model.xtr_head(u, tgt_lang), tokens), tgt) + dense_xtr(
            only_batch_tokens(model.xtr_head(v, src_lang), tokens), src
        )
    torch.testing.assert_close(out["xtr"].double(), xtr.mean(), rtol=1e-4, atol=1e-5)
    trained_rows = model.xtr_head.out.weight.grad.abs().sum(dim=1) > 0
    assert trained_rows.nonzero().flatten().tolist() == list(range(5, 17))


def test_xtr_vocabulary_must_be_full_or_batch():
    with pytest.raises(ValueError, match="xtr_vocabulary must be 'full' or 'batch', not 'sampled'"):
        config_from_preset("tiny", vocab_size=40, n_languages=3, xtr_vocabulary="sampled")
