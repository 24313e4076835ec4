"""WMT20 sentence-level quality estimation (MLQE-PE direct assessments) as a similarity task.

In: `<data>/<src>-<tgt>/<split>.<srctgt>.df.short.tsv` (tab-separated with a header naming the
columns index, original, translation, scores, mean, z_scores, z_mean, model_scores; the texts
contain quote characters, which are literal: no CSV quoting). Out: `RatedPairs` of (original in
src, translation in tgt, z_mean). The score of an encoder is Pearson r between
cosine(original, translation) and z_mean, per pair (eval.evaluators.correlation).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from eval.evaluators.correlation import RatedPairs
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import read_text
from eval.faults import DataErrors

COLUMNS = ("original", "translation", "z_mean")
SKIP_MALFORMED = "wrong number of fields"
SKIP_EMPTY = "empty sentence"
SKIP_SCORE = "z_mean not a number"


def mlqe_path(data_dir: Path, pair: str, split: str) -> Path:
    """data_dir/<src>-<tgt>/<split>.<srctgt>.df.short.tsv for a pair such as "en-de"."""
    src, _, tgt = pair.partition("-")
    if not src or not tgt:
        raise ValueError(f"an MLQE pair is named <src>-<tgt>, e.g. en-de; got {pair!r}")
    return Path(data_dir) / pair / f"{split}.{src}{tgt}.df.short.tsv"


def read_mlqe(path: Path, pair: str) -> RatedPairs:
    """The (original, translation, z_mean) rows of one MLQE-PE file. Rows with the wrong number of
    fields, an empty sentence or a non-numeric z_mean are skipped and counted by reason.
    MissingDataError if the file is missing; ValueError if the header lacks a needed column."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing WMT20 QE file {path} (MLQE-PE data/direct-assessments, see PROVENANCE.md)")
    src, _, tgt = pair.partition("-")
    sent1, sent2, gold, skipped = [], [], [], {}
    with io.StringIO(read_text(path, "utf-8-sig"), newline="") as file:
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
    found = score_items(pairs, lambda pair: read_mlqe(paths[pair], pair), lambda _, rated: rated.head(max_sentences))
    return list(found.rows.values()), found.errors
