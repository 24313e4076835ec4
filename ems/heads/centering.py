"""Per-language centering (Libovický, Rosa, Fraser 2020): subtract each language's mean embedding.

fit: the mean of each language's embeddings in the training pairs (both sides; never the test
file). meaning(e, lang) = e - mean[lang]; language(e, lang) = mean[lang] for every row, so that
meaning + language = e. Saved as centering.safetensors (languages x d means) + head.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ems.heads.base import HEAD_JSON, ParallelEmbeddings, check_language

WEIGHTS_FILE = "centering.safetensors"


class CenteringHead:
    name = "centering"

    def __init__(self, means: dict[str, np.ndarray] | None = None):
        self.means = dict(means or {})

    @property
    def languages(self) -> list[str]:
        return sorted(self.means)

    def fit(self, train: ParallelEmbeddings, valid: ParallelEmbeddings, seed: int = 0) -> dict:
        """Language means over the training pairs; the log gives the count per language and the
        mean cosine of valid pairs after centering (no iterations, so no early stopping)."""
        self.means = {}
        counts = {}
        for lang in train.languages:
            rows = train.embeddings_of(lang)
            if len(rows):
                self.means[lang] = rows.astype(np.float64).mean(axis=0).astype(np.float32)
                counts[lang] = len(rows)
        return {"sentences_per_language": counts, "valid_pair_cosine": _valid_pair_cosine(self, valid)}

    def meaning(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        check_language(lang, self.languages, self.name)
        return (np.asarray(embeddings, dtype=np.float32) - self.means[lang]).astype(np.float32)

    def language(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        check_language(lang, self.languages, self.name)
        return np.broadcast_to(self.means[lang], np.shape(embeddings)).astype(np.float32)

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file(
            {lang: np.ascontiguousarray(mean) for lang, mean in self.means.items()}, str(directory / WEIGHTS_FILE)
        )
        description = {"name": self.name, "languages": self.languages}
        (directory / HEAD_JSON).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> CenteringHead:
        return cls(load_file(str(Path(directory) / WEIGHTS_FILE)))


def _valid_pair_cosine(head, valid: ParallelEmbeddings) -> float | None:
    """Mean cosine between the meaning views of the two sides of each valid pair whose languages
    the head knows (None if none)."""
    cosines = []
    for i in range(len(valid)):
        x_lang, y_lang = valid.languages[valid.x_lang[i]], valid.languages[valid.y_lang[i]]
        if x_lang not in head.languages or y_lang not in head.languages:
            continue
        a = head.meaning(valid.x[i : i + 1], x_lang)[0]
        b = head.meaning(valid.y[i : i + 1], y_lang)[0]
        cosines.append(float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)))
    return float(np.mean(cosines)) if cosines else None
