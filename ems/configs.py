"""Typed configs from YAML files plus `key=value` command-line overrides."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """["max_steps=100", "model_overrides.d_model=128"] -> {"max_steps": 100, "model_overrides": {"d_model": 128}}.

    Values are read as YAML scalars, so numbers, booleans, null and lists come out typed.
    """
    result: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form key=value")
        *parents, leaf = key.split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return result


def _merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | dict | None = None) -> T:
    """Build dataclass `cls` from a YAML file (optional) and overrides; unknown keys are an error."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        values = yaml.safe_load(path.read_text()) or {}
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping of config keys, got {type(values).__name__}")
    if overrides:
        extra = overrides if isinstance(overrides, dict) else parse_overrides(list(overrides))
        values = _merge(values, extra)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}; known: {sorted(known)}")
    hints = typing.get_type_hints(cls)
    return cls(**{key: _coerce(f"{cls.__name__}.{key}", value, hints[key]) for key, value in values.items()})


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """`value` as the field's scalar type where that is unambiguous. YAML 1.1 reads `3e-4` (no dot)
    as a string and `1` as an int: both become floats for a float field. A value that does not
    fit a scalar field is an error naming the field."""
    allowed = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else {hint}
    if value is None:
        if type(None) in allowed:
            return None
        raise ValueError(f"{name} cannot be null")
    scalars = allowed & {bool, int, float, str}
    if not scalars or type(value) in scalars:
        return value
    if float in scalars and isinstance(value, (int, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            pass
    if int in scalars and isinstance(value, (str, float)):
        try:
            number = float(value)
            if number.is_integer():
                return int(number)
        except ValueError:
            pass
    if str in scalars and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    expected = " or ".join(sorted(t.__name__ for t in scalars))
    raise ValueError(f"{name} must be {expected}, got {value!r}")


def dump_config(config: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
