"""The interface shared by all meaning/language disentanglement heads.

A head is trained on embeddings of parallel sentences (`ParallelEmbeddings`) from a frozen
encoder and splits an embedding of a sentence in a known language into a meaning part
(`meaning`) and a language part (`language`). Heads save to a directory (arrays in
safetensors/npz plus a small JSON `head.json` naming the head); no pickles.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

HEAD_JSON = "head.json"
VIEWS = ("raw", "meaning", "language")  # an embedding as it is, or one of the two parts a head splits it into


@dataclass
class ParallelEmbeddings:
    """Embeddings of aligned pairs: x[i] (language x_lang[i]) is a translation of y[i] (language y_lang[i])."""

    x: np.ndarray  # (n, d) float32
    y: np.ndarray  # (n, d) float32
    x_lang: np.ndarray  # (n,) int64 index into `languages`
    y_lang: np.ndarray  # (n,) int64
    languages: list[str]  # canonical codes

    def __post_init__(self) -> None:
        n = len(self.x)
        if self.x.ndim != 2 or self.y.shape != self.x.shape:
            raise ValueError(f"x and y must both be (n, d); got {self.x.shape} and {self.y.shape}")
        if self.x_lang.shape != (n,) or self.y_lang.shape != (n,):
            raise ValueError(f"x_lang and y_lang must be ({n},); got {self.x_lang.shape} and {self.y_lang.shape}")
        if n and (
            min(self.x_lang.min(), self.y_lang.min()) < 0
            or max(self.x_lang.max(), self.y_lang.max()) >= len(self.languages)
        ):
            raise ValueError(f"language indices must lie in [0, {len(self.languages)})")

    def __len__(self) -> int:
        return len(self.x)

    def subset(self, rows: np.ndarray) -> ParallelEmbeddings:
        """The pairs at `rows` (same language list)."""
        return ParallelEmbeddings(
            self.x[rows], self.y[rows], self.x_lang[rows], self.y_lang[rows], list(self.languages)
        )

    def split(self, valid_fraction: float, seed: int) -> tuple[ParallelEmbeddings, ParallelEmbeddings]:
        """(train, valid): a random `valid_fraction` of the pairs (at least one, and at least one
        left for training) goes to valid; the same seed gives the same split."""
        if not 0.0 < valid_fraction < 1.0:
            raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
        if len(self) < 2:
            raise ValueError(f"need at least 2 pairs to split, got {len(self)}")
        order = np.random.default_rng(seed).permutation(len(self))
        n_valid = min(max(1, round(valid_fraction * len(self))), len(self) - 1)
        return self.subset(np.sort(order[n_valid:])), self.subset(np.sort(order[:n_valid]))

    def embeddings_of(self, lang: str) -> np.ndarray:
        """All embeddings (x side and y side) of language `lang`, stacked."""
        index = self.languages.index(lang)
        return np.concatenate([self.x[self.x_lang == index], self.y[self.y_lang == index]])


class Head(Protocol):
    """A trained meaning/language disentanglement head on top of a frozen encoder."""

    name: str

    def fit(self, train: ParallelEmbeddings, valid: ParallelEmbeddings, seed: int = 0) -> dict:
        """Train; returns a training log (e.g. best_epoch, best_valid_loss, epochs)."""
        ...

    def meaning(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        """(n, d) embeddings of sentences in `lang` -> their meaning part (float32)."""
        ...

    def language(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        """(n, d) embeddings of sentences in `lang` -> their language part (float32)."""
        ...

    def save(self, directory: Path) -> None:
        """Write the head to `directory` (safetensors/npz + HEAD_JSON with at least {"name"}); no pickle."""
        ...

    @classmethod
    def load(cls, directory: Path) -> Head:
        """Read a head written by `save`."""
        ...


class UnknownLanguageError(ValueError):
    """A head was asked about a language it was not trained on."""


def check_language(lang: str, languages: list[str], head_name: str) -> None:
    """Raise UnknownLanguageError naming the trained languages unless `lang` is one of them."""
    if lang not in languages:
        raise UnknownLanguageError(
            f"the {head_name} head was not trained on language {lang!r}; it knows {', '.join(languages)}"
        )
