"""The points of the compute→quality map (ems.apps.studies.compute_map): each trained and evaluated model is one
point, a file RUN_ROOT/<size>/<budget>/map_point.json (`write_point`) holding exactly the fields of
`MapPoint`:

    {"size": "small", "budget": "b2", "train_flops": 3.1e17, "train_seconds": 5400.0, "steps": 20000,
     "params": 48000000, "scores": {"tatoeba/all": 71.2, "tatoeba/≥10k pairs": 88.0, "flores/unseen": 12.5}}

Scores are percentages in [0, 100] (P@1), named "<task>/<language group>" (groups: "≥10k pairs",
"1k–10k", "<1k", "unseen", "all").
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ems.artifacts import write_json
from ems.cli import MissingDataError

POINT_FILE = "map_point.json"


@dataclass(frozen=True)
class MapPoint:
    """One trained and evaluated model: its preset `size`, its compute `budget` label, the FLOPs and
    seconds its training took, its optimizer `steps` and parameter count `params`, and `scores`
    {metric: percentage in [0, 100]}, metrics named "<task>/<language group>"."""

    size: str
    budget: str
    train_flops: float
    train_seconds: float
    steps: int
    params: int
    scores: dict[str, float]


POINT_FIELDS = tuple(field.name for field in fields(MapPoint))


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _field_problem(name: str, value) -> str | None:
    """What is wrong with `value` as MapPoint field `name`; None when nothing is."""
    if name in ("size", "budget"):
        ok = isinstance(value, str) and value.strip() != "" and "/" not in value
        return None if ok else "must be a non-empty name without '/'"
    if name == "train_flops":
        return None if _number(value) and value > 0 else "must be a positive finite number"
    if name == "train_seconds":
        return None if _number(value) and value >= 0 else "must be a finite number ≥ 0"
    if name in ("steps", "params"):
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= (name == "params")
        return None if ok else f"must be an integer ≥ {0 if name == 'steps' else 1}"
    if not isinstance(value, dict) or not value:
        return "must be a non-empty object {metric: score}"
    for metric, score in value.items():
        if not _number(score) or not 0 <= score <= 100:
            return f"[{metric!r}] must be a percentage in [0, 100], got {score!r}"
    return None


def point_from_json(value, source: str = "map point") -> MapPoint:
    """A MapPoint from a decoded JSON object with exactly MapPoint's fields; ValueError naming
    `source` and the first missing, unknown or malformed field."""
    if not isinstance(value, dict):
        raise ValueError(f"{source}: not a JSON object with the fields {', '.join(POINT_FIELDS)}")
    for name in POINT_FIELDS:
        if name not in value:
            raise ValueError(f"{source}: missing field '{name}'")
        problem = _field_problem(name, value[name])
        if problem:
            raise ValueError(f"{source}: field '{name}' {problem}")
    unknown = sorted(set(value) - set(POINT_FIELDS))
    if unknown:
        raise ValueError(f"{source}: unknown field '{unknown[0]}' (a map point has {', '.join(POINT_FIELDS)})")
    scores = {str(metric): float(score) for metric, score in value["scores"].items()}
    return MapPoint(
        value["size"],
        value["budget"],
        float(value["train_flops"]),
        float(value["train_seconds"]),
        int(value["steps"]),
        int(value["params"]),
        scores,
    )


def point_path(run_root: str | Path, size: str, budget: str) -> Path:
    """Where the point of (size, budget) lives: RUN_ROOT/<size>/<budget>/map_point.json."""
    return Path(run_root) / size / budget / POINT_FILE


def write_point(path: str | Path, point: MapPoint) -> Path:
    """Write `point` as JSON to `path` (whole or not at all, parent folders created); returns the path.
    ValueError for a point that read_points would refuse."""
    checked = point_from_json(asdict(point), f"{path}")  # the same checks as reading it back; numpy numbers -> Python
    write_json(path, asdict(checked))
    return Path(path)


def read_points(run_root: str | Path) -> tuple[list[MapPoint], list[str]]:
    """Every RUN_ROOT/<size>/<budget>/map_point.json -> (points sorted by size then FLOPs, the
    "<size>/<budget>" run directories that hold no map_point.json). A missing RUN_ROOT is a
    MissingDataError; a malformed file a ValueError naming the file and the field, as is a file whose
    size or budget is not the directory it is in."""
    root = Path(run_root)
    if not root.is_dir():
        raise MissingDataError(f"{root} is not a directory (expected RUN_ROOT/<size>/<budget>/{POINT_FILE})")
    points, missing = [], []
    for size_dir in sorted(path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")):
        for run_dir in sorted(path for path in size_dir.iterdir() if path.is_dir() and not path.name.startswith(".")):
            path = run_dir / POINT_FILE
            if not path.is_file():
                missing.append(f"{size_dir.name}/{run_dir.name}")
                continue
            try:
                value = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as error:
                raise ValueError(f"{path}: not valid JSON ({error})") from None
            point = point_from_json(value, str(path))
            for name, expected in (("size", size_dir.name), ("budget", run_dir.name)):
                if getattr(point, name) != expected:
                    raise ValueError(
                        f"{path}: field '{name}' is {getattr(point, name)!r} but the file is under {expected!r}"
                    )
            points.append(point)
    return sorted(points, key=lambda p: (p.size, p.train_flops, p.budget)), missing


def size_order(points: Iterable[MapPoint]) -> list[str]:
    """The sizes of `points`, smallest parameter count first (then by name)."""
    params: dict[str, int] = {}
    for point in points:
        params[point.size] = max(params.get(point.size, 0), point.params)
    return sorted(params, key=lambda size: (params[size], size))


def metrics_of(points: Iterable[MapPoint]) -> list[str]:
    """Every metric any point scores, sorted."""
    return sorted({metric for point in points for metric in point.scores})
