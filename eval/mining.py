"""Margin-based bitext mining (Artetxe & Schwenk 2019, as in LASER and the EMS paper's BUCC table).

Embeddings in, scored candidate pairs out: exact k-nearest neighbours with faiss (flat inner
product over chunks of both sides, so memory does not grow with the corpus; an IVF index for
corpora over ~1M sentences; GPU when faiss sees one), margin scores over k neighbours each side, and the four retrieval modes
(forward, backward, max, intersect). Shared by the BUCC task, the large-scale retrieval task and
the `python -m eval.mine` command.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import faiss
import numpy as np
from tqdm import tqdm

DEFAULT_K = 4
DEFAULT_CHUNK_ROWS = 16384  # queries per faiss call: 16k x k results, plus faiss's own blocked search
IVF_MIN_ROWS = 1_000_000  # "auto" index: exact flat search below this many indexed rows, IVF above


def _ratio(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos / neighbourhood


def _distance(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos - neighbourhood


def _absolute(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos


MARGINS = {"ratio": _ratio, "distance": _distance, "absolute": _absolute}
MODES = ("forward", "backward", "max", "intersect")
INDEX_TYPES = ("auto", "flat", "ivf")


def check_choice(name: str, value: str, choices) -> None:
    """Raise ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def check_embeddings(name: str, x: np.ndarray) -> np.ndarray:
    """`x` as an array, with a clear ValueError unless it is a non-empty 2-D real array (a
    memory-mapped .npy stays memory-mapped: rows are read chunk by chunk)."""
    x = x if isinstance(x, np.ndarray) else np.asarray(x)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty 2-D (n, d) array, got shape {x.shape}")
    if x.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real numeric array, got dtype {x.dtype}")
    return x


def normalised_rows(name: str, x: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows start:stop of `x` as a C-contiguous float32 copy with unit rows (zero rows stay zero);
    ValueError naming `name` if they hold NaN or infinity."""
    rows = np.array(x[start:stop], dtype=np.float32, order="C", copy=True)
    release_mapped_pages(x)
    if not np.isfinite(rows).all():
        raise ValueError(f"{name} contains NaN or infinite values (in rows {start}-{stop - 1})")
    faiss.normalize_L2(rows)
    return rows


def release_mapped_pages(x: np.ndarray) -> None:
    """Unmap the pages that reading a read-only memory-mapped `x` (np.load(..., mmap_mode="r"))
    brought into this process. They stay in the OS page cache, so a later read is a cheap minor
    fault, but the process's resident set (what a SLURM memory limit watches) no longer grows
    with the size of the embedding file as chunks stream through. Anything else: no-op."""
    mapping = getattr(x, "_mmap", None)  # np.memmap's mapping; numpy has no public handle for it
    if isinstance(x, np.memmap) and x.mode == "r" and mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)  # read-only shared mapping: nothing can be lost


def _gpus() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def resolve_index_type(index_type: str, n: int) -> str:
    """"flat" or "ivf" for an index over `n` rows ("auto": ivf from IVF_MIN_ROWS rows)."""
    check_choice("index", index_type, INDEX_TYPES)
    if index_type == "auto":
        return "ivf" if n >= IVF_MIN_ROWS else "flat"
    return index_type


def build_index(
    name: str, vectors: np.ndarray, index_type: str = "auto", nprobe: int | None = None, chunk_rows: int = DEFAULT_CHUNK_ROWS
):
    """faiss inner-product index over the L2-normalised rows of `vectors` (n, d), added
    `chunk_rows` at a time so that the index holds the only normalised copy.

    "flat" is exact; "ivf" clusters into ~4 sqrt(n) lists and searches `nprobe` of them (default
    1/8 of the lists, at least 16); "auto" picks ivf from IVF_MIN_ROWS rows. Moved to all GPUs
    when faiss was built with GPU support and sees one.
    """
    n, dim = vectors.shape
    if resolve_index_type(index_type, n) == "flat":
        index = faiss.IndexFlatIP(dim)
    else:
        n_lists = max(1, min(int(4 * np.sqrt(n)), n // 39))  # faiss wants >= 39 training points per list
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, n_lists, faiss.METRIC_INNER_PRODUCT)
        sample = np.sort(np.random.default_rng(0).choice(n, size=min(n, 64 * n_lists), replace=False))
        training = np.array(vectors[sample], dtype=np.float32, order="C")
        release_mapped_pages(vectors)
        faiss.normalize_L2(training)
        index.train(training)
        index.nprobe = min(n_lists, nprobe or max(16, n_lists // 8))
    if _gpus() > 0:
        index = faiss.index_cpu_to_all_gpus(index)
    for start in range(0, n, chunk_rows):
        index.add(normalised_rows(name, vectors, start, start + chunk_rows))
    return index


def knn(
    queries: np.ndarray,
    index,
    k: int,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    desc: str = "queries",
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k inner products of the L2-normalised rows of `queries` (n, d) against a faiss
    `index`, `chunk_rows` queries per call. Returns (similarities (n, k) float32, ids (n, k)
    int64), best first."""
    return _search_in_chunks(queries, k, lambda chunk: index.search(chunk, k), chunk_rows, progress, desc)


def blockwise_knn(
    queries: np.ndarray,
    base: np.ndarray,
    k: int,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    desc: str = "queries",
    base_name: str = "base",
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products of the L2-normalised rows of `queries` (n, d) against those of
    `base` (m, d), without an index: each chunk of queries meets `base` one chunk of rows at a
    time (faiss.knn) and the hits are merged into a running top-k (faiss.ResultHeap). Memory is
    two chunks plus the (n, k) results whatever m is, where a flat index holds all of `base`;
    the arithmetic is the same. Returns (similarities (n, k) float32, ids (n, k) int64), best
    first; k <= m."""

    def search(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        heap = faiss.ResultHeap(len(chunk), k, keep_max=True)
        for start in range(0, len(base), chunk_rows):
            block = normalised_rows(base_name, base, start, start + chunk_rows)
            block_sims, block_ids = faiss.knn(chunk, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result(block_sims, block_ids + start)
        heap.finalize()
        return heap.D, heap.I

    return _search_in_chunks(queries, k, search, chunk_rows, progress, desc)


def _search_in_chunks(queries, k, search, chunk_rows, progress, desc) -> tuple[np.ndarray, np.ndarray]:
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    sims = np.empty((len(queries), k), dtype=np.float32)
    ids = np.empty((len(queries), k), dtype=np.int64)
    for start in tqdm(range(0, len(queries), chunk_rows), desc=desc, unit="chunk", disable=not progress):
        chunk = normalised_rows(desc, queries, start, start + chunk_rows)
        sims[start : start + len(chunk)], ids[start : start + len(chunk)] = search(chunk)
    return sims, ids


def nearest(
    queries: np.ndarray,
    base: np.ndarray,
    k: int,
    index_type: str,
    nprobe: int | None,
    chunk_rows: int,
    progress: bool,
    desc: str,
    base_name: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of `queries` among `base` rows by cosine: exact search on the CPU streams both sides
    (`blockwise_knn`); IVF, and any search on GPUs, goes through a faiss index."""
    if resolve_index_type(index_type, len(base)) == "flat" and _gpus() == 0:
        return blockwise_knn(queries, base, k, chunk_rows, progress, desc, base_name)
    return knn(queries, build_index(base_name, base, index_type, nprobe, chunk_rows), k, chunk_rows, progress, desc)


@dataclass
class MarginNeighbours:
    """k nearest neighbours both ways with their margin scores.

    fwd_ids[i] are the k candidates in y for x[i], fwd_scores[i] their margin scores (best first
    by cosine); bwd_* the same from y to x. avg_x[i] / avg_y[j] are the mean cosines of x[i] /
    y[j] to its k neighbours on the other side."""

    fwd_ids: np.ndarray
    fwd_scores: np.ndarray
    bwd_ids: np.ndarray
    bwd_scores: np.ndarray
    avg_x: np.ndarray
    avg_y: np.ndarray


def margin_neighbours(
    x: np.ndarray,
    y: np.ndarray,
    k: int = DEFAULT_K,
    margin: str = "ratio",
    index_type: str = "auto",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    nprobe: int | None = None,
) -> MarginNeighbours:
    """Margin scores of each x row against its k nearest y rows, and of each y row against its
    k nearest x rows: margin(cos(x, y), (avg_x + avg_y) / 2), where avg_* is a sentence's mean
    cosine to its k neighbours (ratio: cos / that, distance: cos - that, absolute: cos).
    k is capped at the size of the smaller side; `nprobe` is passed to `build_index`."""
    check_choice("margin", margin, MARGINS)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    x, y = check_embeddings("x", x), check_embeddings("y", y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same dimension, got {x.shape[1]} and {y.shape[1]}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    k = min(k, len(x), len(y))
    # Exact search holds two chunks at a time; an IVF index holds one side (one index alive at a time).
    fwd_cos, fwd_ids = nearest(x, y, k, index_type, nprobe, chunk_rows, progress, "x", "y")
    bwd_cos, bwd_ids = nearest(y, x, k, index_type, nprobe, chunk_rows, progress, "y", "x")
    # IVF may return fewer than k hits (id -1); a missing neighbour adds nothing to the average.
    fwd_cos[fwd_ids < 0], bwd_cos[bwd_ids < 0] = 0.0, 0.0
    avg_x, avg_y = fwd_cos.mean(axis=1), bwd_cos.mean(axis=1)
    score = MARGINS[margin]
    fwd_scores = score(fwd_cos, (avg_x[:, None] + avg_y[fwd_ids]) / 2)
    bwd_scores = score(bwd_cos, (avg_y[:, None] + avg_x[bwd_ids]) / 2)
    fwd_scores[fwd_ids < 0], bwd_scores[bwd_ids < 0] = -np.inf, -np.inf
    return MarginNeighbours(fwd_ids, fwd_scores, bwd_ids, bwd_scores, avg_x, avg_y)


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
    both = _sorted(*(np.concatenate([a, b]) for a, b in ((fwd.src, bwd.src), (fwd.tgt, bwd.tgt), (fwd.score, bwd.score))))
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
    index_type: str = "auto",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    nprobe: int | None = None,
) -> ScoredPairs:
    """Candidate pairs between embeddings x (n, d) and y (m, d), best margin score first.

    forward: each x row with its best y; backward: each y row with its best x; intersect: pairs
    both directions agree on; max: both directions' pairs, greedily keeping the best-scoring
    pair of each sentence. No threshold is applied (see `best_threshold`)."""
    check_choice("mode", mode, RETRIEVAL)
    neighbours = margin_neighbours(x, y, k, margin, index_type, chunk_rows, progress, nprobe)
    return RETRIEVAL[mode](neighbours)


def precision_recall_f1(predicted: set, gold: set) -> dict:
    """P, R, F1 in percent of a predicted set of pairs against a gold set (0 where undefined)."""
    true_positives = len(predicted & gold)
    precision = 100.0 * true_positives / len(predicted) if predicted else 0.0
    recall = 100.0 * true_positives / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_predicted": len(predicted), "n_gold": len(gold)}


def best_threshold(scores: list[float] | np.ndarray, is_gold: list[bool] | np.ndarray, n_gold: int) -> float:
    """The score threshold that maximises F1 when pairs with score >= threshold are kept.

    `scores` are candidate scores sorted best first, `is_gold` whether each candidate is a gold
    pair, `n_gold` the size of the gold set. As in LASER's BUCC script the threshold lies midway
    between the last kept and the first dropped candidate. +inf if no candidate is gold."""
    scores = np.asarray(scores, dtype=np.float64)
    is_gold = np.asarray(is_gold, dtype=bool)
    if len(scores) != len(is_gold):
        raise ValueError(f"scores and is_gold differ in length: {len(scores)} and {len(is_gold)}")
    if np.any(np.diff(scores) > 0):
        raise ValueError("scores must be sorted best first")
    if n_gold < 1 or not is_gold.any():
        return float("inf")
    true_positives = np.cumsum(is_gold)
    kept = np.arange(1, len(scores) + 1)
    f1 = 2 * true_positives / (kept + n_gold)  # = 2PR / (P + R)
    # A threshold cannot split candidates with equal scores: cut only where the score drops.
    f1[np.append(scores[:-1] == scores[1:], False)] = -1.0
    best = int(f1.argmax())
    if best + 1 == len(scores):
        return float(scores[best])
    return float((scores[best] + scores[best + 1]) / 2)
