"""WMT20 sentence-level quality estimation (MLQE-PE direct assessments) as a similarity task.

In: `<data>/<src>-<tgt>/<split>.<srctgt>.df.short.tsv` (tab-separated with a header naming the
columns index, original, translation, scores, mean, z_scores, z_mean, model_scores; the texts
contain quote characters, which are literal: no CSV quoting). Out: `RatedPairs` of (original in
src, translation in tgt, z_mean). The score of an encoder is Pearson r between
cosine(original, translation) and z_mean, per pair (eval.evaluators.correlation), raw and through
each head's meaning view: `evaluate_qe`, the evaluator of the task type `qe`, whose config is a
QeConfig. `dev_split` is scored beside `split` by the same heads: choices are made on it, never on
`split`.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder
from eval.evaluators.correlation import RAW_PEARSON, HeadsConfig, RatedPairs, evaluate_correlation_task
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import read_text
from eval.faults import DataErrors
from eval.report import correlation_table
from eval.task import TaskRun, TaskType, pair_in_filter

COLUMNS = ("original", "translation", "z_mean")
SKIP_MALFORMED = "wrong number of fields"
SKIP_EMPTY = "empty sentence"
SKIP_SCORE = "z_mean not a number"


@dataclass(kw_only=True)
class QeConfig(HeadsConfig):
    """configs/eval/mlqe.yaml: the MLQE-PE pairs ("en-de"), the split scored and the dev split."""

    pairs: list[str]
    split: str = "test20"
    dev_split: str | None = None

    def language_codes(self) -> list[str]:
        return [code for pair in self.pairs for code in pair.split("-")]


def mlqe_path(data_dir: Path, pair: str, split: str) -> Path:
    """data_dir/<src>-<tgt>/<split>.<srctgt>.df.short.tsv for a pair such as "en-de"."""
    src, _, tgt = pair.partition("-")
    if not src or not tgt:
        raise ValueError(f"an MLQE pair is named <src>-<tgt>, e.g. en-de; got {pair!r}")
    return Path(data_dir) / pair / f"{split}.{src}{tgt}.df.short.tsv"


def read_mlqe(path: Path, pair: str, folder: Path | None = None) -> RatedPairs:
    """The (original, translation, z_mean) rows of one MLQE-PE file of the data folder `folder`
    (read_text). Rows with the wrong number of fields, an empty sentence or a non-numeric z_mean
    are skipped and counted by reason. MissingDataError if the file is missing; ValueError if the
    header lacks a needed column."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing WMT20 QE file {path} (MLQE-PE data/direct-assessments, see PROVENANCE.md)")
    src, _, tgt = pair.partition("-")
    sent1, sent2, gold, skipped = [], [], [], {}
    with io.StringIO(read_text(path, "utf-8-sig", folder), newline="") as file:
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        missing = [column for column in COLUMNS if header is None or column not in header]
        if missing:
            raise ValueError(f"{path}: header lacks column(s) {', '.join(missing)}; found {header}")
        index = [header.index(column) for column in COLUMNS]
        for fields in reader:
            reason = _problem(fields, len(header), index)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            sent1.append(fields[index[0]].strip())
            sent2.append(fields[index[1]].strip())
            gold.append(float(fields[index[2]]))
    return RatedPairs(pair, src, tgt, sent1, sent2, np.asarray(gold, dtype=np.float64), skipped)


def _problem(fields: list[str], n_columns: int, index: list[int]) -> str | None:
    if len(fields) != n_columns:
        return SKIP_MALFORMED
    if not fields[index[0]].strip() or not fields[index[1]].strip():
        return SKIP_EMPTY
    try:
        score = float(fields[index[2]])
    except ValueError:
        return SKIP_SCORE
    return None if math.isfinite(score) else SKIP_SCORE


def read_qe_pairs(
    data_dir: Path, pairs: list[str], split: str, max_sentences: int | None = None
) -> tuple[list[RatedPairs], DataErrors]:
    """The MLQE files of `pairs` (first `max_sentences` rows each; None: all). A missing or bad
    file is a data error of its pair (eval.faults); MissingDataError when `data_dir` is missing.
    Returns (pair sets, {pair: reason})."""
    if not Path(data_dir).is_dir():
        raise MissingDataError(
            f"WMT20 QE directory {data_dir} does not exist (MLQE-PE data/direct-assessments, see PROVENANCE.md)"
        )
    paths = {pair: mlqe_path(data_dir, pair, split) for pair in pairs}  # a malformed pair name fails the task
    found = score_items(
        pairs, lambda pair: read_mlqe(paths[pair], pair, data_dir), lambda _, rated: rated.head(max_sentences)
    )
    return list(found.rows.values()), found.errors


def evaluate_qe(encoder: Encoder, task: TaskRun) -> dict:
    """The correlation task (eval.evaluators.correlation.evaluate_correlation_task) on the config's
    pairs that the run's filter keeps, the first `max_sentences` rows of each, on `split` and on
    `dev_split` when the config names one."""
    config, options = task.config, task.options
    pairs = [pair for pair in config.pairs if pair_in_filter(pair.split("-"), options)]
    pair_sets, errors = read_qe_pairs(task.data_dir, pairs, config.split, options.max_sentences)
    dev_sets, dev_errors = (
        read_qe_pairs(task.data_dir, pairs, config.dev_split, options.max_sentences)
        if config.dev_split
        else (None, None)
    )
    return evaluate_correlation_task(
        encoder, task, TASK.metric, pair_sets, errors, config.dev_split, dev_sets, dev_errors
    )


TASK = TaskType(metric="qe_pearson", run=evaluate_qe, table=correlation_table, config=QeConfig, headline=RAW_PEARSON)
