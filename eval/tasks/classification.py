"""Zero-shot cross-lingual document classification (MLDoc, SIB-200, ...): an MLP on frozen
embeddings, en→X and/or X→en (eval.evaluators.classification)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from ems.configs import FieldsOf
from ems.languages import ENGLISH
from eval.evaluators.classification import DEFAULT_SEEDS, EN2XX, MlpSettings, evaluate_classification, mlp_settings
from eval.evaluators.classification_data import read_task
from eval.report import classification_table
from eval.task import Languages, TaskConfig, TaskRun, TaskType, filtered_languages


@dataclass
class MlpConfig(MlpSettings):
    """The keys of a classification config's `mlp:`: a `preset` (a key of
    eval.evaluators.classification.PRESETS) and MlpSettings fields overriding it (mlp_settings)."""

    preset: str = "laser"


@dataclass(kw_only=True)
class ClassificationConfig(TaskConfig):
    """configs/eval/{sib200,mldoc,amazon}.yaml. `languages`: "all" (every language in the data) or
    a list (the train language is always read); `format` and `reader`, its format's keyword
    settings (eval.evaluators.classification_data.READERS); `seeds`: a list, or a count n for
    seeds 0..n-1; `mlp`: a `preset` and settings overriding it (mlp_settings); `directions`: en2xx
    (train on the train language, test each language) and/or xx2en (train on each language X,
    select on X's dev, test on the train language)."""

    format: str
    languages: Languages
    train_language: str = ENGLISH
    seeds: int | list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))  # a list after __init__
    mlp: Annotated[dict, FieldsOf(MlpConfig)] = field(default_factory=dict)  # MlpSettings after __init__
    reader: dict = field(default_factory=dict)
    directions: list[str] = field(default_factory=lambda: [EN2XX])

    def __post_init__(self):
        self.seeds = list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)
        self.mlp = mlp_settings(self.mlp)

    def language_codes(self) -> list[str]:
        return [*super().language_codes(), self.train_language]


def run(encoder, task: TaskRun) -> dict:
    config, options, skipped = task.config, task.options, {}
    if config.languages == "all":
        languages = options.canonical
    else:
        languages, skipped = filtered_languages(config.languages, options)

    def read(train: str, test_languages: list[str] | None):
        return read_task(
            config.format, task.data_dir, test_languages, train, options.max_sentences, task.name, **config.reader
        )

    data = read(config.train_language, languages)
    result = evaluate_classification(
        encoder,
        data,
        config.seeds,
        config.mlp,
        options.progress,
        config.directions,
        lambda lang: read(lang, [config.train_language]),
    )
    result["skipped"].update(skipped)
    return result


TASK = TaskType(
    name="classification",
    metric="accuracy",
    run=run,
    table=classification_table,
    config=ClassificationConfig,
    headline=lambda row: row["accuracy"],
    headline_label="accuracy (%), mean over seeds",
)
