"""Margin scores over k neighbours each side (Artetxe & Schwenk 2019), and the candidate pairs of
the four retrieval modes (forward, backward, max, intersect).

In: embeddings x (n, d) and y (m, d), k, a margin, a mode and an index spec (ems.mining.index_kinds).
Out: `MarginNeighbours` (both directions' neighbours and margin scores) or `ScoredPairs`
(candidate pairs, best margin score first; no threshold: eval.evaluators.bucc chooses one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ems.cli import check_choice
from ems.mining.index_kinds import DEFAULT_CHUNK_ROWS, IndexSpec, as_index_spec
from ems.mining.search import nearest

DEFAULT_K = 4


def _ratio(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos / neighbourhood


def _distance(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos - neighbourhood


def _absolute(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos


MARGINS = {"ratio": _ratio, "distance": _distance, "absolute": _absolute}


def neighbourhood_mean(cos: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each row's mean cosine to its k neighbours (n, k) -> (n,). IVF and HNSW may return fewer
    than k hits (id -1): a missing neighbour counts as cosine 0 (its `cos` entry is set to 0)."""
    cos[ids < 0] = 0.0
    return cos.mean(axis=1)


def margin_scores(
    cos: np.ndarray, ids: np.ndarray, avg_self: np.ndarray, avg_other: np.ndarray, margin: str
) -> np.ndarray:
    """Margin scores (n, k) of each row's k candidates: margin(cos, (avg_self + avg_other) / 2),
    `avg_self` (n,) the rows' neighbourhood means, `avg_other` (n, k) the candidates' (any value
    where ids < 0); a missing candidate scores -inf."""
    scores = MARGINS[margin](cos, (avg_self[:, None] + avg_other) / 2)
    scores[ids < 0] = -np.inf
    return scores


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
    avg_x, avg_y = neighbourhood_mean(fwd_cos, fwd_ids), neighbourhood_mean(bwd_cos, bwd_ids)
    fwd_scores = margin_scores(fwd_cos, fwd_ids, avg_x, avg_y[np.maximum(fwd_ids, 0)], margin)
    bwd_scores = margin_scores(bwd_cos, bwd_ids, avg_y, avg_x[np.maximum(bwd_ids, 0)], margin)
    return MarginNeighbours(fwd_ids, fwd_scores, bwd_ids, bwd_scores, avg_x, avg_y, max(fwd_bytes, bwd_bytes))


@dataclass
class ScoredPairs:
    """Mined pairs, best first: x row src[i] aligned to y row tgt[i] with margin score score[i]."""

    src: np.ndarray
    tgt: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.src)


def best_candidates(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best-scoring candidate (the first of equal ones) and its score: ((n,), (n,))."""
    best = scores.argmax(axis=1)
    rows = np.arange(len(ids))
    return ids[rows, best], scores[rows, best]


def one_to_one(pairs: Iterable[tuple[int, int]], n_src: int, n_tgt: int) -> Iterator[bool]:
    """For each (src, tgt) of `pairs` (rows of sides of n_src and n_tgt sentences), best first:
    whether to keep it, greedily, so that a sentence on either side is used once (the max mode's
    rule). One byte per sentence of each side."""
    used_src, used_tgt = np.zeros(n_src, dtype=bool), np.zeros(n_tgt, dtype=bool)
    for s, t in pairs:
        keep = not (used_src[s] or used_tgt[t])
        if keep:
            used_src[s] = used_tgt[t] = True
        yield keep


def best_first(score: np.ndarray) -> np.ndarray:
    """The positions of the finite scores, highest first (ties: lower position first); -inf means
    no neighbour was found (a sparse IVF probe)."""
    order = np.argsort(-score, kind="stable")
    return order[np.isfinite(score[order])]


def _sorted(src: np.ndarray, tgt: np.ndarray, score: np.ndarray) -> ScoredPairs:
    order = best_first(score)
    return ScoredPairs(src[order], tgt[order], score[order])


def _forward(nb: MarginNeighbours) -> ScoredPairs:
    tgt, score = best_candidates(nb.fwd_ids, nb.fwd_scores)
    return _sorted(np.arange(len(tgt)), tgt, score)


def _backward(nb: MarginNeighbours) -> ScoredPairs:
    src, score = best_candidates(nb.bwd_ids, nb.bwd_scores)
    return _sorted(src, np.arange(len(src)), score)


def _intersect(nb: MarginNeighbours) -> ScoredPairs:
    fwd = _forward(nb)
    bwd_best, bwd_score = best_candidates(nb.bwd_ids, nb.bwd_scores)
    keep = agreed(fwd.src, bwd_best[fwd.tgt], bwd_score[fwd.tgt])
    return ScoredPairs(fwd.src[keep], fwd.tgt[keep], fwd.score[keep])


def agreed(src: np.ndarray, tgt_best: np.ndarray, tgt_best_score: np.ndarray) -> np.ndarray:
    """Which forward pairs (src[i], tgt[i]) the backward direction agrees on (the intersect mode),
    given each tgt[i]'s own best candidate `tgt_best[i]` and its score: that candidate is src[i],
    with a finite score."""
    return (tgt_best == src) & np.isfinite(tgt_best_score)


def _max(nb: MarginNeighbours) -> ScoredPairs:
    # Both directions' best pairs, best score first; a sentence on either side is used once.
    fwd, bwd = _forward(nb), _backward(nb)
    both = _sorted(
        *(np.concatenate([a, b]) for a, b in ((fwd.src, bwd.src), (fwd.tgt, bwd.tgt), (fwd.score, bwd.score)))
    )
    pairs = zip(both.src.tolist(), both.tgt.tolist())
    keep = np.fromiter(one_to_one(pairs, len(nb.fwd_ids), len(nb.bwd_ids)), dtype=bool, count=len(both))
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
