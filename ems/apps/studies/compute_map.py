"""The compute→quality map: measured (model size, compute budget) points, a power-law fit of the
error rate per size and metric, the compute-optimal frontier, and projections to more compute.

    python -m ems.apps.studies.compute_map RUN_ROOT --out DIR [--metric tatoeba/all ...] [--hours 1 8 64]

It trains and evaluates nothing: each trained and evaluated model is one point, a file
RUN_ROOT/<size>/<budget>/map_point.json (ems.apps.studies.compute_map_points). The fit per size and metric, its
projections and the frontier are ems.apps.studies.compute_map_fit's; every output (table, JSON, plot) labels a
score at a compute outside the measured points "projection".

`write_map` writes DIR/compute_map.md (the markdown `map_table`, also printed), DIR/compute_map.json
and DIR/compute_map.png (`plot_map`, of the first metric). No point, a malformed map_point.json or a
score of 100 in a fitted metric is one `error: ...` line and exit status 2 (ems.cli.run_main); a run
directory without map_point.json is listed (stderr, markdown, JSON "missing"), not an error.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ems.apps.studies.compute_map_fit import (  # noqa: E402
    DEFAULT_LEVEL,
    EMS_MFU,
    H100_PEAK_TFLOPS,
    PROJECTION,
    PowerLawFit,
    Projection,
    Unfitted,
    budget_flops,
    fit_map,
    frontier_fitted,
    frontier_measured,
    h100_flops,
    project,
    projections,
)
from ems.apps.studies.compute_map_points import POINT_FILE, MapPoint, metrics_of, read_points, size_order  # noqa: E402
from ems.artifacts import write_json  # noqa: E402
from ems.cli import UserError, add_debug_option, run_main  # noqa: E402
from eval.chart import save_figure  # noqa: E402

MARKDOWN_FILE = "compute_map.md"
JSON_FILE = "compute_map.json"
PLOT_FILE = "compute_map.png"
DEFAULT_HOURS = (1.0, 8.0, 64.0)


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
    parser = argparse.ArgumentParser(
        prog="python -m ems.apps.studies.compute_map", description=__doc__.split("\n\n")[0]
    )
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
