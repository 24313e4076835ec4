"""FLORES-200 retrieval: P@1 by cosine both ways on a FLORES split (eval.evaluators.flores, whose
FloresConfig is this type's config)."""

from __future__ import annotations

from ems.languages import ENGLISH, canonical_language, flores_languages
from eval.evaluators.flores import FloresConfig, evaluate_flores
from eval.report import markdown_table
from eval.task import TaskRun, TaskType, filtered_languages


def run(encoder, task: TaskRun) -> dict:
    config, options, skipped = task.config, task.options, {}
    if config.languages == "all":
        languages = None if options.canonical is None else _filtered_keys(task, options.canonical)
    else:
        languages, skipped = filtered_languages(config.languages, options)
    result = evaluate_flores(encoder, config, task.data_dir, languages, options.max_sentences, options.progress)
    result["skipped"].update(skipped)
    return result


def _filtered_keys(task: TaskRun, canonical: list[str]) -> list[str]:
    """The directory's language keys whose canonical code the run's filter keeps (`zh` keeps `zh`
    and `zh-Hant`), then the filter's codes that no file has (reported as not in FLORES)."""
    keys = [key for key in flores_languages(task.data_dir, task.config.split) if key != ENGLISH]
    kept = [key for key in keys if canonical_language(key) in canonical]
    return kept + [lang for lang in canonical if lang not in {canonical_language(key) for key in keys}]


TASK = TaskType(
    name="flores",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    config=FloresConfig,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
