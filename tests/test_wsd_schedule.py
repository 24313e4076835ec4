"""The warmup-stable-decay schedule (TrainConfig.lr_schedule "wsd") and its decay branches: the lr
factor against hand-computed values, the config checks, and a branch from a long run's kept
branch-point checkpoint giving, to the bit, the model of a run trained to that budget from the start."""

import dataclasses
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from ems.configs import ConfigError, load_config
from ems.losses import OBJECTIVES
from ems.training.checkpoint import load_tensor_file
from ems.training.config import TrainConfig, with_resolved_paths
from ems.training.resume import ABSENT, CONFIG_HISTORY_FILE, BranchError, ResumeConfigError, config_changes
from ems.training.saving import RUN_CONFIG_FILE, Checkpointer
from ems.training.schedule import LinearSchedule, WSDSchedule, build_schedule, wsd_decay_start
from ems.training.train import train
from tests.conftest import small_run
from tests.fakes import RUN

# --- the schedule --------------------------------------------------------------------------------


def test_wsd_warms_up_holds_the_peak_then_decays_to_zero():
    f = WSDSchedule(warmup_steps=4, max_steps=20, decay_fraction=0.25)  # decay over steps 15-20
    assert f.decay_start == 15
    assert [round(f(s), 3) for s in range(21)] == [0.25, 0.5, 0.75] + [1.0] * 13 + [0.8, 0.6, 0.4, 0.2, 0.0]


@pytest.mark.parametrize(
    "max_steps, fraction, start",
    [
        (100, 0.2, 80),
        (100_000, 0.1, 90_000),
        (7, 0.1, 6),  # round(0.7) = 1
        (10, 0.25, 8),  # round(2.5) = 2: Python's round, half to even
        (14, 0.25, 10),  # round(3.5) = 4
        (50, 1.0, 0),  # all decay
        (3, 0.1, 3),  # round(0.3) = 0: no decay steps, 0 at the end
    ],
)
def test_decay_start(max_steps, fraction, start):
    assert wsd_decay_start(max_steps, fraction) == start
    f = WSDSchedule(0, max_steps, fraction)
    assert [f(s) for s in range(start)] == [1.0] * start and f(max_steps) == 0.0


def test_decay_overlapping_the_warmup_takes_the_smaller_factor():
    f = WSDSchedule(warmup_steps=10, max_steps=10, decay_fraction=0.5)  # decay from step 5
    assert [round(f(s), 3) for s in range(11)] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.6, 0.4, 0.2, 0.0]


def test_the_plateau_does_not_depend_on_the_end_and_a_fitted_end_moves_the_decay():
    """What a branch relies on: the steps before a budget T's branch point, the state a checkpoint
    there holds, have a longer run's factors."""
    for long in (200, 137, 60):
        for budget in range(1, long):
            point = wsd_decay_start(budget, 0.2)
            assert point <= wsd_decay_start(long, 0.2)
            short, longer = WSDSchedule(7, budget, 0.2), WSDSchedule(7, long, 0.2)
            assert [short(s) for s in range(point)] == [longer(s) for s in range(point)]
    f = WSDSchedule(5, 1000, 0.2)
    f.max_steps = 50  # a time budget's fitted end (TimeBudget, ems.training.train)
    assert (f.decay_start, f(39), f(45), f(50)) == (40, 1.0, 0.5, 0.0)


def test_linear_stays_the_default_and_unchanged():
    cfg = TrainConfig()
    assert (cfg.lr_schedule, cfg.decay_fraction, cfg.branch_steps, cfg.branch_from) == ("linear", 0.2, [], None)
    f = build_schedule(cfg, 4, 10)
    assert type(f) is LinearSchedule
    assert [round(f(s), 3) for s in range(11)] == [0.25, 0.5, 0.75, 1.0, 1.0, 0.833, 0.667, 0.5, 0.333, 0.167, 0.0]
    assert build_schedule(TrainConfig(lr_schedule="wsd", decay_fraction=0.5), 4, 10) == WSDSchedule(4, 10, 0.5)


# --- config errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, message",
    [
        ({"lr_schedule": "wsd", "decay_fraction": 0.0}, "decay_fraction must be in (0, 1], got 0.0"),
        ({"lr_schedule": "wsd", "decay_fraction": 1.5}, "decay_fraction must be in (0, 1], got 1.5"),
        ({"lr_schedule": "cosine"}, "lr_schedule must be one of linear, wsd, got 'cosine'"),
        (
            {"branch_steps": [500], "decay_fraction": -1.0},
            "decay_fraction must be in (0, 1], got -1.0; branch_steps needs lr_schedule wsd (a linear schedule's "
            "every lr depends on its end), got lr_schedule 'linear'",
        ),
        (
            {"branch_steps": [500]},
            "branch_steps needs lr_schedule wsd (a linear schedule's every lr depends on its end), got lr_schedule "
            "'linear'",
        ),
        (
            {"lr_schedule": "wsd", "max_steps": 1000, "branch_steps": [500, 1000]},
            "branch_steps must be budgets below max_steps (1000) whose branch point T - round(decay_fraction * T) "
            "is at least 1, got [1000]",
        ),
        ({"branch_from": "run/checkpoints/step400"}, "branch_from needs lr_schedule wsd"),
        (
            {"lr_schedule": "wsd", "branch_from": "run/checkpoints/step400", "time_budget_minutes": 60},
            "branch_from needs no time_budget_minutes (a branch ends at max_steps exactly)",
        ),
    ],
)
def test_a_bad_wsd_setting_is_one_error_line_naming_the_key(values, message):
    with pytest.raises(ConfigError) as caught:
        load_config(TrainConfig, values=values)
    assert str(caught.value) == f"TrainConfig: {message}"


# --- a long run, its kept branch point, and a branch -------------------------------------------

LONG, BUDGET, POINT = 30, 20, 16  # 20 - round(0.2 * 20) = 16
LONG_DECAY, LONGER = 24, 40  # the long run decays from step 24; a longer run (decaying from 32) goes on from there
WSD = dict(
    lr_schedule="wsd",
    decay_fraction=0.2,
    warmup_steps=5,
    log_every=1,
    save_every=5,
    keep_checkpoints=1,
)
COMPARED = (*OBJECTIVES, "loss", "lr", "grad_norm")


def trajectory(history: list[dict]) -> list[tuple]:
    """Each logged step's losses, lr and gradient norm."""
    return [(h["step"], *(h[key] for key in COMPARED)) for h in history if "loss" in h]


def final_weights(out, step: int) -> dict[str, torch.Tensor]:
    """The whole model (encoder and training heads) of the run's checkpoint at `step`."""
    return load_tensor_file(out / "checkpoints" / f"step{step}" / "mp_rank_00_model_states.pt")["module"]


def assert_same_weights(a_out, b_out, step: int) -> None:
    """The two runs' checkpoints at `step` hold the same tensors, to the bit."""
    a, b = final_weights(a_out, step), final_weights(b_out, step)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def long_run(tiny_pipeline, tmp_path_factory):
    out = tmp_path_factory.mktemp("long")
    return out, train(small_run(tiny_pipeline, out, RUN, WSD, max_steps=LONG, branch_steps=[BUDGET]))


def test_a_long_run_keeps_its_branch_point_checkpoint(long_run):
    out, result = long_run
    assert result.steps == LONG
    # keep_checkpoints=1 pruned steps 5, 10, 15, 20 and 25; the branch point and the run's own decay start
    # (where a longer run can go on from it) are kept
    assert sorted(p.name for p in (out / "checkpoints").glob("step*")) == [
        f"step{POINT}",
        f"step{LONG_DECAY}",
        f"step{LONG}",
    ]


def branch_against_straight(long_run, pipeline: Path, tmp_path: Path, at: int, steps: int) -> tuple[list, list]:
    """A run of `steps` steps branched into tmp_path/branch from the long run's checkpoint of step `at`, against
    the run trained to `steps` from the start (tmp_path/straight): the branch goes on from step `at`, and every
    loss, lr and gradient norm (the long run's up to `at`, then the branch's) and the final weights equal the
    straight run's to the bit. Returns the long run's and the branch's trajectory."""
    long_out, long_result = long_run
    straight = train(small_run(pipeline, tmp_path / "straight", RUN, WSD, max_steps=steps))
    branch_from = long_out / "checkpoints" / f"step{at}"
    branched = train(small_run(pipeline, tmp_path / "branch", RUN, WSD, max_steps=steps, branch_from=str(branch_from)))
    assert branched.steps == steps
    long_history, branch_history = trajectory(long_result.history), trajectory(branched.history)
    assert [h[0] for h in branch_history] == list(range(at + 1, steps + 1))
    assert long_history[:at] + branch_history == trajectory(straight.history)
    assert_same_weights(tmp_path / "straight", tmp_path / "branch", steps)
    return long_history, branch_history


def test_a_branch_equals_the_run_trained_to_its_budget_from_the_start(long_run, tiny_pipeline, tmp_path):
    long_history, branch_history = branch_against_straight(long_run, tiny_pipeline, tmp_path, POINT, BUDGET)
    assert long_history[POINT + 1][1:] != branch_history[1][1:]  # the long run holds its lr where the branch decays
    f = WSDSchedule(5, BUDGET, 0.2)
    assert [h[COMPARED.index("lr") + 1] for h in branch_history] == pytest.approx(
        [2e-3 * f(s) for s in range(POINT + 1, BUDGET + 1)], rel=1e-12
    )
    history = yaml.safe_load((tmp_path / "branch" / CONFIG_HISTORY_FILE).read_text())
    assert history[0]["from_step"] == POINT
    assert history[0]["changed"]["max_steps"] == {"from": LONG, "to": BUDGET}
    branch_from = long_run[0] / "checkpoints" / f"step{POINT}"
    assert history[0]["changed"]["branch_from"] == {"from": None, "to": str(branch_from)}


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"max_steps": 15},
            f"it is the checkpoint of step {POINT}, and a wsd run of max_steps 15 with decay_fraction 0.2 decays "
            "from step 12",
        ),
        ({"max_steps": BUDGET, "lr": 1e-3}, "it was trained with other settings: lr 0.002 -> 0.001; a branch may"),
    ],
)
def test_a_branch_from_the_wrong_checkpoint_is_refused_in_one_line(long_run, tiny_pipeline, tmp_path, change, message):
    branch_from = long_run[0] / "checkpoints" / f"step{POINT}"
    with pytest.raises(BranchError) as caught:
        train(small_run(tiny_pipeline, tmp_path / "branch", RUN, WSD, change, branch_from=str(branch_from)))
    assert str(caught.value).startswith(f"cannot branch from branch_from={branch_from}: {message}")
    assert "\n" not in str(caught.value)
    assert not list((tmp_path / "branch").glob("checkpoints/step*"))


def test_a_longer_run_goes_on_from_a_shorter_runs_plateau_to_the_bit(long_run, tiny_pipeline, tmp_path):
    """From the long run's own decay start (step 24, kept), a run of 40 steps holds the peak lr to its
    decay start (32) and decays: the model of a 40-step run from the start."""
    _, longer_history = branch_against_straight(long_run, tiny_pipeline, tmp_path, LONG_DECAY, LONGER)
    lr = COMPARED.index("lr") + 1
    assert [h[lr] for h in longer_history[: 32 - LONG_DECAY]] == [2e-3] * 8  # the plateau held to step 32


def test_a_branch_from_a_decayed_checkpoint_is_refused(long_run, tiny_pipeline, tmp_path):
    """The long run's last checkpoint (step 30) is past its decay start (24): its lr was already falling."""
    branch_from = long_run[0] / "checkpoints" / f"step{LONG}"
    with pytest.raises(BranchError) as caught:
        train(small_run(tiny_pipeline, tmp_path / "b", RUN, WSD, max_steps=50, branch_from=str(branch_from)))
    assert str(caught.value) == (
        f"cannot branch from branch_from={branch_from}: its run was already decaying at step {LONG} (its schedule "
        f"ended at step {LONG}), so it is off the plateau a branch goes on from"
    )


# --- paths compared as the files they name; a decay under way kept as it is -----------------------


def test_a_branch_compares_the_files_its_paths_name_not_their_spelling(long_run, tiny_pipeline, tmp_path, monkeypatch):
    """The long run stored its paths absolute; a branch from another working directory that spells them
    relative, the vocabulary through a symbolic link, is the same run's config. Its own stored paths are
    the real ones."""
    (tmp_path / "vocab-link").symlink_to(tiny_pipeline / "vocab")
    monkeypatch.chdir(tmp_path)
    branch_from = long_run[0] / "checkpoints" / f"step{POINT}"
    spelled = dict(data=os.path.relpath(tiny_pipeline / "shards"), vocab="vocab-link", out="branch")
    branched = train(small_run(tiny_pipeline, "", RUN, WSD, spelled, max_steps=BUDGET, branch_from=str(branch_from)))
    assert branched.steps == BUDGET
    stored = json.loads((tmp_path / "branch" / "checkpoints" / f"step{BUDGET}" / RUN_CONFIG_FILE).read_text())
    real = {key: os.path.realpath(tiny_pipeline / key) for key in ("shards", "vocab")}
    assert (stored["config"]["data"], stored["config"]["vocab"]) == (real["shards"], real["vocab"])
    history = yaml.safe_load((tmp_path / "branch" / CONFIG_HISTORY_FILE).read_text())
    assert "data" not in history[0]["changed"] and "vocab" not in history[0]["changed"]


def test_a_checkpoint_without_its_run_config_is_refused_in_one_line(tmp_path):
    tag_dir = tmp_path / "runs" / "old" / "checkpoints" / "step4"
    tag_dir.mkdir(parents=True)
    checkpointer = SimpleNamespace(cfg=TrainConfig(out=str(tmp_path / "runs" / "old")), fixed={}, rank=0)
    with pytest.raises(
        ResumeConfigError, match=f"^{tag_dir} has no {RUN_CONFIG_FILE}, so its config cannot be checked"
    ):
        config_changes(checkpointer, tag_dir)


def test_a_checkpoint_whose_config_names_a_setting_otherwise_is_refused_not_left_unchecked(tmp_path):
    """A run config another version wrote: pair sampling's temperature under its old name `temperature`, and
    no `pair_sampling_temperature`. Both keys are compared as present on one side only, so the renamed
    setting, which fixes the data order, is refused; a key outside FIXED_KEYS on one side only is a change."""
    out = tmp_path / "runs" / "old"
    tag_dir = out / "checkpoints" / "step4"
    tag_dir.mkdir(parents=True)
    cfg = TrainConfig(out=str(out), pair_sampling_temperature=5.0)
    stored = json.loads(json.dumps(dataclasses.asdict(with_resolved_paths(cfg))))
    stored["temperature"] = stored.pop("pair_sampling_temperature")
    (tag_dir / RUN_CONFIG_FILE).write_text(json.dumps({"config": stored, "fixed": {}}))
    checkpointer = SimpleNamespace(cfg=cfg, fixed={}, rank=0, directory=out / "checkpoints")
    with pytest.raises(ResumeConfigError) as caught:
        config_changes(checkpointer, tag_dir)
    assert f"pair_sampling_temperature {ABSENT!r} -> 5.0" in str(caught.value)
    stored["pair_sampling_temperature"] = stored.pop("temperature")
    stored.pop("log_every")
    (tag_dir / RUN_CONFIG_FILE).write_text(json.dumps({"config": stored, "fixed": {}}))
    assert config_changes(checkpointer, tag_dir) == {"log_every": [ABSENT, cfg.log_every]}


def test_a_checkpoint_from_before_a_data_order_setting_was_added_resumes_under_its_default(tmp_path):
    """pair_sampling_floor (ADDED_KEYS) fixes the data order but did not exist when older checkpoints were
    written: absent from their config, it reads as its default (no floor, as they trained), so they resume;
    the same checkpoint resumed with a floor is refused."""
    out = tmp_path / "runs" / "old"
    tag_dir = out / "checkpoints" / "step4"
    tag_dir.mkdir(parents=True)
    cfg = TrainConfig(out=str(out))
    stored = json.loads(json.dumps(dataclasses.asdict(with_resolved_paths(cfg))))
    del stored["pair_sampling_floor"]
    (tag_dir / RUN_CONFIG_FILE).write_text(json.dumps({"config": stored, "fixed": {}}))
    checkpointer = SimpleNamespace(cfg=cfg, fixed={}, rank=0, directory=out / "checkpoints")
    assert config_changes(checkpointer, tag_dir) == {}
    checkpointer.cfg = TrainConfig(out=str(out), pair_sampling_floor=1000)
    with pytest.raises(ResumeConfigError, match="pair_sampling_floor"):
        config_changes(checkpointer, tag_dir)


def copy_of(run, tmp_path):
    """A copy of a run directory (the module's long run stays as it is)."""
    return shutil.copytree(run, tmp_path / "run")


def test_a_finished_wsd_run_resumed_with_a_longer_budget_is_refused_naming_its_plateau_checkpoint(
    long_run, tiny_pipeline, tmp_path
):
    """Its lr decayed to 0 at step 30: a plain resume to 40 steps would put it back at the peak (a 40-step wsd
    run decays from step 32). The branch from its plateau checkpoint is that run (see above)."""
    out = copy_of(long_run[0], tmp_path)
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    with pytest.raises(ResumeConfigError) as caught:
        train(small_run(tiny_pipeline, out, RUN, WSD, max_steps=LONGER, branch_steps=[BUDGET]))
    assert str(caught.value) == (
        f"{out} is a wsd run decaying since step {LONG_DECAY} (max_steps {LONG}, decay_fraction 0.2) whose "
        f"checkpoint is at step {LONG}: a resume with max_steps {LONGER} cannot change a decay under way (a wsd run "
        f"of that schedule holds the peak lr to step 32). For that budget, train it into a new out= with "
        f"branch_from={out / 'checkpoints' / f'step{LONG_DECAY}'}, the run's last checkpoint on the plateau"
    )
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before


def test_a_resume_from_the_plateau_checkpoint_equals_the_uninterrupted_run_and_keeps_it(
    long_run, tiny_pipeline, tmp_path
):
    """From the decay start itself (step 24, not past it) a resume of the same schedule is the long run, to the
    bit, and with keep_checkpoints=1 its branch point and plateau checkpoints are still kept."""
    long_out, long_result = long_run
    out = copy_of(long_out, tmp_path)
    shutil.rmtree(out / "checkpoints" / f"step{LONG}")
    (out / "checkpoints" / "latest").write_text(f"step{LONG_DECAY}")
    resumed = train(small_run(tiny_pipeline, out, RUN, WSD, max_steps=LONG, branch_steps=[BUDGET]))
    assert trajectory(resumed.history) == trajectory(long_result.history)[LONG_DECAY:]
    assert_same_weights(long_out, out, LONG)
    assert sorted(p.name for p in (out / "checkpoints").glob("step*")) == [
        f"step{POINT}",
        f"step{LONG_DECAY}",
        f"step{LONG}",
    ]


def test_the_kept_decay_start_follows_the_schedule_s_end_however_it_is_set():
    """max_steps, max_epochs' steps or a time budget's fitted end: RunState.max_steps."""
    for schedule_end in ({}, {"max_epochs": 3.0}, {"time_budget_minutes": 5.0}):
        cfg = TrainConfig(lr_schedule="wsd", max_steps=1000, branch_steps=[20], **schedule_end)
        checkpointer = Checkpointer(Path("run/checkpoints"), None, 0, None, cfg, {})
        assert checkpointer.branch_points(50) == {16, 40}
        assert [step for step in range(1, 51) if checkpointer.should_save(step, 50)] == [16, 40]
    assert Checkpointer(Path("run"), None, 0, None, TrainConfig(save_every=7), {}).branch_points(50) == set()
