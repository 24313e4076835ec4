"""Margin-based bitext mining (Artetxe & Schwenk 2019, as in LASER and the EMS paper's BUCC table).

Embeddings in, scored candidate pairs out: k-nearest neighbours with faiss, margin scores over
k neighbours each side, and the four retrieval modes (forward, backward, max, intersect).
Neighbour search (`IndexSpec`, or a string such as "ivf-pq:nprobe=32,m=16"): exact flat inner
product over chunks of both sides (memory does not grow with the corpus), or an approximate index
over one side at a time: IVFFlat, IVF with 8-bit scalar quantisation (4x smaller than float32),
IVF-PQ (16x smaller by default, its candidates re-ranked by exact cosine), HNSW. "auto" is exact
below 1M indexed rows and AUTO_LARGE_KIND from there. With faiss-gpu and a GPU, indexes are
sharded across all GPUs; the CPU package is the default. Shared by the BUCC task, the large-scale
retrieval task and the `python -m eval.mine` command.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import faiss
import numpy as np
from tqdm import tqdm

from ems.mapped import release_mapped_pages

DEFAULT_K = 4
DEFAULT_CHUNK_ROWS = 16384  # queries per faiss call: 16k x k results, plus faiss's own blocked search
IVF_MIN_ROWS = 1_000_000  # "auto" index: exact flat search below this many indexed rows, AUTO_LARGE_KIND from there


def _ratio(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos / neighbourhood


def _distance(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos - neighbourhood


def _absolute(cos: np.ndarray, neighbourhood: np.ndarray) -> np.ndarray:
    return cos


MARGINS = {"ratio": _ratio, "distance": _distance, "absolute": _absolute}
MODES = ("forward", "backward", "max", "intersect")
INDEX_KINDS = ("flat", "ivf", "ivf-sq8", "ivf-pq", "hnsw")
INDEX_TYPES = ("auto", *INDEX_KINDS)


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


def _gpus() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


@dataclass(frozen=True)
class IndexSpec:
    """How to search one side of a mining run: an index kind and its settings.

    kind: "flat" (exact), "ivf" (IVFFlat: full float32 vectors in inverted lists), "ivf-sq8" (IVF
    with each vector stored as d bytes, 8-bit scalar quantised), "ivf-pq" (IVF with each vector
    stored as `pq_m` bytes, product-quantised, 8 bits per sub-quantiser), "hnsw" (HNSW graph over
    full float32 vectors, inner product), or "auto": flat below IVF_MIN_ROWS indexed rows,
    AUTO_LARGE_KIND from there. A setting left None takes the default `resolve_index` computes for
    the side's size n and dimension d:

    - n_lists: round(4 sqrt(n)), at most n / 39 (faiss wants 39 training points per list).
    - nprobe: DEFAULT_NPROBE lists searched per query (at most n_lists), a fixed number rather than
      a fraction of the lists, so the search cost per query stays ~nprobe * n / n_lists rows.
      Measured with benchmarks/mining_benchmark.py at 900k x 900k real sentences, hashed
      character-trigram embeddings, d = 64, 3795 lists, both directions (recall@4 against exact
      search on 10k sampled queries each way; CPU seconds on 2 AVX2 cores): IVFFlat nprobe 32:
      recall 52.8 / 48.6 %, 334 CPU s; nprobe 128: 74.0 / 71.7 %, 1078 CPU s (nlist / 8 = 474
      would cost ~4000). Those vectors are nearly isotropic, a hard case for any IVF. Learned
      embeddings cluster: on the 178k cached multilingual-e5-small vectors (d = 384, 1688 lists;
      benchmarks/mining_recall_cached.py) nprobe 8 / 32 / 128 reach recall@4 84 / 94 / 98 %
      (IVFFlat) and 83 / 92 / 97 % (SQ8), on 165k mUSE vectors 87 / 95 / 99 % and 86 / 94 / 97 %.
      Raise nprobe (e.g. "ivf-sq8:nprobe=128") where recall matters more than time, and measure on
      your own encoder's embeddings.
    - pq_m: d / 4 sub-quantisers (16x smaller than float32), or the largest divisor of d below that.
    - train_size: rows sampled to train the coarse quantiser and codebooks: 64 per list, at least
      10,000 (PQ's 256 centroids per sub-quantiser), at most n.
    - rerank: ivf-pq and ivf-sq8 only: search rerank * k candidates in the index, then re-rank them
      by their exact cosine, read from the (memory-mapped) input vectors. 0 = none. Default:
      DEFAULT_PQ_RERANK for ivf-pq, 0 for ivf-sq8. PQ cosines are coarse and margin scores are
      ratios of cosines: on the benchmark above (m = 16, nprobe 32), PQ without re-ranking found
      29 % of the exact neighbours and agreed with exact margin mining on 24 % of best pairs
      (mean margin error 0.037); re-ranking 16 candidates gave 43 % and 42 % (0.030) at no extra
      CPU time (298 vs 312 s). SQ8 needs none: 52.4 / 48.2 % recall against IVFFlat's
      52.8 / 48.6 %, with a 3.6x smaller index (63 vs 228 MiB), which is why "auto" picks it
      from IVF_MIN_ROWS rows.
    hnsw_m (graph degree), ef_construction and ef_search (candidate list sizes when building and
    searching; at least k is used) are HNSW's usual settings.
    """

    kind: str = "auto"
    n_lists: int | None = None
    nprobe: int | None = None
    pq_m: int | None = None
    train_size: int | None = None
    rerank: int | None = None
    hnsw_m: int = 32
    ef_construction: int = 40
    ef_search: int = 64

    def __post_init__(self) -> None:
        check_choice("index", self.kind, INDEX_TYPES)
        for name in ("n_lists", "nprobe", "pq_m", "train_size", "hnsw_m", "ef_construction", "ef_search"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"index setting {name} must be an integer >= 1, got {value!r}")
        if self.rerank is not None and (isinstance(self.rerank, bool) or not isinstance(self.rerank, int) or self.rerank < 0):
            raise ValueError(f"index setting rerank must be an integer >= 0, got {self.rerank!r}")


DEFAULT_NPROBE = 32
DEFAULT_PQ_RERANK = 4
AUTO_LARGE_KIND = "ivf-sq8"
# Spec-string keys each kind takes ("m" is pq_m for ivf-pq, hnsw_m for hnsw); auto takes its large kind's.
SPEC_KEYS = {
    "flat": (),
    "ivf": ("n_lists", "nprobe", "train_size"),
    "ivf-sq8": ("n_lists", "nprobe", "train_size", "rerank"),
    "ivf-pq": ("n_lists", "nprobe", "m", "train_size", "rerank"),
    "hnsw": ("m", "ef_construction", "ef_search"),
}
SPEC_KEYS["auto"] = SPEC_KEYS[AUTO_LARGE_KIND]


def parse_index_spec(text: str) -> IndexSpec:
    """"KIND[:key=value,...]" (e.g. "ivf-pq:nprobe=32,m=16", "hnsw:ef_search=128") -> IndexSpec.
    KIND is one of INDEX_TYPES; SPEC_KEYS lists the keys each kind takes; values are integers.
    One ValueError naming the spec, what is wrong and what is allowed."""
    kind, _, settings = text.strip().partition(":")
    if kind not in INDEX_TYPES:
        raise ValueError(f"index {text!r}: unknown kind {kind!r}; expected one of {', '.join(INDEX_TYPES)}")
    allowed = SPEC_KEYS[kind]
    values: dict[str, int] = {}
    for item in filter(None, settings.split(",")):
        key, equals, value = item.partition("=")
        key = key.strip()
        if key not in allowed or not equals:
            takes = f"takes {', '.join(allowed)}" if allowed else "takes no settings"
            raise ValueError(f"index {text!r}: bad setting {item!r}; {kind} {takes} (key=integer)")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"index {text!r}: {key} must be an integer, got {value!r}") from None
        values[{"m": "pq_m" if kind == "ivf-pq" else "hnsw_m"}.get(key, key)] = number
    try:
        return IndexSpec(kind, **values)
    except ValueError as error:
        raise ValueError(f"index {text!r}: {error}") from None


def as_index_spec(index: str | IndexSpec, nprobe: int | None = None) -> IndexSpec:
    """`index` as an IndexSpec (a string is parsed by `parse_index_spec`); a given `nprobe` (the
    older keyword of `mine` and `build_index`) overrides the spec's."""
    spec = index if isinstance(index, IndexSpec) else parse_index_spec(index)
    return spec if nprobe is None else replace(spec, nprobe=nprobe)


def resolve_index(spec: IndexSpec, n: int, dim: int) -> IndexSpec:
    """`spec` for an index over n rows of dimension dim: "auto" replaced by the kind it picks and
    every setting the kind uses filled in with its default (see IndexSpec)."""
    kind = spec.kind
    if kind == "auto":
        kind = AUTO_LARGE_KIND if n >= IVF_MIN_ROWS else "flat"
    if kind in ("flat", "hnsw"):
        return replace(spec, kind=kind, n_lists=None, nprobe=None, pq_m=None, train_size=None, rerank=0)
    n_lists = spec.n_lists or max(1, min(round(4 * np.sqrt(n)), n // 39))
    pq_m = None
    if kind == "ivf-pq":
        pq_m = spec.pq_m or max(m for m in range(1, max(1, dim // 4) + 1) if dim % m == 0)
        if dim % pq_m:
            raise ValueError(f"index setting m={pq_m} must divide the dimension {dim}")
    rerank = spec.rerank if spec.rerank is not None else (DEFAULT_PQ_RERANK if kind == "ivf-pq" else 0)
    if kind == "ivf" and rerank:
        raise ValueError("index setting rerank applies to ivf-sq8 and ivf-pq (ivf stores exact vectors)")
    return replace(spec, kind=kind, n_lists=n_lists, nprobe=min(n_lists, spec.nprobe or DEFAULT_NPROBE), pq_m=pq_m,
                   train_size=min(n, spec.train_size or max(64 * n_lists, 10_000)), rerank=rerank)  # fmt: skip


def empty_index(spec: IndexSpec, dim: int):
    """An untrained, empty faiss inner-product index for a resolved `spec`."""
    if spec.kind == "flat":
        return faiss.IndexFlatIP(dim)
    if spec.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, spec.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = spec.ef_construction
        index.hnsw.efSearch = spec.ef_search
        return index
    quantizer = faiss.IndexFlatIP(dim)
    if spec.kind == "ivf":
        index = faiss.IndexIVFFlat(quantizer, dim, spec.n_lists, faiss.METRIC_INNER_PRODUCT)
    elif spec.kind == "ivf-sq8":
        index = faiss.IndexIVFScalarQuantizer(quantizer, dim, spec.n_lists, faiss.ScalarQuantizer.QT_8bit,
                                              faiss.METRIC_INNER_PRODUCT)  # fmt: skip
    else:
        index = faiss.IndexIVFPQ(quantizer, dim, spec.n_lists, spec.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
    index.nprobe = spec.nprobe
    return index


def to_gpus(index, spec: IndexSpec):
    """`index` split across every GPU faiss sees (each GPU holds 1/G of the rows: sharded, not
    replicated), or `index` itself when there is none or its kind has no GPU version (hnsw).
    ivf-pq uses float16 lookup tables on the GPU (faiss needs them for many sub-quantisers);
    other kinds keep float32 vectors, since margin scores are ratios of close cosines."""
    if _gpus() == 0 or spec.kind == "hnsw":
        return index
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True
    options.useFloat16 = spec.kind == "ivf-pq"
    return faiss.index_cpu_to_all_gpus(index, co=options)


def build_index(
    name: str,
    vectors: np.ndarray,
    index_type: str | IndexSpec = "auto",
    nprobe: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
):
    """faiss inner-product index over the L2-normalised rows of `vectors` (n, d), added
    `chunk_rows` at a time so that the index holds the only normalised copy.

    `index_type` is an IndexSpec or a spec string ("flat", "ivf", "ivf-pq:nprobe=16,m=32", ...;
    see `parse_index_spec`); `nprobe`, if given, overrides the spec's. IVF kinds are trained on
    `train_size` rows sampled evenly at random (seed 0). Sharded across all GPUs when faiss was
    built with GPU support and sees one (`to_gpus`).
    """
    n, dim = vectors.shape
    spec = resolve_index(as_index_spec(index_type, nprobe), n, dim)
    index = empty_index(spec, dim)
    if spec.train_size is not None:
        sample = np.sort(np.random.default_rng(0).choice(n, size=spec.train_size, replace=False))
        training = np.array(vectors[sample], dtype=np.float32, order="C")
        release_mapped_pages(vectors)
        faiss.normalize_L2(training)
        index.train(training)
    index = to_gpus(index, spec)
    for start in range(0, n, chunk_rows):
        index.add(normalised_rows(name, vectors, start, start + chunk_rows))
    return index


def index_bytes(index) -> int:
    """Bytes a CPU faiss index of this module's kinds holds for its rows: vectors or codes, their
    ids in the inverted lists, HNSW links, the coarse quantiser and codebooks (what
    faiss.serialize_index would write, without making that copy)."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexHNSW):
        hnsw = index.hnsw
        return index_bytes(index.storage) + 4 * hnsw.neighbors.size() + 8 * hnsw.offsets.size() + 4 * hnsw.levels.size()
    if isinstance(index, faiss.IndexIVF):
        codebooks = 4 * index.pq.centroids.size() if isinstance(index, faiss.IndexIVFPQ) else 0
        if isinstance(index, faiss.IndexIVFScalarQuantizer):
            codebooks = 4 * index.sq.trained.size()
        return index.ntotal * (index.code_size + 8) + index_bytes(index.quantizer) + codebooks
    return index.ntotal * index.code_size  # flat kinds


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
    if spec.kind == "flat" and _gpus() == 0:
        return (*blockwise_knn(queries, base, k, chunk_rows, progress, desc, base_name), 0)
    if spec.kind == "hnsw":
        spec = replace(spec, ef_search=max(spec.ef_search, k))  # at least k candidates
    built = build_index(base_name, base, spec, chunk_rows=chunk_rows)
    size = index_bytes(built) if _gpus() == 0 else 0
    return (*knn(queries, built, k, chunk_rows, progress, desc, spec.rerank, base, base_name), size)


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
