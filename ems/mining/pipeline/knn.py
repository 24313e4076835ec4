"""The k-NN step: one query shard's k nearest neighbours on the other side, by cosine.

In: the shard's vectors (the embed step), the other side's vectors (all shards) and its index
(the index steps; none for exact search). Out, in WORK/knn/<side>/ (src shards search tgt: the
forward direction; tgt shards search src: the backward one):

    <shard>.cos.npy   (n, k) float32   cosines, best first (0 where a neighbour is missing)
    <shard>.ids.npy   (n, k) int64     the neighbours' row numbers on the other side (-1: missing)
    <shard>.avg.npy   (n,)   float32   each row's mean cosine to its k neighbours (the margin's
                                       neighbourhood term, ems.mining.margin.neighbourhood_mean)

Exact search is ems.mining.search.nearest over the other side's shards (streamed a block at a
time on the CPU; a flat index on all GPUs when faiss-gpu sees one), an index is searched with
ems.mining.search.knn (on all GPUs when there are any: ems.mining.index_kinds.to_gpus), re-ranking
IVF-PQ/SQ8 candidates by exact cosine when the spec asks: the same search as ems.mining.margin's.
"""

from __future__ import annotations

from pathlib import Path

from ems.mining.index_kinds import to_gpus
from ems.mining.margin import neighbourhood_mean
from ems.mining.pipeline.files import save_arrays
from ems.mining.pipeline.index import index_spec, merged_index
from ems.mining.pipeline.manifest import mark_done, stage_dir
from ems.mining.pipeline.plan import Plan, parse_unit
from ems.mining.search import knn, nearest

KNN_FILES = ("cos", "ids", "avg")


def knn_path(plan: Plan, unit: str, name: str) -> Path:
    side, shard = parse_unit(unit)
    return stage_dir(plan.work, "knn") / side / f"{shard:05d}.{name}.npy"


def knn_unit(plan: Plan, unit: str) -> None:
    """Search the shard `unit`'s rows among the other side's and write its files."""
    side, shard = parse_unit(unit)
    other, options = plan.other(side), plan.options
    queries, base = plan.vectors(side, shard), plan.all_vectors(other)
    spec = index_spec(plan, other)
    if spec.kind == "flat":
        cos, ids, _ = nearest(queries, base, plan.k, spec, options.chunk_rows, False, side, other)
    else:
        index = to_gpus(merged_index(plan, other), spec)
        cos, ids = knn(queries, index, plan.k, options.chunk_rows, False, side, spec.rerank, base, other)
    avg = neighbourhood_mean(cos, ids)
    arrays = {knn_path(plan, unit, name): array for name, array in zip(KNN_FILES, (cos, ids, avg))}
    mark_done(plan.work, "knn", unit, save_arrays(arrays))
