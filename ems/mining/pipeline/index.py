"""The index steps: one faiss index over a side, built shard by shard, for the other side's queries.

In: the side's vectors (the embed step's shards) and --index (ems.mining.index_kinds.IndexSpec, resolved
for the side's size and dimension). Out, in WORK/index/<side>/:

    train     trained.index       the empty index, its coarse quantiser (and SQ/PQ codebooks)
                                  trained on a seeded sample of the side's rows (seed 0, as
                                  ems.mining.index_kinds.build_index samples them)
    populate  <shard>.index       the trained index holding one shard's rows, under their row
                                  numbers on the side
    merge     merged/             IVF: merged.index + merged.ivfdata, the shards' inverted lists
                                  merged into on-disk lists (faiss.contrib.ondisk), which the k-NN
                                  step memory-maps: no step holds all of a side's vectors in memory.
                                  HNSW (a graph faiss cannot merge): built from all rows here.

A side searched exactly (flat) has no index: the k-NN step streams its shards. Indexes are built
on the CPU and written with faiss.serialize_index; the k-NN step moves them to the GPUs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from dataclasses import replace
from pathlib import Path

import faiss

from ems.mining.index_kinds import IndexSpec, add_rows, as_index_spec, resolve_index, trained_index
from ems.mining.pipeline.files import atomic, save_bytes
from ems.mining.pipeline.manifest import file_size, mark_done, stage_dir
from ems.mining.pipeline.plan import Plan, parse_unit


def index_spec(plan: Plan, side: str) -> IndexSpec:
    """--index resolved for `side` (its distinct lines and dimension); HNSW searches at least k."""
    rows = plan.vectors(side, 0)
    spec = resolve_index(as_index_spec(plan.options.index), plan.sides[side]["distinct"], rows.shape[1])
    return replace(spec, ef_search=max(spec.ef_search, plan.k)) if spec.kind == "hnsw" else spec


def index_dir(plan: Plan, side: str) -> Path:
    return stage_dir(plan.work, "index") / side


def _save_index(path: Path, index) -> int:
    return save_bytes(path, faiss.serialize_index(index))


def _read_index(plan: Plan, step: str, unit: str, path: Path, flags: int = 0):
    file_size(plan.work, step, unit, path)
    return faiss.read_index(str(path), flags)


@contextlib.contextmanager
def _faiss_prints_on_stderr():
    """faiss's on-disk lists printf() what they do ("resizing ...", "IO_FLAG_ONDISK_SAME_DIR:
    updating ..."); send it to stderr, where progress goes, not into stdout (a command's output)."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def train_unit(plan: Plan, side: str) -> None:
    """Train `side`'s IVF index on its sample rows (read from every shard)."""
    path = index_dir(plan, side) / "trained.index"
    index = trained_index(index_spec(plan, side), plan.all_vectors(side))
    mark_done(plan.work, "train", side, {path: _save_index(path, index)})


def populate_unit(plan: Plan, unit: str) -> None:
    """The trained index of the shard's side, holding the shard's rows (ids: their row numbers)."""
    side, shard = parse_unit(unit)
    index = _read_index(plan, "train", side, index_dir(plan, side) / "trained.index")
    rows = plan.vectors(side, shard)
    add_rows(index, side, rows, plan.options.chunk_rows, first_id=plan.shard_start(side, shard))
    path = index_dir(plan, side) / f"{shard:05d}.index"
    mark_done(plan.work, "populate", unit, {path: _save_index(path, index)})


def merge_unit(plan: Plan, side: str) -> None:
    """`side`'s searchable index in WORK/index/<side>/merged/ (see the module docstring)."""
    spec = index_spec(plan, side)
    target = index_dir(plan, side) / "merged"
    with atomic(target) as partial:
        partial.mkdir()
        if spec.kind == "hnsw":
            index = trained_index(spec, plan.all_vectors(side))
            add_rows(index, side, plan.all_vectors(side), plan.options.chunk_rows)
        else:
            from faiss.contrib.ondisk import merge_ondisk

            index = _read_index(plan, "train", side, index_dir(plan, side) / "trained.index")
            shards = []
            for unit in plan.shard_units([side]):
                path = index_dir(plan, side) / f"{parse_unit(unit)[1]:05d}.index"
                file_size(plan.work, "populate", unit, path)
                shards.append(str(path))
            with _faiss_prints_on_stderr():
                merge_ondisk(index, shards, str(partial / "merged.ivfdata"))
        _save_index(partial / "merged.index", index)
    files = {path: path.stat().st_size for path in sorted(target.iterdir())}
    mark_done(plan.work, "merge", side, files)


def merged_index(plan: Plan, side: str):
    """`side`'s merged index, its inverted lists memory-mapped from disk (IVF)."""
    path = index_dir(plan, side) / "merged" / "merged.index"
    with _faiss_prints_on_stderr():
        return _read_index(plan, "merge", side, path, faiss.IO_FLAG_ONDISK_SAME_DIR)
