"""A PNG bar chart of evaluation results: one panel per task that ran and has a headline score
(eval.task.TaskType.headline: Tatoeba / held-out / bitext: mean P@1; xSIM: xx→en error rate; BUCC:
test F1, else training F1; large retrieval: P@1; classification: accuracy on each non-train
language; QE / STS: Pearson r × 100 of the raw embeddings), one bar per language."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from eval.results import TaskResult  # noqa: E402
from eval.task import task_type  # noqa: E402

CHART_FILE = "results.png"


def save_figure(fig, path: str | Path) -> Path:
    """Lay out `fig`, write it to `path` (PNG, parent folders created), close it; returns the path."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _charted(result: TaskResult) -> bool:
    return result.ran and bool(result.languages) and task_type(result.type).headline is not None


def write_chart(results: dict[str, TaskResult], path: Path) -> Path | None:
    """Write the chart of {task: TaskResult} to `path`; returns it, or None if no task has scores."""
    panels = [(name, r) for name, r in results.items() if _charted(r)]
    if not panels:
        return None
    widest = max(len(r.languages) for _, r in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(6.0, 0.22 * widest + 2), 2.8 * len(panels)), squeeze=False)
    for ax, (name, result) in zip(axes[:, 0], panels):
        headline = task_type(result.type).headline
        score, label = headline.score, headline.label
        langs = list(result.languages)
        ax.bar(range(len(langs)), [score(result.languages[lang]) for lang in langs], color="tab:blue")
        ax.set_xticks(range(len(langs)), langs, rotation=90 if len(langs) > 12 else 0, fontsize=7)
        ax.set_ylim(0, 100)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(label, fontsize=8)
    return save_figure(fig, path)


def write_comparison_chart(results_by_model: dict[str, dict[str, TaskResult]], path: Path) -> Path | None:
    """Write a chart comparing models side by side to `path`: one panel per task that ran for
    every model ({model name: {task: TaskResult}}), one group of bars per language (one bar per
    model, the task's headline score) and an average group; returns the path, or None if no task ran."""
    names = list(results_by_model)
    tasks = [
        task
        for task in results_by_model[names[0]]
        if all(task in r and _charted(r[task]) for r in results_by_model.values())
    ]
    if not tasks:
        return None
    widest = max(len(results_by_model[names[0]][task].languages) for task in tasks)
    fig, axes = plt.subplots(
        len(tasks), 1, figsize=(max(7.0, 0.5 * (widest + 1) * len(names) + 2), 3.0 * len(tasks)), squeeze=False
    )
    width = 0.8 / len(names)
    for ax, task in zip(axes[:, 0], tasks):
        headline = task_type(results_by_model[names[0]][task].type).headline
        score, label = headline.score, headline.label
        langs = list(results_by_model[names[0]][task].languages)
        for k, name in enumerate(names):
            rows = results_by_model[name][task].languages
            values = [score(rows[lang]) if lang in rows else 0.0 for lang in langs]
            values.append(sum(values) / len(values))
            ax.bar([i + k * width for i in range(len(langs) + 1)], values, width, label=name)
        ax.set_xticks(
            [i + width * (len(names) - 1) / 2 for i in range(len(langs) + 1)],
            langs + ["average"],
            rotation=90 if len(langs) > 16 else 0,
            fontsize=7,
        )
        ax.set_ylim(0, 100)
        ax.set_title(task, fontsize=10)
        ax.set_ylabel(label, fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    return save_figure(fig, path)
