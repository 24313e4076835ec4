"""Language neutrality (Libovický et al., 2020): a linear language-ID probe on the raw embeddings
and on each head's meaning and language views, plus a PCA plot (eval.evaluators.language_id)."""

from __future__ import annotations

from eval.evaluators.language_id import LanguageIdTask, evaluate_language_id
from eval.report import language_id_table
from eval.task import TaskRun, TaskType, filtered_languages

SETTINGS = frozenset({"heads", "head_lines", "probe_train_lines", "probe_test_lines", "l2", "pca_pair", "valid_fraction", "seed"})


def run(encoder, task: TaskRun) -> dict:
    options, settings = task.options, task.pick(SETTINGS)
    if options.max_sentences is not None:  # caps each block of FLORES lines
        for key in ("head_lines", "probe_train_lines", "probe_test_lines"):
            settings[key] = min(settings.get(key, options.max_sentences), options.max_sentences)
    languages, skipped = filtered_languages(task.config["languages"], options)
    probe = LanguageIdTask(task.data_dir, languages, task.name, **settings)
    result = evaluate_language_id(encoder, probe, options.out_dir, options.progress)
    result["skipped"].update(skipped)
    return result


TASK = TaskType(name="language_id", metric="lid_accuracy", run=run, table=language_id_table, settings=SETTINGS)
