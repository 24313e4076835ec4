"""Margin scores over k neighbours each side (Artetxe & Schwenk 2019), and the candidate pairs of
the four retrieval modes (forward, backward, max, intersect).

In: embeddings x (n, d) and y (m, d), k, a margin, a mode and an index spec (ems.mining.index).
Out: `MarginNeighbours` (both directions' neighbours and margin scores) or `ScoredPairs`
(candidate pairs, best margin score first; no threshold: eval.evaluators.bucc chooses one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ems.cli import check_choice
from ems.mining.index import DEFAULT_CHUNK_ROWS, IndexSpec, as_index_spec
from ems.mining.search import nearest

DEFAULT_K = 4


def _ratio(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos / neighbourhood


def _distance(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos - neighbourhood


def _absolute(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos


MARGINS = {"ratio": _ratio, "distance": _distance, "absolute": _absolute}


def check_embeddings(name: str, x: np.ndarray) -> np.ndarray:
    """`x` as an array, with a clear ValueError unless it is a non-empty 2-D real array (a
    memory-mapped .npy stays memory-mapped: rows are read chunk by chunk)."""
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty 2-D (n, d) array, got shape {x.shape}")
    if x.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real numeric array, got dtype {x.dtype}")
    return x


@dataclass
class MarginNeighbours:
    """k nearest neighbours both ways with their margin scores.

    fwd_ids[i] are the k candidates in y for x[i], fwd_scores[i] their margin scores (best first
    by cosine); bwd_* the same from y to x. avg_x[i] / avg_y[j] are the mean cosines of x[i] /
    y[j] to its k neighbours on the other side. index_bytes: the larger of the two faiss indexes'
    sizes (`index_bytes`; one is alive at a time), 0 for exact search on the CPU (no index) or on GPUs."""

    fwd_ids: np.ndarray
    fwd_scores: np.ndarray
    bwd_ids: np.ndarray
    bwd_scores: np.ndarray
    avg_x: np.ndarray
    avg_y: np.ndarray
    index_bytes: int = 0


def margin_neighbours(
    x: np.ndarray,
    y: np.ndarray,
    k: int = DEFAULT_K,
    margin: str = "ratio",
    index_type: str | IndexSpec = "auto",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    nprobe: int | None = None,
) -> MarginNeighbours:
    """Margin scores of each x row against its k nearest y rows, and of each y row against its
    k nearest x rows: margin(cos(x, y), (avg_x + avg_y) / 2), where avg_* is a sentence's mean
    cosine to its k neighbours (ratio: cos / that, distance: cos - that, absolute: cos).
    k is capped at the size of the smaller side; `index_type` is an IndexSpec or a spec string
    (`parse_index_spec`), resolved for each side's size; `nprobe`, if given, overrides its nprobe."""
    check_choice("margin", margin, MARGINS)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    spec = as_index_spec(index_type, nprobe)
    x, y = check_embeddings("x", x), check_embeddings("y", y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same dimension, got {x.shape[1]} and {y.shape[1]}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    k = min(k, len(x), len(y))
    # Exact search holds two chunks at a time; an index holds one side (one index alive at a time).
    fwd_cos, fwd_ids, fwd_bytes = nearest(x, y, k, spec, chunk_rows, progress, "x", "y")
    bwd_cos, bwd_ids, bwd_bytes = nearest(y, x, k, spec, chunk_rows, progress, "y", "x")
    # IVF and HNSW may return fewer than k hits (id -1); a missing neighbour adds nothing to the average.
    fwd_cos[fwd_ids < 0], bwd_cos[bwd_ids < 0] = 0.0, 0.0
    avg_x, avg_y = fwd_cos.mean(axis=1), bwd_cos.mean(axis=1)
    score = MARGINS[margin]
    fwd_scores = score(fwd_cos, (avg_x[:, None] + avg_y[fwd_ids]) / 2)
    bwd_scores = score(bwd_cos, (avg_y[:, None] + avg_x[bwd_ids]) / 2)
    fwd_scores[fwd_ids < 0], bwd_scores[bwd_ids < 0] = -np.inf, -np.inf
    return MarginNeighbours(fwd_ids, fwd_scores, bwd_ids, bwd_scores, avg_x, avg_y, max(fwd_bytes, bwd_bytes))


@dataclass
class ScoredPairs:
    """Mined pairs, best first: x row src[i] aligned to y row tgt[i] with margin score score[i]."""

    src: np.ndarray
    tgt: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.src)


def _best(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    best = scores.argmax(axis=1)
    rows = np.arange(len(ids))
    return ids[rows, best], scores[rows, best]


def _sorted(src: np.ndarray, tgt: np.ndarray, score: np.ndarray) -> ScoredPairs:
    order = np.argsort(-score, kind="stable")
    order = order[np.isfinite(score[order])]  # -inf: no neighbour found (a sparse IVF probe)
    return ScoredPairs(src[order], tgt[order], score[order])


def _forward(nb: MarginNeighbours) -> ScoredPairs:
    tgt, score = _best(nb.fwd_ids, nb.fwd_scores)
    return _sorted(np.arange(len(tgt)), tgt, score)


def _backward(nb: MarginNeighbours) -> ScoredPairs:
    src, score = _best(nb.bwd_ids, nb.bwd_scores)
    return _sorted(src, np.arange(len(src)), score)


def _intersect(nb: MarginNeighbours) -> ScoredPairs:
    fwd, bwd = _forward(nb), _backward(nb)
    backward_pairs = set(zip(bwd.src.tolist(), bwd.tgt.tolist()))
    keep = np.array([pair in backward_pairs for pair in zip(fwd.src.tolist(), fwd.tgt.tolist())], dtype=bool)
    return ScoredPairs(fwd.src[keep], fwd.tgt[keep], fwd.score[keep])


def _max(nb: MarginNeighbours) -> ScoredPairs:
    # Both directions' best pairs, best score first; a sentence on either side is used once.
    fwd, bwd = _forward(nb), _backward(nb)
    both = _sorted(
        *(np.concatenate([a, b]) for a, b in ((fwd.src, bwd.src), (fwd.tgt, bwd.tgt), (fwd.score, bwd.score)))
    )
    used_src, used_tgt, keep = set(), set(), []
    for i, (s, t) in enumerate(zip(both.src.tolist(), both.tgt.tolist())):
        if s not in used_src and t not in used_tgt:
            used_src.add(s)
            used_tgt.add(t)
            keep.append(i)
    keep = np.array(keep, dtype=np.int64)
    return ScoredPairs(both.src[keep], both.tgt[keep], both.score[keep])


RETRIEVAL = {"forward": _forward, "backward": _backward, "max": _max, "intersect": _intersect}


def mine(
    x: np.ndarray,
    y: np.ndarray,
    k: int = DEFAULT_K,
    margin: str = "ratio",
    mode: str = "max",
    index_type: str | IndexSpec = "auto",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    nprobe: int | None = None,
) -> ScoredPairs:
    """Candidate pairs between embeddings x (n, d) and y (m, d), best margin score first.

    forward: each x row with its best y; backward: each y row with its best x; intersect: pairs
    both directions agree on; max: both directions' pairs, greedily keeping the best-scoring
    pair of each sentence. No threshold is applied (see `best_threshold`). `index_type` and
    `nprobe` choose the search as in `margin_neighbours`."""
    check_choice("mode", mode, RETRIEVAL)
    neighbours = margin_neighbours(x, y, k, margin, index_type, chunk_rows, progress, nprobe)
    return RETRIEVAL[mode](neighbours)
