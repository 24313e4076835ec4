"""The score steps: margin scores, each sentence's best pair, and the pairs written as a TSV sorted
by score, streamed from sorted runs without loading them all.

In: the k-NN step's files of both directions and the options' margin, mode, threshold and
line_numbers. Out:

    score  WORK/score/<side>/<shard>.best.npy   (n,) [partner int64, score float32]: each row's
                                                best candidate by margin (ems.mining.margin.
                                                margin_scores, best_candidates), in row order
           WORK/score/<side>/<shard>.run.npy    the same pairs [score, row, partner], best first
                                                (ties: lower row first), non-finite scores left out
    write  --out                                "<score>\\t<src sentence>\\t<tgt sentence>" lines,
                                                [\\t<src line>\\t<tgt line>, 1-based], best first

`write` merges the runs (heapq.merge over blocks read from the memory-mapped runs) in the order
ems.mining.margin.mine sorts its pairs (score, then forward before backward, then row), stops
at the first score below the threshold, and keeps pairs by the mode: forward (src runs),
backward (tgt runs), intersect (src runs whose target's backward best is that source,
ems.mining.margin.agreed), max (both, a sentence used once: ems.mining.margin.one_to_one). The
sentences are read back from the input files by byte offset. Memory: one block per run, the
max mode's one byte per sentence of each side, and a batch of output lines.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ems.mapped import release_mapped_pages
from ems.mining.margin import agreed, best_candidates, best_first, margin_scores, one_to_one
from ems.mining.pipeline.files import ShardedRows, atomic, save_arrays
from ems.mining.pipeline.knn import knn_path
from ems.mining.pipeline.manifest import mark_done, stage_dir
from ems.mining.pipeline.plan import SIDES, Plan, parse_unit
from ems.mining.streaming import line_at

BEST = np.dtype([("partner", "<i8"), ("score", "<f4")])
RUN = np.dtype([("score", "<f4"), ("row", "<i8"), ("partner", "<i8")])
BLOCK = 65_536  # run records read at a time, per run
BATCH = 4_096  # output lines gathered before their sentences are read


def score_path(plan: Plan, unit: str, name: str) -> Path:
    side, shard = parse_unit(unit)
    return stage_dir(plan.work, "score") / side / f"{shard:05d}.{name}.npy"


def score_unit(plan: Plan, unit: str) -> None:
    """Margin-score the shard's k candidates, keep each row's best, write it and its sorted run."""
    side, shard = parse_unit(unit)
    cos, ids, avg = (np.array(plan.load("knn", unit, knn_path(plan, unit, name))) for name in ("cos", "ids", "avg"))
    other_units = plan.shard_units([plan.other(side)])
    other_avg = ShardedRows([plan.load("knn", u, knn_path(plan, u, "avg")) for u in other_units])
    candidates_avg = other_avg[np.maximum(ids, 0).ravel()].reshape(ids.shape)
    partner, score = best_candidates(ids, margin_scores(cos, ids, avg, candidates_avg, plan.options.margin))
    best = np.empty(len(ids), dtype=BEST)
    best["partner"], best["score"] = partner, score
    order = best_first(score)
    run = np.empty(len(order), dtype=RUN)
    run["score"], run["row"], run["partner"] = score[order], order + plan.shard_start(side, shard), partner[order]
    arrays = {score_path(plan, unit, "best"): best, score_path(plan, unit, "run"): run}
    mark_done(plan.work, "score", unit, save_arrays(arrays))


def _records(run: np.ndarray, direction: int) -> Iterator[tuple[float, int, int, int]]:
    """(-score, direction, row, partner) of a run's pairs, in its order, a block at a time."""
    for start in range(0, len(run), BLOCK):
        block = np.array(run[start : start + BLOCK])
        release_mapped_pages(run)
        yield from zip(
            (-block["score"]).tolist(), itertools.repeat(direction), *(block[f].tolist() for f in ("row", "partner"))
        )


def _sorted_pairs(plan: Plan) -> Iterator[tuple[float, int, int]]:
    """(score, src row, tgt row) of the mode's candidate pairs, best first, down to the threshold."""
    directions = {"forward": (0,), "intersect": (0,), "backward": (1,), "max": (0, 1)}[plan.options.mode]
    runs = [
        _records(plan.load("score", unit, score_path(plan, unit, "run")), direction)
        for direction in directions
        for unit in plan.shard_units([SIDES[direction]])
    ]
    pairs = (
        (-neg, row, partner) if direction == 0 else (-neg, partner, row)
        for neg, direction, row, partner in heapq.merge(*runs)
    )
    threshold = plan.options.threshold
    return pairs if threshold is None else itertools.takewhile(lambda pair: pair[0] >= threshold, pairs)


def _kept(plan: Plan, pairs: Iterator[tuple[float, int, int]]) -> Iterator[list[tuple[float, int, int]]]:
    """Batches of the pairs the mode keeps, in order."""
    if plan.options.mode == "max":
        pairs, candidates = itertools.tee(pairs)
        n_src, n_tgt = (plan.sides[side]["distinct"] for side in SIDES)
        pairs = itertools.compress(pairs, one_to_one(((s, t) for _, s, t in candidates), n_src, n_tgt))
    if plan.options.mode == "intersect":
        backward = ShardedRows([plan.load("score", u, score_path(plan, u, "best")) for u in plan.shard_units(["tgt"])])
    while batch := list(itertools.islice(pairs, BATCH)):
        if plan.options.mode == "intersect":
            src, tgt = (np.array([pair[i] for pair in batch], dtype=np.int64) for i in (1, 2))
            best = backward[tgt]
            batch = list(itertools.compress(batch, agreed(src, best["partner"], best["score"]).tolist()))
        yield batch


def write_unit(plan: Plan, unit: str = "all") -> None:
    """Write the mined pairs to --out (atomically: the TSV is whole or absent)."""
    out = Path(plan.options.out)
    lines = {side: plan.all_lines(side) for side in SIDES}
    written = 0
    with (
        atomic(out) as partial,
        open(partial, "w", encoding="utf-8", newline="\n") as f,
        open(plan.path("src"), "rb") as src_file,
        open(plan.path("tgt"), "rb") as tgt_file,
    ):
        for batch in _kept(plan, _sorted_pairs(plan)):
            src = lines["src"][np.array([pair[1] for pair in batch], dtype=np.int64)].tolist()
            tgt = lines["tgt"][np.array([pair[2] for pair in batch], dtype=np.int64)].tolist()
            for (score, _, _), (s_offset, s_number), (t_offset, t_number) in zip(batch, src, tgt):
                numbers = f"\t{s_number + 1}\t{t_number + 1}" if plan.options.line_numbers else ""
                f.write(f"{score:.6f}\t{line_at(src_file, s_offset)}\t{line_at(tgt_file, t_offset)}{numbers}\n")
            written += len(batch)
    mark_done(plan.work, "write", unit, {out: out.stat().st_size}, written=written)
