"""Tatoeba similarity search (LASER's 112 languages): P@1 by cosine both ways (eval.evaluators.tatoeba)."""

from __future__ import annotations

from eval.report import markdown_table
from eval.evaluators.tatoeba import evaluate_tatoeba, load_tatoeba_task
from eval.task import TaskRun, TaskType

NO_TATOEBA_SET = "no Tatoeba test set"


def run(encoder, task: TaskRun) -> dict:
    # load_tatoeba_task checks the config's keys itself; the data directory is run_all's (data_subdir or --task-dir).
    options = task.options
    tatoeba = load_tatoeba_task(task.config_path, task.data_dir, options.tatoeba_codes, options.max_sentences)
    tatoeba.data_dir = task.data_dir
    result = evaluate_tatoeba(encoder, tatoeba, options.progress)
    if options.without_tatoeba:
        result["skipped"][NO_TATOEBA_SET] = options.without_tatoeba
    return result


TASK = TaskType(
    name="tatoeba",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    settings=frozenset({"file_pattern", "metric", "groups", "laser_duplicates"}),
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
