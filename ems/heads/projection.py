"""Linear projection into the English space (Libovický, Rosa, Fraser 2020, "explicit projection"):
per language a map W_lang with e_lang @ W_lang ~ e_en, fit on the training pairs by ridge
regression (no intercept, as in the paper's linear projection); English is the identity.

The paper fits plain least squares on 500-3000 pairs per language. Here the heads see at most
about a thousand pairs with d up to 1024, where least squares interpolates the training pairs
exactly, so each map is a ridge solution

    W(lam) = argmin_W ||A W - B||^2 + lam ||W||^2        (sklearn Ridge(alpha=lam, fit_intercept=False))

with lam = alpha * mean squared norm of that language's training source rows, alpha in
`ALPHAS` (0, i.e. minimum-norm least squares, and 1e-4 .. 1e3). alpha is chosen per language by
the mean squared error of the mapped held-out source vectors against their English translations
(the `valid` pairs the head training holds out; `select_ridge` receives only train and valid
arrays, never an evaluation set). A language with no held-out pair uses the alpha that is best
summed over the other languages' held-out pairs (0 if no language has one). The map is then the
ridge solution on the training pairs alone.

meaning(e, lang) = e @ W_lang; language(e, lang) = e - meaning(e, lang). Training pairs must
have English on one side (pairs not involving English are ignored, and a language without any
English pair cannot be fit). Saved as projection.safetensors (one d x d map per language) +
head.json, which records per language the chosen alpha and lam and the validation curve.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ems.heads.base import HEAD_JSON, ParallelEmbeddings, check_language
from ems.heads.centering import _valid_pair_cosine

WEIGHTS_FILE = "projection.safetensors"
PIVOT = "en"
ALPHAS = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)


def ridge_fit(a: np.ndarray, b: np.ndarray, lam: float, fit_intercept: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(W, intercept) minimising ||A W + 1 c - B||^2 + lam ||W||^2 (c = 0 without fit_intercept),
    the objective of sklearn.linear_model.Ridge(alpha=lam). lam = 0 gives the minimum-norm
    least-squares solution."""
    return _ridge_path(a, b, [lam], fit_intercept)[0]


def _ridge_path(a: np.ndarray, b: np.ndarray, lams, fit_intercept: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """ridge_fit for several lam from one SVD of A: W = V diag(s / (s^2 + lam)) U^T B."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a_mean = a.mean(axis=0) if fit_intercept else np.zeros(a.shape[1])
    b_mean = b.mean(axis=0) if fit_intercept else np.zeros(b.shape[1])
    u, s, vt = np.linalg.svd(a - a_mean, full_matrices=False)
    ub = u.T @ (b - b_mean)
    keep = s > s.max(initial=0.0) * max(a.shape) * np.finfo(np.float64).eps
    solutions = []
    for lam in lams:
        factor = np.where(keep, s / np.where(keep, s * s + lam, 1.0), 0.0)
        w = vt.T @ (factor[:, None] * ub)
        solutions.append((w, b_mean - a_mean @ w))
    return solutions


def _mean_squared_error(a: np.ndarray, w: np.ndarray, b: np.ndarray) -> float:
    """Mean over rows of ||a_i W - b_i||^2."""
    return float(np.mean(np.sum((np.asarray(a, np.float64) @ w - np.asarray(b, np.float64)) ** 2, axis=1)))


def select_ridge(
    train_a: np.ndarray, train_b: np.ndarray, valid_a: np.ndarray, valid_b: np.ndarray, alphas=ALPHAS
) -> dict:
    """Ridge maps A -> B on the training rows for each alpha in `alphas` (lam = alpha * mean
    squared norm of the training rows of A), scored by the mean squared error on the held-out
    rows. Returns {"scale" (the mean squared norm), "alphas", "lambdas", "valid_mse" (None
    without held-out rows), "alpha", "lambda" (the argmin; the first alpha without held-out
    rows), "map" (W of the chosen alpha)}."""
    train_a = np.asarray(train_a, np.float64)
    scale = float(np.mean(np.sum(train_a**2, axis=1))) if len(train_a) else 0.0
    lams = [alpha * scale for alpha in alphas]
    maps = [w for w, _ in _ridge_path(train_a, train_b, lams)]
    curve = [_mean_squared_error(valid_a, w, valid_b) for w in maps] if len(valid_a) else None
    best = int(np.argmin(curve)) if curve else 0
    return {
        "scale": scale,
        "alphas": [float(x) for x in alphas],
        "lambdas": lams,
        "valid_mse": curve,
        "alpha": float(alphas[best]),
        "lambda": lams[best],
        "map": maps[best],
    }


def _english_pairs(pairs: ParallelEmbeddings) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{lang: (sources in lang, their English translations)} over the pairs with English on one side."""
    if PIVOT not in pairs.languages:
        return {}
    pivot = pairs.languages.index(PIVOT)
    sources: dict[str, list[np.ndarray]] = {}
    targets: dict[str, list[np.ndarray]] = {}
    sides = ((pairs.x, pairs.y, pairs.x_lang, pairs.y_lang), (pairs.y, pairs.x, pairs.y_lang, pairs.x_lang))
    for source, target, source_lang, target_lang in sides:
        rows = (target_lang == pivot) & (source_lang != pivot)
        for index in np.unique(source_lang[rows]):
            lang = pairs.languages[index]
            sources.setdefault(lang, []).append(source[rows & (source_lang == index)])
            targets.setdefault(lang, []).append(target[rows & (source_lang == index)])
    return {lang: (np.concatenate(sources[lang]), np.concatenate(targets[lang])) for lang in sources}


class ProjectionHead:
    name = "projection"

    def __init__(self, maps: dict[str, np.ndarray] | None = None, alphas=ALPHAS, ridge: dict | None = None):
        self.maps = dict(maps or {})
        self.alphas = tuple(alphas)
        self.ridge = dict(
            ridge or {}
        )  # {lang: {"alpha", "lambda", "selected_on", "alphas", "valid_mse"}}; {}: unregularised

    @property
    def languages(self) -> list[str]:
        return sorted(self.maps)

    def fit(self, train: ParallelEmbeddings, valid: ParallelEmbeddings, seed: int = 0) -> dict:
        """Ridge per language on the training pairs with English on one side, alpha chosen on the
        held-out `valid` pairs (module docstring). The log gives per language the pair count, the
        training residual and the ridge selection (alpha, lambda, the validation MSE curve), and
        the mean valid-pair cosine."""
        if PIVOT not in train.languages:
            raise ValueError(
                f"the projection head maps into English ({PIVOT!r}); the training pairs have no English side"
            )
        train_pairs, valid_pairs = _english_pairs(train), _english_pairs(valid)
        dim = train.x.shape[1]
        empty = np.zeros((0, dim))
        selections = {
            lang: select_ridge(a, b, *valid_pairs.get(lang, (empty, empty)), alphas=self.alphas)
            for lang, (a, b) in sorted(train_pairs.items())
        }
        curves = [sel["valid_mse"] for sel in selections.values() if sel["valid_mse"] is not None]
        pooled = int(np.argmin(np.sum(curves, axis=0))) if curves else 0
        self.maps = {PIVOT: np.eye(dim, dtype=np.float32)}
        self.ridge = {}
        log = {"pairs_per_language": {}, "train_residual": {}, "ridge": {}}
        for lang, selection in selections.items():
            a, b = (np.asarray(m, np.float64) for m in train_pairs[lang])
            if selection["valid_mse"] is None:  # no held-out pair of this language: the pooled choice
                selection["alpha"], selection["lambda"] = selection["alphas"][pooled], selection["lambdas"][pooled]
                selection["map"] = ridge_fit(a, b, selection["lambda"])[0]
                selected_on = (
                    "other languages' held-out pairs" if curves else "nothing (no held-out pairs): least squares"
                )
            else:
                selected_on = f"{len(valid_pairs[lang][0])} held-out {lang}-{PIVOT} pairs"
            w = selection.pop("map")
            self.maps[lang] = w.astype(np.float32)
            self.ridge[lang] = {"selected_on": selected_on, **selection}
            log["pairs_per_language"][lang] = len(a)
            log["train_residual"][lang] = float(np.linalg.norm(a @ w - b) / max(np.linalg.norm(b), 1e-12))
            log["ridge"][lang] = self.ridge[lang]
        log["valid_pair_cosine"] = _valid_pair_cosine(self, valid)
        return log

    def meaning(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        check_language(lang, self.languages, self.name)
        return (np.asarray(embeddings, dtype=np.float32) @ self.maps[lang]).astype(np.float32)

    def language(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        return (np.asarray(embeddings, dtype=np.float32) - self.meaning(embeddings, lang)).astype(np.float32)

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file({lang: np.ascontiguousarray(w) for lang, w in self.maps.items()}, str(directory / WEIGHTS_FILE))
        description = {"name": self.name, "languages": self.languages, "alphas": list(self.alphas), "ridge": self.ridge}
        (directory / HEAD_JSON).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> ProjectionHead:
        """The maps of `directory` and head.json's alphas and ridge record (ValueError naming the file
        when it has none)."""
        directory = Path(directory)
        path = directory / WEIGHTS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{directory} holds no projection maps (missing {WEIGHTS_FILE})")
        meta_path = directory / HEAD_JSON
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        if not isinstance(meta, dict) or not isinstance(meta.get("ridge"), dict) or "alphas" not in meta:
            raise ValueError(f"{meta_path} records no alphas and ridge selection: fit the head again")
        return cls(load_file(str(path)), meta["alphas"], meta["ridge"])
