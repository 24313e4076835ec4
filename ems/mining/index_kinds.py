"""How one side of a mining run is searched, and building that index.

`IndexSpec` (or a spec string such as "ivf-pq:nprobe=32,m=16", in the grammar of ems.specs): exact
flat inner product over chunks of both sides (memory does not grow with the corpus), or an
approximate faiss index over one side at a time: IVFFlat, IVF with 8-bit scalar quantisation (4x
smaller than float32), IVF-PQ (16x smaller by default, its candidates re-ranked by exact cosine),
HNSW. "auto" is exact below 1M indexed rows and AUTO_LARGE_KIND from there. With faiss-gpu and a
GPU, indexes are sharded across all GPUs; the CPU package is the default.

In: an IndexSpec or spec string, and the (n, d) vectors of the side to index. Out: a resolved
IndexSpec (`resolve_index`), a faiss inner-product index over the L2-normalised rows
(`build_index`) and its size in bytes (`index_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import faiss
import numpy as np

from ems.cli import check_choice
from ems.mapped import release_mapped_pages
from ems.specs import SpecKind, integer, parse_spec

DEFAULT_CHUNK_ROWS = 16384  # queries per faiss call: 16k x k results, plus faiss's own blocked search
IVF_MIN_ROWS = 1_000_000  # "auto" index: exact flat search below this many indexed rows, AUTO_LARGE_KIND from there
INDEX_KINDS = ("flat", "ivf", "ivf-sq8", "ivf-pq", "hnsw")
INDEX_TYPES = ("auto", *INDEX_KINDS)


def normalised_rows(name: str, x: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows start:stop of `x` as a C-contiguous float32 copy with unit rows (zero rows stay zero);
    ValueError naming `name` if they hold NaN or infinity."""
    rows = np.array(x[start:stop], dtype=np.float32, order="C", copy=True)
    release_mapped_pages(x)
    if not np.isfinite(rows).all():
        raise ValueError(f"{name} contains NaN or infinite values (in rows {start}-{stop - 1})")
    faiss.normalize_L2(rows)
    return rows


def gpu_count() -> int:
    """The number of GPUs faiss sees (0 with the CPU package)."""
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
      a fraction of the lists, so the search cost per query stays ~nprobe * n / n_lists rows (nlist / 8
      made CPU search take hours). Hashed n-gram vectors are nearly isotropic, a hard case for any IVF;
      learned embeddings cluster, and nprobe 32 finds over 90 % of their exact neighbours (measured with
      benchmarks/mining_benchmark.py and benchmarks/mining_recall_cached.py: docs/results/throughput.md).
      Raise nprobe (e.g. "ivf-sq8:nprobe=128") where recall matters more than time, and measure on
      your own encoder's embeddings.
    - pq_m: d / 4 sub-quantisers (16x smaller than float32), or the largest divisor of d below that.
    - train_size: rows sampled to train the coarse quantiser and codebooks: 64 per list, at least
      10,000 (PQ's 256 centroids per sub-quantiser), at most n.
    - rerank: ivf-pq and ivf-sq8 only: search rerank * k candidates in the index, then re-rank them
      by their exact cosine, read from the (memory-mapped) input vectors. 0 = none. Default:
      DEFAULT_PQ_RERANK for ivf-pq, 0 for ivf-sq8. PQ cosines are coarse and margin scores are
      ratios of cosines: re-ranking recovers much of what PQ loses, at no extra CPU time. SQ8 needs
      none: about IVFFlat's recall with a 3.6x smaller index, which is why "auto" picks it from
      IVF_MIN_ROWS rows (measured: docs/results/throughput.md).
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
        if self.rerank is not None and (
            isinstance(self.rerank, bool) or not isinstance(self.rerank, int) or self.rerank < 0
        ):
            raise ValueError(f"index setting rerank must be an integer >= 0, got {self.rerank!r}")


DEFAULT_NPROBE = 32
PQ_CENTROIDS = 256  # 8 bits per sub-quantiser: faiss trains 256 centroids on as many rows at least
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
INDEX_SPEC_KINDS = {kind: SpecKind(options={key: integer for key in SPEC_KEYS[kind]}) for kind in INDEX_TYPES}


def parse_index_spec(text: str) -> IndexSpec:
    """ "KIND[:key=value,...]" (e.g. "ivf-pq:nprobe=32,m=16", "hnsw:ef_search=128") -> IndexSpec,
    read by ems.specs.parse_spec, the parser of encoder specs too. KIND is one of INDEX_TYPES;
    SPEC_KEYS lists the keys each kind takes; values are integers. One ValueError naming the
    spec, what is wrong and what is allowed."""
    kind, _, settings = parse_spec(text, "index", INDEX_SPEC_KINDS)
    values = {{"m": "pq_m" if kind == "ivf-pq" else "hnsw_m"}.get(key, key): value for key, value in settings.items()}
    try:
        return IndexSpec(kind, **values)
    except ValueError as error:
        raise ValueError(f"index {text!r}: {error}") from None


def as_index_spec(index: str | IndexSpec, nprobe: int | None = None) -> IndexSpec:
    """`index` as an IndexSpec (a string is parsed by `parse_index_spec`); a given `nprobe` (the
    older keyword of `mine` and `build_index`) overrides the spec's."""
    spec = index if isinstance(index, IndexSpec) else parse_index_spec(index)
    return spec if nprobe is None else replace(spec, nprobe=nprobe)


def chosen_kind(spec: IndexSpec, n: int) -> str:
    """The index kind `spec` gives for n indexed rows: its own, or for "auto" flat below
    IVF_MIN_ROWS rows and AUTO_LARGE_KIND from there."""
    if spec.kind != "auto":
        return spec.kind
    return AUTO_LARGE_KIND if n >= IVF_MIN_ROWS else "flat"


def resolve_index(spec: IndexSpec, n: int, dim: int) -> IndexSpec:
    """`spec` for an index over n rows of dimension dim: "auto" replaced by the kind it picks and
    every setting the kind uses filled in with its default (see IndexSpec)."""
    kind = chosen_kind(spec, n)
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
    return replace(
        spec,
        kind=kind,
        n_lists=n_lists,
        nprobe=min(n_lists, spec.nprobe or DEFAULT_NPROBE),
        pq_m=pq_m,
        train_size=min(n, spec.train_size or max(64 * n_lists, 10_000)),
        rerank=rerank,
    )


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
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, dim, spec.n_lists, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
    else:
        index = faiss.IndexIVFPQ(quantizer, dim, spec.n_lists, spec.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
    index.nprobe = spec.nprobe
    return index


def to_gpus(index, spec: IndexSpec):
    """`index` split across every GPU faiss sees (each GPU holds 1/G of the rows: sharded, not
    replicated), or `index` itself when there is none or its kind has no GPU version (hnsw).
    ivf-pq uses float16 lookup tables on the GPU (faiss needs them for many sub-quantisers);
    other kinds keep float32 vectors, since margin scores are ratios of close cosines."""
    if gpu_count() == 0 or spec.kind == "hnsw":
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
    index = to_gpus(trained_index(spec, vectors), spec)
    add_rows(index, name, vectors, chunk_rows)
    return index


def trained_index(spec: IndexSpec, vectors: np.ndarray):
    """An empty faiss index of the resolved `spec` over (n, d) `vectors`' dimension, trained (IVF
    kinds) on `spec.train_size` of their rows sampled evenly at random (seed 0), L2-normalised.
    `vectors` may be memory-mapped, or any array-like whose integer-array indexing gives rows."""
    n, dim = vectors.shape
    index = empty_index(spec, dim)
    if spec.train_size is not None:
        needed = max(spec.n_lists, PQ_CENTROIDS if spec.kind == "ivf-pq" else 0)
        if spec.train_size < needed:
            raise ValueError(
                f"index {spec.kind} with {spec.n_lists} lists needs at least {needed} rows to train on; "
                f"the side has {n} (train_size {spec.train_size}): use fewer lists, or flat"
            )
        sample = np.sort(np.random.default_rng(0).choice(n, size=spec.train_size, replace=False))
        training = np.array(vectors[sample], dtype=np.float32, order="C")
        release_mapped_pages(vectors)
        faiss.normalize_L2(training)
        index.train(training)
    return index


def add_rows(index, name: str, vectors: np.ndarray, chunk_rows: int = DEFAULT_CHUNK_ROWS, first_id: int | None = None):
    """Add the L2-normalised rows of `vectors` to `index`, `chunk_rows` at a time: with ids
    0, 1, ... (faiss's own numbering, `first_id` None), or first_id, first_id + 1, ... (an IVF
    index populated one shard at a time)."""
    for start in range(0, len(vectors), chunk_rows):
        rows = normalised_rows(name, vectors, start, start + chunk_rows)
        if first_id is None:
            index.add(rows)
        else:
            index.add_with_ids(rows, np.arange(first_id + start, first_id + start + len(rows), dtype=np.int64))


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
