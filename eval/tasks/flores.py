"""FLORES-200 retrieval: P@1 by cosine both ways on a FLORES split (eval.evaluators.flores)."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.flores import FloresTask, evaluate_flores
from eval.report import markdown_table
from eval.task import Languages, TaskConfig, TaskRun, TaskType, filtered_languages


@dataclass(kw_only=True)
class FloresConfig(TaskConfig):
    """configs/eval/flores_bitext.yaml: canonical codes, or "all" (every language of
    ems.languages.FLORES_FILES), and the split (the files' suffix)."""

    languages: Languages
    split: str = FloresTask.split


def run(encoder, task: TaskRun) -> dict:
    config, options, skipped = task.config, task.options, {}
    if config.languages == "all":
        languages = options.canonical
    else:
        languages, skipped = filtered_languages(config.languages, options)
    flores = FloresTask(task.data_dir, languages, options.max_sentences, name=task.name, split=config.split)
    result = evaluate_flores(encoder, flores, options.progress)
    result["skipped"].update(skipped)
    return result


TASK = TaskType(
    name="flores",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    config=FloresConfig,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
