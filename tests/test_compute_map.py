"""ems.apps.studies.compute_map, compute_map_fit and compute_map_points on synthetic points: the power-law
fit, its uncertainty and projections, the compute-optimal frontier, the H100 FLOPs helper, reading and
writing map_point.json, and the command line."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from ems.apps.studies.compute_map import JSON_FILE, MARKDOWN_FILE, PLOT_FILE, main, map_table, plot_map
from ems.apps.studies.compute_map_fit import (
    PROJECTION,
    fit_map,
    fit_power_law,
    frontier_fitted,
    frontier_measured,
    h100_flops,
    project,
)
from ems.apps.studies.compute_map_points import MapPoint, point_path, read_points, write_point
from ems.cli import USAGE_EXIT_CODE, run_main

METRIC = "tatoeba/all"


def true_error(flops, scale=80.0, alpha=0.15):
    """The error rate (100 - score) of the synthetic law: scale * (C / 1e12)^-alpha."""
    return scale * (flops / 1e12) ** -alpha


def point(size, budget, flops, score, params=1_000_000, **scores):
    return MapPoint(size, budget, flops, flops / 1e13, int(flops / 1e11), params, {METRIC: score, **scores})


def law_points(size="small", budgets=(1e12, 1e13, 1e14, 1e15), scale=80.0, alpha=0.15, params=1_000_000):
    return [point(size, f"b{i}", c, 100 - true_error(c, scale, alpha), params) for i, c in enumerate(budgets)]


# --- the fit ------------------------------------------------------------------------------------


def test_the_fit_recovers_an_exact_power_law():
    """error = 80 (C/1e12)^-0.15 = A C^-alpha with alpha = 0.15, A = 80 * 1e12^0.15 (≈ 5047.7)."""
    points = law_points()
    fit = fit_power_law([p.train_flops for p in points], [p.scores[METRIC] for p in points], "small", METRIC)
    assert fit.alpha == pytest.approx(0.15, rel=1e-9)
    assert fit.A == pytest.approx(80.0 * 1e12**0.15, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert (fit.n, fit.dof) == (4, 2)
    assert fit.alpha_se == pytest.approx(0.0, abs=1e-9)
    central, low, high = project(fit, 1e17)
    assert central == pytest.approx(100 - true_error(1e17), rel=1e-9)
    assert low == pytest.approx(central, abs=1e-6) and high == pytest.approx(central, abs=1e-6)


def test_a_noisy_fit_brackets_the_true_exponent_and_the_projection():
    """Multiplicative noise on the error (seeded): the true alpha lies within 3 standard errors, and
    the 95% prediction interval 100x beyond the largest budget contains the true score."""
    rng = np.random.default_rng(7)
    flops = np.array([1e12, 1e13, 1e14, 1e15])
    scores = 100 - true_error(flops) * np.exp(rng.normal(0.0, 0.03, size=flops.size))
    fit = fit_power_law(list(flops), list(scores), "small", METRIC)
    assert fit.dof == 2 and 0 < fit.r2 < 1 and fit.alpha_se > 0 and fit.A_se > 0
    assert abs(fit.alpha - 0.15) < 3 * fit.alpha_se
    assert abs(fit.alpha - 0.15) > 1e-6  # the noise did move it
    central, low, high = project(fit, 1e17)
    truth = 100 - true_error(1e17)
    assert low < truth < high
    assert low < central < high


def test_degrees_of_freedom_decide_the_interval():
    """3 points: 1 dof and an interval (t with 1 dof: wide); 2 points: exact fit, no interval;
    1 point: no fit."""
    three = law_points(budgets=(1e12, 1e13, 1e14))
    noisy = [point(p.size, p.budget, p.train_flops, p.scores[METRIC] + d) for p, d in zip(three, (0.5, -0.5, 0.5))]
    fits, unfitted = fit_map(noisy, [METRIC])
    assert [(f.n, f.dof) for f in fits] == [(3, 1)] and not unfitted
    central, low, high = project(fits[0], 1e16)
    assert low < central < high

    fits, _ = fit_map(three[:2], [METRIC])
    assert fits[0].dof == 0 and fits[0].alpha_se is None and fits[0].residual_se is None
    central, low, high = project(fits[0], 1e16)
    assert central == pytest.approx(100 - true_error(1e16), rel=1e-9) and (low, high) == (None, None)

    fits, unfitted = fit_map(three[:1], [METRIC])
    assert fits == [] and [(u.size, u.n) for u in unfitted] == [("small", 1)]
    with pytest.raises(ValueError, match="at least 2"):
        fit_power_law([1e12], [50.0])


def test_a_perfect_score_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"score of 100 .* \(log of 0\)") as raised:
        fit_power_law([1e12, 1e13], [90.0, 100.0], "small", METRIC)
    assert "\n" not in str(raised.value)


def test_projections_are_clipped_to_percentages():
    fit = fit_power_law([1e12, 1e13, 1e14], [10.0, 60.0, 85.0])  # steep: error 90 -> 15
    central, low, high = project(fit, 1e30)
    assert 0 <= low <= central <= high <= 100
    central, low, high = project(fit, 1e3)  # far below: the error rate is above 100
    assert central == 0.0 and low == 0.0


# --- the frontier --------------------------------------------------------------------------------


def crossing_points():
    """small: error 60 (C/1e12)^-0.05; large: error 90 (C/1e12)^-0.2; they cross where
    (C/1e12)^0.15 = 1.5, C ≈ 1.49e13. By hand: at 1e12 small 40.0 vs large 10.0; at 1e14 small
    100 - 60/100^0.05 = 52.34 vs large 100 - 90/100^0.2 = 64.17; at 1e16 small 62.1 vs large 85.7."""
    budgets = (1e12, 1e14, 1e16)
    return law_points("small", budgets, 60.0, 0.05, params=10**6) + law_points("large", budgets, 90.0, 0.2, 10**8)


def uneven_points():
    """crossing_points' laws, small measured to 1e14 only: at 1e15 small 100 - 60 x 1000^-0.05 = 57.52
    (a projection), large 100 - 90 x 1000^-0.2 = 77.39 (within its measured FLOPs)."""
    return law_points("small", (1e12, 1e13, 1e14), 60.0, 0.05, params=10**6) + law_points(
        "large", (1e12, 1e14, 1e16), 90.0, 0.2, 10**8
    )


def test_the_frontier_picks_the_small_size_at_low_compute_and_the_large_at_high():
    points = crossing_points()
    measured = frontier_measured(points, METRIC)
    assert [(best.budget, best.size) for best in measured] == [("b0", "small"), ("b1", "large"), ("b2", "large")]
    assert measured[0].score == pytest.approx(40.0) and measured[0].scores["large"] == pytest.approx(10.0)
    assert measured[1].scores["small"] == pytest.approx(52.34, abs=0.01)
    assert measured[1].score == pytest.approx(64.17, abs=0.01)

    fits, _ = fit_map(points, [METRIC])
    fitted = frontier_fitted(fits, METRIC, [1e12, 1e13, 2e13, 1e16, 1e18])
    assert [best.size for best in fitted] == ["small", "small", "large", "large", "large"]
    assert [best.projection for best in fitted] == [False, False, False, False, True]
    assert [best.projected for best in fitted] == [(), (), (), (), ("small", "large")]
    # a size is a projection only outside its own measured FLOPs, whatever the other sizes measured
    uneven_fits, _ = fit_map(uneven_points(), [METRIC])
    (at_1e15,) = frontier_fitted(uneven_fits, METRIC, [1e15])
    assert at_1e15.projected == ("small",) and at_1e15.size == "large" and at_1e15.projection
    assert at_1e15.scores == pytest.approx({"small": 57.52, "large": 77.39}, abs=0.01)
    assert fitted[0].score == pytest.approx(40.0, rel=1e-9)


# --- H100 FLOPs ------------------------------------------------------------------------------------


def test_h100_flops():
    """1 h x 3600 s x 989e12 FLOP/s x 0.323 = 1.1500092e18 (989 x 0.323 = 319.447; x 3600 = 1,150,009.2)."""
    assert h100_flops(1) == pytest.approx(1.1500092e18, rel=1e-12)
    assert h100_flops(8) == pytest.approx(8 * 1.1500092e18, rel=1e-12)
    assert h100_flops(2, peak_tflops=100.0, mfu=0.5) == pytest.approx(2 * 3600 * 100e12 * 0.5, rel=1e-12)


# --- map_point.json ---------------------------------------------------------------------------------


def test_points_round_trip_and_missing_runs_are_listed(tmp_path):
    points = crossing_points()
    for p in points:
        write_point(point_path(tmp_path, p.size, p.budget), p)
    (tmp_path / "small" / "b9").mkdir()  # a run that has not written its point yet
    read, missing = read_points(tmp_path)
    assert sorted(read, key=repr) == sorted(points, key=repr)
    assert missing == ["small/b9"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda v: v.pop("train_flops"), "train_flops"),
        (lambda v: v.update(steps="10"), "steps"),
        (lambda v: v.update(params=True), "params"),
        (lambda v: v.update(scores={METRIC: 101.0}), "scores"),
        (lambda v: v.update(scores=[50.0]), "scores"),
        (lambda v: v.update(extra=1), "extra"),
        (lambda v: v.update(budget="b7"), "budget"),
    ],
)
def test_a_malformed_point_names_the_file_and_the_field(tmp_path, change, field):
    path = write_point(point_path(tmp_path, "small", "b0"), point("small", "b0", 1e12, 50.0))
    value = json.loads(path.read_text(encoding="utf-8"))
    change(value)
    path.write_text(json.dumps(value), encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        read_points(tmp_path)
    message = str(raised.value)
    assert str(path) in message and f"'{field}'" in message and "\n" not in message


# --- outputs and the command line ------------------------------------------------------------------


def test_the_table_and_plot_label_projections(tmp_path):
    points = crossing_points() + [point("tiny", "b0", 1e12, 20.0, params=10**5)]
    fits, unfitted = fit_map(points, [METRIC])
    table = map_table(points, fits, [METRIC], unfitted, frontier_flops=[1e18])
    assert "| small | b0 | 10 | 1,000,000 | 1.000e+12 |" in table
    assert "| large | tatoeba/all | 3 | 0.2 ± " in table and "| tiny | tatoeba/all | 1 | 1 point: no fit |" in table
    # 1e18 = 1e6 x 1e12, beyond every point: small 100 - 60 x 10^-0.3 = 69.9, large 100 - 90 x 10^-1.2 = 94.3
    assert (
        f"| 1.000e+18 | large | 94.3 | small 69.9 ({PROJECTION}), large 94.3 ({PROJECTION}) "
        f"| {PROJECTION}: small, large |" in table
    )
    uneven = uneven_points()
    table = map_table(uneven, fit_map(uneven, [METRIC])[0], [METRIC], frontier_flops=[1e15])
    assert f"| 1.000e+15 | large | 77.4 | small 57.5 ({PROJECTION}), large 77.4 | {PROJECTION}: small |" in table
    path = plot_map(points, fits, METRIC, tmp_path / "map.png", project_flops=[1e18])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_writes_the_map(tmp_path, capsys):
    rng = np.random.default_rng(3)
    for p in crossing_points():
        noisy = {METRIC: p.scores[METRIC] + rng.normal(0, 0.3), "flores/unseen": p.scores[METRIC] / 2}
        write_point(point_path(tmp_path / "runs", p.size, p.budget), MapPoint(**{**p.__dict__, "scores": noisy}))
    out = tmp_path / "map"
    status = run_main(main, [str(tmp_path / "runs"), "--out", str(out), "--metric", METRIC, "flores/unseen"])
    printed = capsys.readouterr().out
    assert status == 0
    assert {path.name for path in out.iterdir()} == {MARKDOWN_FILE, JSON_FILE, PLOT_FILE}
    assert printed == (out / MARKDOWN_FILE).read_text(encoding="utf-8")
    assert "## Frontier: flores/unseen" in printed and f"| {PROJECTION} | large | tatoeba/all | 64 |" in printed
    result = json.loads((out / JSON_FILE).read_text(encoding="utf-8"))
    assert len(result["points"]) == 6 and len(result["fits"]) == 4
    assert {proj["label"] for proj in result["projections"]} == {PROJECTION}
    assert [proj["hours"] for proj in result["projections"][:3]] == [1, 8, 64]
    assert result["projections"][0]["flops"] == pytest.approx(h100_flops(1))
    fit = result["fits"][0]
    assert fit["dof"] == 1 and fit["alpha_se"] > 0 and math.isfinite(fit["A_se"])
    assert result["frontier"][METRIC]["measured"][0]["size"] == "small"


def test_main_without_points_is_one_error_line(tmp_path, capsys):
    (tmp_path / "small" / "b0").mkdir(parents=True)
    status = run_main(main, [str(tmp_path), "--out", str(tmp_path / "map")])
    err = capsys.readouterr().err
    assert status == USAGE_EXIT_CODE == 2
    assert err.startswith("error: no map_point.json under") and err.count("\n") == 1 and "small/b0" in err
    assert not (tmp_path / "map").exists()

    status = run_main(main, [str(tmp_path / "nowhere"), "--out", str(tmp_path / "map")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_the_prediction_interval_and_standard_error_have_their_coverage():
    """Over 1500 seeded noisy data sets of 4 points (2 dof): the 95% prediction interval, at the
    points' middle compute and at 100x the largest, holds a fresh noisy observation there about 95%
    of the time, and the true alpha
    lies within t(0.975, 2) standard errors about 95% of the time. (A confidence interval for the
    mean instead, the normal quantile instead of t's, or √(SSR/n) instead of √(SSR/dof) cover far less.)"""
    rng = np.random.default_rng(11)
    flops = np.array([1e12, 1e13, 1e14, 1e15])
    t = stats.t.ppf(0.975, 2)
    at = (10**13.5, 1e17)
    inside, covered, runs = np.zeros(len(at)), 0, 1500
    for _ in range(runs):
        scores = 100 - true_error(flops) * np.exp(rng.normal(0.0, 0.05, size=flops.size))
        fit = fit_power_law(list(flops), list(scores))
        for i, c in enumerate(at):
            _, low, high = project(fit, c)
            inside[i] += low <= 100 - true_error(c) * math.exp(rng.normal(0.0, 0.05)) <= high
        covered += abs(fit.alpha - 0.15) <= t * fit.alpha_se
    assert inside / runs == pytest.approx([0.95, 0.95], abs=0.02)  # binomial sd 0.006
    assert covered / runs == pytest.approx(0.95, abs=0.02)
