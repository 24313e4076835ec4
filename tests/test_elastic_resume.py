"""Elastic resume: a run resumes on another number of processes (and accumulation) with the same
global batch and replays the same samples, step for step; with another global batch it goes on
after the pairs consumed so far and says so. 2 processes run under torchrun with gloo on CPU."""

import pytest

from ems.training.checkpoint import load_tensor_file
from ems.training.config import TrainConfig
from ems.training.resume import resumed_position
from ems.training.runtime import BatchLayout, gradient_accumulation, optimizer_layout
from ems.training.train import train
from tests.conftest import SMALL_MODEL, small_run
from tests.fakes import assert_same_parameters, finish, launch, logged_losses, parameters

pytestmark = pytest.mark.usefixtures("one_thread_like_the_subprocesses")

NO_DROPOUT = dict(SMALL_MODEL, dropout=0.0)  # with dropout, 2 ranks draw other masks than 1 (see resume)
SCHEDULE = dict(lr=2.0e-3, warmup_steps=2, max_steps=6, log_every=1, save_every=1000)
ELASTIC = dict(SCHEDULE, batch_size=16, global_batch_size=32, model_overrides=NO_DROPOUT)
STOP, STEPS = 3, 6


@pytest.fixture(scope="module")
def one_process(tiny_pipeline, tmp_path_factory):
    """The uninterrupted run: 1 process accumulating 2 x 16 pairs (= 2 processes x 16, local negatives)."""
    out = tmp_path_factory.mktemp("straight")
    result = train(small_run(tiny_pipeline, out, ELASTIC, deepspeed_config="configs/deepspeed/zero1.json"))
    return {"losses": logged_losses(out), "params": parameters(result.model_dir)}


def assert_equals_uninterrupted(out, straight) -> None:
    losses = logged_losses(out)
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step, loss in straight["losses"].items():
        assert losses[step] == pytest.approx(loss, rel=1e-5), step
    assert_same_parameters(parameters(out / "model"), straight["params"], atol=1e-5)


def test_two_processes_with_zero1_resumed_on_one_equal_an_uninterrupted_run(tiny_pipeline, tmp_path, one_process):
    """ZeRO-1 splits Adam's state over the 2 ranks: the resume goes through DeepSpeed's universal checkpoint."""
    out = tmp_path / "run"
    status, output = finish(
        launch(
            small_run(tiny_pipeline, out, ELASTIC, stop_at_step=STOP, deepspeed_config="configs/deepspeed/zero1.json"),
            nproc=2,
        )
    )
    assert status == 0, output[-3000:]
    assert len(list((out / "checkpoints" / f"step{STOP}").glob("zero_pp_rank_*_optim_states.pt"))) == 2
    status, output = finish(
        launch(small_run(tiny_pipeline, out, ELASTIC, deepspeed_config="configs/deepspeed/zero1.json"))
    )
    assert status == 0, output[-3000:]
    assert "holds optimizer partitions of 2 ranks; this run has 1" in output
    assert (
        "elastic resume: 2 processes x 1 accumulation x 16 pairs -> 1 process x 2 accumulation x 16 pairs, "
        "the same global batch of 32 pairs"
    ) in output
    assert f"resumed from {out / 'checkpoints' / f'step{STOP}'} (through its universal copy) at step {STOP}" in output
    assert not list((out / "checkpoints").glob("universal-*"))  # the converted copy is gone
    assert_equals_uninterrupted(out, one_process)


def test_one_process_resumed_on_two_equals_an_uninterrupted_run(tiny_pipeline, tmp_path, one_process):
    """ZeRO-1 on 1 rank: one partition, re-split over 2 ranks on resume."""
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, ELASTIC, stop_at_step=STOP, deepspeed_config="configs/deepspeed/zero1.json"))
    status, output = finish(
        launch(small_run(tiny_pipeline, out, ELASTIC, deepspeed_config="configs/deepspeed/zero1.json"), nproc=2)
    )
    assert status == 0, output[-3000:]
    assert "1 process x 2 accumulation x 16 pairs -> 2 processes x 1 accumulation x 16 pairs" in output
    assert_equals_uninterrupted(out, one_process)


def test_another_global_batch_goes_on_after_the_pairs_consumed_and_says_so(tiny_pipeline, tmp_path, capsys):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, ELASTIC, stop_at_step=STOP))  # position (0, 3): 96 pairs
    capsys.readouterr()
    train(small_run(tiny_pipeline, out, ELASTIC, global_batch_size=64, stop_at_step=STOP + 1))
    said = capsys.readouterr().out
    assert (
        "the global batch changed from 32 to 64 pairs (1 process x 2 accumulation x 16 pairs -> 1 process x 4 "
        "accumulation x 16 pairs): going on after the 96 pairs consumed in epoch 0, at batch 1 of the new order"
    ) in said
    state = load_tensor_file(out / "checkpoints" / f"step{STOP + 1}" / "mp_rank_00_model_states.pt")
    assert state["data_position"] == [0, 2] and state["global_batch"] == 64 and state["accumulation"] == 4


def test_resumed_position_keeps_the_position_for_the_same_global_batch_and_maps_pairs_otherwise(capsys):
    saved = {"data_position": [2, 7], "global_batch": 48, "world_size": 4, "accumulation": 1, "batch_size": 12}
    assert resumed_position(saved, BatchLayout(1, 4, 12), rank=0) == (2, 7)
    assert resumed_position(saved, BatchLayout(2, 1, 24), rank=0) == (2, 7)
    assert capsys.readouterr().out.count("elastic resume") == 2
    assert resumed_position(saved, BatchLayout(4, 1, 12), rank=0) == (2, 7)
    assert capsys.readouterr().out == ""  # nothing changed: nothing said
    assert resumed_position(saved, BatchLayout(1, 1, 100), rank=0) == (2, 3)  # 7 x 48 = 336 pairs -> batch 3 of 100
    assert resumed_position(saved, BatchLayout(1, 1, 16), rank=0) == (2, 21)
    assert "the global batch changed from 48 to 16" in capsys.readouterr().out
    old = {"data_position": [0, 5], "global_batch": 32, "world_size": 2}  # saved before accumulation was recorded
    assert resumed_position(old, BatchLayout(1, 2, 16), rank=0) == (0, 5)
    assert "2 processes x ? accumulation x ? pairs -> 1 process x 2 accumulation x 16 pairs" in capsys.readouterr().out


def test_gradient_accumulation_follows_the_global_batch():
    ds = {"gradient_accumulation_steps": 3}
    assert gradient_accumulation(TrainConfig(batch_size=16), ds, world_size=2) == 3
    assert gradient_accumulation(TrainConfig(batch_size=16, global_batch_size=128), ds, world_size=2) == 4
    assert gradient_accumulation(TrainConfig(batch_size=16, global_batch_size=128), ds, world_size=8) == 1
    with pytest.raises(ValueError, match="global_batch_size=128 is not a multiple of 3 processes x batch_size 16 = 48"):
        gradient_accumulation(TrainConfig(batch_size=16, global_batch_size=128), ds, world_size=3)
    with pytest.raises(ValueError, match="global_batch_size must be positive"):
        TrainConfig(global_batch_size=0)


def test_the_batch_layout_is_not_part_of_the_optimizer_layout():
    ds = {
        "train_micro_batch_size_per_gpu": 16,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 1},
    }
    assert optimizer_layout(ds) == {"gradient_clipping": 1.0, "zero_optimization": {"stage": 1}}
