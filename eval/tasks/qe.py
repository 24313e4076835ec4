"""WMT20 sentence-level QE (MLQE-PE) as a similarity task: Pearson r of cosine(source, MT) with
the human z_mean per pair, raw and through each head's meaning view (eval.evaluators.qe, eval.evaluators.correlation).
`dev_split` is scored beside `split` by the same heads: choices are made on it, never on `split`."""

from __future__ import annotations

from eval.evaluators.correlation import HeadTraining, evaluate_correlation_task
from eval.evaluators.qe import read_qe_pairs
from eval.report import correlation_table
from eval.task import TaskRun, TaskType, pair_in_filter

SETTINGS = frozenset({"split", "dev_split", "heads", "head_training"})


def run(encoder, task: TaskRun) -> dict:
    options, settings = task.options, task.pick(SETTINGS)
    pairs = [pair for pair in task.config["pairs"] if pair_in_filter(pair.split("-"), options)]
    pair_sets, errors = read_qe_pairs(task.data_dir, pairs, settings.get("split", "test20"), options.max_sentences)
    dev_split = settings.get("dev_split")
    dev_sets, dev_errors = read_qe_pairs(task.data_dir, pairs, dev_split, options.max_sentences) if dev_split else (None, None)
    training = HeadTraining.from_config(settings.get("heads"), settings.get("head_training"), options.data_root, str(task.config_path))
    return evaluate_correlation_task(encoder, task.name, TASK.metric, pair_sets, training, None, options.progress, errors,
                                     dev_split, dev_sets, dev_errors)  # fmt: skip


def raw_pearson(row: dict) -> float:
    return 100.0 * (row["raw"]["pearson"] or 0.0)


TASK = TaskType(
    name="qe",
    metric="qe_pearson",
    run=run,
    table=correlation_table,
    settings=SETTINGS,
    headline=raw_pearson,
    headline_label="Pearson r × 100 (raw embeddings)",
)
