"""The trainer at scale, for real: 2 processes (torchrun, gloo on CPU) against 1, ZeRO stages,
gradient accumulation, all-rank contrastive negatives, and exact resume after SIGKILL,
SIGTERM/SIGUSR1 pre-emption, a STOP file and a corrupt checkpoint."""

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ems.training.checkpoint import LATEST, saved_tags
from ems.training.stopping import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE, STOP_FILE
from ems.training.train import train
from tests.conftest import SMALL_MODEL, small_run
from tests.fakes import assert_same_parameters, finish, launch, logged_losses, parameters

# dropout stays on (0.1, the tiny preset's) in the resume tests: the per-rank RNG must be restored
RESUME = dict(batch_size=32, lr=2.0e-3, warmup_steps=4, max_steps=1000, log_every=1, save_every=4, seed=3)
STEPS = 12

pytestmark = pytest.mark.usefixtures("one_thread_like_the_subprocesses")


@pytest.fixture(scope="module")
def straight(tiny_pipeline, tmp_path_factory):
    """The uninterrupted run every resumed run must reproduce, step by step."""
    out = tmp_path_factory.mktemp("straight")
    result = train(small_run(tiny_pipeline, out, RESUME, stop_at_step=STEPS))
    return {"losses": {h["step"]: h["loss"] for h in result.history}, "params": parameters(result.model_dir)}


def assert_resumed_equals_straight(out: Path, straight: dict) -> None:
    losses = logged_losses(out)
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step, loss in straight["losses"].items():
        assert losses[step] == pytest.approx(loss, rel=1e-5), step
    assert_same_parameters(parameters(out / "model"), straight["params"], atol=1e-6)


def wait_for(condition, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(
                f"training ended (status {process.returncode}) before the test could interrupt it:\n"
                + process.communicate()[0][-3000:]
            )
        assert time.time() < deadline, "timed out waiting for the training subprocess"
        time.sleep(0.05)


def test_sigkill_after_a_checkpoint_then_resume_equals_uninterrupted(tiny_pipeline, tmp_path, straight):
    out = tmp_path / "run"
    process = launch(small_run(tiny_pipeline, out, RESUME))
    wait_for(lambda: (out / "checkpoints" / LATEST).is_file(), process)
    process.send_signal(signal.SIGKILL)
    assert finish(process)[0] == -signal.SIGKILL
    killed_at = int((out / "checkpoints" / LATEST).read_text().removeprefix("step"))
    assert killed_at < STEPS
    resumed = train(small_run(tiny_pipeline, out, RESUME, stop_at_step=STEPS))
    assert [h["step"] for h in resumed.history][0] == killed_at + 1
    assert_resumed_equals_straight(out, straight)


@pytest.mark.parametrize(
    "stop_signal, status",
    [
        (signal.SIGTERM, PREEMPTED_EXIT_CODE),
        (signal.SIGUSR1, PREEMPTED_EXIT_CODE),
        (signal.SIGINT, INTERRUPTED_EXIT_CODE),
    ],
)
def test_a_stop_signal_checkpoints_exits_and_resumes_exactly(tiny_pipeline, tmp_path, straight, stop_signal, status):
    """SIGTERM/SIGUSR1 (pre-emption): 99, to be requeued; SIGINT (Ctrl-C): 130, without a traceback."""
    out = tmp_path / "run"
    process = launch(small_run(tiny_pipeline, out, RESUME, save_every=1000))
    wait_for(
        lambda: (out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().count("\n") >= 2, process
    )
    process.send_signal(stop_signal)
    exit_status, output = finish(process)
    assert exit_status == status and "Traceback" not in output, output[-3000:]
    stopped_at = int((out / "checkpoints" / LATEST).read_text().removeprefix("step"))
    assert 2 <= stopped_at < STEPS and not (out / "model").exists()
    assert max(logged_losses(out)) == stopped_at
    resumed = train(small_run(tiny_pipeline, out, RESUME, stop_at_step=STEPS))
    assert resumed.history[0]["step"] == stopped_at + 1
    assert_resumed_equals_straight(out, straight)


def test_stop_file_and_corrupt_latest_checkpoint(tiny_pipeline, tmp_path, straight, caplog):
    out = tmp_path / "run"
    cfg = lambda **k: small_run(tiny_pipeline, out, RESUME, keep_checkpoints=2, **k)  # noqa: E731
    assert train(cfg(stop_at_step=9)).steps == 9
    assert saved_tags(out / "checkpoints") == ["step8", "step9"]  # keep_checkpoints=2: step4 deleted
    # a STOP file: stop at once (nothing new to save), exit code 99 from main, STOP consumed
    (out / STOP_FILE).touch()
    stopped = train(cfg())
    assert stopped.preempted and stopped.steps == 9 and not (out / STOP_FILE).exists()
    # truncate the newest checkpoint's model file: resuming warns and uses step8
    model_file = next((out / "checkpoints" / "step9").rglob("*model_states.pt"))
    model_file.write_bytes(model_file.read_bytes()[:1000])
    with caplog.at_level("WARNING", logger="ems.training.checkpoint"):
        resumed = train(cfg(stop_at_step=STEPS))
    assert "skipping checkpoint step9" in caplog.text and "truncated" in caplog.text
    assert resumed.history[0]["step"] == 9  # replays step 9 from step8
    assert_resumed_equals_straight(out, straight)


SCALE = dict(lr=2.0e-3, warmup_steps=2, max_steps=4, log_every=1, save_every=1000)
# Parameters of runs that sum gradients in a different order: Adam divides by sqrt(v), so a rare
# token's near-zero gradient that differs in its 7th digit moves it by a visibly different fraction
# of lr (seen: 6.5e-6 on 1 of 64k embedding weights). A different batch moves weights by ~lr = 2e-3.
SCALE_ATOL = 1e-5


# one process accumulating 2 micro-batches of 16 pairs
ACCUMULATING = dict(SCALE, batch_size=16, deepspeed_overrides={"gradient_accumulation_steps": 2})
# with dropout, 2 ranks draw other masks than 1; XTR's batch softmax takes each rank's (micro-)batch's tokens as
# its candidates, the full softmax the same vocabulary at any split
NO_DROPOUT = dict(SMALL_MODEL, dropout=0.0, xtr_vocabulary="full")


def two_ranks_of_16(pipeline: Path, out: Path, **settings) -> None:
    """A SCALE run of 16 pairs on each of 2 processes (torchrun), without dropout, into `out`; it must
    succeed."""
    status, output = finish(
        launch(small_run(pipeline, out, SCALE, batch_size=16, model_overrides=NO_DROPOUT, **settings), nproc=2)
    )
    assert status == 0, output[-3000:]


def test_two_processes_with_global_negatives_and_zero2_equal_one_process_with_the_global_batch(tiny_pipeline, tmp_path):
    """Global negatives make 2 x 16 pairs the same optimisation problem as 1 x 32."""
    two_ranks_of_16(
        tiny_pipeline, tmp_path / "two", global_negatives=True, deepspeed_config="configs/deepspeed/zero2.json"
    )
    one = train(small_run(tiny_pipeline, tmp_path / "one", SCALE, batch_size=32, model_overrides=NO_DROPOUT))
    assert_same_parameters(parameters(tmp_path / "two" / "model"), parameters(one.model_dir), atol=SCALE_ATOL)
    for step, loss in logged_losses(tmp_path / "two").items():
        assert loss == pytest.approx(logged_losses(tmp_path / "one")[step], rel=1e-5)


def test_two_processes_with_local_negatives_and_zero1_equal_one_process_accumulating_two_micro_batches(
    tiny_pipeline, tmp_path
):
    """Local negatives: rank r's 16 pairs are micro-batch r of one process accumulating 2 x 16."""
    two_ranks_of_16(tiny_pipeline, tmp_path / "two", deepspeed_config="configs/deepspeed/zero1.json")
    one = train(small_run(tiny_pipeline, tmp_path / "one", ACCUMULATING, model_overrides=NO_DROPOUT))
    assert_same_parameters(parameters(tmp_path / "two" / "model"), parameters(one.model_dir), atol=SCALE_ATOL)
    # and this differs from one process with in-batch negatives over all 32 pairs
    whole = train(small_run(tiny_pipeline, tmp_path / "whole", SCALE, batch_size=32, model_overrides=NO_DROPOUT))
    assert not torch.allclose(
        parameters(whole.model_dir)["layers.0.qkv.weight"],
        parameters(one.model_dir)["layers.0.qkv.weight"],
        atol=1e-5,
    )


def test_one_process_skips_deepspeeds_identity_all_reduce_and_trains_bit_identically(
    tiny_pipeline, tmp_path, monkeypatch
):
    """On one process at ZeRO 0 the gradient all-reduce is skipped (it only copied the gradients
    through a buffer): the same weights to the bit as with it. ZeRO 1 keeps it."""
    import ems.training.setup

    build_engine, engines = ems.training.setup.build_engine, []

    def recorded(*args, reduce: bool | None = None):
        engines.append(engine := build_engine(*args))
        if reduce is not None:
            engine.enable_backward_allreduce = reduce
        return engine

    accumulating = dict(ACCUMULATING, model_overrides=SMALL_MODEL)
    monkeypatch.setattr(ems.training.setup, "build_engine", recorded)
    skipped = train(small_run(tiny_pipeline, tmp_path / "skipped", accumulating))
    assert engines[-1].enable_backward_allreduce is False
    monkeypatch.setattr(ems.training.setup, "build_engine", lambda *args: recorded(*args, reduce=True))
    reduced = train(small_run(tiny_pipeline, tmp_path / "reduced", accumulating))
    a, b = parameters(skipped.model_dir), parameters(reduced.model_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    assert [h["loss"] for h in skipped.history if "loss" in h] == [h["loss"] for h in reduced.history if "loss" in h]
    monkeypatch.setattr(ems.training.setup, "build_engine", recorded)
    train(small_run(tiny_pipeline, tmp_path / "zero1", SCALE, deepspeed_config="configs/deepspeed/zero1.json"))
    assert engines[-1].enable_backward_allreduce is True


def test_the_loop_clips_as_deepspeed_would_have(tiny_pipeline, tmp_path, monkeypatch):
    """At ZeRO 0 in fp32 the loop clips the gradients (one foreach norm, also the one logged) and DeepSpeed's
    own clipping is off: the same weights and gradient norms as DeepSpeed clipping, to float tolerance, with a
    max norm every step exceeds. ZeRO 1 leaves the clipping to DeepSpeed."""
    import ems.training.setup

    clipping = dict(SCALE, deepspeed_overrides={"gradient_clipping": 0.05}, model_overrides=SMALL_MODEL)
    looped = train(small_run(tiny_pipeline, tmp_path / "loop", clipping))
    monkeypatch.setattr(ems.training.setup, "clip_in_the_loop", lambda engine: None)
    deepspeeds = train(small_run(tiny_pipeline, tmp_path / "deepspeed", clipping))
    norms = [[h["grad_norm"] for h in run.history if "grad_norm" in h] for run in (looped, deepspeeds)]
    assert min(norms[0]) > 0.05 and norms[0] == pytest.approx(norms[1], rel=1e-4)
    a, b = parameters(looped.model_dir), parameters(deepspeeds.model_dir)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-6, msg=key)
    unclipped = train(small_run(tiny_pipeline, tmp_path / "unclipped", dict(clipping, deepspeed_overrides={})))
    assert not torch.allclose(parameters(unclipped.model_dir)["layers.0.qkv.weight"], a["layers.0.qkv.weight"])

    import ems.training.runtime

    build_engine, engines = ems.training.setup.build_engine, []
    monkeypatch.setattr(
        ems.training.setup, "build_engine", lambda *args: engines.append(build_engine(*args)) or engines[-1]
    )
    monkeypatch.setattr(ems.training.setup, "clip_in_the_loop", ems.training.runtime.clip_in_the_loop)
    zero1 = dict(clipping, deepspeed_config="configs/deepspeed/zero1.json", max_steps=1)
    train(small_run(tiny_pipeline, tmp_path / "zero1", zero1))
    assert engines[-1].gradient_clipping() == 0.05


def test_the_adamw_settings_are_the_optimizer_s(tiny_pipeline, tmp_path, monkeypatch):
    import ems.training.setup

    build_engine, engines = ems.training.setup.build_engine, []
    monkeypatch.setattr(
        ems.training.setup, "build_engine", lambda *args: engines.append(build_engine(*args)) or engines[-1]
    )
    train(small_run(tiny_pipeline, tmp_path / "run", SCALE, adam_beta2=0.999, adam_eps=1e-8, max_steps=1))
    groups = engines[-1].optimizer.param_groups
    assert (
        [(group["betas"], group["eps"]) for group in groups]
        == [((0.9, 0.999), 1e-8)] * len(groups)
        == [((0.9, 0.999), 1e-8)] * 2
    )
    with pytest.raises(ValueError, match=r"adam_beta2 must be in \[0, 1\), got 1.0.*adam_eps must be a positive"):
        small_run(tiny_pipeline, tmp_path / "bad", SCALE, adam_beta2=1.0, adam_eps=0.0)


def test_accumulation_equals_the_larger_batch_for_per_pair_losses(tiny_pipeline, tmp_path):
    """XTR is a per-pair mean, so 2 accumulated micro-batches of 16 = one batch of 32 (the
    in-batch contrastive loss is not, hence its weight 0 here)."""
    xtr_only = dict(NO_DROPOUT, contrastive_weight=0.0)  # XTR over the whole vocabulary: per pair
    accumulated = train(small_run(tiny_pipeline, tmp_path / "acc", ACCUMULATING, model_overrides=xtr_only))
    whole = train(small_run(tiny_pipeline, tmp_path / "whole", SCALE, batch_size=32, model_overrides=xtr_only))
    assert_same_parameters(parameters(accumulated.model_dir), parameters(whole.model_dir), atol=SCALE_ATOL)
    a, b = [[h["xtr"] for h in r.history] for r in (accumulated, whole)]
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_fp16_on_a_cpu_without_fp16_support_is_a_clear_error(tiny_pipeline, tmp_path):
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().is_fp16_supported():
        pytest.skip("this accelerator supports fp16")
    cfg = small_run(tiny_pipeline, tmp_path, SCALE, deepspeed_config="configs/deepspeed/zero0-fp16.json")
    with pytest.raises(ValueError, match="enables fp16, which DeepSpeed's cpu accelerator does not support"):
        train(cfg)
