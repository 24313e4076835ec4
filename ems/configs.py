"""The project's one config system: dataclasses read from a YAML file, a mapping and `--set` items.

    cfg = load_config(TrainConfig, "configs/train/demo.yaml", ["max_steps=100", "model_overrides.d_model=64"])

In: a dataclass whose fields are typed with bool, int, float, str, None (in unions), Literal
values, lists, tuples and dicts of those, nested dataclasses (a YAML section),
`Annotated[dict, FieldsOf(X)]` (a section of some of dataclass X's fields, each typed as in X) and
unions of these (`list[str] | Literal["all"]`: the first member the value fits); a YAML file, a
nested mapping of values, and `key.sub=value` items. Out: the dataclass, each value of its
field's type, or one ConfigError that lists every problem found (unknown keys, missing keys,
values of the wrong type, then the dataclasses' own range checks), one line naming the file (or
the class) and each key.

A `--set` value is read as the type of the field it names: verbatim for a string field (`out=123`,
`duplicate_negatives=no`; YAML-quoted, `out="a b"`, it is unquoted), as a YAML scalar otherwise
(`lr=3e-4`, `max_minutes=null`, `seeds=[0, 1]`); for a field that is a string or another scalar
(`compile: bool | str`), as YAML reads it when that is one of the others (`compile=false`), else
verbatim. A `--set` key that names no field is a problem naming the item and the closest key.
In a YAML file, YAML's own types count: a number or a boolean for a string field is an error
(`release: 1.10` would read as 1.1), a string for a number field is read as one (YAML 1.1 reads
`3e-4` as a string). A key with nothing after it is an empty section, list or mapping.

Every YAML the project reads (a config file, a `--set` value, a run's train_config.yaml and
config history) goes through `yaml_value` / `load_yaml`: YAML's safe loader, except that a mapping
with the same key twice (which YAML would read as the last value, silently) is an error naming the
key and both lines. A merge key (`<<: *defaults`) still fills in the keys a mapping does not set.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml

from ems.artifacts import write_text

T = TypeVar("T")
_NONE = type(None)
_SCALARS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", _NONE: "null"}
_PLURALS = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}
_YAML_NULLS = ("", "~", "null", "Null", "NULL")


class ConfigError(ValueError):
    """Every problem of one config, on one line: "<where>: <problem>; <problem>". `where` is the
    file (or the class); each problem names its key, a nested one after its section ("clean: ...")."""

    def __init__(self, where: str, problems: Sequence[str]):
        self.where, self.problems = where, list(problems)
        super().__init__(f"{where}: " + "; ".join(self.problems))


@dataclasses.dataclass(frozen=True)
class FieldsOf:
    """`Annotated[dict, FieldsOf(X)]`: a mapping of some of dataclass X's fields (not those in
    `exclude`), each checked and converted as X types it; the value stays a plain dict."""

    cls: type
    exclude: tuple[str, ...] = ()


def load_config(
    cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = (), values: dict | None = None
) -> T:
    """`cls` from its defaults, the YAML file `path`, the nested mapping `values` and the `--set`
    items `overrides`, each later one winning (nested mappings are merged key by key)."""
    where = str(path) if path is not None else cls.__name__
    raw = read_yaml(path) if path is not None else {}
    problems: list[str] = []
    for layer in (values or {}, _parse_overrides(cls, overrides, problems)):
        raw = merge(raw, layer)
    config = _section(raw, cls, "", problems)
    if problems:
        raise ConfigError(where, problems)
    return config


def read_yaml(path: str | Path) -> dict:
    """A YAML file's top-level mapping ({} for an empty file); FileNotFoundError, or ConfigError
    naming the file and the line and column of a syntax error (load_yaml)."""
    data = load_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), [f"expected a mapping of config keys, got {_shown(data)}"])
    return data


def load_yaml(path: str | Path) -> Any:
    """The value in the YAML file `path` (yaml_value: a key twice in one mapping is refused);
    FileNotFoundError (IsADirectoryError for a directory), or ConfigError naming the file and what is
    wrong: not UTF-8, a syntax error (its line and column), a duplicate key (the key and both lines)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"config file {path} is a directory: give the YAML file itself")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        return yaml_value(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), [f"not UTF-8 text ({error.reason} at byte {error.start})"]) from None
    except DuplicateKeyError as error:
        raise ConfigError(str(path), [f"{error.problem}: YAML would keep only the last value; remove one"]) from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [f"not a readable YAML file: {_yaml_problem(error)}"]) from None


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A YAML mapping holds the same key twice; `problem` names the key (its path from the top:
    `model_overrides.d_model`, `files[2].name`) and the lines of both."""


# The limits of every YAML text the project reads (a file or a `--set` value): a config is small and
# shallow, and PyYAML's composer and constructor recurse once per level (a RecursionError deeper).
MAX_YAML_DEPTH = 100
MAX_YAML_CHARS = 4 << 20


class YAMLLimitError(yaml.YAMLError):
    """A YAML text over MAX_YAML_CHARS characters or nested deeper than MAX_YAML_DEPTH levels."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def yaml_value(text: str) -> Any:
    """yaml.safe_load(text), except that a mapping with a key twice is DuplicateKeyError, and a text
    over MAX_YAML_CHARS characters or nested deeper than MAX_YAML_DEPTH levels YAMLLimitError (both
    yaml.YAMLErrors), instead of silently the last value or a RecursionError."""
    if len(text) > MAX_YAML_CHARS:
        raise YAMLLimitError(f"{len(text)} characters, more than the {MAX_YAML_CHARS} a config may hold")
    _check_flow_depth(text)
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLLimitError(f"nested more than {MAX_YAML_DEPTH} levels deep") from None
        if node is None:
            return None
        _check_unique_keys(loader, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_flow_depth(text: str) -> None:
    """YAMLLimitError for a text whose brackets ([ and {) nest deeper than MAX_YAML_DEPTH, found by a
    scan of the text before PyYAML recurses into it (an upper bound: brackets inside quotes count)."""
    depth = 0
    for char in text:
        if char in "[{":
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise YAMLLimitError(f"nested more than {MAX_YAML_DEPTH} levels deep")
        elif char in "]}":
            depth = max(0, depth - 1)


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_unique_keys(loader: yaml.SafeLoader, root: yaml.Node) -> None:
    """DuplicateKeyError for the first mapping under `root` (a composed document) with a key twice."""
    pending, seen_nodes = [(root, "", 0)], set()
    while pending:
        node, where, depth = pending.pop()
        if depth > MAX_YAML_DEPTH:  # block-style nesting, which _check_flow_depth does not see
            raise YAMLLimitError(f"nested more than {MAX_YAML_DEPTH} levels deep")
        if id(node) in seen_nodes:  # an alias of a node already checked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending.extend((item, f"{where}[{i}]", depth + 1) for i, item in reversed(list(enumerate(node.value))))
        elif isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            children = []
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:  # `<<: *defaults`: keys set beside it override the merged ones
                    children.append((value_node, where, depth))
                    continue
                key = loader.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
                name = f"{where}.{key}" if where else str(key)
                try:
                    earlier = first_line.get(key) if key is not None else None
                except TypeError:  # unhashable: the constructor refuses it anyway
                    earlier = None
                if earlier is not None:
                    raise DuplicateKeyError(
                        problem=f"key {name!r} appears twice, at lines {earlier} and {key_node.start_mark.line + 1}",
                        problem_mark=key_node.start_mark,
                    )
                if key is not None:
                    first_line[key] = key_node.start_mark.line + 1
                children.append((value_node, name, depth + 1))
            pending.extend(reversed(children))


def _yaml_problem(error: yaml.YAMLError) -> str:
    """ "line L, column C: <problem> (<context> at line L, column C)" of a YAML syntax error."""

    def at(mark) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    problem, mark = getattr(error, "problem", None), getattr(error, "problem_mark", None)
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    if not problem:
        return " ".join(str(error).split())
    text = f"{at(mark)}: {problem}" if mark is not None else problem
    if context:
        text += f" ({context}{f' at {at(context_mark)}' if context_mark is not None else ''})"
    return text


def merge(base: dict, extra: dict) -> dict:
    """`extra` over `base`, nested mappings merged key by key; neither is modified."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def as_values(value: Any) -> Any:
    """A checked config value as a YAML file would hold it (its dataclasses as mappings), for
    load_config's `values`."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return {key: as_values(item) for key, item in value.items()} if isinstance(value, dict) else value


def dump_config(config: Any, path: str | Path) -> None:
    """`config` (a dataclass) as YAML in `path`, whole or not at all (ems.artifacts.write_text)."""
    write_text(path, yaml.safe_dump(dataclasses.asdict(config), sort_keys=False), "config")


def out_of_range(name: str, value: Any, low: float | None = None, high: float | None = None) -> list[str]:
    """For a dataclass's own checks: [] when `value` is a finite number within [low, high], else the
    problem naming `name`, what it must be and the value."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and math.isfinite(value) and (low is None or value >= low) and (high is None or value <= high):
        return []
    kind = "an integer" if isinstance(value, int) and number else "a finite number"
    bounds = (
        f" from {low} to {high}"
        if low is not None and high is not None
        else f" >= {low}"
        if low is not None
        else f" <= {high}"
        if high is not None
        else ""
    )
    return [f"{name} must be {kind}{bounds}, got {value!r}"]


# --- `--set` items ------------------------------------------------------------------------------


def _parse_overrides(cls: type, items: Sequence[str], problems: list[str]) -> dict:
    """["max_steps=100", "model_overrides.d_model=64"] -> {"max_steps": 100, "model_overrides": {"d_model": 64}},
    each value read as the type of the field its key names (_override_value). An item whose key names no
    field is a problem naming the item (and the closest field), left out of the result."""
    result: dict = {}
    for item in items:
        key, sep, text = item.partition("=")
        path = key.split(".")
        shown = item if len(item) <= 200 else f"{item[:100]}...{item[-20:]}"  # a huge value: its ends
        if not sep or not all(path):
            problems.append(f"--set {item!r} is not of the form key=value (nested keys: section.key=value)")
            continue
        hint, unknown = _hint_at(cls, path)
        if unknown is not None:
            problems.append(f"--set {shown!r}: {unknown}")
            continue
        try:
            value = _override_value(text, _options(_unwrap(hint)[0]))
        except yaml.YAMLError as error:
            problems.append(f"--set {shown!r}: not a YAML value: {_yaml_problem(error)}")
            continue
        node = result
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = value
    return result


def _override_value(text: str, options: tuple) -> Any:
    """A `--set` value `text` for a field of the union `options`: a YAML value, except for a field that
    may be a string, where it is verbatim (YAML would read `no` as false, `1.10` as 1.1; a quoted string
    is unquoted, an empty or null text is None where the field allows it) unless YAML reads it as one of
    the field's other scalar types (`compile=false` for a true/false/"auto" field)."""
    if str not in options or text[:1] in ("'", '"'):
        return yaml_value(text)
    if _NONE in options and text in _YAML_NULLS:
        return None
    others = [option for option in options if option in (bool, int, float)]
    if others:
        try:
            value = yaml_value(text)
        except yaml.YAMLError:
            return text
        if type(value) in others or (type(value) is int and float in others):
            return value
    return text


def _hint_at(hint: Any, path: list[str]) -> tuple[Any, str | None]:
    """(the type of the value at `path` (keys) inside a value of type `hint`, Any where untyped; None),
    or (Any, the problem) when a key names no field of a dataclass or FieldsOf section on the way:
    "[SECTION: ]unknown key(s) ['KEY']; did you mean 'NAME'?" (else the known keys)."""
    for depth, part in enumerate(path):
        hint, fields_of = _unwrap(hint)
        if fields_of is not None:
            hint = fields_of.cls
        if dataclasses.is_dataclass(hint):
            known = _known(hint, fields_of)
            if part not in known:
                excluded = fields_of is not None and part in fields_of.exclude  # the known keys say why
                close = [] if excluded else difflib.get_close_matches(part, known, n=1)
                known_keys = f"known{_known_of(hint, fields_of)}: {sorted(known)}"
                advice = f"did you mean {close[0]!r}?" if close else known_keys
                return Any, _at(".".join(path[:depth]), f"unknown key(s) [{part!r}]; {advice}")
            hint = _hints(hint)[part]
        elif typing.get_origin(hint) is dict and len(typing.get_args(hint)) == 2:
            hint = typing.get_args(hint)[1]
        else:
            return Any, None
    return hint, None


def _known(cls: type, fields_of: FieldsOf | None) -> list[str]:
    """The keys a section of dataclass `cls` takes (with `fields_of`: not its excluded ones)."""
    return [f.name for f in dataclasses.fields(cls) if f.init and not (fields_of and f.name in fields_of.exclude)]


def _known_of(cls: type, fields_of: FieldsOf | None) -> str:
    """What the known keys of a FieldsOf section are, for the unknown-key problem ("" for a dataclass)."""
    return f" ({cls.__name__} fields{''.join(f', not {name}' for name in fields_of.exclude)})" if fields_of else ""


# --- checking and converting values --------------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _unwrap(hint: Any) -> tuple[Any, FieldsOf | None]:
    """(the type without Annotated, its FieldsOf or None)."""
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        return base, next((extra for extra in extras if isinstance(extra, FieldsOf)), None)
    return hint, None


def _options(hint: Any) -> tuple:
    """The members of a union (X | Y, Optional[X]), or (hint,)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _shown(value: Any) -> str:
    return "null" if value is None else repr(value)


def _at(section: str, text: str) -> str:
    return f"{section}: {text}" if section else text


def _join(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _describe(hint: Any) -> str:
    hint, fields_of = _unwrap(hint)
    if fields_of is not None:
        return f"a mapping of {fields_of.cls.__name__} keys"
    options = _options(hint)
    if len(options) > 1:
        return " or ".join(_describe(option) for option in options)
    if hint in _SCALARS:
        return _SCALARS[hint]
    if typing.get_origin(hint) is Literal:
        return " or ".join(map(repr, typing.get_args(hint)))
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} keys"
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if origin in (list, tuple):
        return f"a list of {_PLURALS[args[0]]}" if args and args[0] in _PLURALS else "a list"
    if origin is dict:
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


def _section(value: Any, cls: type, section: str, problems: list[str], fields_of: FieldsOf | None = None) -> Any:
    """`value` (a mapping; None: empty) as dataclass `cls`, or with `fields_of` as a dict of some of
    its fields; None after appending the problems to `problems`."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.append(_at(section, f"expected a mapping of {cls.__name__} keys, got {_shown(value)}"))
        return None
    found = len(problems)
    hints = _hints(cls)
    known = _known(cls, fields_of)
    unknown = [key for key in value if key not in known]
    if unknown:
        known_keys = f"known{_known_of(cls, fields_of)}: {sorted(known)}"
        problems.append(_at(section, f"unknown key(s) {sorted(map(str, unknown))}; {known_keys}"))
    if fields_of is None:
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.init
            and f.name not in value
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            problems.append(_at(section, f"missing required key(s) {missing}"))
    converted = {key: _convert(item, hints[key], key, section, problems) for key, item in value.items() if key in known}
    if len(problems) > found:
        return None
    if fields_of is not None:
        return converted
    try:
        return cls(**converted)
    except ConfigError as error:  # the dataclass's own checks
        problems.extend(_at(section, problem) for problem in error.problems)
    except ValueError as error:
        problems.append(_at(section, str(error)))
    return None


def _convert(value: Any, hint: Any, key: str, section: str, problems: list[str]) -> Any:
    """`value` as type `hint` (the field `key` of `section`), or None after appending a problem."""
    hint, fields_of = _unwrap(hint)
    options = _options(hint)
    if value is None and _NONE in options:
        return None
    if fields_of is not None:
        return _section(value, fields_of.cls, _join(section, key), problems, fields_of)
    if hint is Any or hint is object:
        return value
    one = [option for option in options if option is not _NONE]
    if len(one) > 1 and not all(option in _SCALARS for option in one):
        return _union(value, one, hint, key, section, problems)
    target = one[0] if len(one) == 1 else hint
    if dataclasses.is_dataclass(target):
        return _section(value, target, _join(section, key), problems)
    origin, args = typing.get_origin(target) or target, typing.get_args(target)
    found = len(problems)
    if origin in (list, tuple) and isinstance(value, (list, tuple, type(None))):
        items = value or []
        variadic = len(args) == 1 or len(args) == 2 and args[1] is Ellipsis
        if args and not variadic and len(items) != len(args):
            problems.append(_at(section, f"{key} must be a list of {len(args)} values, got {_shown(value)}"))
            return None
        types_ = [args[0] if variadic else args[i] for i in range(len(items))] if args else [Any] * len(items)
        converted = [
            _convert(item, type_, f"{key}[{i}]", section, problems)
            for i, (item, type_) in enumerate(zip(items, types_))
        ]
        return None if len(problems) > found else origin(converted)
    if origin is dict and isinstance(value, (dict, type(None))):
        key_type, value_type = args if args else (Any, Any)
        mapping = value or {}
        bad_keys = [k for k in mapping if key_type is str and not isinstance(k, str)]
        if bad_keys:
            problems.append(_at(section, f"{key} has key(s) {bad_keys} that are not strings (quote them in YAML)"))
        converted = {k: _convert(v, value_type, f"{key}.{k}", section, problems) for k, v in mapping.items()}
        return None if len(problems) > found else converted
    if origin is Literal and any(value == choice and type(value) is type(choice) for choice in args):
        return value
    if one and all(option in _SCALARS for option in one):
        converted = _scalar(value, one)
        if converted is not _INVALID:
            return converted
    note = ""
    if str in one and isinstance(value, bool):
        note = " (YAML reads no, yes, off, on as false or true: quote it)"
    elif str in one and isinstance(value, (int, float)):
        note = " (quote it in YAML)"
    problems.append(_at(section, f"{key} must be {_describe(hint)}, got {_shown(value)}{note}"))
    return None


def _union(value: Any, options: list, hint: Any, key: str, section: str, problems: list[str]) -> Any:
    """`value` as the first of `options` (a union's members) it fits, or None after appending a
    problem: the one member of the value's own shape (a list, a mapping) says what is wrong inside
    it, else the problem names every member."""
    shape = "list" if isinstance(value, (list, tuple)) else "mapping" if isinstance(value, dict) else None
    shaped = []
    for option in options:
        attempt: list[str] = []
        converted = _convert(value, option, key, section, attempt)
        if not attempt:
            return converted
        if shape is not None and shape == _shape(option):
            shaped.append(attempt)
    problems.extend(
        shaped[0] if len(shaped) == 1 else [_at(section, f"{key} must be {_describe(hint)}, got {_shown(value)}")]
    )
    return None


def _shape(hint: Any) -> str | None:
    """ "list" or "mapping": what a value of type `hint` is in YAML; None for a scalar."""
    hint, fields_of = _unwrap(hint)
    origin = typing.get_origin(hint) or hint
    if origin in (list, tuple):
        return "list"
    if origin is dict or fields_of is not None or dataclasses.is_dataclass(hint):
        return "mapping"
    return None


_INVALID = object()


def _scalar(value: Any, allowed: list[type]) -> Any:
    """`value` as one of the scalar types `allowed` where that is unambiguous, else _INVALID: an int
    is a float for a float field, a string that reads as a number is one for a number field, and a
    float with no fraction is an int for an int field."""
    if type(value) in allowed:
        return value
    if isinstance(value, bool) or value is None:
        return _INVALID
    if float in allowed and isinstance(value, (int, str)):
        try:
            return float(value)
        except ValueError:
            pass
    if int in allowed and isinstance(value, (str, float)):
        try:
            number = float(value)
        except ValueError:
            return _INVALID
        if number.is_integer():
            return int(number)
    return _INVALID
