"""Generic bitext retrieval: any pairwise or multi-parallel corpus described in YAML by file
patterns, scored by P@1 in both directions (cosine or margin), LASER's duplicate rule as a flag.

A config (configs/eval/ntrex.yaml) names a source side and a pattern for the other side:

    type: bitext
    source: {pattern: "newstest2019-src.{lang}.txt", lang: eng}
    targets: {pattern: "newstest2019-ref.{lang}.txt"}
    languages: [deu, fra, fra-CA, zho-CN, srp-Cyrl]   # any form: deu, zho_Hans, fra-CA, de
    scoring: cosine            # or margin (eval.evaluators.xsim.margin_picks: k nearest, ratio/distance/absolute)
    directions: both           # or xx2en / en2xx: which directions the headline "mean" averages
    laser_duplicates: false    # true: a retrieved sentence identical to the gold one is correct

`{lang}` is filled with each code exactly as written, so files named with 3-letter, FLORES or
BCP-47 codes are found as they are; every code must name a language (ems.languages), else the
task does not run. The source side is the pivot: "xx2en" retrieves source sentences for each
target sentence, "en2xx" the reverse. In: an encoder and a TaskRun: that config (BitextConfig), the
corpus directory and the run's options (language filter, sentence cap). Out:
eval.evaluators.retrieval.evaluate_bitexts's result keyed by the codes as written, plus "metric":
"bitext_p_at_1" and "settings" (`evaluate_bitext`, the evaluator of the task type `bitext`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder, encoder_languages
from ems.mining.margin import DEFAULT_K, MARGINS
from eval.evaluators.items import NOT_COVERED, score_items
from eval.evaluators.retrieval import (
    Bitext,
    bidirectional_p_at_1,
    check_max_sentences,
    evaluate_bitexts,
    read_aligned_files,
)
from eval.evaluators.xsim import correct_picks, encoder_lang, margin_picks
from eval.report import bitext_table
from eval.task import Headline, TaskConfig, TaskRun, TaskType, codes_in_filter, one_of, refuse

SCORINGS = ("cosine", "margin")
DIRECTIONS = ("both", "xx2en", "en2xx")


@dataclass
class Side:
    """A file pattern with a `{lang}` placeholder, and (source side only) the code to fill it with."""

    pattern: str
    lang: str | None = None

    def __post_init__(self):
        if self.pattern.count("{lang}") != 1:
            raise ValueError(f"a file pattern needs {{lang}} exactly once, got {self.pattern!r}")

    def path(self, data_dir: Path, code: str) -> Path:
        return Path(data_dir) / self.pattern.replace("{lang}", code)


@dataclass(kw_only=True)
class BitextConfig(TaskConfig):
    """configs/eval/ntrex.yaml: `source` {pattern, lang} sentences line-aligned with each target
    code's `targets` {pattern} file, the codes (each must name a language: eval.task checks them
    with the types), the scoring (`margin` and `k` with scoring: margin), `directions` and `url`,
    where to get the corpus, for the missing-data message."""

    source: Side
    targets: Side
    languages: list[str]
    scoring: str = "cosine"
    directions: str = "both"
    laser_duplicates: bool = False
    margin: str = "ratio"
    k: int = DEFAULT_K
    url: str | None = None

    def __post_init__(self):
        problems = []
        if self.source.lang is None:
            problems.append("source needs a lang: the code its file pattern is filled with")
        if not self.languages:
            problems.append("languages must list at least one code")
        problems += one_of("scoring", self.scoring, SCORINGS) + one_of("margin", self.margin, MARGINS)
        refuse(self, problems + one_of("directions", self.directions, DIRECTIONS))

    def language_codes(self) -> list[str]:
        return [code for code in (self.source.lang, *self.languages) if code is not None]


def _margin_scores(x: np.ndarray, pivot: np.ndarray, x_texts, pivot_texts, margin: str, k: int) -> dict:
    to_pivot, from_pivot = margin_picks(x, pivot, margin, k)
    xx2en, en2xx = correct_picks(to_pivot, pivot_texts), correct_picks(from_pivot, x_texts)
    rescued = int((xx2en & (to_pivot != np.arange(len(x)))).sum() + (en2xx & (from_pivot != np.arange(len(x)))).sum())
    xx2en, en2xx = 100.0 * xx2en.mean(), 100.0 * en2xx.mean()
    return {"xx2en": xx2en, "en2xx": en2xx, "mean": (xx2en + en2xx) / 2, "duplicate_hits": rescued}


def _scorer(config: BitextConfig):
    def score(x: np.ndarray, pivot: np.ndarray, x_texts, pivot_texts) -> dict:
        if config.scoring == "cosine":
            scores = bidirectional_p_at_1(x, pivot, xx_texts=x_texts, en_texts=pivot_texts)
        else:
            scores = _margin_scores(x, pivot, x_texts, pivot_texts, config.margin, config.k)
        if config.directions != "both":
            scores["mean"] = scores[config.directions]
        return scores

    return score


def evaluate_bitext(encoder: Encoder, task: TaskRun) -> dict:
    """P@1 (%) per code the encoder covers (module docstring) in the corpus under `task.data_dir`:
    the config's codes whose language the run's filter keeps, the first `max_sentences` pairs of
    each (None: all). A language the encoder lacks is listed under "skipped" (NOT_COVERED); one
    whose file is missing, unreadable or misaligned is a data error; a missing data directory or
    source file raises MissingDataError."""
    config, options, max_sentences = task.config, task.options, task.options.max_sentences
    check_max_sentences(max_sentences)
    data_dir, source = Path(task.data_dir), config.source
    where = f"; get the corpus from {config.url}" if config.url else ""
    source_path = source.path(data_dir, source.lang)
    if not source_path.is_file():
        raise MissingDataError(f"task {config.name}: missing source file {source_path}{where}")
    covered = encoder_languages(encoder)
    pivot = encoder_lang(source.lang, covered)

    def uncovered(code: str) -> str | None:
        if pivot is None:
            return f"encoder does not cover {source.lang}"
        return NOT_COVERED if encoder_lang(code, covered) is None else None

    def read(code: str) -> Bitext:
        path = config.targets.path(data_dir, code)
        if not path.is_file():
            raise MissingDataError(f"missing {path} (line-aligned with {source_path.name}){where}")
        xx, en = read_aligned_files(path, source_path, max_sentences, data_dir)
        return Bitext(lang=encoder_lang(code, covered), source=path.name, xx=xx, en=en, name=code)

    found = score_items(codes_in_filter(config.languages, options), read, skip=uncovered, desc=config.name)
    result = evaluate_bitexts(
        encoder,
        list(found.rows.values()),
        config.name,
        found.skipped,
        options.progress,
        found.errors,
        config.laser_duplicates,
        pivot or source.lang,
        _scorer(config),
    )
    settings = {
        "source": str(source_path.name),
        "scoring": config.scoring,
        "directions": config.directions,
        "max_sentences": max_sentences,
    }
    if config.scoring == "margin":
        settings.update(margin=config.margin, k=config.k)
    return {
        "task": result.pop("task"),
        "metric": TASK.metric,
        "data_dir": str(data_dir),
        "settings": settings,
        **result,
    }


MEAN_OF_DIRECTIONS = Headline("P@1 (%), mean of the directions", lambda row: row["mean"])
TASK = TaskType(
    metric="bitext_p_at_1", run=evaluate_bitext, table=bitext_table, config=BitextConfig, headline=MEAN_OF_DIRECTIONS
)
