"""benchmarks/peer_sentence_transformers.py: the budget it reads from a demo directory, the refusal of
anything else, the comparison table's ratios, and the schedule re-fitted to the budget (the training
itself is the benchmark's run)."""

import importlib.util
import json
import sys

import pytest

from ems.cli import UserError
from tests.conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location(
    "peer_sentence_transformers", REPO_ROOT / "benchmarks" / "peer_sentence_transformers.py"
)
peer = importlib.util.module_from_spec(spec)
sys.modules["peer_sentence_transformers"] = peer
spec.loader.exec_module(peer)


def test_budget_is_the_demo_training_stage(tmp_path):
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "demo_stages.json").write_text(
        json.dumps({"seconds": {"corpus": 17.0, "train": 600.5, "eval": 40.0}, "steps": 1800})
    )
    (tmp_path / "run" / "metrics.jsonl").write_text(
        '{"step": 20, "tokens_per_s": 1000.0}\n{"step": 40, "tokens_per_s": 3000.0}\n{"step": 40, "valid_loss": 1.0}\n'
    )
    assert peer.ems_budget(tmp_path) == {"seconds": 600.5, "steps": 1800, "tokens_per_s": 2000.0}


def test_a_directory_that_is_not_a_finished_demo_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="demo_stages.json not found"):
        peer.ems_budget(tmp_path)


def test_peer_vocabulary_defaults_to_the_ems_models(tmp_path):
    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    with pytest.raises(UserError, match="config.json not found"):
        peer.ems_vocab_size(tmp_path)
    (model / "config.json").write_text(json.dumps({"vocab_size": 32000, "d_model": 128}))
    assert peer.ems_vocab_size(tmp_path) == 32000


def test_table_gives_ems_over_peer_ratios():
    table = peer.report_table(
        {
            "steps": 1800,
            "seconds": 600.0,
            "steps_per_s": 3.0,
            "tokens_per_s": 20000.0,
            "Tatoeba": 75.0,
            "FLORES-200": 30.0,
            "held-out": 80.0,
        },
        {
            "steps": 600,
            "seconds": 600.0,
            "steps_per_s": 1.0,
            "tokens_per_s": 10000.0,
            "Tatoeba": 60.0,
            "FLORES-200": 40.0,
            "held-out": 80.0,
        },
    )
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]] for line in table.splitlines()[2:]}
    assert rows["steps/s"] == ["3.00", "1.00", "3.00"]
    assert rows["Tatoeba P@1"] == ["75.0", "60.0", "1.25"]
    assert rows["FLORES-200 P@1"] == ["30.0", "40.0", "0.75"]
    assert rows["held-out P@1"][2] == "1.00"


def test_the_peer_schedule_is_transformers_linear_one_with_a_movable_end():
    import torch
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    reference = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=150, num_training_steps=900).lr_lambdas[0]
    schedule = peer.LinearDecay(warmup=150, end=900)
    assert [schedule(step) for step in range(1000)] == pytest.approx([reference(step) for step in range(1000)])
    schedule.end = 600  # re-fitted: the decay now reaches 0 at step 600
    assert schedule(375) == pytest.approx(0.5) and schedule(600) == 0.0 and schedule(700) == 0.0


def test_refit_end_fills_the_budget_at_the_run_s_own_rate():
    # 100 steps in 100 s, 1.1 steps/s: 400 s left are 440 more steps
    assert peer.refit_end(step=100, elapsed=100.0, steady_rate=1.1, seconds=500.0, cap=1000) == 540
    assert peer.refit_end(step=100, elapsed=100.0, steady_rate=1.1, seconds=500.0, cap=500) == 500  # the loop's bound
    assert peer.refit_end(step=100, elapsed=600.0, steady_rate=1.1, seconds=500.0, cap=1000) == 101  # over budget
