"""BUCC-style bitext mining: margin-scored candidates, threshold chosen on the training split,
P/R/F1 on the test split (eval.evaluators.bucc)."""

from __future__ import annotations

from eval.evaluators.bucc import BuccTask, evaluate_bucc
from eval.report import bucc_table
from eval.task import TaskRun, TaskType, filtered_languages

SETTINGS = frozenset({"train_split", "test_split", "k", "margin", "mode", "index", "source"})


def run(encoder, task: TaskRun) -> dict:
    languages, skipped = filtered_languages(task.config["languages"], task.options)
    if not languages:
        return {"task": task.name, "metric": TASK.metric, "languages": {}, "average": None, "skipped": skipped}
    bucc = BuccTask(task.data_dir, languages, task.name, max_sentences=task.options.max_sentences, **task.pick(SETTINGS))
    result = evaluate_bucc(encoder, bucc, task.options.progress)
    result["skipped"].update(skipped)
    return result


TASK = TaskType(
    name="bucc",
    metric="mining_f1",
    run=run,
    table=bucc_table,
    settings=SETTINGS,
    headline=lambda row: (row["test"] or row["train"])["f1"],
    headline_label="F1 (%), test split (training if no test gold)",
)
