"""k-nearest-neighbour search of one side's vectors among the other's, by cosine.

In: query vectors (n, d), the other side's vectors (m, d) and an IndexSpec (ems.mining.index). Out:
(similarities (n, k) float32, ids (n, k) int64), best first. Exact search on the CPU streams both
sides a chunk at a time (`blockwise_knn`); every other kind, and any search on GPUs, goes
through a faiss index (`knn`), optionally re-ranking its candidates by exact cosine.
"""

from __future__ import annotations

from dataclasses import replace

import faiss
import numpy as np
from tqdm import tqdm

from ems.mapped import release_mapped_pages
from ems.mining.index import (
    DEFAULT_CHUNK_ROWS,
    IndexSpec,
    build_index,
    gpu_count,
    index_bytes,
    normalised_rows,
    resolve_index,
)


def rerank_exact(
    queries: np.ndarray, base: np.ndarray, ids: np.ndarray, k: int, base_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The best k of each query's candidate `ids` (nq, c) by exact inner product between the
    normalised `queries` rows and the normalised `base` rows (read from `base`, which may be
    memory-mapped: only the candidates' rows are). Returns (similarities (nq, k), ids (nq, k)),
    best first; a missing candidate (id -1) ranks last with similarity -inf."""
    wanted = np.unique(ids[ids >= 0])
    rows = np.array(base[wanted], dtype=np.float32, order="C")
    release_mapped_pages(base)
    if not np.isfinite(rows).all():
        raise ValueError(f"{base_name} contains NaN or infinite values")
    faiss.normalize_L2(rows)
    position = np.searchsorted(wanted, np.maximum(ids, 0))
    sims = np.full(ids.shape, -np.inf, dtype=np.float32)
    for column in range(ids.shape[1]):  # one (nq, d) gather at a time, not (nq, c, d)
        found = ids[:, column] >= 0
        sims[found, column] = np.einsum("ij,ij->i", queries[found], rows[position[found, column]])
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)


def knn(
    queries: np.ndarray,
    index,
    k: int,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool = False,
    desc: str = "queries",
    rerank: int = 0,
    base: np.ndarray | None = None,
    base_name: str = "base",
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k inner products of the L2-normalised rows of `queries` (n, d) against a faiss
    `index`, `chunk_rows` queries per call. With rerank > 0 the index gives rerank * k candidates
    and `base` (the indexed vectors) re-ranks them exactly (`rerank_exact`). Returns
    (similarities (n, k) float32, ids (n, k) int64), best first."""
    if rerank and base is None:
        raise ValueError("rerank needs the indexed vectors (base)")

    def search(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not rerank:
            return index.search(chunk, k)
        _, candidates = index.search(chunk, rerank * k)
        return rerank_exact(chunk, base, candidates, k, base_name)

    return _search_in_chunks(queries, k, search, chunk_rows, progress, desc)


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
    spec: IndexSpec,
    chunk_rows: int,
    progress: bool,
    desc: str,
    base_name: str,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Top-k of `queries` among `base` rows by cosine: exact search on the CPU streams both sides
    (`blockwise_knn`); every other kind, and any search on GPUs, goes through a faiss index over
    `base`. Returns (similarities, ids, bytes of that index: 0 without one, or on GPUs)."""
    spec = resolve_index(spec, len(base), base.shape[1])
    if spec.kind == "flat" and gpu_count() == 0:
        return (*blockwise_knn(queries, base, k, chunk_rows, progress, desc, base_name), 0)
    if spec.kind == "hnsw":
        spec = replace(spec, ef_search=max(spec.ef_search, k))  # at least k candidates
    built = build_index(base_name, base, spec, chunk_rows=chunk_rows)
    size = index_bytes(built) if gpu_count() == 0 else 0
    return (*knn(queries, built, k, chunk_rows, progress, desc, spec.rerank, base, base_name), size)
