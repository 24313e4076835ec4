"""The trainer end to end on a real (small) corpus through DeepSpeed, single process."""

import numpy as np
import pytest
import torch

import ems
from ems.training.schedule import LinearSchedule
from ems.training.train import train
from tests.conftest import SMALL_MODEL, small_run
from tests.fakes import RUN

# conftest.small_run's settings of this file's runs (other test files' short runs start from them too)


@pytest.fixture(scope="module")
def trained(tiny_pipeline, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    # XTR over the whole vocabulary, as the held-out loss scores it (the batch softmax trains against only
    # the batch's pieces, and in 80 steps lowers the held-out XTR less)
    model_overrides = dict(SMALL_MODEL, xtr_vocabulary="full")
    valid_data = str(tiny_pipeline / "valid_shards")
    return out, train(
        small_run(tiny_pipeline, out, RUN, valid_data=valid_data, export_init=True, model_overrides=model_overrides)
    )


def test_short_run_lowers_both_held_out_losses(trained):
    _, result = trained
    valid = [h for h in result.history if "valid_loss" in h]
    assert [h["step"] for h in valid] == [0, 80]
    before, after = valid
    assert after["valid_xtr"] < 0.8 * before["valid_xtr"]
    assert after["valid_contrastive"] < 0.96 * before["valid_contrastive"]
    assert after["valid_loss"] < before["valid_loss"]


def test_run_writes_tensorboard_metrics_and_export(trained):
    out, result = trained
    assert result.steps == 80
    assert list((out / "tb").glob("events.out.tfevents.*"))
    assert (out / "metrics.jsonl").read_text().count("\n") == 16 + 2  # 16 training logs, 2 validations
    model = ems.load(result.model_dir)
    assert model.encode(["Guardar cambios"], lang="de").shape == (1, SMALL_MODEL["d_model"])


def test_export_round_trips_to_identical_outputs(trained, tiny_pipeline):
    out, result = trained
    from ems.encoder import export_encoder
    from ems.text import Tokenizer

    model = ems.load(result.model_dir)
    copy_dir = out / "model-copy"
    export_encoder(model.model, Tokenizer.load(tiny_pipeline / "vocab"), copy_dir)
    sentences = ["Enter a valid date.", "This field is required.", "Save and continue editing"]
    again = ems.load(copy_dir).encode(sentences, lang="en")
    assert again.dtype == np.float32
    np.testing.assert_array_equal(model.encode(sentences, lang="en"), again)


def test_training_changed_the_encoder(trained):
    out, result = trained
    sentences = ["Enter a valid date."]
    assert not np.allclose(
        ems.load(out / "model-init").encode(sentences, "en"), ems.load(result.model_dir).encode(sentences, "en")
    )


def test_resume_from_checkpoint_equals_uninterrupted_run(tiny_pipeline, tmp_path):
    common = dict(max_steps=20, warmup_steps=5, log_every=1)
    straight = train(small_run(tiny_pipeline, tmp_path / "straight", RUN, common))
    first_half = train(small_run(tiny_pipeline, tmp_path / "resumed", RUN, common, stop_at_step=10))
    second_half = train(small_run(tiny_pipeline, tmp_path / "resumed", RUN, common))
    assert (first_half.steps, second_half.steps) == (10, 20)
    resumed_history = [h for h in first_half.history + second_half.history if "loss" in h]
    assert [h["step"] for h in resumed_history] == list(range(1, 21))
    for a, b in zip(straight.history, resumed_history, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5), a["step"]
    a = ems.load(straight.model_dir).model.state_dict()
    b = ems.load(second_half.model_dir).model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key])


def test_lr_schedule_warms_up_then_decays_to_zero():
    f = LinearSchedule(warmup_steps=4, max_steps=10)
    assert [round(f(s), 3) for s in range(11)] == [0.25, 0.5, 0.75, 1.0, 1.0, 0.833, 0.667, 0.5, 0.333, 0.167, 0.0]


def test_time_budget_fits_the_schedule_and_a_resume_keeps_the_fitted_end(tiny_pipeline, tmp_path):
    # the probe (steps 5-10) ends within warm-up, so the lr never depends on the unfitted end
    budget = dict(
        max_steps=100_000,
        warmup_steps=12,
        time_budget_minutes=0.05,
        budget_probe_steps=5,
        log_every=1,
        save_every=100_000,
    )
    first = train(small_run(tiny_pipeline, tmp_path / "run", RUN, budget, stop_at_step=12))
    fitted = first.max_steps
    assert first.steps == 12 and 12 < fitted < 100_000  # timed on steps 5-10, fitted to ~3 s of steps
    second = train(small_run(tiny_pipeline, tmp_path / "run", RUN, budget))  # resumes at 12: no new timing
    assert second.max_steps == fitted and second.steps == fitted
    assert second.history[-1]["lr"] == 0.0  # the decay ended exactly at the fitted end
    straight = train(
        small_run(tiny_pipeline, tmp_path / "plain", RUN, budget, max_steps=fitted, time_budget_minutes=None)
    )
    assert [h["lr"] for h in straight.history] == [h["lr"] for h in first.history + second.history]


def test_warmup_in_samples_and_scaled_lr_drive_the_logged_lr_and_survive_a_resume(tiny_pipeline, tmp_path, capsys):
    """Global batch 32 (one process): warmup_samples=160 -> 5 warm-up steps; lr 2e-3 linearly
    scaled from a 64-pair reference -> peak 1e-3. The logged lr is that schedule's, resumed or not."""
    common = dict(
        max_steps=20,
        log_every=1,
        warmup_samples=160,
        lr_scaling="linear",
        reference_global_batch=64,
        save_every=10,
    )
    first = train(small_run(tiny_pipeline, tmp_path / "run", RUN, common, stop_at_step=10))
    printed = capsys.readouterr().out
    assert "schedule: global batch 32 pairs (1 ranks x 1 accumulation x 32); peak lr 0.001" in printed
    assert "warm-up 5 steps = 160 pairs (warmup_samples 160 / 32), 25.0% of 20 steps" in printed
    second = train(small_run(tiny_pipeline, tmp_path / "run", RUN, common))
    schedule = LinearSchedule(5, 20)
    logged = {h["step"]: h["lr"] for h in first.history + second.history if "lr" in h}
    # the record of step s holds the lr the scheduler set after step s, i.e. for step s + 1 (0-based s)
    assert sorted(logged) == list(range(1, 21))
    for step, lr in logged.items():
        assert lr == pytest.approx(1e-3 * schedule(step), rel=1e-6), step
