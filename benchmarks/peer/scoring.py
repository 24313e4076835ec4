"""How the peer benchmark (benchmarks/peer/sentence_transformers.py) scores every model, EMS and peer
alike: eval.run_all on the suite and the held-out pairs, each task reduced to its mean P@1 (higher is
better) or, for an error rate such as xSIM's, to its mean error under the task's name + ERROR_SUFFIX
(lower is better: `lower_is_better`). A helper of that benchmark: no command line.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ems.cli import UserError

METRICS = {"held-out": "heldout", "Tatoeba": "tatoeba", "FLORES-200": "flores200"}  # column -> task; P@1 means
ERROR_SUFFIX = " error"  # the column of a task whose metric is an error rate (xsim_error): lower is better


def lower_is_better(column: str) -> bool:
    """Whether a score column of `score` is an error rate (the best of several is the lowest)."""
    return column.endswith(ERROR_SUFFIX)


@dataclass
class Scoring:
    """How every model is scored: the suite and held-out pairs of `prepared`, on `languages` (None: all)."""

    prepared: Path
    data_dir: Path
    languages: list[str] | None
    suite: Path
    task_dirs: dict[str, Path] | None = None  # {task name: its data directory}, as ems-eval's --task-dir


def score(encoder_spec: str, scoring: Scoring, out: Path) -> dict[str, float]:
    """eval.run_all of the encoder `encoder_spec` (ems.encoder_kinds) on the suite and the held-out pairs,
    results in out/results.json; returns the average P@1 (both directions) of each task of METRICS and of
    every other task of the suite with a P@1 average (e.g. a development set), and the average error
    rate of each task with one (xSIM: column "TASK error"); other metrics (accuracy) are left out. Embeddings are cached
    for the run only: FLORES-200's bitext and xSIM tasks (and every language's English side) encode
    the same sentences."""
    from ems.encoder_kinds import load_encoder
    from eval.run_all import run_all

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="embeddings-", dir=out) as cache:
        results = run_all(
            load_encoder(encoder_spec, Path(cache)),
            scoring.data_dir,
            heldout_dir=scoring.prepared / "corpus" / "heldout",
            out_dir=out,
            languages=scoring.languages,
            suite_path=scoring.suite,
            task_dirs=scoring.task_dirs,
            progress=False,
            print_tables=False,
        )
    scores = {}
    for column, task in METRICS.items():
        result = results.get(task)
        if result is None or not result.ran:
            raise UserError(f"{task} could not be scored ({result.error if result else 'not in the suite'}); see {out}")
        scores[column] = float(result.to_dict()["average"]["mean"])
    for task, result in results.items():
        row = result.to_dict()
        mean = (row.get("average") or {}).get("mean") if result.ran else None
        if task in METRICS.values() or not isinstance(mean, (int, float)):
            continue
        if row["metric"] == "p_at_1":
            scores[task] = float(mean)
        elif row["metric"].endswith("_error"):
            scores[task + ERROR_SUFFIX] = float(mean)
    return scores
