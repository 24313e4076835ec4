"""Evaluation task types: what the `type:` of a task config (configs/eval/*.yaml) names.

A task type is one `TaskType` object, `TASK`, in one module: its metric, the config keys it
takes, its runner (encoder + the config and data directory -> a result mapping), its markdown
table and the score its chart shows per language. The built-in types are the modules of
eval/tasks (`type: qe` is eval/tasks/qe.py); a config may also name any importable module that
defines `TASK` (`type: my_project.my_task`). The evaluators themselves (eval/evaluators/tatoeba.py,
eval/evaluators/correlation.py, ...) know nothing of configs: a task module is the glue, as MTEB keeps tasks
(data plus metadata) apart from its evaluators. Adding a task is one new module plus its YAML.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ems.languages import canonical_language

# Keys every task config may have besides the task type's own `settings`.
COMMON_KEYS = frozenset({"type", "name", "data_subdir", "languages", "pairs", "source"})
NOT_IN_TASK = "not a language of this task"


@dataclass
class RunOptions:
    """What every task runner gets besides its config: the language filter (None = all) in both
    code systems, the per-language sentence cap, progress bars, the data root (for tasks that
    also read another task's data, e.g. FLORES to train heads) and the output directory (for
    tasks that write files besides results.json; None = write nothing)."""

    canonical: list[str] | None = None
    tatoeba_codes: list[str] | None = None
    without_tatoeba: list[str] | None = None
    max_sentences: int | None = None
    progress: bool = True
    data_root: Path | None = None
    out_dir: Path | None = None


@dataclass
class TaskRun:
    """One task to run: its config (a mapping read from YAML, keys checked against the type's
    `settings`), the file it came from, the directory of its data and the run's options."""

    config: dict
    config_path: Path
    data_dir: Path
    options: RunOptions

    @property
    def name(self) -> str:
        return self.config["name"]

    def pick(self, keys) -> dict:
        """{key: value} of the config's keys among `keys`."""
        return {key: self.config[key] for key in keys if key in self.config}


Runner = Callable[[object, TaskRun], dict]


@dataclass(frozen=True)
class TaskType:
    """An evaluation task type.

    name: the type's name (a built-in's is its module's name and the config's `type`). metric: the name of its score, stored in every result.
    settings: the config keys it takes besides COMMON_KEYS (others are an error when read).
    run(encoder, TaskRun) -> result mapping with at least "task", "languages" ({item: row}),
      "average" and "skipped" (eval.results.TaskResult holds it).
    table(result mapping, title) -> the markdown section of eval/report.md.
    headline(row) -> the chart's bar for one language row (a percentage-like number), with
      `headline_label` as its axis label; None keeps the task out of the chart."""

    name: str
    metric: str
    run: Runner
    table: Callable[[dict, str], str]
    settings: frozenset[str] = frozenset()
    headline: Callable[[dict], float] | None = None
    headline_label: str = ""

    def unknown_keys(self, config: dict) -> list[str]:
        return sorted(set(config) - COMMON_KEYS - self.settings)


def builtin_task_types() -> list[str]:
    """The names of the task types in eval/tasks."""
    import eval.tasks

    return sorted(module.name for module in pkgutil.iter_modules(eval.tasks.__path__))


def task_type(name: str) -> TaskType:
    """The TaskType a config's `type` names: eval/tasks/<name>.py, or the module `name` when it
    is dotted. ValueError naming the built-in types when there is none."""
    module_name = name if "." in name else f"eval.tasks.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if "." not in name and error.name == module_name:
            raise ValueError(f"unknown task type {name!r}; expected one of {', '.join(builtin_task_types())} "
                             "or an importable module that defines TASK") from None
        raise ValueError(f"task type {name!r}: cannot import {module_name} ({error})") from None
    task = getattr(module, "TASK", None)
    if not isinstance(task, TaskType):
        raise ValueError(f"task type {name!r}: {module_name} defines no TASK = TaskType(...)")
    return task


def filtered_languages(languages: list[str], options: RunOptions) -> tuple[list[str], dict]:
    """The task's `languages` that the run's language filter keeps, and {NOT_IN_TASK: filter
    codes the task lacks} (empty without a filter or when nothing is left out)."""
    if options.canonical is None:
        return languages, {}
    outside = [lang for lang in options.canonical if lang not in languages]
    return [lang for lang in languages if lang in options.canonical], ({NOT_IN_TASK: outside} if outside else {})


def pair_in_filter(languages: list[str], options: RunOptions) -> bool:
    """Whether the filter keeps a pair or track of these languages (English always passes)."""
    return options.canonical is None or set(languages) - {"en"} <= set(options.canonical)


def codes_in_filter(codes: list[str], options: RunOptions) -> list[str]:
    """Codes in any form (deu, cmn_Hans, fra-CA) whose canonical code the language filter keeps."""
    return codes if options.canonical is None else [code for code in codes if canonical_language(code) in options.canonical]
