"""xSIM / xSIM++ (LASER): margin-based error rate of each FLORES file against English (eval.evaluators.xsim).
`languages`: FLORES stems, or "all"; `augmented_subdir` (xSIM++ files) is under the data root."""

from __future__ import annotations

from eval.report import xsim_table
from eval.task import TaskRun, TaskType, codes_in_filter
from eval.evaluators.xsim import XsimTask, evaluate_xsim, flores_stems

SETTINGS = frozenset({"split", "english", "margin", "k", "textual", "augmented_subdir"})


def run(encoder, task: TaskRun) -> dict:
    options, settings = task.options, task.pick(SETTINGS)
    augmented = settings.pop("augmented_subdir", None)
    languages = task.config["languages"]
    xsim = XsimTask(task.data_dir, None if languages == "all" else languages, task.name,
                    augmented_dir=options.data_root / augmented if augmented else None,
                    max_sentences=options.max_sentences, **settings)  # fmt: skip
    if options.canonical is not None:
        xsim.languages = codes_in_filter(xsim.languages or flores_stems(task.data_dir, xsim.split, xsim.english), options)
    return evaluate_xsim(encoder, xsim, options.progress)


TASK = TaskType(
    name="xsim",
    metric="xsim_error",
    run=run,
    table=xsim_table,
    settings=SETTINGS,
    headline=lambda row: row["xx2en"],
    headline_label="xSIM error (%), xx→en, lower is better",
)
