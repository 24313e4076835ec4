"""SemEval-2017 Task 1 (STS2017) cross-lingual semantic textual similarity.

In: `<data>/STS2017.track<N>.<xx-yy>.sent1-sent2-gold.tsv`: three tab-separated fields per line
(sent1, sent2, gold similarity 0-5), no header, quotes literal. Which language each column holds
differs per track (track 2: en | ar, 4a: es | en, 4b: en | es, 6: en | tr), so the task config
names them. Out: `RatedPairs`; the score is Pearson r and Spearman rho between
cosine(sent1, sent2) and gold, per track (eval.evaluators.correlation), raw and through each
head's meaning view: `evaluate_sts`, the evaluator of the task type `sts`, whose config is a StsConfig.
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

SKIP_MALFORMED = "not 3 fields"
SKIP_EMPTY = "empty sentence"
SKIP_SCORE = "gold not a number"


def read_sts(path: Path, name: str, sent1_lang: str, sent2_lang: str, folder: Path | None = None) -> RatedPairs:
    """The (sent1, sent2, gold) lines of one STS2017 file of the data folder `folder` (read_text);
    lines with other than 3 fields, an empty sentence or a non-numeric gold are skipped and
    counted. MissingDataError if missing."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing STS2017 file {path} (SemEval-2017 Task 1 with gold, see PROVENANCE.md)")
    sent1, sent2, gold, skipped = [], [], [], {}
    with io.StringIO(read_text(path, "utf-8-sig", folder), newline="") as file:
        for fields in csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE):
            reason = _problem(fields)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            sent1.append(fields[0].strip())
            sent2.append(fields[1].strip())
            gold.append(float(fields[2]))
    return RatedPairs(name, sent1_lang, sent2_lang, sent1, sent2, np.asarray(gold, dtype=np.float64), skipped)


def _problem(fields: list[str]) -> str | None:
    if len(fields) != 3:
        return SKIP_MALFORMED
    if not fields[0].strip() or not fields[1].strip():
        return SKIP_EMPTY
    try:
        score = float(fields[2])
    except ValueError:
        return SKIP_SCORE
    return None if math.isfinite(score) else SKIP_SCORE


@dataclass
class StsTrack:
    """One STS2017 file of a task: its name in the results, the file (under the data directory)
    and the languages of its sent1 and sent2 columns."""

    name: str
    file: str
    langs: list[str]

    def __post_init__(self):
        if len(self.langs) != 2:
            raise ValueError(f"an STS track is {{name, file, langs: [sent1 language, sent2 language]}}; got {self}")


def read_sts_tracks(
    data_dir: Path, tracks: list[StsTrack], max_sentences: int | None = None
) -> tuple[list[RatedPairs], DataErrors]:
    """The STS2017 files of `tracks`, first `max_sentences` pairs each (None: all). A missing or
    bad file is a data error of its track (eval.faults); MissingDataError when `data_dir` is
    missing. Returns (pair sets, {track: reason})."""
    if not Path(data_dir).is_dir():
        raise MissingDataError(
            f"STS2017 directory {data_dir} does not exist (SemEval-2017 Task 1 with gold, see PROVENANCE.md)"
        )
    found = score_items(
        tracks,
        lambda track: read_sts(Path(data_dir) / track.file, track.name, *track.langs, folder=data_dir),
        lambda _, rated: rated.head(max_sentences),
        key=lambda track: track.name,
    )
    return list(found.rows.values()), found.errors


@dataclass(kw_only=True)
class StsConfig(HeadsConfig):
    """configs/eval/sts2017.yaml: the tracks ({name, file, langs}: StsTrack), the heads and their training."""

    tracks: list[StsTrack]

    def language_codes(self) -> list[str]:
        return [lang for track in self.tracks for lang in track.langs]


def evaluate_sts(encoder: Encoder, task: TaskRun) -> dict:
    """The correlation task (eval.evaluators.correlation.evaluate_correlation_task) on the config's
    tracks that the run's filter keeps, the first `max_sentences` pairs of each."""
    config, options = task.config, task.options
    tracks = [track for track in config.tracks if pair_in_filter(track.langs, options)]
    pair_sets, errors = read_sts_tracks(task.data_dir, tracks, options.max_sentences)
    return evaluate_correlation_task(encoder, task, TASK.metric, pair_sets, errors)


TASK = TaskType(
    metric="sts_correlation", run=evaluate_sts, table=correlation_table, config=StsConfig, headline=RAW_PEARSON
)
