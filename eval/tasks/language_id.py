"""Language neutrality (Libovický et al., 2020): a linear language-ID probe on the raw embeddings
and on each head's meaning and language views, plus a PCA plot (eval.evaluators.language_id)."""

from __future__ import annotations

from dataclasses import dataclass, field

from eval.evaluators.language_id import LanguageIdTask, evaluate_language_id
from eval.report import language_id_table
from eval.task import TaskConfig, TaskRun, TaskType, filtered_languages

BLOCKS = ("head_lines", "probe_train_lines", "probe_test_lines")


@dataclass(kw_only=True)
class LanguageIdConfig(TaskConfig):
    """configs/eval/language_id.yaml: the languages probed (English always is), the heads, the
    three blocks of FLORES lines (None: LanguageIdTask's default, or --max-sentences when given;
    --max-sentences caps each), the probe's L2 penalty, the PCA plot's pair and the heads' training."""

    languages: list[str]
    heads: list[str] = field(default_factory=list)
    head_lines: int | None = None
    probe_train_lines: int | None = None
    probe_test_lines: int | None = None
    l2: float = LanguageIdTask.l2
    pca_pair: str | None = LanguageIdTask.pca_pair
    valid_fraction: float = LanguageIdTask.valid_fraction
    seed: int = LanguageIdTask.seed


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    blocks = {key: getattr(config, key) for key in BLOCKS}
    if options.max_sentences is not None:  # caps each block of FLORES lines
        blocks = {
            key: min(options.max_sentences if lines is None else lines, options.max_sentences)
            for key, lines in blocks.items()
        }
    languages, skipped = filtered_languages(config.languages, options)
    probe = LanguageIdTask(
        task.data_dir,
        languages,
        task.name,
        l2=config.l2,
        pca_pair=config.pca_pair,
        valid_fraction=config.valid_fraction,
        seed=config.seed,
        heads=list(config.heads),
        **{key: lines for key, lines in blocks.items() if lines is not None},
    )
    result = evaluate_language_id(encoder, probe, options.out_dir, options.progress)
    result["skipped"].update(skipped)
    return result


TASK = TaskType(name="language_id", metric="lid_accuracy", run=run, table=language_id_table, config=LanguageIdConfig)
