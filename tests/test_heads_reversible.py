"""The reversible head's objective against the paper (Fukushima, Kajiwara, Ninomiya; full text
at /work/shared/papers/reversible_disentanglement_fukushima.txt), computed by hand with numpy.

Eq. (1) s_M = MLP(s)   Eq. (2) s_L = s - s_M   Eq. (3) L = L_M + L_L + L_C
Eq. (4) L_M = 2 (1 - cos(s_M, t_M)) + max(0, cos(s_M, s'_M)) + max(0, cos(t_M, t'_M))
Eq. (5) L_L = (1 - cos(s_L, s'_L)) + (1 - cos(t_L, t'_L))
Eq. (6) L_C = max(0, cos(s_M, s_L)) + max(0, cos(t_M, t_L))
              + 2 - cos(s, s_M + s'_L) - cos(t, t_M + t'_L)
              + 2 - cos(s, t_M + s_L) - cos(t, s_M + t_L)
"""

import numpy as np
import pytest
import torch

from ems.heads.reversible import ReversibleHead, ReversibleModule, reversible_losses
from ems.heads.training import Decomposition, PairBatch

# d = 4, two translation pairs (s_i, t_i) and a same-language partner for each sentence.
S = np.array([[1.0, 2.0, 0.0, -1.0], [0.5, -1.0, 2.0, 1.0]])
T = np.array([[2.0, 1.0, -1.0, 0.0], [-1.0, 0.5, 1.0, 2.0]])
S_OTHER = np.array([[0.0, 1.0, 1.0, 1.0], [2.0, 0.0, -1.0, 0.5]])
T_OTHER = np.array([[1.0, -1.0, 0.5, 2.0], [0.0, 2.0, 1.0, -1.0]])
# the single linear layer of Sec. 3.1 with fixed weights: MLP(e) = W e + b
W = np.array(
    [
        [0.5, 0.1, -0.2, 0.0],
        [0.0, 0.4, 0.1, -0.3],
        [0.2, 0.0, 0.6, 0.1],
        [-0.1, 0.3, 0.0, 0.5],
    ]
)
B = np.array([0.1, -0.2, 0.0, 0.3])

TERMS = (
    "translation",
    "push_s",
    "push_t",
    "lang_s",
    "lang_t",
    "orth_s",
    "orth_t",
    "swap_lang_s",
    "swap_lang_t",
    "swap_meaning_s",
    "swap_meaning_t",
)


def cos(a, b):
    """Row-wise cosine similarity."""
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def hinge(x):
    return np.maximum(0.0, x)


def paper_terms(s, t, s_o, t_o, mlp):
    """Each per-pair term of Eqs. (4)-(6), batch-averaged, with the paper's weights."""
    s_m, t_m, so_m, to_m = mlp(s), mlp(t), mlp(s_o), mlp(t_o)  # Eq. (1)
    s_l, t_l, so_l, to_l = s - s_m, t - t_m, s_o - so_m, t_o - to_m  # Eq. (2)
    return {
        # Eq. (4)
        "translation": np.mean(2 * (1 - cos(s_m, t_m))),
        "push_s": np.mean(hinge(cos(s_m, so_m))),
        "push_t": np.mean(hinge(cos(t_m, to_m))),
        # Eq. (5)
        "lang_s": np.mean(1 - cos(s_l, so_l)),
        "lang_t": np.mean(1 - cos(t_l, to_l)),
        # Eq. (6), first line
        "orth_s": np.mean(hinge(cos(s_m, s_l))),
        "orth_t": np.mean(hinge(cos(t_m, t_l))),
        # Eq. (6), second line: 2 - cos(s, s_M + s'_L) - cos(t, t_M + t'_L), split as (1 - .) + (1 - .)
        "swap_lang_s": np.mean(1 - cos(s, s_m + so_l)),
        "swap_lang_t": np.mean(1 - cos(t, t_m + to_l)),
        # Eq. (6), third line: 2 - cos(s, t_M + s_L) - cos(t, s_M + t_L)
        "swap_meaning_s": np.mean(1 - cos(s, t_m + s_l)),
        "swap_meaning_t": np.mean(1 - cos(t, s_m + t_l)),
    }


def paper_loss(terms, drop=()):
    """Eq. (3): the plain sum of every term of L_M, L_L and L_C (less those in `drop`)."""
    return sum(value for name, value in terms.items() if name not in drop)


def fixed_module(w=W, b=B):
    module = ReversibleModule(4, hidden_dim=0).double()
    with torch.no_grad():
        module.meaning.weight.copy_(torch.from_numpy(w))
        module.meaning.bias.copy_(torch.from_numpy(b))
    return module


def batch(s=S, t=T, s_o=S_OTHER, t_o=T_OTHER):
    as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))  # noqa: E731
    langs = torch.zeros(len(s), dtype=torch.int64)
    return PairBatch(
        x=as_tensor(s), y=as_tensor(t), x_lang=langs, y_lang=langs + 1, x_other=as_tensor(s_o), y_other=as_tensor(t_o)
    )


def head_losses(module, pair_batch):
    return {k: float(v.detach()) for k, v in ReversibleHead().loss_function(module)(pair_batch).items()}


def test_head_loss_equals_the_papers_objective_by_hand():
    terms = paper_terms(S, T, S_OTHER, T_OTHER, lambda e: e @ W.T + B)
    losses = head_losses(fixed_module(), batch())
    assert set(losses) == {"meaning", "language", "cross_reconstruction", "total"}
    np.testing.assert_allclose(losses["meaning"], terms["translation"] + terms["push_s"] + terms["push_t"], rtol=1e-10)
    np.testing.assert_allclose(losses["language"], terms["lang_s"] + terms["lang_t"], rtol=1e-10)
    l_c = sum(terms[k] for k in ("orth_s", "orth_t", "swap_lang_s", "swap_lang_t", "swap_meaning_s", "swap_meaning_t"))
    np.testing.assert_allclose(losses["cross_reconstruction"], l_c, rtol=1e-10)
    np.testing.assert_allclose(losses["total"], paper_loss(terms), rtol=1e-10)


def test_every_term_is_in_the_loss():
    """On the fixed case every term of Eqs. (4)-(6) is nonzero, so leaving any one out, or giving
    the translation term weight 1 instead of 2, changes the total."""
    terms = paper_terms(S, T, S_OTHER, T_OTHER, lambda e: e @ W.T + B)
    total = head_losses(fixed_module(), batch())["total"]
    for name in TERMS:
        assert terms[name] > 1e-3, name
        assert abs(total - paper_loss(terms, drop=(name,))) > 1e-3, name
    assert abs(total - (paper_loss(terms) - terms["translation"] / 2)) > 1e-3


def test_orthogonality_hinge_counts_only_when_meaning_and_language_point_alike():
    """max(0, cos(s_M, s_L)) of Eq. (6): with MLP(e) = a e, s_L = (1 - a) e and cos(s_M, s_L) is
    +1 for 0 < a < 1 and -1 for a > 1."""
    for a, positive in ((0.6, True), (1.5, False)):
        w, b = a * np.eye(4), np.zeros(4)
        terms = paper_terms(S, T, S_OTHER, T_OTHER, lambda e: e @ w.T + b)  # noqa: B023
        total = head_losses(fixed_module(w, b), batch())["total"]
        without_hinge = paper_loss(terms, drop=("orth_s", "orth_t"))
        np.testing.assert_allclose(total, paper_loss(terms), rtol=1e-10)
        if positive:
            np.testing.assert_allclose(terms["orth_s"] + terms["orth_t"], 2.0)
            np.testing.assert_allclose(total - without_hinge, 2.0, rtol=1e-10)
        else:
            assert terms["orth_s"] == terms["orth_t"] == 0.0
            np.testing.assert_allclose(total, without_hinge, rtol=1e-10)


def test_same_language_swap_term_uses_the_partners_language_part():
    """Changing only s' changes 2 - cos(s, s_M + s'_L) - ... (and the L_M / L_L terms with s'),
    exactly as the hand computation says."""
    mlp = lambda e: e @ W.T + B  # noqa: E731
    s_o = S_OTHER + np.array([[0.0, 0.0, 3.0, 0.0], [-2.0, 0.0, 0.0, 0.0]])
    before, after = paper_terms(S, T, S_OTHER, T_OTHER, mlp), paper_terms(S, T, s_o, T_OTHER, mlp)
    assert abs(before["swap_lang_s"] - after["swap_lang_s"]) > 1e-3
    np.testing.assert_allclose(head_losses(fixed_module(), batch(s_o=s_o))["total"], paper_loss(after), rtol=1e-10)


def test_reversible_losses_takes_decompositions():
    """`reversible_losses` on explicit Decompositions agrees with the module route."""
    module = fixed_module()
    parts = [module(torch.from_numpy(a)) for a in (S, T, S_OTHER, T_OTHER)]
    assert isinstance(parts[0], Decomposition)
    direct = {k: float(v.detach()) for k, v in reversible_losses(*parts).items()}
    assert direct == pytest.approx(head_losses(module, batch()), rel=1e-12)


def test_defaults_follow_the_paper():
    """Sec. 3.1: batch 512, Adam lr 1e-4, early stopping with patience 5 on the Eq. (3) loss; a
    single-layer MLP and nothing else trained (no language classifier)."""
    head = ReversibleHead()
    hp = head.hyperparameters
    assert (hp.batch_size, hp.learning_rate, hp.patience, hp.hidden_dim) == (512, 1e-4, 5, 0)
    assert head.select_on == "total"
    module = head.build_module(8, 3)
    assert sorted(name for name, _ in module.named_parameters()) == ["meaning.bias", "meaning.weight"]
    e = torch.randn(5, 8)
    parts = module(e)
    torch.testing.assert_close(parts.meaning + parts.language, e)
