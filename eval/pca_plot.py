"""PNG scatter plots of the first two principal components of sentence embeddings.

In: panels (title, {language: (n, d) embeddings}); each panel's embeddings of all its languages
are centered together and projected on their first two principal directions (numpy SVD). Out: a
PNG, one scatter per panel, one colour per language (matplotlib, Agg backend).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from eval.chart import save_figure  # noqa: E402


def principal_components(x: np.ndarray, k: int = 2) -> np.ndarray:
    """(n, d) -> (n, k): x centered and projected on its top-k right singular vectors (the sign
    of each component fixed so that its largest-magnitude loading is positive)."""
    x = np.asarray(x, dtype=np.float64)
    centered = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    vt = vt[:k]
    signs = np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])
    return centered @ (vt * signs[:, None]).T


def write_pca_plot(panels: list[tuple[str, dict[str, np.ndarray]]], path: Path, columns: int = 3) -> Path:
    """One PCA scatter per (title, {lang: embeddings}) panel, `columns` panels per row; returns path."""
    if not panels:
        raise ValueError("no panels to plot")
    rows = -(-len(panels) // columns)
    columns = min(columns, len(panels))
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.3 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (title, by_language) in zip(axes.flat, panels):
        languages = list(by_language)
        points = principal_components(np.concatenate([by_language[lang] for lang in languages]))
        start = 0
        for lang in languages:
            n = len(by_language[lang])
            ax.scatter(points[start : start + n, 0], points[start : start + n, 1], s=6, alpha=0.6, label=lang)
            start += n
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("PC 1", fontsize=7)
        ax.set_ylabel("PC 2", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=7, markerscale=2)
    return save_figure(fig, path)
