"""The fit of the compute→quality map (ems.apps.studies.compute_map), per size and metric, and the
compute-optimal frontier.

The fit: 100 - score = A * C^(-alpha), C the training FLOPs, by least squares of log(100 - score)
on log C (natural logs; scipy.stats.linregress). With n points it has n - 2 degrees of freedom:
2 points fit exactly (no standard errors, no interval), 1 point is not fitted. A score at a compute
outside the measured points is a projection: the t-distribution prediction interval of the
log-linear regression at the new log C, turned back into a score, labelled "projection".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ems.apps.studies.compute_map_points import MapPoint, size_order

PROJECTION = "projection"  # the label of every score at a compute no model was trained with
DEFAULT_LEVEL = 0.95  # two-sided prediction interval
H100_PEAK_TFLOPS = 989.0  # dense bf16 tensor-core peak of an H100 SXM
EMS_MFU = 0.323  # the measured model-FLOPs utilisation of an EMS training step at 1024 pairs per batch


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
