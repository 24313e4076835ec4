"""The compute→quality map: measured (model size, compute budget) points, a power-law fit of the
error rate per size and metric, the compute-optimal frontier, and projections to more compute.

    python -m eval.compute_map RUN_ROOT --out DIR [--metric tatoeba/all ...] [--hours 1 8 64]

It trains and evaluates nothing: each trained and evaluated model is one point, a file
RUN_ROOT/<size>/<budget>/map_point.json (`write_point`) holding exactly the fields of `MapPoint`:

    {"size": "small", "budget": "b2", "train_flops": 3.1e17, "train_seconds": 5400.0, "steps": 20000,
     "params": 48000000, "scores": {"tatoeba/all": 71.2, "tatoeba/≥10k pairs": 88.0, "flores/unseen": 12.5}}

Scores are percentages in [0, 100] (P@1), named "<task>/<language group>" (groups: "≥10k pairs",
"1k–10k", "<1k", "unseen", "all").

The fit, per size and metric: 100 - score = A * C^(-alpha), C the training FLOPs, by least squares
of log(100 - score) on log C (natural logs; scipy.stats.linregress). With n points it has n - 2
degrees of freedom: 2 points fit exactly (no standard errors, no interval), 1 point is not fitted.
A score at a compute outside the measured points is a projection: the t-distribution prediction
interval of the log-linear regression at the new log C, turned back into a score, and every output
(table, JSON, plot) labels it "projection".

`write_map` writes DIR/compute_map.md (the markdown `map_table`, also printed), DIR/compute_map.json
and DIR/compute_map.png (`plot_map`, of the first metric). No point, a malformed map_point.json or a
score of 100 in a fitted metric is one `error: ...` line and exit status 2 (ems.cli.run_main); a run
directory without map_point.json is listed (stderr, markdown, JSON "missing"), not an error.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from ems.artifacts import write_json  # noqa: E402
from ems.cli import MissingDataError, UserError, add_debug_option, run_main  # noqa: E402
from eval.chart import save_figure  # noqa: E402

POINT_FILE = "map_point.json"
MARKDOWN_FILE = "compute_map.md"
JSON_FILE = "compute_map.json"
PLOT_FILE = "compute_map.png"
PROJECTION = "projection"  # the label of every score at a compute no model was trained with
DEFAULT_LEVEL = 0.95  # two-sided prediction interval
DEFAULT_HOURS = (1.0, 8.0, 64.0)
H100_PEAK_TFLOPS = 989.0  # dense bf16 tensor-core peak of an H100 SXM
EMS_MFU = 0.323  # the measured model-FLOPs utilisation of an EMS training step at 1024 pairs per batch


# --- points -------------------------------------------------------------------------------------


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


# --- the fit --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerLawFit:
    """100 - score = A * C^(-alpha) for one size and metric, fitted to `n` points (training FLOPs
    `flops_min`..`flops_max`) by least squares in natural-log space: log(100 - score) = log A - alpha log C.
    `alpha_se` / `A_se` are standard errors (A's by the delta method: A * se(log A)); None with 0
    degrees of freedom (`dof` = n - 2, two points fit exactly). `r2` is R² of the log-log regression.
    `log_flops_mean`, `log_flops_ss` (Σ (log C - mean)²) and `residual_se` (√(SSR / dof)) are what the
    prediction interval needs."""

    size: str
    metric: str
    n: int
    dof: int
    alpha: float
    alpha_se: float | None
    A: float
    A_se: float | None
    r2: float
    log_flops_mean: float
    log_flops_ss: float
    residual_se: float | None
    flops_min: float
    flops_max: float

    @property
    def log_A(self) -> float:
        return math.log(self.A)

    def error_at(self, flops: float) -> float:
        """The fitted error rate 100 - score at `flops` (a percentage, not clipped)."""
        return math.exp(self.log_A - self.alpha * math.log(flops))

    def score_at(self, flops: float) -> float:
        """The fitted score at `flops`, clipped to [0, 100]."""
        return min(100.0, max(0.0, 100.0 - self.error_at(flops)))

    def measured(self, flops: float) -> bool:
        """Whether `flops` lies within the measured FLOPs (an interpolation, not a projection)."""
        return self.flops_min * (1 - 1e-9) <= flops <= self.flops_max * (1 + 1e-9)


def fit_power_law(flops: Sequence[float], scores: Sequence[float], size: str = "", metric: str = "") -> PowerLawFit:
    """Fit 100 - score = A * C^(-alpha) to (training FLOPs, score %) pairs -> PowerLawFit. ValueError
    (one line) for fewer than 2 points, all at the same FLOPs, FLOPs ≤ 0, or a score ≥ 100 (whose
    error rate has no logarithm)."""
    where = f"{size} {metric}".strip() or "power-law fit"
    if len(flops) != len(scores):
        raise ValueError(f"{where}: {len(flops)} FLOP values but {len(scores)} scores")
    if len(flops) < 2:
        raise ValueError(f"{where}: {len(flops)} point(s); a power law needs at least 2")
    for c, score in zip(flops, scores):
        if not c > 0:
            raise ValueError(f"{where}: training FLOPs must be positive, got {c!r}")
        if not score < 100:
            raise ValueError(
                f"{where}: a score of {score:g} at {c:.3g} FLOPs leaves no error to fit (log of 0); "
                "the power law on 100 - score needs scores below 100"
            )
    x = np.log(np.asarray(flops, dtype=np.float64))
    y = np.log(100.0 - np.asarray(scores, dtype=np.float64))
    if np.ptp(x) == 0:
        raise ValueError(
            f"{where}: every point has the same training FLOPs ({flops[0]:.3g}); nothing to fit a slope to"
        )
    result = stats.linregress(x, y)
    n, dof = len(x), len(x) - 2
    residuals = y - (result.intercept + result.slope * x)
    residual_se = math.sqrt(float(residuals @ residuals) / dof) if dof > 0 else None
    A = math.exp(result.intercept)
    return PowerLawFit(
        size=size,
        metric=metric,
        n=n,
        dof=dof,
        alpha=-float(result.slope),
        alpha_se=float(result.stderr) if dof > 0 else None,
        A=A,
        A_se=A * float(result.intercept_stderr) if dof > 0 else None,
        r2=float(result.rvalue) ** 2,
        log_flops_mean=float(x.mean()),
        log_flops_ss=float(((x - x.mean()) ** 2).sum()),
        residual_se=residual_se,
        flops_min=float(min(flops)),
        flops_max=float(max(flops)),
    )


@dataclass(frozen=True)
class Unfitted:
    """A (size, metric) with too few points to fit: `n` points, `reason`."""

    size: str
    metric: str
    n: int
    reason: str


def fit_map(points: Sequence[MapPoint], metrics: Sequence[str]) -> tuple[list[PowerLawFit], list[Unfitted]]:
    """One PowerLawFit per size and metric over the points that score the metric -> (fits, the
    (size, metric) pairs left unfitted: one point, or all at the same FLOPs). ValueError for a score
    of 100 or more."""
    fits, unfitted = [], []
    for metric in metrics:
        for size in size_order(points):
            mine = [p for p in points if p.size == size and metric in p.scores]
            if not mine:
                continue
            if len(mine) < 2:
                unfitted.append(Unfitted(size, metric, 1, "1 point: no fit"))
            elif len({p.train_flops for p in mine}) < 2:
                unfitted.append(Unfitted(size, metric, len(mine), "every point at the same FLOPs: no fit"))
            else:
                flops, scores = [p.train_flops for p in mine], [p.scores[metric] for p in mine]
                fits.append(fit_power_law(flops, scores, size, metric))
    return fits, unfitted


def project(fit: PowerLawFit, flops: float, level: float = DEFAULT_LEVEL) -> tuple[float, float | None, float | None]:
    """The projected score at `flops` -> (central, low, high), each clipped to [0, 100]. low..high
    is the `level` t-distribution prediction interval of the log-log regression at log(flops), turned
    back into a score; (central, None, None) when the fit has 0 degrees of freedom (2 points: no
    interval). A projection, whatever `flops` is: label it so wherever it is shown."""
    x0 = math.log(flops)
    log_error = fit.log_A - fit.alpha * x0
    central = 100.0 - math.exp(log_error)
    if fit.dof < 1 or fit.residual_se is None:
        return _clip(central), None, None
    se = fit.residual_se * math.sqrt(1 + 1 / fit.n + (x0 - fit.log_flops_mean) ** 2 / fit.log_flops_ss)
    t = float(stats.t.ppf(0.5 + level / 2, fit.dof))
    low, high = 100.0 - math.exp(log_error + t * se), 100.0 - math.exp(log_error - t * se)
    return _clip(central), _clip(low), _clip(high)


def _clip(score: float) -> float:
    return min(100.0, max(0.0, score))


def h100_flops(hours: float, peak_tflops: float = H100_PEAK_TFLOPS, mfu: float = EMS_MFU) -> float:
    """The training FLOPs of `hours` on one H100: hours * 3600 * peak_tflops * 1e12 * mfu.
    `peak_tflops`: the dense bf16 peak (989 for an H100 SXM); `mfu`: the model-FLOPs utilisation a
    training step reaches (0.323: measured for EMS at 1024 pairs per batch)."""
    return hours * 3600.0 * peak_tflops * 1e12 * mfu


@dataclass(frozen=True)
class Projection:
    """A projected score: `size`'s fit of `metric` at `flops` (`hours` on one H100, when given) ->
    `score` and its `level` prediction interval `low`..`high` (None: 2 points, no interval).
    `label` is always "projection"."""

    size: str
    metric: str
    flops: float
    score: float
    low: float | None
    high: float | None
    level: float
    hours: float | None = None
    label: str = PROJECTION


def projections(
    fits: Sequence[PowerLawFit],
    flops: Sequence[float],
    hours: Sequence[float | None] | None = None,
    level: float = DEFAULT_LEVEL,
) -> list[Projection]:
    """project() of every fit at every value of `flops` (with its `hours`, if given) -> Projections."""
    hours = list(hours) if hours is not None else [None] * len(flops)
    out = []
    for fit in fits:
        for c, h in zip(flops, hours):
            score, low, high = project(fit, c, level)
            out.append(Projection(fit.size, fit.metric, c, score, low, high, level, h))
    return out


# --- the frontier --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredBest:
    """At compute budget `budget` (its points' geometric-mean FLOPs `flops`): the size that scored
    best on `metric`, its `score`, and every size's measured score `scores`."""

    budget: str
    flops: float
    metric: str
    size: str
    score: float
    scores: dict[str, float]


@dataclass(frozen=True)
class FittedBest:
    """At `flops`: the size whose fitted curve of `metric` is highest, its fitted `score`, every
    fitted size's `scores`; `projected`, the sizes whose score there is a projection (`flops` outside
    their measured FLOPs), and `projection`, whether there is any (then the comparison rests on
    extrapolated curves)."""

    flops: float
    metric: str
    size: str
    score: float
    scores: dict[str, float]
    projected: tuple[str, ...]

    @property
    def projection(self) -> bool:
        return bool(self.projected)


def budget_flops(points: Sequence[MapPoint]) -> dict[str, float]:
    """{budget label: geometric mean of its points' training FLOPs}, in increasing FLOPs."""
    groups: dict[str, list[float]] = {}
    for point in points:
        groups.setdefault(point.budget, []).append(point.train_flops)
    means = {budget: math.exp(sum(map(math.log, c)) / len(c)) for budget, c in groups.items()}
    return dict(sorted(means.items(), key=lambda item: (item[1], item[0])))


def frontier_measured(points: Sequence[MapPoint], metric: str) -> list[MeasuredBest]:
    """Per budget label (in increasing FLOPs): which size scored best on `metric`, measured. Ties go
    to the smaller size. Budgets where no point scores the metric are left out."""
    order = {size: rank for rank, size in enumerate(size_order(points))}
    out = []
    for budget, flops in budget_flops(points).items():
        scored = [p for p in points if p.budget == budget and metric in p.scores]
        if not scored:
            continue
        best = max(scored, key=lambda p: (p.scores[metric], -order[p.size]))
        scores = {p.size: p.scores[metric] for p in sorted(scored, key=lambda p: order[p.size])}
        out.append(MeasuredBest(budget, flops, metric, best.size, best.scores[metric], scores))
    return out


def frontier_fitted(fits: Sequence[PowerLawFit], metric: str, flops: Sequence[float]) -> list[FittedBest]:
    """At each of `flops`: which size's fitted curve of `metric` is highest (ties: the first fit)."""
    mine = [fit for fit in fits if fit.metric == metric]
    out = []
    for c in flops:
        if not mine:
            break
        scores = {fit.size: fit.score_at(c) for fit in mine}
        best = max(mine, key=lambda fit: scores[fit.size])
        projected = tuple(fit.size for fit in mine if not fit.measured(c))
        out.append(FittedBest(c, metric, best.size, scores[best.size], scores, projected))
    return out


# --- outputs --------------------------------------------------------------------------------------


def _row(cells: Iterable) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _header(*names: str) -> list[str]:
    return [_row(names), _row("---" for _ in names)]


def _pm(value: float, se: float | None, digits: int = 4) -> str:
    return f"{value:.{digits}g} ± {se:.2g}" if se is not None else f"{value:.{digits}g} (no se: 0 dof)"


def _interval(low: float | None, high: float | None) -> str:
    return f"{low:.1f}–{high:.1f}" if low is not None and high is not None else "no interval (2 points)"


def map_table(
    points: Sequence[MapPoint],
    fits: Sequence[PowerLawFit],
    metrics: Sequence[str],
    unfitted: Sequence[Unfitted] = (),
    projected: Sequence[Projection] = (),
    missing: Sequence[str] = (),
    frontier_flops: Sequence[float] | None = None,
) -> str:
    """The map as markdown: a table of the points (size, budget, steps, params, train FLOPs,
    minutes, each metric), a table of the fits (size, metric, points, alpha ± se, A ± se, R², dof),
    the frontier per metric (measured per budget; from the fits at each budget's FLOPs and at
    `frontier_flops`, flagged "projection" outside the measured FLOPs), and the `projected` scores,
    each labelled "projection". `unfitted` and `missing` run directories are listed."""
    order = {size: rank for rank, size in enumerate(size_order(points))}
    lines = ["# Compute → quality map", "", "## Measured points", ""]
    lines += _header("size", "budget", "steps", "params", "train FLOPs", "minutes", *metrics)
    for p in sorted(points, key=lambda p: (order[p.size], p.train_flops)):
        scores = [f"{p.scores[m]:.1f}" if m in p.scores else "–" for m in metrics]
        cells = [p.size, p.budget, p.steps, f"{p.params:,}", f"{p.train_flops:.3e}", f"{p.train_seconds / 60:.1f}"]
        lines.append(_row(cells + scores))
    if missing:
        lines += ["", f"Runs without {POINT_FILE} (not in the map): {', '.join(missing)}"]
    lines += ["", "## Fits: 100 − score = A · C^(−alpha), C = training FLOPs (least squares in log-log space)", ""]
    lines += _header("size", "metric", "points", "alpha ± se", "A ± se", "R²", "dof")
    for fit in fits:
        alpha, A = _pm(fit.alpha, fit.alpha_se), _pm(fit.A, fit.A_se)
        lines.append(_row([fit.size, fit.metric, fit.n, alpha, A, f"{fit.r2:.4f}", fit.dof]))
    for item in unfitted:
        lines.append(_row([item.size, item.metric, item.n, item.reason, "", "", ""]))
    lines += ["", "dof = points − 2. With 1 dof the standard errors and intervals rest on a single residual."]
    at_budgets = list(budget_flops(points).values())
    for metric in metrics:
        lines += ["", f"## Frontier: {metric}", "", "Measured, per budget:", ""]
        lines += _header("budget", "FLOPs (geo. mean)", "best size", "score", "all sizes")
        for best in frontier_measured(points, metric):
            others = ", ".join(f"{size} {score:.1f}" for size, score in best.scores.items())
            lines.append(_row([best.budget, f"{best.flops:.3e}", best.size, f"{best.score:.1f}", others]))
        fitted = frontier_fitted(fits, metric, at_budgets + list(frontier_flops or []))
        if fitted:
            lines += ["", "From the fits, at equal FLOPs:", ""]
            lines += _header("FLOPs", "best size", "fitted score", "all fitted sizes", "kind")
            for best in fitted:
                others = ", ".join(
                    f"{size} {score:.1f}{f' ({PROJECTION})' if size in best.projected else ''}"
                    for size, score in best.scores.items()
                )
                kind = (
                    f"{PROJECTION}: {', '.join(best.projected)}"
                    if best.projection
                    else "fit, within the measured FLOPs"
                )
                lines.append(_row([f"{best.flops:.3e}", best.size, f"{best.score:.1f}", others, kind]))
    if projected:
        level = projected[0].level
        lines += ["", f"## Projections (not measured): fitted score and {level:.0%} prediction interval", ""]
        lines += _header("label", "size", "metric", "H100 hours", "FLOPs", "score", "interval")
        rank = {metric: i for i, metric in enumerate(metrics)}
        for proj in sorted(projected, key=lambda q: (rank.get(q.metric, len(rank)), order.get(q.size, 0), q.flops)):
            hours = f"{proj.hours:g}" if proj.hours is not None else "–"
            cells = [proj.label, proj.size, proj.metric, hours, f"{proj.flops:.3e}", f"{proj.score:.1f}"]
            lines.append(_row(cells + [_interval(proj.low, proj.high)]))
    return "\n".join(lines) + "\n"


def plot_map(
    points: Sequence[MapPoint],
    fits: Sequence[PowerLawFit],
    metric: str,
    path: str | Path,
    project_flops: Sequence[float] = (),
    level: float = DEFAULT_LEVEL,
) -> Path:
    """A PNG of `metric` against training FLOPs (log x) at `path`: one colour per size, measured
    points as markers, each size's fitted curve over its measured FLOPs as a solid line, and, for
    `project_flops`, the curve extended dashed to them with its prediction interval shaded and the
    projected scores as hollow markers, labelled "projection". Returns the path."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    by_size = {fit.size: fit for fit in fits if fit.metric == metric}
    for rank, size in enumerate(size_order(points)):
        color = colors[rank % len(colors)]
        mine = sorted((p for p in points if p.size == size and metric in p.scores), key=lambda p: p.train_flops)
        if mine:
            ax.plot([p.train_flops for p in mine], [p.scores[metric] for p in mine], "o", color=color, label=f"{size}")
        fit = by_size.get(size)
        if fit is None:
            continue
        grid = np.geomspace(fit.flops_min, fit.flops_max, 50)
        ax.plot(grid, [fit.score_at(c) for c in grid], "-", color=color, label=f"{size} fit, α = {fit.alpha:.3f}")
        if not project_flops:
            continue
        far = max(project_flops)
        grid = np.geomspace(fit.flops_max, max(far, fit.flops_max), 50)
        projected = [project(fit, c, level) for c in grid]
        interval = "" if fit.dof < 1 else f", {level:.0%} interval"
        ax.plot(grid, [q[0] for q in projected], "--", color=color, label=f"{size} {PROJECTION}{interval}")
        if fit.dof >= 1:
            ax.fill_between(grid, [q[1] for q in projected], [q[2] for q in projected], color=color, alpha=0.15)
        at = [project(fit, c, level)[0] for c in project_flops]
        ax.plot(project_flops, at, "o", markerfacecolor="none", color=color)
        ax.annotate(
            PROJECTION,
            (far, at[int(np.argmax(project_flops))]),
            fontsize=7,
            color=color,
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
        )
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel(f"{metric} (P@1 %)")
    ax.set_title(f"compute → quality: {metric}; fit 100 − score = A·C^(−α); dashed = {PROJECTION}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def _json_value(value):
    """JSON-safe: dataclasses as dicts, NaN / inf as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    return value


def map_json(
    points: Sequence[MapPoint],
    fits: Sequence[PowerLawFit],
    unfitted: Sequence[Unfitted],
    metrics: Sequence[str],
    projected: Sequence[Projection],
    missing: Sequence[str] = (),
    frontier_flops: Sequence[float] = (),
    settings: dict | None = None,
) -> dict:
    """The map as one JSON-ready dict: {"model", "metrics", "settings", "points", "missing", "fits",
    "unfitted", "frontier": {metric: {"measured": [...], "fitted": [...]}}, "projections"}; every
    projection has "label": "projection", every fitted-frontier entry a "projection" flag and the
    "projected" sizes."""
    at = list(budget_flops(points).values()) + list(frontier_flops)
    return _json_value(
        {
            "model": "100 - score = A * C^(-alpha), C = training FLOPs; least squares of ln(100 - score) on ln C",
            "metrics": list(metrics),
            "settings": settings or {},
            "points": [asdict(p) for p in points],
            "missing": list(missing),
            "fits": [asdict(fit) for fit in fits],
            "unfitted": [asdict(item) for item in unfitted],
            "frontier": {
                metric: {
                    "measured": [asdict(best) for best in frontier_measured(points, metric)],
                    "fitted": [
                        {**asdict(best), "projection": best.projection} for best in frontier_fitted(fits, metric, at)
                    ],
                }
                for metric in metrics
            },
            "projections": [asdict(proj) for proj in projected],
        }
    )


def write_map(
    run_root: str | Path,
    out_dir: str | Path,
    metrics: Sequence[str] | None = None,
    project_hours: Sequence[float] = DEFAULT_HOURS,
    peak_tflops: float = H100_PEAK_TFLOPS,
    mfu: float = EMS_MFU,
    level: float = DEFAULT_LEVEL,
) -> tuple[str, list[str]]:
    """Read RUN_ROOT's points, fit each size and metric, project every fit to `project_hours` on one
    H100 (h100_flops with `peak_tflops`, `mfu`), and write OUT_DIR/compute_map.md, compute_map.json
    and compute_map.png (the first metric). `metrics` None: every "<task>/all" metric the points have
    (else all of them). Returns (the markdown, the run directories without a point). UserError for no
    point or a metric no point has; ValueError for a malformed file or a score of 100 in a fit."""
    points, missing = read_points(run_root)
    if not points:
        listed = f" (run directories without one: {', '.join(missing)})" if missing else ""
        raise UserError(f"no {POINT_FILE} under {run_root} (expected RUN_ROOT/<size>/<budget>/{POINT_FILE}){listed}")
    have = metrics_of(points)
    if not metrics:
        metrics = [m for m in have if m.endswith("/all")] or have
    unknown = [m for m in metrics if m not in have]
    if unknown:
        raise UserError(f"metric {unknown[0]!r} is in no {POINT_FILE} under {run_root} (they have: {', '.join(have)})")
    fits, unfitted = fit_map(points, metrics)
    flops = [h100_flops(h, peak_tflops, mfu) for h in project_hours]
    projected = projections(fits, flops, list(project_hours), level)
    markdown = map_table(points, fits, metrics, unfitted, projected, missing, flops)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKDOWN_FILE).write_text(markdown, encoding="utf-8")
    settings = {"project_hours": list(project_hours), "peak_tflops": peak_tflops, "mfu": mfu, "level": level}
    write_json(out / JSON_FILE, map_json(points, fits, unfitted, metrics, projected, missing, flops, settings))
    plot_map(points, fits, metrics[0], out / PLOT_FILE, flops, level)
    return markdown, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.compute_map", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_root", type=Path, help=f"directory of <size>/<budget>/{POINT_FILE}")
    parser.add_argument("--out", type=Path, required=True, help="directory for compute_map.{md,json,png}")
    parser.add_argument(
        "--metric",
        dest="metrics",
        action="extend",
        nargs="+",
        default=None,
        help="metrics to fit and show, e.g. tatoeba/all (repeatable; the first is plotted; default: every */all)",
    )
    parser.add_argument("--hours", type=float, nargs="+", default=list(DEFAULT_HOURS), help="H100 hours to project to")
    parser.add_argument("--peak-tflops", type=float, default=H100_PEAK_TFLOPS, help="dense bf16 peak of the GPU")
    parser.add_argument("--mfu", type=float, default=EMS_MFU, help="model-FLOPs utilisation of a training step")
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL, help="prediction-interval level, in (0, 1)")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if not 0 < args.level < 1:
        raise UserError(f"--level must be in (0, 1), got {args.level}")
    if not (args.peak_tflops > 0 and 0 < args.mfu <= 1 and all(h > 0 for h in args.hours)):
        raise UserError("--peak-tflops and --hours must be positive and --mfu in (0, 1]")
    markdown, missing = write_map(
        args.run_root, args.out, args.metrics, args.hours, args.peak_tflops, args.mfu, args.level
    )
    if missing:
        print(f"note: run directories without {POINT_FILE}: {', '.join(missing)}", file=sys.stderr)
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
