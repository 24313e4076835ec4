"""The peer benchmark's grid (benchmarks/peer/sentence_transformers.py): its (vocabulary, lr) points,
the coordinate search over them on held-out P@1, and the search's runs, each point trained for the
whole budget and scored (a point trained before is reused). A helper of that benchmark: no command line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.peer import scoring as peer_scoring
from benchmarks.peer import training as peer_training

EXTEND = 2  # extensions of each axis beyond an edge pick
MIN_VOCAB = 1000  # an extension below this is not run
POINT_FILE = "point.json"  # OUT/grid-vV-lrL/point.json: a point's settings, steps, seconds and scores (reused)


@dataclass
class GridPoint:
    vocab_size: int
    lr: float
    steps: int
    seconds: float
    scores: dict[str, float]  # every metric (peer_scoring.score's columns); "held-out" chooses
    model_dir: str = ""
    real_tokens: int = 0  # non-pad tokens of both sides over every pair trained on ([CLS]/[SEP] included)

    @property
    def heldout(self) -> float:
        return self.scores["held-out"]


@dataclass
class GridChoice:
    points: list[GridPoint]  # in the order they were run
    vocab_size: int
    lr: float
    vocab_at_grid_edge: bool
    lr_at_grid_edge: bool

    @property
    def pick(self) -> GridPoint:
        return next(p for p in self.points if (p.vocab_size, p.lr) == (self.vocab_size, self.lr))

    def best_on(self, metric: str) -> GridPoint:
        """The grid point best on `metric`, the highest or, for an error rate, the lowest (the first run
        of equals): EMS's worst case on it."""
        if peer_scoring.lower_is_better(metric):
            return min(self.points, key=lambda point: point.scores[metric])
        return max(self.points, key=lambda point: point.scores[metric])


def middle(values: list[float]) -> float:
    """The middle of a sorted grid (the lower middle of an even one)."""
    return values[(len(values) - 1) // 2]


def beyond(values: list, best) -> object | None:
    """The next value past `best` at an edge of the sorted axis `values`, one step of the edge's own
    ratio to its neighbour (32k, 64k: 128k); None when `best` is inside or the axis has one value."""
    if len(values) < 2 or best not in (values[0], values[-1]):
        return None
    edge, neighbour = (values[-1], values[-2]) if best == values[-1] else (values[0], values[1])
    value = edge * edge / neighbour
    return round(value) if isinstance(edge, int) else float(f"{value:.3g}")


def coordinate_search(
    vocab_grid: list[int],
    lr_grid: list[float],
    run_point: Callable[[int, float], GridPoint],
    extend: int = EXTEND,
) -> GridChoice:
    """Every vocabulary size (ascending) at the middle lr, the vocabulary axis extended past an edge
    best (`beyond`) up to `extend` times; then every other lr (ascending) at the best size, extended
    the same way; the best point by held-out P@1 (the first run of equals). An edge flag is set when
    the choice is still the smallest or largest of an axis that has more than one value."""
    vocabs, lrs = sorted(set(vocab_grid)), sorted(set(lr_grid))
    points: dict[tuple[int, float], GridPoint] = {}

    def visit(vocab: int, lr: float) -> None:
        if (vocab, lr) not in points:
            points[vocab, lr] = run_point(vocab, lr)

    lr0 = middle(lrs)
    for vocab in vocabs:
        visit(vocab, lr0)
    for _ in range(extend):
        more = beyond(vocabs, max(vocabs, key=lambda vocab: points[vocab, lr0].heldout))
        if more is None or more < MIN_VOCAB:
            break
        vocabs = sorted([*vocabs, more])
        visit(more, lr0)
    best_vocab = max(vocabs, key=lambda vocab: points[vocab, lr0].heldout)
    for lr in lrs:
        visit(best_vocab, lr)
    for _ in range(extend):
        more = beyond(lrs, max(lrs, key=lambda lr: points[best_vocab, lr].heldout))
        if more is None:
            break
        lrs = sorted([*lrs, more])
        visit(best_vocab, more)
    best = max(points.values(), key=lambda point: point.heldout)
    return GridChoice(
        points=list(points.values()),
        vocab_size=best.vocab_size,
        lr=best.lr,
        vocab_at_grid_edge=len(vocabs) > 1 and best.vocab_size in (vocabs[0], vocabs[-1]),
        lr_at_grid_edge=len(lrs) > 1 and best.lr in (lrs[0], lrs[-1]),
    )


def search_peer(
    pairs,
    vocab_grid: list[int],
    lr_grid: list[float],
    seconds: float,
    out: Path,
    scoring: peer_scoring.Scoring,
    training: peer_training.PeerTraining,
    extend: int = EXTEND,
) -> tuple[GridChoice, dict[int, peer_training.Vocabulary]]:
    """The coordinate search of (vocab, lr), each point trained for the whole `seconds` (out/grid-vVOCAB-lrLR)
    and scored on everything; returns the choice and the vocabularies made."""
    vocabularies: dict[int, peer_training.Vocabulary] = {}

    def run_point(vocab: int, lr: float) -> GridPoint:
        run_dir = out / f"grid-v{vocab}-lr{lr:g}"
        trained = {"seconds": seconds, "pairs": len(pairs), **asdict(training)}
        scored = {"suite": str(scoring.suite), "languages": scoring.languages, "task_dirs": str(scoring.task_dirs)}
        record = json.loads((run_dir / POINT_FILE).read_text()) if (run_dir / POINT_FILE).is_file() else {}
        if record.get("trained") == trained and (run_dir / "model").is_dir():
            point = GridPoint(**record["point"])
            print(f"grid vocab {vocab:,} lr {lr:g}: trained before ({run_dir / POINT_FILE})", flush=True)
        else:
            if vocab not in vocabularies:
                vocabularies[vocab] = peer_training.prepare_vocabulary(pairs, vocab, out, training)
            vocabulary = vocabularies[vocab]
            steps, taken, _ = peer_training.train_peer(
                pairs, vocabulary.tokenizer, run_dir, lr, vocabulary.steps_in(seconds), seconds, training
            )
            real_tokens = round(steps * peer_training.BATCH_SIZE * vocabulary.tokens_per_pair)
            point = GridPoint(vocab, lr, steps, taken, {}, str(run_dir / "model"), real_tokens)
        run_dir.mkdir(parents=True, exist_ok=True)
        if record.get("scored") != scored or not point.scores:
            point.scores = peer_scoring.score(f"st:{run_dir / 'model'}", scoring, run_dir / "eval")
        (run_dir / POINT_FILE).write_text(json.dumps({"trained": trained, "scored": scored, "point": asdict(point)}))
        print(
            f"grid vocab {vocab:,} lr {lr:g}: {point.steps} steps in {point.seconds:.0f} s, "
            + ", ".join(f"{metric} {value:.1f}" for metric, value in point.scores.items()),
            flush=True,
        )
        return point

    choice = coordinate_search(vocab_grid, lr_grid, run_point, extend)
    for axis, flag, value in (
        ("vocab", choice.vocab_at_grid_edge, f"{choice.vocab_size:,}"),
        ("lr", choice.lr_at_grid_edge, f"{choice.lr:g}"),
    ):
        if flag:
            print(f"{axis} {value} is at the grid's edge after {extend} extensions", flush=True)
    return choice, vocabularies
