"""WMT20 sentence-level QE (MLQE-PE) as a similarity task: Pearson r of cosine(source, MT) with
the human z_mean per pair, raw and through each head's meaning view (eval.evaluators.qe,
eval.evaluators.correlation). `dev_split` is scored beside `split` by the same heads: choices are
made on it, never on `split`. The heads' keys (HeadsConfig) are STS's too (eval.tasks.sts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eval.evaluators.correlation import HeadTraining, evaluate_correlation_task
from eval.evaluators.qe import read_qe_pairs
from eval.report import correlation_table
from eval.task import TaskConfig, TaskRun, TaskType, pair_in_filter


@dataclass
class HeadTrainingConfig:
    """`head_training:` where the heads' English-X training pairs come from: `flores_subdir` (a
    FLORES-200 split under the data root) or `pairs_dir` (a Moses-format corpus root, absolute or
    under the data root, e.g. the shared Tatoeba Challenge and TICO-19 pairs after `ems-prep
    import` and `ems-prep clean`), at most `max_pairs` per language (a sample drawn with `seed`),
    `valid_fraction` held out for early stopping and every selection."""

    flores_subdir: str | None = None
    pairs_dir: str | None = None
    valid_fraction: float = HeadTraining.valid_fraction
    seed: int = HeadTraining.seed
    max_pairs: int | None = None

    def check(self, heads: list[str]) -> None:
        """ValueError when `heads` are asked for without exactly one source of training pairs."""
        if heads and (self.flores_subdir is None) == (self.pairs_dir is None):
            raise ValueError(
                "head_training takes one of flores_subdir and pairs_dir (with heads), valid_fraction, "
                f"seed, max_pairs; got {self}"
            )

    def training(self, heads: list[str], data_root: Path) -> HeadTraining:
        """The HeadTraining of `heads`, its directories under `data_root` (checked as by `check`)."""
        self.check(heads)
        root = Path(data_root)
        return HeadTraining(
            None if self.flores_subdir is None else root / self.flores_subdir,
            list(heads),
            self.valid_fraction,
            self.seed,
            self.max_pairs,
            None if self.pairs_dir is None else root / self.pairs_dir,
        )


@dataclass(kw_only=True)
class HeadsConfig(TaskConfig):
    """The keys of a task that scores the heads' meaning views: `heads` (names in ems.heads.HEADS)
    and their `head_training`."""

    heads: list[str] = field(default_factory=list)
    head_training: HeadTrainingConfig = field(default_factory=HeadTrainingConfig)

    def __post_init__(self):
        self.head_training.check(self.heads)


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
    training = config.head_training.training(config.heads, options.data_root)
    return evaluate_correlation_task(
        encoder,
        task.name,
        TASK.metric,
        pair_sets,
        training,
        None,
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
