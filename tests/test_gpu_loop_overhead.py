"""benchmarks/gpu/loop_overhead.py's reading of the trainer's logged windows."""

import pytest

from benchmarks.gpu.loop_overhead import loop_figures

HISTORY = [
    {"step": 0, "valid_loss": 40.0},
    {"step": 20, "seconds": 9.0, "tokens_per_s": 1000.0, "data_wait_fraction": 0.9},  # start-up
    {"step": 40, "seconds": 4.0, "tokens_per_s": 3000.0, "data_wait_fraction": 0.5},
    {"step": 50, "valid_loss": 30.0},
    {"step": 60, "seconds": 2.0, "tokens_per_s": 6000.0, "data_wait_fraction": 0.2},
]


def test_windows_after_the_skipped_ones_give_seconds_per_step_and_token_rate():
    figures = loop_figures(HISTORY, skip_windows=1)
    assert figures == {
        "steps": 40,
        "s_per_step": 6.0 / 40,
        "tokens_per_s": (12000 + 12000) / 6.0,
        "data_wait_fraction": pytest.approx((2.0 + 0.4) / 6.0),
    }
    assert loop_figures(HISTORY, skip_windows=0)["s_per_step"] == 15.0 / 60


def test_too_few_windows_is_one_line():
    with pytest.raises(SystemExit, match="3 logged windows, none left after skipping 3"):
        loop_figures(HISTORY, skip_windows=3)


def test_an_unknown_set_key_is_one_line_before_any_data_is_read(tmp_path, capsys):
    from benchmarks.gpu.loop_overhead import main
    from ems.cli import run_main

    argv = ["--data", str(tmp_path / "absent"), "--work", str(tmp_path / "work"), "--device", "cpu"]
    status = run_main(main, [*argv, "--set", "prefetch_batchez=0"])
    error = capsys.readouterr().err
    assert status != 0 and error.count("\n") == 1
    assert "unknown key(s) ['prefetch_batchez']" in error
    assert not (tmp_path / "work").exists()
