"""Linear projection into the English space: per language a least-squares map W_lang with
e_lang @ W_lang ~ e_en over the training pairs (numpy lstsq); English is the identity.

meaning(e, lang) = e @ W_lang; language(e, lang) = e - meaning(e, lang). Training pairs must
have English on one side (pairs not involving English are ignored, and a language without any
English pair cannot be fit). Saved as projection.safetensors (one d x d map per language) + head.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from eval.heads.base import HEAD_JSON, ParallelEmbeddings, check_language
from eval.heads.centering import _valid_pair_cosine

WEIGHTS_FILE = "projection.safetensors"
PIVOT = "en"


class ProjectionHead:
    name = "projection"

    def __init__(self, maps: dict[str, np.ndarray] | None = None, rcond: float | None = None):
        self.maps = dict(maps or {})
        self.rcond = rcond

    @property
    def languages(self) -> list[str]:
        return sorted(self.maps)

    def fit(self, train: ParallelEmbeddings, valid: ParallelEmbeddings, seed: int = 0) -> dict:
        """Least squares per language on the pairs with English on one side; the log gives the
        pair count and training residual per language and the mean valid-pair cosine."""
        if PIVOT not in train.languages:
            raise ValueError(f"the projection head maps into English ({PIVOT!r}); the training pairs have no English side")
        pivot = train.languages.index(PIVOT)
        sources: dict[str, list[np.ndarray]] = {}
        targets: dict[str, list[np.ndarray]] = {}
        sides = ((train.x, train.y, train.x_lang, train.y_lang), (train.y, train.x, train.y_lang, train.x_lang))
        for source, target, source_lang, target_lang in sides:
            rows = (target_lang == pivot) & (source_lang != pivot)
            for index in np.unique(source_lang[rows]):
                lang = train.languages[index]
                sources.setdefault(lang, []).append(source[rows & (source_lang == index)])
                targets.setdefault(lang, []).append(target[rows & (source_lang == index)])
        dim = train.x.shape[1]
        self.maps = {PIVOT: np.eye(dim, dtype=np.float32)}
        log = {"pairs_per_language": {}, "train_residual": {}}
        for lang in sorted(sources):
            a = np.concatenate(sources[lang]).astype(np.float64)
            b = np.concatenate(targets[lang]).astype(np.float64)
            w, *_ = np.linalg.lstsq(a, b, rcond=self.rcond)
            self.maps[lang] = w.astype(np.float32)
            log["pairs_per_language"][lang] = len(a)
            log["train_residual"][lang] = float(np.linalg.norm(a @ w - b) / max(np.linalg.norm(b), 1e-12))
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
        description = {"name": self.name, "languages": self.languages}
        (directory / HEAD_JSON).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> "ProjectionHead":
        return cls(load_file(str(Path(directory) / WEIGHTS_FILE)))
