"""Evaluation task types and their configs: what the `type:` of a task config (configs/eval/*.yaml) names.

A task type is one `TaskType` object, `TASK`, in one module: its metric, its config (a TaskConfig
dataclass: the keys it takes, typed), its evaluator (an `ems.encoder_kinds.Encoder` and a `TaskRun`
-> a result mapping), its markdown table and the score its chart shows per language. The built-in
types are the modules of eval/evaluators that define `TASK` (`type: qe` is eval/evaluators/qe.py,
which holds QeConfig, evaluate_qe and TASK); a config may also name any importable module that
defines `TASK` (`type: my_project.my_task`). `read_task_config` reads a config file into its type's
dataclass with ems.configs.load_config, the project's one config loader: keys the type does not
take, missing keys, values of the wrong type, the type's own checks (its __post_init__: `one_of`,
`refuse`), then misspelled language codes are one error naming the file. That config is the one
typed object of a task: the evaluator takes it as it is, in the TaskRun beside the data directory
and the run's options (language filter, sentence cap), and checks none of its keys again.
Adding a task is one new module plus its YAML.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from ems.cli import MissingDataError
from ems.configs import ConfigError, load_config, read_yaml
from ems.encoder_kinds import Encoder
from ems.languages import UnknownLanguageError, canonical_language

BUILTIN_PACKAGE = "eval.evaluators"  # where an undotted `type:` is a module
NOT_IN_TASK = "not a language of this task"
# A config's `languages`: a list of codes, or "all" (every language of the data set).
Languages = list[str] | Literal["all"]


@dataclass(kw_only=True)
class TaskConfig(Mapping):
    """The keys every task config has: `name` (the task's name in the results), `data_subdir` (its
    data under the data root), `type` (the task type; tatoeba when absent) and `source` (where the
    data comes from, named when it is missing). A task type's config is a subclass, defined in the
    module of its evaluator (qe and sts: a subclass of correlation's HeadsConfig adding the keys
    that pick their files), adding its own keys, each typed, with a default where it has one and
    checked in its __post_init__ where its type says too little. It also reads as the YAML
    mapping it came from (`config["name"]`, `"heads" in config`): the keys that have a value."""

    name: str
    data_subdir: str
    type: str = "tatoeba"
    source: str | None = None

    def __getitem__(self, key: str):
        value = getattr(self, key) if key in _keys(type(self)) else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self):
        return (key for key in _keys(type(self)) if getattr(self, key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def language_codes(self) -> list[str]:
        """Every language code the config names, in any form (checked when the config is read):
        here its `languages` unless "all"; a type whose keys name more extends it."""
        languages = self.get("languages")
        return list(languages) if isinstance(languages, list) else []


def _keys(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def one_of(key: str, value: str, choices: Iterable[str]) -> list[str]:
    """For a config's own checks: [] when `value` is one of `choices`, else the problem naming `key`."""
    choices = list(choices)
    return [] if value in choices else [f"{key} must be one of {', '.join(choices)}; got {value!r}"]


def refuse(config: object, problems: list[str]) -> None:
    """End a config's own checks (its __post_init__): one ConfigError naming its type and every
    problem, if there is one (load_config reports them with the file's name)."""
    if problems:
        raise ConfigError(type(config).__name__, problems)


@dataclass
class RunOptions:
    """What every evaluator gets besides its config: the language filter (None = all) in both
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
    """One task to run: its config (its type's TaskConfig), the directory of its data and the
    run's options."""

    config: TaskConfig
    data_dir: Path
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def name(self) -> str:
        return self.config["name"]


Evaluator = Callable[[Encoder, TaskRun], dict]


@dataclass(frozen=True)
class Headline:
    """The score a task's chart shows: `score(row)` for one language row (a percentage-like
    number), `label` its axis label."""

    label: str
    score: Callable[[dict], float]


@dataclass(frozen=True)
class TaskType:
    """An evaluation task type; its name is the config's `type` (a built-in's: its module's name).

    metric: the name of its score, stored in every result.
    run(encoder, TaskRun) -> result mapping with at least "task", "languages" ({item: row}),
      "average" and "skipped" (eval.results.TaskResult holds it): the type's evaluator.
    table(result mapping, title) -> the markdown section of eval/report.md.
    config: its TaskConfig subclass, the keys it takes (TaskConfig itself for a type with none of its own).
    headline: the chart's bar per language row; None keeps the task out of the chart."""

    metric: str
    run: Evaluator
    table: Callable[[dict, str], str]
    config: type[TaskConfig] = TaskConfig
    headline: Headline | None = None


def _defined_task(module_name: str) -> TaskType | None:
    task = getattr(importlib.import_module(module_name), "TASK", None)
    return task if isinstance(task, TaskType) else None


def builtin_task_types() -> list[str]:
    """The names of the built-in task types: the modules of eval/evaluators that define TASK (the
    others hold what several types share). Imports them all, so only the error path calls it."""
    modules = pkgutil.iter_modules([str(Path(__file__).with_name("evaluators"))])
    return sorted(module.name for module in modules if _defined_task(f"{BUILTIN_PACKAGE}.{module.name}"))


def task_type(name: str) -> TaskType:
    """The TaskType a config's `type` names: the TASK of eval/evaluators/<name>.py, or of the
    module `name` when it is dotted. ValueError naming the built-in types when there is none."""
    module_name = name if "." in name else f"{BUILTIN_PACKAGE}.{name}"
    try:
        task = _defined_task(module_name)
    except ModuleNotFoundError as error:
        if "." in name or error.name != module_name:
            raise ValueError(f"task type {name!r}: cannot import {module_name} ({error})") from None
        task = None
    if task is None and "." not in name:
        raise ValueError(
            f"unknown task type {name!r}; expected one of {', '.join(builtin_task_types())} "
            "or an importable module that defines TASK"
        )
    if task is None:
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
    return (
        codes
        if options.canonical is None
        else [code for code in codes if canonical_language(code) in options.canonical]
    )


def read_task_config(path: Path) -> tuple[TaskConfig, TaskType]:
    """A task config file (YAML with at least name and data_subdir; `type` defaults to tatoeba)
    read into its type's TaskConfig, and the type. One ConfigError (a ValueError) naming the file
    for an unknown type, keys the type does not take, missing keys, values of the wrong type, or
    else misspelled language codes; MissingDataError if the file is not there."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing task config {path}")
    raw = read_yaml(path)
    try:
        kind = task_type(str(raw.get("type", "tatoeba")))
    except ValueError as error:
        raise ConfigError(str(path), [str(error)]) from None
    config = load_config(kind.config, path)
    problems = []
    for code in config.language_codes():  # a misspelled code fails here, never as an empty result
        try:
            canonical_language(str(code))
        except UnknownLanguageError as error:
            problems.append(str(error))
    if problems:
        raise ConfigError(str(path), problems)
    return config, kind
