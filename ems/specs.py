"""The one grammar of the spec strings that name an encoder or a mining index, and its parser.

    KIND[:PATH][,key=value]...          st:intfloat/multilingual-e5-small,prompt=query: ,device=cuda
    KIND[:key=value[,key=value]...]     ivf-pq:nprobe=32,m=16 (a kind that takes no path)

After KIND and an optional ":" come comma-separated items: the leading items that are not
`key=value` form the PATH (so a path may hold commas), the rest are options, so a kind that
takes no path reads every item as an option ("ivf-sq8:nprobe=64" and "ivf-sq8,nprobe=64" are one
spec). An option key may carry a qualifier where the caller allows one for that key
(`prompt.de=...`). Empty items are ignored.

In: the text, what it names ("encoder", "index": the first word of every error) and its kinds
({KIND: an object with `path` ("required", "optional" or "none"), `path_hint` (the path's name in
errors) and `options` ({key: parse(text) -> value, ValueError for a bad value})}). Out:
(kind, path or None, {key: value}), a qualified option under "key.qualifier". Any mistake is one
ValueError naming the spec, what is wrong and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

_OPTION = re.compile(r"\s*(?P<key>[a-z_]+)(?:\.(?P<qualifier>[\w-]+))?\s*=(?P<value>.*)", re.DOTALL)


class Kind(Protocol):
    path: str
    path_hint: str
    options: Mapping[str, Callable[[str], object]]


@dataclass(frozen=True)
class SpecKind:
    """A kind that is only parsed: what its spec takes (see the module docstring)."""

    path: str = "none"
    options: Mapping[str, Callable[[str], object]] = field(default_factory=dict)
    path_hint: str = "PATH"


def parse_spec(
    text: str,
    what: str,
    kinds: Mapping[str, Kind],
    common: Mapping[str, Callable[[str], object]] | None = None,
    qualified: Mapping[str, str] | None = None,
) -> tuple[str, str | None, dict[str, object]]:
    """(kind, path or None, options) of spec `text` (see the module docstring). `common` options
    are taken by every kind; `qualified` ({key: what its qualifier names}) lists the keys that
    also take `key.<qualifier>=value`."""
    head, *items = text.split(",")
    kind, colon, first = head.partition(":")
    kind = kind.strip()
    if kind not in kinds:
        raise ValueError(f"{what} {text!r}: unknown kind {kind!r}; expected one of {', '.join(kinds)}")
    spec_kind = kinds[kind]
    if colon:
        items.insert(0, first)
    n_path = next((i for i, item in enumerate(items) if _OPTION.fullmatch(item)), len(items))
    path = ",".join(items[:n_path]) or None
    if spec_kind.path == "none" and path:
        raise ValueError(f"{what} {text!r}: {kind} takes no path, got {path!r}")
    if spec_kind.path == "required" and not path:
        raise ValueError(f"{what} {text!r}: {kind} needs a path: {kind}:{spec_kind.path_hint}")
    allowed = {**(common or {}), **spec_kind.options}
    qualified = {key: name for key, name in (qualified or {}).items() if key in allowed}
    options: dict[str, object] = {}
    for item in filter(str.strip, items[n_path:]):
        match = _OPTION.fullmatch(item)
        if not match or match["key"] not in allowed or (match["qualifier"] and match["key"] not in qualified):
            names = sorted(allowed) + [f"{key}.<{name}>" for key, name in qualified.items()]
            takes = f"takes {', '.join(names)}" if names else "takes no options"
            raise ValueError(f"{what} {text!r}: bad option {item!r}; {kind} {takes}")
        try:
            value = allowed[match["key"]](match["value"])
        except ValueError as error:
            raise ValueError(f"{what} {text!r}: option {item!r}: {error}") from None
        options[f"{match['key']}.{match['qualifier']}" if match["qualifier"] else match["key"]] = value
    return kind, path, options


def integer(text: str) -> int:
    """An option value that must be an integer."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"must be an integer, got {text!r}") from None


def positive(text: str) -> int:
    """An option value that must be an integer >= 1."""
    value = integer(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def boolean(text: str) -> bool:
    """An option value that must be true or false (also 1/0, yes/no)."""
    if text.lower() not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text.lower() in ("1", "true", "yes")
