"""xSIM / xSIM++ (LASER): margin-based error rate of each FLORES file against English
(eval.evaluators.xsim, whose XsimConfig is this type's config)."""

from __future__ import annotations

from ems.languages import UnknownLanguageError, canonical_language, flores_language
from eval.evaluators.xsim import XsimConfig, evaluate_xsim, flores_stems
from eval.report import xsim_table
from eval.task import RunOptions, TaskRun, TaskType


def stems_in_filter(stems: list[str], options: RunOptions) -> list[str]:
    """The FLORES file stems whose language key (ems.languages.flores_language: `quy` -> `qu`,
    `cmn_Hant` -> `zh-Hant`) is of a language the run's filter keeps; a stem that names no
    language stays, for evaluate_xsim to report."""
    kept = []
    for stem in stems:
        try:
            language = canonical_language(flores_language(stem))
        except UnknownLanguageError:
            kept.append(stem)
            continue
        if language in options.canonical:
            kept.append(stem)
    return kept


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    languages = None if config.languages == "all" else config.languages
    if options.canonical is not None:
        languages = stems_in_filter(languages or flores_stems(task.data_dir, config.split, config.english), options)
    augmented_dir = options.data_root / config.augmented_subdir if config.augmented_subdir else None
    return evaluate_xsim(
        encoder, config, task.data_dir, languages, augmented_dir, options.max_sentences, options.progress
    )


TASK = TaskType(
    name="xsim",
    metric="xsim_error",
    run=run,
    table=xsim_table,
    config=XsimConfig,
    headline=lambda row: row["xx2en"],
    headline_label="xSIM error (%), xx→en, lower is better",
)
