"""Any bitext test set described by file patterns (NTREX-128, FLORES, ...): P@1 by cosine or
margin (eval.evaluators.bitext). `{lang}` in a pattern is each code exactly as written in the config."""

from __future__ import annotations

from eval.evaluators.bitext import BitextTask, evaluate_bitext
from eval.report import bitext_table
from eval.task import TaskRun, TaskType, codes_in_filter

SETTINGS = frozenset({"targets", "scoring", "margin", "k", "directions", "laser_duplicates", "url"})


def run(encoder, task: TaskRun) -> dict:
    settings = task.pick(SETTINGS | {"source"})
    bitext = BitextTask(task.data_dir, languages=task.config["languages"], name=task.name,
                        max_sentences=task.options.max_sentences, **settings)  # fmt: skip
    bitext.languages = codes_in_filter(bitext.languages, task.options)  # checked in full first: a misspelled code still errors
    return evaluate_bitext(encoder, bitext, task.options.progress)


TASK = TaskType(
    name="bitext",
    metric="bitext_p_at_1",
    run=run,
    table=bitext_table,
    settings=SETTINGS,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of the directions",
)
