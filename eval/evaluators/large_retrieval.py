"""Large-scale retrieval (the EMS paper's ParaCrawl setting, Table 9): n queries searched among m
candidates with margin scoring, P@1 in percent.

Built from any pair of line-aligned files: the first n lines of the query file are the queries,
the first m lines of the candidate file the candidates, so query i's gold candidate is line i and
the other m - n lines are distractors. A retrieved candidate whose text equals the gold one
counts as correct (LASER's rule for duplicates).

In: an encoder and a TaskRun: a LargeRetrievalConfig (configs/eval/paracrawl.yaml: the file pairs,
the pool, the margin search), the data directory and the run's options (language filter, sentence
cap). Out: P@1 per pair and their average (`evaluate_large_retrieval`, the evaluator of the task
type `large_retrieval`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder, encode_checked, encoder_languages
from ems.languages import ENGLISH, canonical_language, covered_language
from ems.mining.index_kinds import parse_index_spec
from ems.mining.margin import DEFAULT_K, MARGINS, margin_neighbours
from eval.evaluators.items import not_covered, score_items, scored_result
from eval.evaluators.retrieval import read_aligned_files
from eval.report import retrieval_table
from eval.task import Headline, TaskConfig, TaskRun, TaskType, one_of, refuse

SHORTER_THAN_ASKED = "fewer lines than n_candidates (all lines used)"
POOL = {"n_queries": 2000, "n_candidates": 200_000}  # the paper's pool, where a config sets no size


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


@dataclass(kw_only=True)
class LargeRetrievalConfig(TaskConfig):
    """configs/eval/{paracrawl,flores_retrieval}.yaml: the file pairs ({src, tgt, src_lang,
    tgt_lang}: RetrievalPair), n_queries queries among n_candidates candidates for each (`pool`),
    the margin search (`k`, `margin` and `index`, an index spec such as auto, flat,
    ivf-sq8:nprobe=64) and `source`, where to get the files, for the missing-data message."""

    pairs: list[RetrievalPair]
    n_queries: int | None = None
    n_candidates: int | None = None
    k: int = DEFAULT_K
    margin: str = "ratio"
    index: str = "auto"

    def __post_init__(self):
        problems = one_of("margin", self.margin, MARGINS)
        n_queries, n_candidates = self.pool()
        if not 0 < n_queries <= n_candidates:
            problems.append(f"need 0 < n_queries <= n_candidates, got {n_queries} and {n_candidates}")
        try:
            parse_index_spec(self.index)
        except ValueError as error:
            problems.append(str(error))
        refuse(self, problems)

    def pool(self, max_sentences: int | None = None) -> tuple[int, int]:
        """(n_queries, n_candidates) of a run: each the config's, else POOL's or, with
        `max_sentences`, max_sentences; `max_sentences` caps both, and then the queries are never
        more than the candidates."""
        sizes = {key: getattr(self, key) for key in POOL}
        if max_sentences is None:
            return tuple(POOL[key] if size is None else size for key, size in sizes.items())
        n_queries, n_candidates = (
            min(max_sentences if size is None else size, max_sentences) for size in sizes.values()
        )
        return min(n_queries, n_candidates), n_candidates


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


def read_retrieval_pair(
    data_dir: Path, pair: RetrievalPair, n_candidates: int, source: str | None = None
) -> tuple[list[str], list[str]]:
    """The first n_candidates lines of a pair's two files; MissingDataError naming the missing
    files (and where to get them: `source`), ValueError for unequal line counts or bad UTF-8."""
    missing = [str(path) for path in (data_dir / pair.src, data_dir / pair.tgt) if not path.is_file()]
    if missing:
        where = f"; get them from {source}" if source else ""
        raise MissingDataError(f"missing {' and '.join(missing)} (line-aligned {pair.src} + {pair.tgt}){where}")
    return read_aligned_files(data_dir / pair.src, data_dir / pair.tgt, n_candidates, data_dir)


def evaluate_large_retrieval(encoder: Encoder, task: TaskRun) -> dict:
    """P@1 per file pair the encoder covers, the files under `task.data_dir`: the config's pairs
    whose query language the run's filter keeps, in the pool `config.pool(max_sentences)`. Returns
    {"task", "metric": "retrieval_p_at_1",
    "data_dir", "settings", "languages": {"xx-yy": {n_queries, n_candidates, p_at_1}},
    "average": {p_at_1, n_languages} or None, "skipped": {reason: [pair names]},
    "data_errors": {pair name: reason}}. A pair whose files are missing or bad is a data error
    (eval.faults); MissingDataError if the data directory is missing."""
    config, options, data_dir = task.config, task.options, Path(task.data_dir)
    pairs, max_sentences = config.pairs, options.max_sentences
    if options.canonical is not None:
        pairs = [pair for pair in pairs if pair.src_lang in options.canonical]
    n_queries, n_candidates = config.pool(max_sentences)
    if not data_dir.is_dir():
        where = f" (get them from {config.source})" if config.source else ""
        raise MissingDataError(
            f"task {config.name}: data directory {data_dir} does not exist; expected line-aligned "
            f"{', '.join(f'{p.src} + {p.tgt}' for p in pairs)}{where}"
        )
    covered = encoder_languages(encoder)
    skipped: dict[str, list[str]] = {}

    def score(pair: RetrievalPair, texts: tuple[list[str], list[str]]) -> dict:
        src, tgt = texts
        if len(tgt) < n_candidates:
            skipped.setdefault(SHORTER_THAN_ASKED, []).append(f"{pair.name} ({len(tgt)} of {n_candidates})")
        queries = encode_checked(encoder, src[:n_queries], covered_language(pair.src_lang, covered))
        candidates = encode_checked(encoder, tgt, covered_language(pair.tgt_lang, covered))
        return {
            "n_queries": len(queries),
            "n_candidates": len(candidates),
            "p_at_1": margin_p_at_1(queries, candidates, tgt, config.k, config.margin, config.index),
        }

    scored = score_items(
        pairs,
        lambda pair: read_retrieval_pair(data_dir, pair, n_candidates, config.source),
        score,
        key=lambda pair: pair.name,
        skip=lambda pair: not_covered(covered, pair.src_lang, pair.tgt_lang),
        skipped=skipped,
        desc=config.name,
        unit="pair",
        progress=options.progress,
    )
    per_pair = scored.rows
    average = None
    if per_pair:
        average = {"p_at_1": float(np.mean([r["p_at_1"] for r in per_pair.values()])), "n_languages": len(per_pair)}
    settings = {
        "k": config.k,
        "margin": config.margin,
        "index": config.index,
        "n_queries": n_queries,
        "n_candidates": n_candidates,
    }
    return scored_result(task, TASK.metric, settings, scored, average)


TASK = TaskType(
    metric="retrieval_p_at_1",
    run=evaluate_large_retrieval,
    table=retrieval_table,
    config=LargeRetrievalConfig,
    headline=Headline("P@1 (%)", lambda row: row["p_at_1"]),
)
