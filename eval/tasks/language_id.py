"""Language neutrality (Libovický et al., 2020): a linear language-ID probe on the raw embeddings
and on each head's meaning and language views, plus a PCA plot (eval.evaluators.language_id,
whose LanguageIdConfig is this type's config; --max-sentences caps each block of lines)."""

from __future__ import annotations

from eval.evaluators.language_id import LanguageIdConfig, evaluate_language_id
from eval.report import language_id_table
from eval.task import TaskRun, TaskType, filtered_languages


def run(encoder, task: TaskRun) -> dict:
    options = task.options
    languages, skipped = filtered_languages(task.config.languages, options)
    result = evaluate_language_id(
        encoder, task.config, task.data_dir, languages, options.max_sentences, options.out_dir, options.progress
    )
    result["skipped"].update(skipped)
    return result


TASK = TaskType(name="language_id", metric="lid_accuracy", run=run, table=language_id_table, config=LanguageIdConfig)
