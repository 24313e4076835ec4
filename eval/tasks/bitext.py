"""Any bitext test set described by file patterns (NTREX-128, FLORES, ...): P@1 by cosine or
margin (eval.evaluators.bitext, whose BitextConfig is this type's config). `{lang}` in a pattern
is each code exactly as written in the config."""

from __future__ import annotations

from eval.evaluators.bitext import BitextConfig, evaluate_bitext
from eval.report import bitext_table
from eval.task import TaskRun, TaskType, codes_in_filter


def run(encoder, task: TaskRun) -> dict:
    options = task.options
    languages = codes_in_filter(task.config.languages, options)
    return evaluate_bitext(encoder, task.config, task.data_dir, languages, options.max_sentences, options.progress)


TASK = TaskType(
    name="bitext",
    metric="bitext_p_at_1",
    run=run,
    table=bitext_table,
    config=BitextConfig,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of the directions",
)
