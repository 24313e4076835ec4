"""Tatoeba similarity search (LASER's 112 languages): P@1 by cosine both ways (eval.evaluators.tatoeba,
whose TatoebaConfig is this type's config; --languages replaces its codes)."""

from __future__ import annotations

from eval.evaluators.tatoeba import TatoebaConfig, evaluate_tatoeba
from eval.report import markdown_table
from eval.task import TaskRun, TaskType

NO_TATOEBA_SET = "no Tatoeba test set"


def run(encoder, task: TaskRun) -> dict:
    options = task.options
    result = evaluate_tatoeba(
        encoder, task.config, task.data_dir, options.tatoeba_codes, options.max_sentences, options.progress
    )
    if options.without_tatoeba:
        result["skipped"][NO_TATOEBA_SET] = options.without_tatoeba
    return result


TASK = TaskType(
    name="tatoeba",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    config=TatoebaConfig,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
