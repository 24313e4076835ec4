"""Similarity-vs-human-score correlation, shared by WMT20 QE (eval.evaluators.qe) and STS2017
(eval.evaluators.sts).

In: `RatedPairs` (sentence pairs in two languages with a gold score each, from a task reader),
an encoder, and the TaskRun (its config a HeadsConfig: the heads and their training). Out: per
pair set the Pearson r and Spearman rho (scipy.stats)
between cosine(sent1, sent2) and the gold score, for the raw embeddings and for each head's
meaning view, plus their averages over pair sets; `RAW_PEARSON`, the raw Pearson r, is the chart's
headline of both tasks.

Nothing here is chosen on the scored pairs: the heads are trained and early-stopped (or, for the
projection head, their ridge strength chosen) on held-out training pairs alone (FLORES-200 or a
parallel corpus: HeadTrainingConfig), and the reported
split (e.g. WMT20 test20) is only scored. A task may also score a dev split (`dev_pair_sets`,
e.g. MLQE-PE dev) with the same heads, reported beside the test numbers, so that choices between
heads or settings can be made on dev.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from ems.encoder_kinds import Encoder
from ems.heads.base import UnknownLanguageError
from ems.languages import flores_file
from eval.evaluators.items import score_items
from eval.faults import DATA_ERRORS, DataErrors
from eval.parallel_data import PIVOT, SentencePairs, capped, flores_pairs, pivot_pairs
from eval.task import Headline, TaskConfig, TaskRun
from eval.train_head import train_heads

RAW = "raw"
RAW_PEARSON = Headline("Pearson r × 100 (raw embeddings)", lambda row: 100.0 * (row[RAW]["pearson"] or 0.0))


@dataclass
class RatedPairs:
    """Sentence pairs with human ratings: sent1[i] (lang1) vs sent2[i] (lang2) rated gold[i] (not
    ems.mining.margin.ScoredPairs, which are mined pairs with margin scores). `skipped` counts the file
    rows that were not used, by reason."""

    name: str
    lang1: str
    lang2: str
    sent1: list[str]
    sent2: list[str]
    gold: np.ndarray
    skipped: dict[str, int] = field(default_factory=dict)

    def head(self, n: int | None) -> RatedPairs:
        """The first n pairs (all when n is None)."""
        if n is None:
            return self
        return RatedPairs(
            self.name, self.lang1, self.lang2, self.sent1[:n], self.sent2[:n], self.gold[:n], dict(self.skipped)
        )


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of a[i] and b[i] for every row (0 for a zero vector)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, 1e-12)


def correlations(predicted: np.ndarray, gold: np.ndarray) -> dict:
    """{"pearson", "spearman"} between two score vectors; a coefficient is None when either
    vector is constant (undefined). ValueError for fewer than 3 scores or unequal lengths."""
    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold.shape or predicted.ndim != 1:
        raise ValueError(f"need two score vectors of equal length, got shapes {predicted.shape} and {gold.shape}")
    if len(gold) < 3:
        raise ValueError(f"a correlation needs at least 3 scored pairs, got {len(gold)}")
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return {"pearson": None, "spearman": None}
    return {
        "pearson": float(stats.pearsonr(predicted, gold).statistic),
        "spearman": float(stats.spearmanr(predicted, gold).statistic),
    }


def evaluate_rated_pairs(encoder: Encoder, pair_sets: list[RatedPairs], heads: dict) -> tuple[dict, dict]:
    """Per pair set: n, the skipped-row counts, and {view: {"pearson", "spearman"}} for "raw"
    and each head's meaning view (None when the head does not know a language of the set).
    Returns (per-set results, {reason: [descriptions]} for heads that could not be applied)."""
    results, skipped = {}, {}
    for pairs in pair_sets:
        e1 = np.asarray(encoder.encode(pairs.sent1, pairs.lang1), dtype=np.float32)
        e2 = np.asarray(encoder.encode(pairs.sent2, pairs.lang2), dtype=np.float32)
        row = {
            "n": len(pairs.gold),
            "skipped_rows": dict(pairs.skipped),
            RAW: correlations(cosine_rows(e1, e2), pairs.gold),
        }
        for name, head in heads.items():
            try:
                m1, m2 = head.meaning(e1, pairs.lang1), head.meaning(e2, pairs.lang2)
            except UnknownLanguageError as exc:
                skipped.setdefault("head not trained on a language of the pair", []).append(
                    f"{name} on {pairs.name}: {exc}"
                )
                row[name] = None
                continue
            row[name] = correlations(cosine_rows(m1, m2), pairs.gold)
        results[pairs.name] = row
    return results, skipped


def average_correlations(per_set: dict, views: list[str]) -> dict:
    """{"n_languages", view: {"pearson", "spearman"} averaged over the sets where the view has a
    value (None if none)} ; "n_languages" counts all sets."""
    average: dict = {"n_languages": len(per_set)}
    for view in views:
        rows = [row[view] for row in per_set.values() if row.get(view) is not None]
        average[view] = {key: _mean([row[key] for row in rows]) for key in ("pearson", "spearman")}
    return average


def _mean(values: list) -> float | None:
    values = [value for value in values if value is not None and not math.isnan(value)]
    return float(np.mean(values)) if values else None


@dataclass
class HeadTrainingConfig:
    """`head_training:` where the heads' English-X training pairs come from: `flores_subdir` (a
    FLORES-200 split under the data root) or `pairs_dir` (a Moses-format corpus root, absolute or
    under the data root, e.g. the shared Tatoeba Challenge and TICO-19 pairs after `ems-prep
    import` and `ems-prep clean`), at most `max_pairs` per language (a sample drawn with `seed`),
    `valid_fraction` held out for early stopping and every selection."""

    flores_subdir: str | None = None
    pairs_dir: str | None = None
    valid_fraction: float = 0.1
    seed: int = 0
    max_pairs: int | None = None

    def check(self, heads: list[str]) -> None:
        """ValueError when `heads` are asked for without exactly one source of training pairs."""
        if heads and (self.flores_subdir is None) == (self.pairs_dir is None):
            raise ValueError(
                "head_training takes one of flores_subdir and pairs_dir (with heads), valid_fraction, "
                f"seed, max_pairs; got {self}"
            )

    def directory(self, data_root: Path) -> Path | None:
        """The corpus root (`pairs_dir`; an absolute one as it is) or else the FLORES split under
        `data_root`; None when the config names neither."""
        subdir = self.flores_subdir if self.pairs_dir is None else self.pairs_dir
        return None if subdir is None else Path(data_root) / subdir

    def source(self, data_root: Path) -> str:
        """Where the pairs come from, in words (the result's head_training.source)."""
        return f"{'FLORES-200' if self.pairs_dir is None else 'the corpus'} {self.directory(data_root)}"

    def pair_sets(self, languages: list[str], data_root: Path) -> list[SentencePairs]:
        """The English-X training pairs for every X in `languages` (MissingDataError naming the
        languages without any)."""
        directory = self.directory(data_root)
        pairs = flores_pairs(directory, languages) if self.pairs_dir is None else pivot_pairs(directory, languages)
        return capped(pairs, self.max_pairs, self.seed)


@dataclass(kw_only=True)
class HeadsConfig(TaskConfig):
    """The keys of a task that scores the heads' meaning views (configs/eval/{mlqe,sts2017}.yaml):
    `heads` (names in ems.heads.HEADS) and their `head_training`."""

    heads: list[str] = field(default_factory=list)
    head_training: HeadTrainingConfig = field(default_factory=HeadTrainingConfig)

    def __post_init__(self):
        self.head_training.check(self.heads)


def _with_head_data(
    pair_sets: list[RatedPairs], config: HeadsConfig, data_root: Path, errors: DataErrors
) -> list[RatedPairs]:
    """The pair sets whose languages all have training pairs for the heads; the others become
    data errors. (Without FLORES's English file no head trains: the training says so.)"""
    training = config.head_training
    if not config.heads or (training.pairs_dir is None and flores_file(training.directory(data_root), PIVOT) is None):
        return pair_sets
    found = score_items(
        pair_sets,
        lambda pairs: training.pair_sets([pairs.lang1, pairs.lang2], data_root),
        lambda pairs, _: pairs,
        key=lambda pairs: pairs.name,
        errors=errors,
    )
    return list(found.rows.values())


def evaluate_correlation_task(
    encoder: Encoder,
    task: TaskRun,
    metric: str,
    pair_sets: list[RatedPairs],
    data_errors: dict | None = None,
    dev_split: str | None = None,
    dev_pair_sets: list[RatedPairs] | None = None,
    dev_data_errors: dict | None = None,
) -> dict:
    """Train the heads of the task's config on its head_training pairs (under the run's data root)
    for the languages of `pair_sets`, then correlations per set and view. A pair set with a
    language that has no training pairs for the heads joins `data_errors` ({set name: reason},
    eval.faults) instead.
    Result: {"task", "metric", "views", "languages": {set name: row}, "average", "heads": training
    logs, "head_training", "skipped", "data_errors"}, plus "dev": {"split", "languages", "average", "data_errors"} when
    `dev_split` is given: the dev pair sets scored by the same heads (a dev set whose languages
    the heads were not trained for is a dev data error). The scored pairs never reach the heads'
    training or selection."""
    config, data_root, progress = task.config, task.options.data_root, task.options.progress
    name, training, source = config.name, config.head_training, config.head_training.source(data_root)
    skipped: dict[str, list] = {}
    errors = DataErrors(data_errors or {})
    pair_sets = _with_head_data(pair_sets, config, data_root, errors)
    languages = sorted({lang for pairs in pair_sets for lang in (pairs.lang1, pairs.lang2)})
    heads, logs = {}, {}
    if config.heads and pair_sets:
        if progress:
            print(
                f"{name}: training heads {', '.join(config.heads)} on en-X pairs of {source} for {', '.join(languages)}"
            )
        heads, logs, head_skips = train_heads(
            encoder, config.heads, training.pair_sets(languages, data_root), training.valid_fraction, training.seed
        )
        for reason, items in head_skips.items():
            skipped.setdefault(reason, []).extend(items)
    per_set, view_skips = evaluate_rated_pairs(encoder, pair_sets, heads)
    for reason, items in view_skips.items():
        skipped.setdefault(reason, []).extend(items)
    views = [RAW, *heads]
    dev = None
    if dev_split is not None:
        dev_errors = DataErrors(dev_data_errors or {})
        for pairs in dev_pair_sets or []:
            if not {pairs.lang1, pairs.lang2} <= set(languages):
                dev_errors[pairs.name] = (
                    f"no {name} {pairs.name} pairs in the scored split: the heads were not trained for it"
                )
        usable = [pairs for pairs in dev_pair_sets or [] if pairs.name not in dev_errors]
        dev_per_set, _ = evaluate_rated_pairs(encoder, usable, heads)
        dev = {
            "split": dev_split,
            "languages": dev_per_set,
            "average": average_correlations(dev_per_set, views) if dev_per_set else None,
            DATA_ERRORS: dict(dev_errors),
        }
    result = {
        "task": name,
        "metric": metric,
        "views": views,
        "languages": per_set,
        "average": average_correlations(per_set, views) if per_set else None,
        "heads": logs,
        "head_training": {
            "source": source,
            "languages": languages,
            "valid_fraction": training.valid_fraction,
            "seed": training.seed,
            "max_pairs": training.max_pairs,
        },
        "skipped": skipped,
        DATA_ERRORS: dict(errors),
    }
    if dev is not None:
        result["dev"] = dev
    return result
