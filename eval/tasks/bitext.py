"""Any bitext test set described by file patterns (NTREX-128, FLORES, ...): P@1 by cosine or
margin (eval.evaluators.bitext). `{lang}` in a pattern is each code exactly as written in the config."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.bitext import BitextTask, Side, evaluate_bitext
from eval.report import bitext_table
from eval.task import TaskConfig, TaskRun, TaskType, codes_in_filter


@dataclass(kw_only=True)
class BitextConfig(TaskConfig):
    """configs/eval/ntrex.yaml: `source` {pattern, lang} and `targets` {pattern}
    (eval.evaluators.bitext.Side), the target codes, the scoring and `url`, where to get the corpus."""

    source: Side
    targets: Side
    languages: list[str]
    scoring: str = BitextTask.scoring
    directions: str = BitextTask.directions
    laser_duplicates: bool = BitextTask.laser_duplicates
    margin: str = BitextTask.margin
    k: int = BitextTask.k
    url: str | None = None

    def language_codes(self) -> list[str]:
        return [code for code in (self.source.lang, *self.languages) if code is not None]


def run(encoder, task: TaskRun) -> dict:
    config = task.config
    bitext = BitextTask(
        task.data_dir,
        config.source,
        config.targets,
        config.languages,
        scoring=config.scoring,
        directions=config.directions,
        laser_duplicates=config.laser_duplicates,
        margin=config.margin,
        k=config.k,
        name=config.name,
        url=config.url,
        max_sentences=task.options.max_sentences,
    )
    bitext.languages = codes_in_filter(
        bitext.languages, task.options
    )  # checked in full first: a misspelled code still errors
    return evaluate_bitext(encoder, bitext, task.options.progress)


TASK = TaskType(
    name="bitext",
    metric="bitext_p_at_1",
    run=run,
    table=bitext_table,
    config=BitextConfig,
    headline=lambda row: row["mean"],
    headline_label="P@1 (%), mean of the directions",
)
