"""WMT20 sentence-level QE (MLQE-PE) as a similarity task: Pearson r of cosine(source, MT) with
the human z_mean per pair, raw and through each head's meaning view (eval.evaluators.qe,
eval.evaluators.correlation, which takes the config: a HeadsConfig). `dev_split` is scored beside
`split` by the same heads: choices are made on it, never on `split`."""

from __future__ import annotations

from dataclasses import dataclass

from eval.evaluators.correlation import HeadsConfig, evaluate_correlation_task
from eval.evaluators.qe import read_qe_pairs
from eval.report import correlation_table
from eval.task import TaskRun, TaskType, pair_in_filter


@dataclass(kw_only=True)
class QeConfig(HeadsConfig):
    """configs/eval/mlqe.yaml: the MLQE-PE pairs ("en-de"), the split scored and the dev split."""

    pairs: list[str]
    split: str = "test20"
    dev_split: str | None = None

    def language_codes(self) -> list[str]:
        return [code for pair in self.pairs for code in pair.split("-")]


def run(encoder, task: TaskRun) -> dict:
    config, options = task.config, task.options
    pairs = [pair for pair in config.pairs if pair_in_filter(pair.split("-"), options)]
    pair_sets, errors = read_qe_pairs(task.data_dir, pairs, config.split, options.max_sentences)
    dev_sets, dev_errors = (
        read_qe_pairs(task.data_dir, pairs, config.dev_split, options.max_sentences)
        if config.dev_split
        else (None, None)
    )
    return evaluate_correlation_task(
        encoder,
        config,
        TASK.metric,
        pair_sets,
        options.data_root,
        options.progress,
        errors,
        config.dev_split,
        dev_sets,
        dev_errors,
    )


def raw_pearson(row: dict) -> float:
    return 100.0 * (row["raw"]["pearson"] or 0.0)


TASK = TaskType(
    name="qe",
    metric="qe_pearson",
    run=run,
    table=correlation_table,
    config=QeConfig,
    headline=raw_pearson,
    headline_label="Pearson r × 100 (raw embeddings)",
)
