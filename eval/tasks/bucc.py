"""BUCC-style bitext mining: margin-scored candidates, threshold chosen on the training split,
P/R/F1 on the test split (eval.evaluators.bucc)."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.bucc import BuccTask, evaluate_bucc
from eval.report import bucc_table
from eval.task import TaskConfig, TaskRun, TaskType, filtered_languages


@dataclass(kw_only=True)
class BuccConfig(TaskConfig):
    """configs/eval/bucc2018.yaml: the languages (each mined against English), the splits and the
    mining settings (ems.mining)."""

    languages: list[str]
    train_split: str = BuccTask.train_split
    test_split: str = BuccTask.test_split
    k: int = BuccTask.k
    margin: str = BuccTask.margin
    mode: str = BuccTask.mode
    index: str = BuccTask.index


def run(encoder, task: TaskRun) -> dict:
    config = task.config
    languages, skipped = filtered_languages(config.languages, task.options)
    if not languages:
        return {"task": task.name, "metric": TASK.metric, "languages": {}, "average": None, "skipped": skipped}
    bucc = BuccTask(
        task.data_dir,
        languages,
        task.name,
        train_split=config.train_split,
        test_split=config.test_split,
        k=config.k,
        margin=config.margin,
        mode=config.mode,
        index=config.index,
        max_sentences=task.options.max_sentences,
        source=config.source or BuccTask.source,
    )
    result = evaluate_bucc(encoder, bucc, task.options.progress)
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
