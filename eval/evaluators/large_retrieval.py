"""Large-scale retrieval (the EMS paper's ParaCrawl setting, Table 9): n queries searched among m
candidates with margin scoring, P@1 in percent.

Built from any pair of line-aligned files: the first n lines of the query file are the queries,
the first m lines of the candidate file the candidates, so query i's gold candidate is line i and
the other m - n lines are distractors. A retrieved candidate whose text equals the gold one
counts as correct (LASER's rule for duplicates).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError, check_choice
from ems.encoder_kinds import encode_checked, encoder_languages
from ems.languages import ENGLISH, canonical_language, covered_language
from ems.mining.index import parse_index_spec
from ems.mining.margin import DEFAULT_K, MARGINS, margin_neighbours
from eval.evaluators.items import not_covered, score_items
from eval.evaluators.retrieval import read_aligned_files
from eval.faults import DATA_ERRORS

SHORTER_THAN_ASKED = "fewer lines than n_candidates (all lines used)"


@dataclass
class RetrievalPair:
    """Query file and candidate file (relative to the task's data directory) and their languages."""

    src: str
    tgt: str
    src_lang: str
    tgt_lang: str = ENGLISH

    def __post_init__(self):
        for code in (self.src_lang, self.tgt_lang):
            canonical_language(code)  # a misspelled code fails when the config is read, naming the closest

    @property
    def name(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


@dataclass
class LargeRetrievalTask:
    """n_queries queries among n_candidates candidates for each pair of files under data_dir."""

    data_dir: Path
    pairs: list[RetrievalPair]
    n_queries: int = 2000
    n_candidates: int = 200_000
    name: str = "large_retrieval"
    k: int = DEFAULT_K
    margin: str = "ratio"
    index: str = "auto"  # an index spec (ems.mining.index): auto, flat, ivf-sq8:nprobe=64, ...
    source: str | None = None  # where to get the files, for the missing-data message

    def __post_init__(self):
        self.data_dir = Path(self.data_dir)
        self.pairs = [p if isinstance(p, RetrievalPair) else RetrievalPair(**p) for p in self.pairs]
        if not 0 < self.n_queries <= self.n_candidates:
            raise ValueError(f"need 0 < n_queries <= n_candidates, got {self.n_queries} and {self.n_candidates}")
        check_choice("margin", self.margin, MARGINS)
        parse_index_spec(self.index)


def margin_p_at_1(
    queries: np.ndarray,
    candidates: np.ndarray,
    candidate_texts: list[str],
    k: int,
    margin: str = "ratio",
    index: str = "auto",
) -> float:
    """P@1 (%) of queries (n, d) against candidates (m >= n, d), query i's gold being candidate i:
    each query takes its best-margin candidate among its k nearest."""
    nb = margin_neighbours(queries, candidates, k, margin, index)
    best = nb.fwd_ids[np.arange(len(queries)), nb.fwd_scores.argmax(axis=1)]
    hits = [j == i or candidate_texts[j] == candidate_texts[i] for i, j in enumerate(best.tolist())]
    return 100.0 * float(np.mean(hits))


def read_retrieval_pair(task: LargeRetrievalTask, pair: RetrievalPair) -> tuple[list[str], list[str]]:
    """The first n_candidates lines of a pair's two files; MissingDataError naming the missing
    files (and where to get them), ValueError for unequal line counts or bad UTF-8."""
    missing = [str(path) for path in (task.data_dir / pair.src, task.data_dir / pair.tgt) if not path.is_file()]
    if missing:
        where = f"; get them from {task.source}" if task.source else ""
        raise MissingDataError(f"missing {' and '.join(missing)} (line-aligned {pair.src} + {pair.tgt}){where}")
    return read_aligned_files(task.data_dir / pair.src, task.data_dir / pair.tgt, task.n_candidates)


def evaluate_large_retrieval(encoder, task: LargeRetrievalTask, progress: bool = True) -> dict:
    """P@1 per file pair the encoder covers. Returns {"task", "metric": "retrieval_p_at_1",
    "data_dir", "settings", "languages": {"xx-yy": {n_queries, n_candidates, p_at_1}},
    "average": {p_at_1, n_languages} or None, "skipped": {reason: [pair names]},
    "data_errors": {pair name: reason}}. A pair whose files are missing or bad is a data error
    (eval.faults); MissingDataError if the data directory is missing."""
    if not task.data_dir.is_dir():
        where = f" (get them from {task.source})" if task.source else ""
        raise MissingDataError(
            f"task {task.name}: data directory {task.data_dir} does not exist; expected line-aligned "
            f"{', '.join(f'{p.src} + {p.tgt}' for p in task.pairs)}{where}"
        )
    covered = encoder_languages(encoder)
    skipped: dict[str, list[str]] = {}

    def score(pair: RetrievalPair, texts: tuple[list[str], list[str]]) -> dict:
        src, tgt = texts
        if len(tgt) < task.n_candidates:
            skipped.setdefault(SHORTER_THAN_ASKED, []).append(f"{pair.name} ({len(tgt)} of {task.n_candidates})")
        queries = encode_checked(encoder, src[: task.n_queries], covered_language(pair.src_lang, covered))
        candidates = encode_checked(encoder, tgt, covered_language(pair.tgt_lang, covered))
        return {
            "n_queries": len(queries),
            "n_candidates": len(candidates),
            "p_at_1": margin_p_at_1(queries, candidates, tgt, task.k, task.margin, task.index),
        }

    scored = score_items(
        task.pairs,
        lambda pair: read_retrieval_pair(task, pair),
        score,
        key=lambda pair: pair.name,
        skip=lambda pair: not_covered(covered, pair.src_lang, pair.tgt_lang),
        skipped=skipped,
        desc=task.name,
        unit="pair",
        progress=progress,
    )
    per_pair = scored.rows
    average = None
    if per_pair:
        average = {"p_at_1": float(np.mean([r["p_at_1"] for r in per_pair.values()])), "n_languages": len(per_pair)}
    settings = {
        "k": task.k,
        "margin": task.margin,
        "index": task.index,
        "n_queries": task.n_queries,
        "n_candidates": task.n_candidates,
    }
    return {
        "task": task.name,
        "metric": "retrieval_p_at_1",
        "data_dir": str(task.data_dir),
        "settings": settings,
        "languages": per_pair,
        "average": average,
        "skipped": skipped,
        DATA_ERRORS: dict(scored.errors),
    }
