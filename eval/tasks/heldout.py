"""Held-out pairs of the training corpus (<l1>-<l2>/<name>.<l1|l2> aligned files): P@1 both ways
(eval.evaluators.heldout). run_all's --heldout runs it; a config with `type: heldout` names the
directory (it takes only the keys every config has)."""

from __future__ import annotations

from eval.evaluators.heldout import evaluate_heldout
from eval.report import markdown_table
from eval.task import TaskRun, TaskType


def run(encoder, task: TaskRun) -> dict:
    options = task.options
    return evaluate_heldout(
        encoder, task.data_dir, options.canonical, options.max_sentences, options.progress, task.name
    )


TASK = TaskType(
    name="heldout",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
