"""Zero-shot cross-lingual document classification (MLDoc, SIB-200, ...): an MLP on frozen
embeddings, en→X and/or X→en (eval.evaluators.classification).

Config: `languages` ("all": every language in the data, or a list; the train language is always
read), `format` and `reader` (eval.evaluators.classification_data), `train_language`, `seeds` (a count or a
list), `mlp` (eval.evaluators.classification.mlp_settings), `directions`: en2xx (train on the train
language, test each language; the default) and/or xx2en (train on each language X, select on X's
dev, test on the train language)."""

from __future__ import annotations

from eval.evaluators.classification import evaluate_classification, mlp_settings
from eval.evaluators.classification_data import read_task
from eval.report import classification_table
from eval.task import TaskRun, TaskType, filtered_languages

SETTINGS = frozenset({"format", "train_language", "seeds", "mlp", "reader", "source", "directions"})


def run(encoder, task: TaskRun) -> dict:
    options, settings = task.options, task.pick(SETTINGS)
    mlp = mlp_settings(settings.get("mlp", {}))
    skipped = {}
    if task.config["languages"] == "all":
        languages = options.canonical
    else:
        languages, skipped = filtered_languages(task.config["languages"], options)
    train_language, reader = settings.get("train_language", "en"), settings.get("reader", {})

    def read(train: str, test_languages: list[str] | None):
        return read_task(settings["format"], task.data_dir, test_languages, train, options.max_sentences, task.name, **reader)

    data = read(train_language, languages)
    seeds = range(settings["seeds"]) if isinstance(settings.get("seeds"), int) else settings.get("seeds", range(5))
    directions = settings.get("directions", ["en2xx"])
    result = evaluate_classification(encoder, data, seeds, mlp, options.progress, directions,
                                     lambda lang: read(lang, [train_language]))  # fmt: skip
    result["skipped"].update(skipped)
    return result


TASK = TaskType(
    name="classification",
    metric="accuracy",
    run=run,
    table=classification_table,
    settings=SETTINGS,
    headline=lambda row: row["accuracy"],
    headline_label="accuracy (%), mean over seeds",
)
