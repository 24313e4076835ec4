"""benchmarks/gpu_loop_overhead.py's reading of the trainer's logged windows."""

import pytest

from benchmarks.gpu_loop_overhead import loop_figures

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
