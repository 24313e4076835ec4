"""xSIM / xSIM++ (LASER): margin-based error rate of each FLORES file against English
(eval.evaluators.xsim, whose XsimConfig is this type's config)."""

from __future__ import annotations

from eval.evaluators.xsim import XsimConfig, evaluate_xsim, flores_stems
from eval.report import xsim_table
from eval.task import TaskRun, TaskType, codes_in_filter


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    languages = None if config.languages == "all" else config.languages
    if options.canonical is not None:
        languages = codes_in_filter(languages or flores_stems(task.data_dir, config.split, config.english), options)
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
