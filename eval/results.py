"""Typed evaluation results and the results.json file.

`TaskResult` is one task's outcome: the fields every task has (what ran, per-item rows, the
average, what was skipped or could not be read, a task-level error) plus `details`, the task
type's own fields (settings, the heads' training logs, the dev split, groups, ...). Rows and
averages stay mappings: each task type defines their columns (see its evaluator's docstring).

results.json is {"schema_version": SCHEMA_VERSION, "tasks": {name: TaskResult.to_dict()}}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eval.faults import DATA_ERRORS

SCHEMA_VERSION = 2
RESULTS_FILE = "results.json"


@dataclass(eq=True)
class TaskResult(Mapping):
    """One task's result. `error` set means the task did not run (then the rest is empty);
    `data_errors` ({item: reason}) are items whose data could not be read; `skipped`
    ({reason: [items]}) items left out by design; `truncated_sentences` counts sentences the
    encoder cut to its max_len; `languages` is None for a task without per-item rows (the
    language-ID probe) or one that did not run. It is also a read-only mapping over its JSON form (`to_dict`),
    so a path into results.json (`result["average"]["mean"]`) reads the same here."""

    task: str
    type: str
    metric: str | None = None
    languages: dict[str, dict] | None = None
    average: dict | None = None
    skipped: dict[str, list] = field(default_factory=dict)
    data_errors: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    truncated_sentences: int = 0
    details: dict = field(default_factory=dict)

    COMMON = ("task", "type", "metric", "languages", "average", "skipped", DATA_ERRORS, "error", "truncated_sentences")

    @classmethod
    def from_dict(cls, type_name: str, result: dict, metric: str | None = None) -> TaskResult:
        """From an evaluator's mapping (or a results.json entry): its common keys become fields
        (`metric` fills a missing metric), every other key goes to `details`."""
        common = {key: result[key] for key in cls.COMMON if key in result and key != "type"}
        if common.get("metric") is None and metric is not None:
            common["metric"] = metric
        details = {key: value for key, value in result.items() if key not in cls.COMMON}
        for key in ("skipped", DATA_ERRORS):
            if common.get(key) is None:
                common.pop(key, None)
        return cls(type=result.get("type", type_name), **common, details=details)

    @classmethod
    def not_run(cls, task: str, type_name: str, error: str) -> TaskResult:
        return cls(task=task, type=type_name, error=error)

    @property
    def ran(self) -> bool:
        return self.error is None

    def __getitem__(self, key: str):
        return self.to_dict()[key]

    def __iter__(self):
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def to_dict(self) -> dict:
        """The flat mapping the tables read and results.json stores: task and type; unless the
        task never ran (an error and nothing else), metric, languages (if it has rows), average
        and skipped; error, data errors and truncations when there are any; then `details`."""
        out = {"task": self.task, "type": self.type}
        never_ran = self.error is not None and self.metric is None and self.languages is None
        if not never_ran:
            out.update(
                metric=self.metric,
                **({} if self.languages is None else {"languages": self.languages}),
                average=self.average,
                skipped=self.skipped,
            )
        if self.error is not None:
            out["error"] = self.error
        if self.data_errors:
            out[DATA_ERRORS] = self.data_errors
        if self.truncated_sentences:
            out["truncated_sentences"] = self.truncated_sentences
        return {**out, **self.details}


def write_results_json(results: dict[str, TaskResult], path: Path) -> Path:
    """Write {task name: TaskResult} to `path` as results.json (schema SCHEMA_VERSION)."""
    document = {"schema_version": SCHEMA_VERSION, "tasks": {name: result.to_dict() for name, result in results.items()}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_results(path: Path) -> dict[str, TaskResult]:
    """{task name: TaskResult} from a results.json (or the directory holding one), schema SCHEMA_VERSION.
    ValueError for a newer schema or a file that is no results file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a results file (expected a JSON object)")
    version = document.get("schema_version")
    if version is None:
        raise ValueError(f"{path}: not a results file of this code (no schema_version): evaluate the model again")
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"{path}: results schema version {version} is newer than this code's {SCHEMA_VERSION}; update ems"
        )
    return {name: TaskResult.from_dict(entry["type"], entry) for name, entry in document["tasks"].items()}
