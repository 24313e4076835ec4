"""benchmarks.train_against_revision: seconds per step from a run's logged windows, the medians and ratios
of its rounds, and one line for a revision or demo directory that is not there."""

import json

import pytest

from benchmarks.train_against_revision import baseline_tree, loop_seconds_per_step, main, summary
from ems.cli import UserError, run_main


def test_seconds_per_step_skip_the_start_up_windows_and_the_validation_rows(tmp_path):
    rows = [{"step": 20, "seconds": 30.0, "tokens_per_s": 1}, {"step": 40, "seconds": 8.0, "tokens_per_s": 1}]
    rows += [{"step": 60, "seconds": 9.0, "tokens_per_s": 1}, {"step": 60, "valid_loss": 3.0}]
    rows += [{"step": 80, "seconds": 11.0, "tokens_per_s": 1}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert loop_seconds_per_step(metrics, skip_windows=2) == pytest.approx(20.0 / 40)  # steps 41-80
    assert loop_seconds_per_step(metrics, skip_windows=0) == pytest.approx(58.0 / 80)
    with pytest.raises(UserError, match="4 logged windows, none after the first 4"):
        loop_seconds_per_step(metrics, skip_windows=4)


def test_the_summary_takes_medians_and_the_ratio_of_each_round():
    def side(bare, loop, loss):
        return {"bare_s_per_step": bare, "loop_s_per_step": loop, "loop_over_bare": loop / bare, "valid_loss": loss}

    rounds = [
        {"baseline": side(0.3, 0.40, 5.0), "new": side(0.3, 0.30, 5.0)},
        {"baseline": side(0.4, 0.50, 5.0), "new": side(0.3, 0.45, 5.001)},
        {"baseline": side(0.3, 0.30, 5.0), "new": side(0.3, 0.33, 5.0)},
    ]
    report = summary(rounds)
    assert report["medians"]["baseline"]["loop_s_per_step"] == 0.40
    assert report["new_over_baseline_loop"] == pytest.approx(0.9)  # ratios 0.75, 0.9, 1.1
    assert report["new_over_baseline_bare"] == pytest.approx(1.0)
    assert report["valid_loss_difference"] == pytest.approx(0.001)


def test_a_missing_revision_or_demo_directory_is_one_line(tmp_path, capsys):
    with pytest.raises(UserError, match="--baseline no-such-revision: no such commit"):
        baseline_tree("no-such-revision", tmp_path)
    status = run_main(main, ["--demo", str(tmp_path), "--baseline", "HEAD", "--work", str(tmp_path / "w")])
    assert status == 2
    assert "no shards/train/ (an ems-demo output directory holds it)" in capsys.readouterr().err
