"""The trained disentanglement heads (DREAM, MEAT, reversible) and their shared training loop.

Loss values are checked against numbers computed with explicit numpy loops; training is checked
on a synthetic dataset whose ground truth is known: e = meaning + offset[language] + noise.
"""

import json
import math

import numpy as np
import pytest
import torch

from ems.configs import ConfigError
from ems.heads import HEADS, load_head
from ems.heads.base import ParallelEmbeddings, UnknownLanguageError
from ems.heads.dream import DreamHead, dream_losses
from ems.heads.meat import MeatHead, MeatModule, meat_losses
from ems.heads.reversible import ReversibleHead, reversible_losses
from ems.heads.training import (
    Decomposition,
    HeadHyperparameters,
    PairBatch,
    same_language_partners,
    train_module,
)

TRAINED_HEADS = [DreamHead, MeatHead, ReversibleHead]
LANGUAGES = ["de", "en", "fr"]


# ---------- hand computations (plain python/numpy, independent of the code under test) ----------


def cos(a, b):
    dot = sum(float(p) * float(q) for p, q in zip(a, b))
    return dot / (math.sqrt(sum(float(p) ** 2 for p in a)) * math.sqrt(sum(float(q) ** 2 for q in b)))


def mean_over_rows(values):
    return sum(values) / len(values)


def pull(a, b):  # mean of 1 - cos over rows
    return mean_over_rows([1 - cos(a[i], b[i]) for i in range(len(a))])


def push(a, b):  # mean of max(0, cos) over rows
    return mean_over_rows([max(0.0, cos(a[i], b[i])) for i in range(len(a))])


def mse(a, b):
    return mean_over_rows([(float(a[i][j]) - float(b[i][j])) ** 2 for i in range(len(a)) for j in range(len(a[0]))])


def cross_entropy(logits, targets):  # targets: class index per row, or a probability row
    total = 0.0
    for row, target in zip(logits, targets):
        log_norm = math.log(sum(math.exp(float(v)) for v in row))
        probs = [1.0 if k == target else 0.0 for k in range(len(row))] if np.ndim(target) == 0 else list(target)
        total += -sum(p * (float(v) - log_norm) for p, v in zip(probs, row))
    return total / len(logits)


def decomposition(embedding, meaning, language):
    return Decomposition(
        torch.tensor(embedding, dtype=torch.float64),
        torch.tensor(meaning, dtype=torch.float64),
        torch.tensor(language, dtype=torch.float64),
    )


# Two pairs of 2-d embeddings; every number chosen by hand.
E_X = [[1.0, 2.0], [0.5, -1.0]]
E_Y = [[2.0, 1.0], [-1.0, 0.5]]
M_X = [[1.0, 0.0], [0.0, 1.0]]
M_Y = [[1.0, 1.0], [1.0, -1.0]]
L_X = [[0.5, 2.0], [0.5, -2.0]]
L_Y = [[1.0, 0.0], [-2.0, 1.0]]
M_XO = [[-1.0, 1.0], [2.0, 1.0]]
M_YO = [[1.0, 2.0], [-1.0, 1.0]]
L_XO = [[1.0, 1.0], [0.0, -1.0]]
L_YO = [[2.0, -1.0], [-1.0, -1.0]]
LOGITS_X = [[2.0, 0.0, -1.0], [0.5, 0.5, 1.0]]
LOGITS_Y = [[0.0, 1.0, 0.0], [1.0, -1.0, 3.0]]
LANG_X = [0, 0]
LANG_Y = [1, 2]


def test_dream_losses_match_hand_computation():
    x, y = decomposition(E_X, M_X, L_X), decomposition(E_Y, M_Y, L_Y)
    x_other, y_other = decomposition(E_X, M_XO, L_XO), decomposition(E_Y, M_YO, L_YO)
    losses = dream_losses(
        x,
        y,
        x_other,
        y_other,
        torch.tensor(LOGITS_X, dtype=torch.float64),
        torch.tensor(LOGITS_Y, dtype=torch.float64),
        torch.tensor(LANG_X),
        torch.tensor(LANG_Y),
    )
    sum_x = [[M_X[i][j] + L_X[i][j] for j in range(2)] for i in range(2)]
    sum_y = [[M_Y[i][j] + L_Y[i][j] for j in range(2)] for i in range(2)]
    expected = {
        "reconstruction": mse(sum_x, E_X) + mse(sum_y, E_Y),
        "meaning": pull(M_X, M_Y) + push(M_X, M_XO) + push(M_Y, M_YO),
        "language_similarity": pull(L_X, L_XO) + pull(L_Y, L_YO),
        "language_identification": cross_entropy(LOGITS_X, LANG_X) + cross_entropy(LOGITS_Y, LANG_Y),
    }
    expected["total"] = sum(expected.values())
    assert set(losses) == set(expected)
    for name, value in expected.items():
        assert float(losses[name]) == pytest.approx(value, rel=1e-9), name
    # spot-check one hand value: row 0 of m_x=(1,0), m_y=(1,1): 1 - 1/sqrt(2); row 1 (0,1),(1,-1): 1 + 1/sqrt(2)
    assert pull(M_X, M_Y) == pytest.approx(1.0)


def test_reversible_losses_match_hand_computation():
    # language = e - meaning, as the reversible head defines it (Eq. 2); Eqs. (4)-(6) of the paper
    lx = [[E_X[i][j] - M_X[i][j] for j in range(2)] for i in range(2)]
    ly = [[E_Y[i][j] - M_Y[i][j] for j in range(2)] for i in range(2)]
    lxo = [[E_X[i][j] - M_XO[i][j] for j in range(2)] for i in range(2)]
    lyo = [[E_Y[i][j] - M_YO[i][j] for j in range(2)] for i in range(2)]
    x, y = decomposition(E_X, M_X, lx), decomposition(E_Y, M_Y, ly)
    x_other, y_other = decomposition(E_X, M_XO, lxo), decomposition(E_Y, M_YO, lyo)
    losses = reversible_losses(x, y, x_other, y_other)

    def add(a, b):
        return [[a[i][j] + b[i][j] for j in range(2)] for i in range(2)]

    expected = {
        "meaning": 2 * pull(M_X, M_Y) + push(M_X, M_XO) + push(M_Y, M_YO),
        "language": pull(lx, lxo) + pull(ly, lyo),
        "cross_reconstruction": push(M_X, lx)
        + push(M_Y, ly)
        + pull(E_X, add(M_X, lxo))
        + pull(E_Y, add(M_Y, lyo))
        + pull(E_X, add(M_Y, lx))
        + pull(E_Y, add(M_X, ly)),
    }
    expected["total"] = sum(expected.values())
    assert set(losses) == set(expected)
    for name, value in expected.items():
        assert float(losses[name]) == pytest.approx(value, rel=1e-9), name


def test_meat_losses_match_hand_computation():
    x, y = decomposition(E_X, M_X, L_X), decomposition(E_Y, M_Y, L_Y)
    disc_x, disc_y = torch.tensor(LOGITS_X, dtype=torch.float64), torch.tensor(LOGITS_Y, dtype=torch.float64)
    frozen_x, frozen_y = (
        torch.tensor(LOGITS_Y, dtype=torch.float64),
        torch.tensor(LOGITS_X, dtype=torch.float64),
    )  # any logits: the loss only reads them
    losses = meat_losses(x, y, disc_x, disc_y, frozen_x, frozen_y, torch.tensor(LANG_X), torch.tensor(LANG_Y))
    plus = lambda a, b: [[a[i][j] + b[i][j] for j in range(2)] for i in range(2)]  # noqa: E731
    uniform = [[1 / 3] * 3] * 2
    expected = {
        "reconstruction": pull(plus(M_X, L_X), E_X) + pull(plus(M_Y, L_Y), E_Y),
        "cross_reconstruction": pull(plus(M_X, L_Y), E_Y) + pull(plus(M_Y, L_X), E_X),
        "language_separation": push(L_X, L_Y),
        "adversarial": cross_entropy(LOGITS_Y, uniform) + cross_entropy(LOGITS_X, uniform),
    }
    expected["extractor"] = sum(expected.values())
    expected["discriminator"] = cross_entropy(LOGITS_X, LANG_X) + cross_entropy(LOGITS_Y, LANG_Y)
    expected["total"] = expected["extractor"] + expected["discriminator"]
    assert set(losses) == set(expected)
    for name, value in expected.items():
        assert float(losses[name]) == pytest.approx(value, rel=1e-9), name


def test_meat_adversarial_game_sends_each_gradient_to_one_player():
    """MEAT's min-max game in one backward pass: the discriminator term trains only the
    discriminator, the adversarial term only the meaning extractor, and on the meaning vectors
    the two objectives pull in opposite directions (the role gradient reversal plays in DANN)."""
    module = MeatModule(dim=3, n_languages=3, hidden_dim=0)
    with torch.no_grad():  # meaning = identity; a confident, correct discriminator
        module.meaning.weight.copy_(torch.eye(3))
        module.meaning.bias.zero_()
        module.discriminator.weight.copy_(4 * torch.eye(3))
        module.discriminator.bias.zero_()
    lang = torch.tensor([0, 1, 2, 0])
    e = torch.eye(3)[lang] + 0.1 * torch.tensor([[0.0, 1.0, -1.0], [1.0, 0.0, 1.0], [-1.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    uniform = torch.full((4, 3), 1 / 3)

    parts = module(e)
    torch.nn.functional.cross_entropy(module.discriminate(parts.meaning), lang).backward()
    assert module.discriminator.weight.grad.abs().sum() > 0
    assert module.meaning.weight.grad is None  # nothing reaches the extractor
    module.zero_grad(set_to_none=True)

    parts = module(e)
    torch.nn.functional.cross_entropy(module.discriminate_frozen(parts.meaning), uniform).backward()
    assert module.discriminator.weight.grad is None  # nothing reaches the discriminator
    assert module.meaning.weight.grad.abs().sum() > 0

    meaning = e.clone().requires_grad_(True)
    adversarial_gradient = torch.autograd.grad(
        torch.nn.functional.cross_entropy(module.discriminate_frozen(meaning), uniform), meaning
    )[0]
    identification_gradient = torch.autograd.grad(
        torch.nn.functional.cross_entropy(module.discriminator(meaning), lang), meaning
    )[0]
    assert torch.all((adversarial_gradient * identification_gradient).sum(dim=1) < 0)


def test_same_language_partners_differ_and_share_the_language():
    languages = np.array([0, 1, 0, 2, 1, 0, 0, 2])
    rng = np.random.default_rng(0)
    for _ in range(20):
        partners = same_language_partners(languages, rng)
        assert np.all(languages[partners] == languages)
        assert np.all(partners != np.arange(len(languages)))
    # a language with a single sentence has only itself
    assert same_language_partners(np.array([0, 0, 1]), rng)[2] == 2


# ---------- synthetic data with known meaning / language structure ----------


def synthetic_pairs(n, dim, seed, offsets, noise=0.05):
    """x in English, y in German or French; e = meaning + offset[language] + noise."""
    rng = np.random.default_rng(seed)
    meanings = rng.normal(size=(n, dim)) / math.sqrt(dim)
    x_lang = np.full(n, LANGUAGES.index("en"))
    y_lang = rng.choice([LANGUAGES.index("de"), LANGUAGES.index("fr")], size=n)
    x = meanings + offsets[x_lang] + rng.normal(size=(n, dim)) * noise / math.sqrt(dim)
    y = meanings + offsets[y_lang] + rng.normal(size=(n, dim)) * noise / math.sqrt(dim)
    return ParallelEmbeddings(
        x.astype(np.float32), y.astype(np.float32), x_lang.astype(np.int64), y_lang.astype(np.int64), list(LANGUAGES)
    )


@pytest.fixture(scope="module")
def synthetic():
    dim = 16
    offsets = np.random.default_rng(42).normal(size=(len(LANGUAGES), dim)) * 3 / math.sqrt(dim)
    train, valid = synthetic_pairs(1500, dim, 0, offsets).split(0.2, seed=0)
    test = synthetic_pairs(400, dim, 1, offsets)
    return train, valid, test


def meaning_views(head, pairs):
    mx, my = np.zeros_like(pairs.x), np.zeros_like(pairs.y)
    for index, lang in enumerate(pairs.languages):
        for side, out, langs in ((pairs.x, mx, pairs.x_lang), (pairs.y, my, pairs.y_lang)):
            rows = langs == index
            if rows.any():
                out[rows] = head.meaning(side[rows], lang)
    return mx, my


def mean_pair_cosine(a, b):
    return float(np.mean(np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def language_id_accuracy(vectors, labels):
    """Nearest-centroid (cosine) language identification, centroids from even rows, tested on odd rows."""
    train, test = np.arange(0, len(vectors), 2), np.arange(1, len(vectors), 2)
    classes = np.unique(labels)
    centroids = np.stack([vectors[train][labels[train] == c].mean(axis=0) for c in classes])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    return float(np.mean(classes[np.argmax(unit[test] @ centroids.T, axis=1)] == labels[test]))


@pytest.fixture(scope="module")
def trained(synthetic):
    train, valid, _ = synthetic
    heads, logs = {}, {}
    for cls in TRAINED_HEADS:
        heads[cls.name] = cls(HeadHyperparameters(learning_rate=3e-3, batch_size=256, max_epochs=60, patience=15))
        logs[cls.name] = heads[cls.name].fit(train, valid, seed=0)
    return heads, logs


@pytest.mark.parametrize("name", [cls.name for cls in TRAINED_HEADS])
def test_training_recovers_meaning_on_synthetic_data(synthetic, trained, name):
    _, _, test = synthetic
    head, log = trained[0][name], trained[1][name]
    raw_cosine = mean_pair_cosine(test.x, test.y)
    mx, my = meaning_views(head, test)
    labels = np.concatenate([test.x_lang, test.y_lang])
    raw_lid = language_id_accuracy(np.concatenate([test.x, test.y]), labels)
    meaning_lid = language_id_accuracy(np.concatenate([mx, my]), labels)
    assert raw_cosine < 0.5 and raw_lid > 0.95  # the synthetic data is dominated by language
    assert mean_pair_cosine(mx, my) > raw_cosine + 0.3
    assert meaning_lid < raw_lid - 0.3
    assert (
        log["best_epoch"] >= 1
        and log["history"][log["best_epoch"] - 1]["valid"][head.select_on] == log["best_valid_loss"]
    )


def test_reversible_parts_add_up_exactly(synthetic, trained):
    _, _, test = synthetic
    head = trained[0]["reversible"]
    rows = test.y[test.y_lang == LANGUAGES.index("de")]
    np.testing.assert_allclose(head.meaning(rows, "de") + head.language(rows, "de"), rows, atol=1e-6)


@pytest.mark.parametrize("name", [cls.name for cls in TRAINED_HEADS])
def test_save_load_gives_identical_outputs(synthetic, trained, tmp_path, name):
    _, _, test = synthetic
    head = trained[0][name]
    head.save(tmp_path / name)
    assert json.loads((tmp_path / name / "head.json").read_text())["name"] == name
    loaded = load_head(tmp_path / name)
    assert type(loaded) is HEADS[name]
    for lang in ("en", "fr"):
        rows = test.x if lang == "en" else test.y[test.y_lang == LANGUAGES.index("fr")]
        np.testing.assert_array_equal(loaded.meaning(rows, lang), head.meaning(rows, lang))
        np.testing.assert_array_equal(loaded.language(rows, lang), head.language(rows, lang))
    assert not any(p.suffix in {".pkl", ".pt", ".bin"} for p in (tmp_path / name).iterdir())
    assert loaded.hyperparameters == head.hyperparameters
    # head.json's hyperparameters are read by the config loader: every problem, naming the file
    meta_path = tmp_path / name / "head.json"
    meta = json.loads(meta_path.read_text())
    meta["hyperparameters"].update(lr=0.1, max_epochs="many")
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ConfigError) as error:
        load_head(tmp_path / name)
    assert str(error.value) == (
        f"{meta_path}: hyperparameters: unknown key(s) ['lr']; known: ['batch_size', 'hidden_dim', "
        "'learning_rate', 'max_epochs', 'patience']; hyperparameters: max_epochs must be an integer, got 'many'"
    )


@pytest.mark.parametrize("name", [cls.name for cls in TRAINED_HEADS])
def test_unknown_language_and_bad_input_give_clear_errors(synthetic, trained, name):
    _, _, test = synthetic
    head = trained[0][name]
    with pytest.raises(UnknownLanguageError, match="'ja'.*de, en, fr"):
        head.meaning(test.x[:2], "ja")
    with pytest.raises(UnknownLanguageError):
        head.language(test.x[:2], "ja")
    with pytest.raises(ValueError, match=r"\(n, 16\)"):
        head.meaning(test.x[:2, :8], "en")
    with pytest.raises(RuntimeError, match="not trained"):
        HEADS[name]().meaning(test.x[:2], "en")


def test_same_seed_gives_same_head(synthetic):
    train, valid, test = synthetic
    hyperparameters = HeadHyperparameters(learning_rate=1e-2, batch_size=256, max_epochs=3)
    first, second = DreamHead(hyperparameters), DreamHead(hyperparameters)
    first.fit(train, valid, seed=3)
    second.fit(train, valid, seed=3)
    np.testing.assert_array_equal(first.meaning(test.x, "en"), second.meaning(test.x, "en"))


# ---------- the shared loop's early stopping ----------


class Scalar(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))


def test_early_stopping_restores_the_best_epoch():
    """Training pulls w towards 10 (the train targets) while the validation loss (w - 3)^2 is
    lowest near w = 3: validation improves, then worsens; the loop must stop and put back the
    weights of its best epoch."""
    module = Scalar()

    def loss_fn(batch: PairBatch):
        return {"total": ((module.w - batch.x[:, 0]) ** 2).mean()}

    def pairs(value, n):
        x = np.full((n, 2), value, dtype=np.float32)
        return ParallelEmbeddings(x, x.copy(), np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), ["a", "b"])

    log = train_module(
        module,
        loss_fn,
        pairs(10.0, 8),
        pairs(3.0, 4),
        HeadHyperparameters(learning_rate=0.5, batch_size=4, max_epochs=100, patience=3),
        seed=0,
    )
    valid_curve = [entry["valid"]["total"] for entry in log["history"]]
    assert log["stopped_early"] and log["epochs"] < 100
    assert log["best_epoch"] == int(np.argmin(valid_curve)) + 1
    assert log["epochs"] == log["best_epoch"] + 3
    assert valid_curve[-1] > min(valid_curve)  # the last epoch was worse...
    # ...and the module now holds the best epoch's weights, not the last ones
    assert float((module.w.detach() - 3.0) ** 2) == pytest.approx(min(valid_curve), rel=1e-6)
    assert log["best_valid_loss"] == pytest.approx(min(valid_curve))


def test_training_refuses_empty_splits(synthetic):
    train, _, _ = synthetic
    empty = train.subset(np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="0 valid pairs"):
        DreamHead().fit(train, empty)
