"""k-nearest-neighbour search of one side's vectors among the other's, by cosine.

In: query vectors (n, d), the other side's vectors (m, d) and an IndexSpec (ems.mining.index_kinds). Out:
(similarities (n, k) float32, ids (n, k) int64), best first. Exact search on the CPU streams both
sides a chunk at a time (`blockwise_knn`); every other kind, and any search on GPUs, goes
through a faiss index (`knn`), optionally re-ranking its candidates by exact cosine.

A query's neighbours and similarities do not depend on which other queries are searched with it
(the staged miner searches a shard's rows, `chunk_rows` at a time): faiss computes inner products
of a batch with BLAS, whose rounding depends on the batch's shape, enough to move mined pairs'
scores (docs/results/throughput.md, "the staged miner"). So exact search takes SLACK more
candidates than it keeps and scores them again one query at a time (`exact_similarities`:
float64, a fixed order), ties broken by id; the CPU IVF kinds choose the lists to probe the same
way (`ivf_search`), since the coarse distances go into the quantised kinds' scores and pick the
candidates.
"""

from __future__ import annotations

from dataclasses import replace

import faiss
import numpy as np
from tqdm import tqdm

from ems.mapped import release_mapped_pages
from ems.mining.index_kinds import (
    DEFAULT_CHUNK_ROWS,
    IndexSpec,
    build_index,
    gpu_count,
    index_bytes,
    normalised_rows,
    resolve_index,
)

SLACK = 8  # candidates searched beyond those kept (neighbours, IVF lists), then scored exactly
EXACT_ELEMENTS = 1 << 20  # products `exact_similarities` forms at a time (8 MiB of float64)


def exact_similarities(queries: np.ndarray, rows: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Inner products (nq, c) float32 of each query row with rows[position[i, j]]: each one summed
    in float64 over the dimensions in a fixed order (numpy's pairwise sum along the last axis)
    and rounded once, so that it is the same whatever else is computed with it (unlike a BLAS
    product, whose rounding depends on the shapes of the batch). `position` entries < 0 give -inf."""
    sims = np.empty(position.shape, dtype=np.float32)
    step = max(1, EXACT_ELEMENTS // max(1, position.shape[1] * rows.shape[1]))
    for start in range(0, len(queries), step):
        where = position[start : start + step]
        gathered = rows[np.maximum(where, 0)]  # (rows, c, d)
        block = np.multiply(gathered, queries[start : start + step, None, :], dtype=np.float64).sum(axis=-1)
        sims[start : start + step] = np.where(where >= 0, block, -np.inf)
    return sims


def best_by_similarity(sims: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best (similarity, id) pairs of (n, c) arrays: highest similarity first, equal
    ones by lower id, missing ones (id -1, similarity -inf) last."""
    order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -sims), axis=1)[:, :k]
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)


def rerank_exact(
    queries: np.ndarray, base: np.ndarray, ids: np.ndarray, k: int, base_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The best k of each query's candidate `ids` (nq, c) by exact inner product between the
    normalised `queries` rows and the normalised `base` rows (read from `base`, which may be
    memory-mapped: only the candidates' rows are; `exact_similarities`). Returns (similarities
    (nq, k), ids (nq, k)), best first, equal ones by id; a missing candidate (id -1) ranks last
    with similarity -inf."""
    wanted = np.unique(ids[ids >= 0])
    rows = np.array(base[wanted], dtype=np.float32, order="C")
    release_mapped_pages(base)
    if not np.isfinite(rows).all():
        raise ValueError(f"{base_name} contains NaN or infinite values")
    faiss.normalize_L2(rows)
    position = np.where(ids >= 0, np.searchsorted(wanted, np.maximum(ids, 0)), -1)
    return best_by_similarity(exact_similarities(queries, rows, position), ids, k)


def cpu_ivf(index):
    """The IndexIVF inside a CPU `index` (an IVF kind of ems.mining.index_kinds), else None (flat,
    HNSW, or an index on GPUs)."""
    return None if gpu_count() > 0 else faiss.try_extract_index_ivf(index)


def ivf_search(ivf, centroids: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`ivf`'s top k for the normalised `queries`, its `nprobe` lists chosen and their coarse
    inner products computed query by query (`exact_similarities` over the quantiser's best
    nprobe + SLACK lists), not by faiss's batched product: the quantised kinds add that inner
    product to each candidate's score, and near ties pick the lists."""
    nprobe = min(ivf.nprobe, ivf.nlist)
    _, lists = ivf.quantizer.search(queries, min(nprobe + SLACK, ivf.nlist))
    coarse, lists = best_by_similarity(exact_similarities(queries, centroids, lists), lists, nprobe)
    if coarse.shape[1] < ivf.nprobe:  # nprobe above the number of lists: pad as faiss does
        pad = ivf.nprobe - coarse.shape[1]
        coarse = np.pad(coarse, ((0, 0), (0, pad)), constant_values=-np.inf)
        lists = np.pad(lists, ((0, 0), (0, pad)), constant_values=-1)
    return ivf.search_preassigned(queries, k, lists, coarse)


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
    and `base` (the indexed vectors) re-ranks them exactly (`rerank_exact`). An IVF index on the
    CPU is searched through `ivf_search` (its lists chosen query by query). Returns
    (similarities (n, k) float32, ids (n, k) int64), best first."""
    if rerank and base is None:
        raise ValueError("rerank needs the indexed vectors (base)")
    ivf = cpu_ivf(index)
    centroids = None if ivf is None else ivf.quantizer.reconstruct_n(0, ivf.nlist)

    def search(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wanted = rerank * k if rerank else k
        sims, ids = index.search(chunk, wanted) if ivf is None else ivf_search(ivf, centroids, chunk, wanted)
        return rerank_exact(chunk, base, ids, k, base_name) if rerank else (sims, ids)

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
    two chunks plus the (n, k) results whatever m is, where a flat index holds all of `base`.
    The best k + SLACK hits are scored again exactly (`rerank_exact`), so a query's results do not
    depend on the chunk it was searched in. Returns (similarities (n, k) float32, ids (n, k)
    int64), best first, equal ones by id; k <= m."""
    candidates = min(k + SLACK, len(base))

    def search(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        heap = faiss.ResultHeap(len(chunk), candidates, keep_max=True)
        for start in range(0, len(base), chunk_rows):
            block = normalised_rows(base_name, base, start, start + chunk_rows)
            found = min(candidates, len(block))
            block_sims, block_ids = faiss.knn(chunk, block, found, metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result(block_sims, block_ids + start)
        heap.finalize()
        return rerank_exact(chunk, base, heap.I, k, base_name)

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
    if spec.kind == "flat":  # on GPUs: k + SLACK candidates scored again exactly, as blockwise_knn does
        return (*exact_knn(queries, built, k, chunk_rows, progress, desc, base, base_name), size)
    return (*knn(queries, built, k, chunk_rows, progress, desc, spec.rerank, base, base_name), size)


def exact_knn(queries, index, k, chunk_rows, progress, desc, base, base_name) -> tuple[np.ndarray, np.ndarray]:
    """Exact search through a flat faiss `index` over `base` (on GPUs): its best k + SLACK of
    each query scored again exactly (`rerank_exact`), as `blockwise_knn` does on the CPU."""
    candidates = min(k + SLACK, len(base))

    def search(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return rerank_exact(chunk, base, index.search(chunk, candidates)[1], k, base_name)

    return _search_in_chunks(queries, k, search, chunk_rows, progress, desc)
