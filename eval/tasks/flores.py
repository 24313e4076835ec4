"""FLORES-200 retrieval: P@1 by cosine both ways on a FLORES split (eval.evaluators.flores)."""

from __future__ import annotations

from eval.evaluators.flores import FloresTask, evaluate_flores
from eval.report import markdown_table
from eval.task import TaskRun, TaskType, filtered_languages

SETTINGS = frozenset({"split"})


def run(encoder, task: TaskRun) -> dict:
    options, skipped = task.options, {}
    if task.config["languages"] == "all":
        languages = options.canonical
    else:
        languages, skipped = filtered_languages(task.config["languages"], options)
    flores = FloresTask(task.data_dir, languages, options.max_sentences, name=task.name, **task.pick(SETTINGS))
    result = evaluate_flores(encoder, flores, options.progress)
    result["skipped"].update(skipped)
    return result


TASK = TaskType(
    name="flores",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    settings=SETTINGS,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
