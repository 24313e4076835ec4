"""The loop every evaluator runs over its items (languages, pairs, tracks, FLORES files).

In: the items, how to name one (`key`), why to leave one out (`skip`: not covered by the encoder,
not in the data set, ...), how to read its data (`read`) and how to score it (`score`). Out:
`ItemScores`: {key: row} of the items scored, {reason: [keys]} of those left out and the data
errors (eval.faults) of those whose data could not be read; the other items still run.
`scored_result` makes them an evaluator's result mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tqdm import tqdm

from ems.languages import covered_language
from eval.faults import DATA_ERRORS, DataErrors
from eval.task import TaskRun

NOT_COVERED = "not covered by the encoder"
Item = TypeVar("Item")
Data = TypeVar("Data")


@dataclass
class ItemScores(Generic[Data]):
    """rows: {key: score(item, data)} (or the data, without a scorer); skipped: {reason: [keys]};
    errors: {key: why its data could not be read}."""

    rows: dict[str, Data | dict] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    errors: DataErrors = field(default_factory=DataErrors)


def score_items(
    items: Iterable[Item],
    read: Callable[[Item], Data],
    score: Callable[[Item, Data], dict | None] | None = None,
    *,
    key: Callable[[Item], str] = str,
    skip: Callable[[Item], str | None] | None = None,
    skipped: dict[str, list[str]] | None = None,
    errors: DataErrors | None = None,
    desc: str | None = None,
    unit: str = "lang",
    progress: bool = False,
) -> ItemScores:
    """For each item in order: `skip(item)` -> a reason to leave it out (its key is listed under
    the reason) or None; `read(item)` -> its data, a DATA_FAULTS error recorded under its key
    instead (eval.faults.DataErrors.read); `score(item, data)` -> its row, None for no row (the
    scorer said why in `skipped` or `errors`, which it may share by passing them in). Without a
    scorer the row is the data. ValueError when two items' rows have one key."""
    result = ItemScores(
        skipped=skipped if skipped is not None else {}, errors=errors if errors is not None else DataErrors()
    )
    for item in tqdm(items, desc=desc, unit=unit, disable=not progress):
        name = key(item)
        reason = skip(item) if skip is not None else None
        if reason is not None:
            result.skipped.setdefault(reason, []).append(name)
            continue
        data = result.errors.read(name, read, item)
        if data is None:
            continue
        row = data if score is None else score(item, data)
        if row is not None:
            if name in result.rows:
                raise ValueError(f"{desc or 'items'}: more than one test set for {name}")
            result.rows[name] = row
    return result


def not_covered(covered: list[str] | None, *langs: str) -> str | None:
    """NOT_COVERED unless the encoder's languages (`covered`, None = any) cover every one of
    `langs` (ems.languages.covered_language): a `skip` for score_items."""
    return None if all(covered_language(lang, covered) is not None for lang in langs) else NOT_COVERED


def scored_result(task: TaskRun, metric: str, settings: dict, scored: ItemScores, average: dict | None) -> dict:
    """The result mapping of an evaluator whose rows are `scored`'s: {"task", "metric", "data_dir",
    "settings", "languages": the rows, "average", "skipped", "data_errors"}."""
    return {
        "task": task.name,
        "metric": metric,
        "data_dir": str(task.data_dir),
        "settings": settings,
        "languages": scored.rows,
        "average": average,
        "skipped": scored.skipped,
        DATA_ERRORS: dict(scored.errors),
    }
