"""Zero-shot cross-lingual document classification (MLDoc, SIB-200, ...): an MLP on frozen
embeddings, en→X and/or X→en (eval.evaluators.classification, whose ClassificationConfig is this
type's config; the data are read by eval.evaluators.classification_data)."""

from __future__ import annotations

from eval.evaluators.classification import ClassificationConfig, evaluate_classification
from eval.evaluators.classification_data import read_task
from eval.report import classification_table
from eval.task import TaskRun, TaskType, filtered_languages


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
        encoder, config, data, lambda lang: read(lang, [config.train_language]), options.progress
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
