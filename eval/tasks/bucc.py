"""BUCC-style bitext mining: margin-scored candidates, threshold chosen on the training split,
P/R/F1 on the test split (eval.evaluators.bucc, whose BuccConfig is this type's config)."""

from __future__ import annotations

from eval.evaluators.bucc import BuccConfig, evaluate_bucc
from eval.report import bucc_table
from eval.task import TaskRun, TaskType, filtered_languages


def run(encoder, task: TaskRun) -> dict:
    options = task.options
    languages, skipped = filtered_languages(task.config.languages, options)
    if not languages:
        return {"task": task.name, "metric": TASK.metric, "languages": {}, "average": None, "skipped": skipped}
    result = evaluate_bucc(encoder, task.config, task.data_dir, languages, options.max_sentences, options.progress)
    result["skipped"].update(skipped)
    return result


TASK = TaskType(
    name="bucc",
    metric="mining_f1",
    run=run,
    table=bucc_table,
    config=BuccConfig,
    headline=lambda row: (row["test"] or row["train"])["f1"],
    headline_label="F1 (%), test split (training if no test gold)",
)
