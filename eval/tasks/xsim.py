"""xSIM / xSIM++ (LASER): margin-based error rate of each FLORES file against English (eval.evaluators.xsim)."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.xsim import XsimTask, evaluate_xsim, flores_stems
from eval.report import xsim_table
from eval.task import Languages, TaskConfig, TaskRun, TaskType, codes_in_filter


@dataclass(kw_only=True)
class XsimConfig(TaskConfig):
    """configs/eval/xsim_flores.yaml: FLORES stems ("all": every file of the split), the split, the
    English stem, the margin search, LASER's textual comparison and `augmented_subdir`, xSIM++'s
    files under the data root (None: no xSIM++)."""

    languages: Languages
    split: str = XsimTask.split
    english: str = XsimTask.english
    margin: str = XsimTask.margin
    k: int = XsimTask.k
    textual: bool = XsimTask.textual
    augmented_subdir: str | None = None


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    augmented_dir = options.data_root / config.augmented_subdir if config.augmented_subdir else None
    xsim = XsimTask(
        task.data_dir,
        None if config.languages == "all" else config.languages,
        task.name,
        split=config.split,
        english=config.english,
        margin=config.margin,
        k=config.k,
        textual=config.textual,
        augmented_dir=augmented_dir,
        max_sentences=options.max_sentences,
    )
    if options.canonical is not None:
        xsim.languages = codes_in_filter(
            xsim.languages or flores_stems(task.data_dir, xsim.split, xsim.english), options
        )
    return evaluate_xsim(encoder, xsim, options.progress)


TASK = TaskType(
    name="xsim",
    metric="xsim_error",
    run=run,
    table=xsim_table,
    config=XsimConfig,
    headline=lambda row: row["xx2en"],
    headline_label="xSIM error (%), xx→en, lower is better",
)
