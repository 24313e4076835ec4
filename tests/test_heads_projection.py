"""The projection head's ridge regression: the closed form against scikit-learn, the strength
chosen on held-out pairs beating plain least squares when n < d, the selection seeing only train
and valid arrays, and the saved record (old saved heads still load)."""

import json

import numpy as np
import pytest
from sklearn.linear_model import Ridge

import ems.heads.projection as projection
from ems.heads import load_head
from ems.heads.base import ParallelEmbeddings
from ems.heads.projection import ALPHAS, ProjectionHead, ridge_fit, select_ridge


def noisy_linear_pairs(n, d=60, noise=0.5, seed=0, w=None):
    """(de rows, en rows = de @ W + noise, W): a known linear map into English plus noise."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(d, d)) / np.sqrt(d) if w is None else w
    de = rng.normal(size=(n, d))
    return de, de @ w + noise * rng.normal(size=(n, d)), w


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("lam", [1e-3, 0.5, 30.0])
def test_closed_form_matches_sklearn_ridge(lam, fit_intercept):
    a, b, _ = noisy_linear_pairs(25, d=12, seed=1)
    b = b + 3.0  # an offset for the intercept to find
    w, intercept = ridge_fit(a, b, lam, fit_intercept)
    reference = Ridge(alpha=lam, fit_intercept=fit_intercept, solver="svd").fit(a, b)
    np.testing.assert_allclose(w, reference.coef_.T, atol=1e-5)
    np.testing.assert_allclose(intercept, np.broadcast_to(reference.intercept_, (12,)), atol=1e-5)


def test_lambda_zero_is_minimum_norm_least_squares():
    a, b, _ = noisy_linear_pairs(10, d=20, seed=2)  # n < d: many exact solutions
    w, _ = ridge_fit(a, b, 0.0)
    np.testing.assert_allclose(w, np.linalg.lstsq(a, b, rcond=None)[0], atol=1e-8)
    np.testing.assert_allclose(a @ w, b, atol=1e-8)  # interpolates the training pairs


def test_held_out_choice_is_positive_and_beats_least_squares_on_fresh_pairs():
    d = 60
    train_a, train_b, w = noisy_linear_pairs(40, d=d, seed=3)  # 40 training pairs, d = 60
    valid_a, valid_b, _ = noisy_linear_pairs(20, d=d, seed=4, w=w)
    fresh_a, fresh_b, _ = noisy_linear_pairs(500, d=d, seed=5, w=w)
    selection = select_ridge(train_a, train_b, valid_a, valid_b)
    assert selection["alpha"] > 0 and selection["lambda"] > 0
    assert len(selection["valid_mse"]) == len(ALPHAS) and selection["alphas"][0] == 0.0
    assert selection["valid_mse"][ALPHAS.index(selection["alpha"])] == min(selection["valid_mse"])
    fresh = lambda m: float(np.mean(np.sum((fresh_a @ m - fresh_b) ** 2, axis=1)))  # noqa: E731
    least_squares = ridge_fit(train_a, train_b, 0.0)[0]
    assert fresh(selection["map"]) < 0.8 * fresh(least_squares)
    np.testing.assert_allclose(selection["map"], ridge_fit(train_a, train_b, selection["lambda"])[0], atol=1e-10)
    # lambda is alpha times the mean squared norm of the training source rows
    assert selection["lambda"] == pytest.approx(selection["alpha"] * np.mean(np.sum(train_a**2, axis=1)))


def as_pairs(de, en):
    """de (index 1) -> en (index 0) pairs, English on the y side."""
    n = len(de)
    return ParallelEmbeddings(
        de.astype(np.float32), en.astype(np.float32), np.ones(n, np.int64), np.zeros(n, np.int64), ["en", "de"]
    )


def test_head_selects_only_on_train_and_valid_and_records_the_curve(tmp_path, monkeypatch):
    de, en, w = noisy_linear_pairs(60, seed=6)
    test_de, test_en, _ = noisy_linear_pairs(200, seed=7, w=w)  # an evaluation set the head must never see
    train, valid = as_pairs(de, en).split(1 / 3, seed=0)
    seen = []
    real = projection.select_ridge

    def spy(*arrays, **kwargs):
        seen.extend(np.asarray(array) for array in arrays)
        return real(*arrays, **kwargs)

    monkeypatch.setattr(projection, "select_ridge", spy)
    head = ProjectionHead()
    log = head.fit(train, valid)
    allowed = {row.tobytes() for m in (train.x, train.y, valid.x, valid.y) for row in m.astype(np.float64)}
    assert len(seen) == 4 and all(row.tobytes() in allowed for array in seen for row in np.asarray(array, np.float64))
    forbidden = {row.tobytes() for m in (test_de, test_en) for row in m.astype(np.float32).astype(np.float64)}
    assert not any(row.tobytes() in forbidden for array in seen for row in np.asarray(array, np.float64))
    assert len(seen[0]) == len(train) and len(seen[2]) == len(valid)
    record = log["ridge"]["de"]
    assert record["alpha"] > 0 and record["selected_on"] == f"{len(valid)} held-out de-en pairs"
    assert len(record["valid_mse"]) == len(record["alphas"]) == len(record["lambdas"])
    head.save(tmp_path)
    saved = json.loads((tmp_path / "head.json").read_text())
    assert saved["ridge"]["de"]["alpha"] == record["alpha"] and saved["ridge"]["de"]["valid_mse"] == record["valid_mse"]
    loaded = load_head(tmp_path)
    assert loaded.ridge["de"]["lambda"] == record["lambda"]
    np.testing.assert_array_equal(loaded.meaning(test_de, "de"), head.meaning(test_de, "de"))


def test_language_without_held_out_pairs_takes_the_pooled_choice_and_old_heads_load(tmp_path):
    de, en, w = noisy_linear_pairs(60, seed=8)
    fr, en_fr, _ = noisy_linear_pairs(30, seed=9, w=w)
    languages = ["en", "de", "fr"]
    train = ParallelEmbeddings(
        np.concatenate([de[:40], fr]).astype(np.float32),
        np.concatenate([en[:40], en_fr]).astype(np.float32),
        np.array([1] * 40 + [2] * 30),
        np.zeros(70, np.int64),
        languages,
    )
    valid = as_pairs(de[40:], en[40:])  # no fr pair held out
    valid = ParallelEmbeddings(valid.x, valid.y, valid.x_lang, valid.y_lang, languages)
    head = ProjectionHead()
    log = head.fit(train, valid)
    assert (
        log["ridge"]["fr"]["valid_mse"] is None
        and log["ridge"]["fr"]["selected_on"] == "other languages' held-out pairs"
    )
    assert log["ridge"]["fr"]["alpha"] == log["ridge"]["de"]["alpha"]  # the only curve is de's
    # a head.json without the ridge record is refused in one line
    head.save(tmp_path)
    (tmp_path / "head.json").write_text(json.dumps({"name": "projection", "languages": head.languages}))
    with pytest.raises(ValueError, match="head.json records no alphas and ridge selection: fit the head again$"):
        load_head(tmp_path)
