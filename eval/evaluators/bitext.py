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
target sentence, "en2xx" the reverse. Out: eval.evaluators.retrieval.evaluate_bitexts's result keyed by the
codes as written, plus "metric": "bitext_p_at_1" and "settings".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError, check_choice
from ems.encoder_kinds import encoder_languages
from ems.languages import canonical_language
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


@dataclass
class BitextTask:
    """The corpus under `data_dir`: `source` sentences line-aligned with each language's `targets`
    file; `max_sentences` keeps the first N pairs."""

    data_dir: Path
    source: Side
    targets: Side
    languages: list[str]
    scoring: str = "cosine"
    directions: str = "both"
    laser_duplicates: bool = False
    margin: str = "ratio"  # with scoring: margin
    k: int = DEFAULT_K
    name: str = "bitext"
    url: str | None = None  # where to get the corpus, for the missing-data message
    max_sentences: int | None = None

    def __post_init__(self):
        self.data_dir = Path(self.data_dir)
        self.source = self.source if isinstance(self.source, Side) else Side(**self.source)
        self.targets = self.targets if isinstance(self.targets, Side) else Side(**self.targets)
        if self.source.lang is None:
            raise ValueError("source needs a lang: the code its file pattern is filled with")
        if isinstance(self.languages, str) or not self.languages:
            raise ValueError(f"languages must be a non-empty list of codes, got {self.languages!r}")
        check_choice("scoring", self.scoring, SCORINGS)
        check_choice("margin", self.margin, MARGINS)
        check_choice("directions", self.directions, DIRECTIONS)
        check_max_sentences(self.max_sentences)
        if not isinstance(self.laser_duplicates, bool):
            raise ValueError(f"laser_duplicates must be true or false, got {self.laser_duplicates!r}")
        for code in [self.source.lang, *self.languages]:
            canonical_language(code)  # UnknownLanguageError (a ValueError) for a misspelled code: the task does not run


def _margin_scores(x: np.ndarray, pivot: np.ndarray, x_texts, pivot_texts, margin: str, k: int) -> dict:
    to_pivot, from_pivot = margin_picks(x, pivot, margin, k)
    xx2en, en2xx = correct_picks(to_pivot, pivot_texts), correct_picks(from_pivot, x_texts)
    rescued = int((xx2en & (to_pivot != np.arange(len(x)))).sum() + (en2xx & (from_pivot != np.arange(len(x)))).sum())
    xx2en, en2xx = 100.0 * xx2en.mean(), 100.0 * en2xx.mean()
    return {"xx2en": xx2en, "en2xx": en2xx, "mean": (xx2en + en2xx) / 2, "duplicate_hits": rescued}


def _scorer(task: BitextTask):
    def score(x: np.ndarray, pivot: np.ndarray, x_texts, pivot_texts) -> dict:
        if task.scoring == "cosine":
            scores = bidirectional_p_at_1(x, pivot, xx_texts=x_texts, en_texts=pivot_texts)
        else:
            scores = _margin_scores(x, pivot, x_texts, pivot_texts, task.margin, task.k)
        if task.directions != "both":
            scores["mean"] = scores[task.directions]
        return scores

    return score


def evaluate_bitext(encoder, task: BitextTask, progress: bool = True) -> dict:
    """P@1 (%) per language of the task the encoder covers (module docstring). A language the
    encoder lacks is listed under "skipped" (NOT_COVERED); one whose file is missing, unreadable or
    misaligned is a data error; a missing data directory or source file raises MissingDataError."""
    where = f"; get the corpus from {task.url}" if task.url else ""
    source_path = task.source.path(task.data_dir, task.source.lang)
    if not source_path.is_file():
        raise MissingDataError(f"task {task.name}: missing source file {source_path}{where}")
    covered = encoder_languages(encoder)
    pivot = encoder_lang(task.source.lang, covered)

    def uncovered(code: str) -> str | None:
        if pivot is None:
            return f"encoder does not cover {task.source.lang}"
        return NOT_COVERED if encoder_lang(code, covered) is None else None

    def read(code: str) -> Bitext:
        path = task.targets.path(task.data_dir, code)
        if not path.is_file():
            raise MissingDataError(f"missing {path} (line-aligned with {source_path.name}){where}")
        xx, en = read_aligned_files(path, source_path, task.max_sentences)
        return Bitext(lang=encoder_lang(code, covered), source=path.name, xx=xx, en=en, name=code)

    found = score_items(task.languages, read, skip=uncovered, desc=task.name)
    result = evaluate_bitexts(
        encoder,
        list(found.rows.values()),
        task.name,
        found.skipped,
        progress,
        found.errors,
        task.laser_duplicates,
        pivot or task.source.lang,
        _scorer(task),
    )
    settings = {
        "source": str(source_path.name),
        "scoring": task.scoring,
        "directions": task.directions,
        "max_sentences": task.max_sentences,
    }
    if task.scoring == "margin":
        settings.update(margin=task.margin, k=task.k)
    return {
        "task": result.pop("task"),
        "metric": "bitext_p_at_1",
        "data_dir": str(task.data_dir),
        "settings": settings,
        **result,
    }
