"""Tatoeba similarity search (LASER's 112 languages): P@1 by cosine both ways (eval.evaluators.tatoeba)."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.tatoeba import SUPPORTED_METRIC, TatoebaTask, evaluate_tatoeba
from eval.report import markdown_table
from eval.task import Languages, TaskConfig, TaskRun, TaskType

NO_TATOEBA_SET = "no Tatoeba test set"


@dataclass(kw_only=True)
class TatoebaConfig(TaskConfig):
    """configs/eval/tatoeba.yaml: the LASER file pattern, the metric (p_at_1, the only one), the
    Tatoeba codes ("all": every set in the directory; --languages replaces them), groups averaged
    in the report ({group: canonical codes}) and LASER's duplicate rule."""

    file_pattern: str
    metric: str
    languages: Languages
    groups: dict[str, list[str]] | None = None
    laser_duplicates: bool = TatoebaTask.laser_duplicates

    def __post_init__(self):
        if self.metric != SUPPORTED_METRIC:
            raise ValueError(f"metric {self.metric!r} is not supported (only {SUPPORTED_METRIC!r})")


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    languages = options.tatoeba_codes
    if languages is None and config.languages != "all":
        languages = config.languages
    tatoeba = TatoebaTask(
        task.data_dir,
        languages,
        options.max_sentences,
        task.name,
        file_pattern=config.file_pattern,
        groups=config.groups,
        laser_duplicates=config.laser_duplicates,
    )
    result = evaluate_tatoeba(encoder, tatoeba, options.progress)
    if options.without_tatoeba:
        result["skipped"][NO_TATOEBA_SET] = options.without_tatoeba
    return result


TASK = TaskType(
    name="tatoeba",
    metric="p_at_1",
    run=run,
    table=markdown_table,
    config=TatoebaConfig,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of both directions",
)
