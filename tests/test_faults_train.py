"""Faults of the trainer (issue 13): what a hostile but fair user does to `python -m ems.training.train`
and a run directory, and the one clear outcome each must have."""

import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from ems.cli import run_main
from ems.training.checkpoint import NoUsableCheckpointError, UnsafeCheckpointError, load_tensor_file, write_manifest
from ems.training.config import TrainConfig
from ems.training.resume import CONFIG_HISTORY_FILE, ResumeConfigError
from ems.training.saving import DIVERGED_EXIT_CODE, TrainingDiverged
from ems.training.schedule import LinearSchedule
from ems.training.stopping import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from ems.training.train import main, train
from tests.conftest import REPO_ROOT, SMALL_MODEL, small_run
from tests.fakes import cli_args, one_error_line

MODEL_STATES = "mp_rank_00_model_states.pt"


# conftest.small_run's settings of this file's runs: 12 steps, a checkpoint every 4
RUN = dict(batch_size=32, lr=2e-3, warmup_steps=5, max_steps=12, log_every=4, save_every=4, seed=3, bucket_batches=50)


def module_weights(tag_dir: Path) -> dict[str, torch.Tensor]:
    return load_tensor_file(tag_dir / MODEL_STATES)["module"]


def rewrite_model_states(tag_dir: Path, change) -> None:
    """Edit a checkpoint's model file in place and regenerate its manifest (as anyone can)."""
    states = load_tensor_file(tag_dir / MODEL_STATES)
    change(states)
    torch.save(states, tag_dir / MODEL_STATES, _use_new_zipfile_serialization=False)
    (tag_dir / "manifest.json").unlink()
    write_manifest(tag_dir)


class Payload:
    """Unpickling this runs a shell command (the classic __reduce__ exploit)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


# --- 1. no code runs from a run directory ---------------------------------------------------


def test_malicious_checkpoint_is_refused_and_its_payload_never_runs(tiny_pipeline, tmp_path, capsys):
    out, marker = tmp_path / "run", tmp_path / "PWNED"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=4))
    rewrite_model_states(out / "checkpoints" / "step4", lambda states: states.update(extra=Payload(marker)))
    with pytest.raises(
        UnsafeCheckpointError, match=r"refusing to load .*step4/mp_rank_00_model_states.pt.*GLOBAL posix.system"
    ):
        train(small_run(tiny_pipeline, out, RUN))
    assert not marker.exists()
    capsys.readouterr()
    assert run_main(main, cli_args(tiny_pipeline, out, "max_steps=12", "warmup_steps=5")) == 2
    assert "Nothing in it was run" in one_error_line(capsys)
    assert not marker.exists()


def test_no_project_code_unpickles():
    """Every loader of run, model and head files: torch.load only with weights_only=True, numpy
    and YAML without pickles or arbitrary objects, no pickle.load."""
    offenders = []
    for path in [*REPO_ROOT.glob("ems/**/*.py"), *REPO_ROOT.glob("eval/**/*.py"), *REPO_ROOT.glob("data_prep/**/*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (
                ("torch.load(" in line and "weights_only=True" not in line)
                or "allow_pickle=True" in line
                or "pickle.load" in line
                or "yaml.load(" in line
                or "yaml.unsafe_load" in line
            ):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# --- 2. no NaN reaches a checkpoint -------------------------------------------------------------


def assert_all_checkpoints_finite(out: Path) -> list[str]:
    tags = sorted(t.name for t in (out / "checkpoints").glob("step*"))
    for tag in tags:
        assert all(torch.isfinite(w).all() for w in module_weights(out / "checkpoints" / tag).values()), tag
    return tags


def test_divergence_stops_at_its_step_with_a_diagnostic_and_no_non_finite_checkpoint(tiny_pipeline, tmp_path, capsys):
    """The issue's run: lr=1e6, loss logged every 20 steps, saved every 5 (it used to save NaN
    checkpoints at 5, 10, 15); then the same directory with a sane lr."""
    out = tmp_path / "run"
    args = ["lr=1e6", "warmup_steps=1", "max_steps=30", "log_every=20", "save_every=5"]
    assert run_main(main, cli_args(tiny_pipeline, out, *args)) == DIVERGED_EXIT_CODE
    message = one_error_line(capsys)
    assert message.startswith("error: training diverged at step 2 (epoch 0, batch 1): loss nan")
    assert (
        "gradient norm nan, lr 1e+06; rank 0's batch: de-en " in message
        and "Nothing non-finite was checkpointed" in message
    )
    assert assert_all_checkpoints_finite(out) == []
    result = train(
        small_run(tiny_pipeline, out, RUN, lr=2e-3, warmup_steps=1, max_steps=30, log_every=20, save_every=5)
    )
    assert result.steps == 30 and all(math.isfinite(h["loss"]) for h in result.history if "loss" in h)


def test_after_divergence_a_sane_lr_resumes_from_the_last_good_checkpoint(tiny_pipeline, tmp_path, capsys):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=4, save_every=2))
    # lr=1e6 from step 4: an update explodes the weights (finite, saved), a later step is NaN
    with pytest.raises(TrainingDiverged) as diverged:
        train(small_run(tiny_pipeline, out, RUN, lr=1e6, save_every=1, log_every=20, max_steps=30))
    found = re.search(
        r"diverged at step (\d+) .* Checkpoint step(\d+), whose weights this step started from, was moved "
        r"aside to rejected-step\2\. The last checkpoint: step(\d+)",
        str(diverged.value),
    )
    assert found, str(diverged.value)
    step, rejected, last = map(int, found.groups())
    assert step >= 6 and rejected == step - 1 and last == step - 2
    tags = assert_all_checkpoints_finite(out)  # the newest keep_checkpoints (2) good ones
    assert tags == [f"step{k}" for k in (2, 4, *range(5, last + 1))][-2:]
    assert (out / "checkpoints" / "latest").read_text() == f"step{last}"
    assert (out / "checkpoints" / f"rejected-step{rejected}").is_dir()
    capsys.readouterr()
    result = train(small_run(tiny_pipeline, out, RUN, save_every=2, log_every=20, max_steps=30))
    assert f"checkpoints/step{last}/mp_rank_00_model_states.pt at step {last}," in capsys.readouterr().out
    assert result.steps == 30 and all(math.isfinite(h["loss"]) for h in result.history if "loss" in h)
    assert assert_all_checkpoints_finite(out)[-1] == "step30"


def test_resume_skips_a_checkpoint_with_non_finite_weights(tiny_pipeline, tmp_path, capsys):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=8))
    name = next(iter(module_weights(out / "checkpoints" / "step8")))
    rewrite_model_states(out / "checkpoints" / "step8", lambda states: states["module"][name].fill_(math.nan))
    result = train(small_run(tiny_pipeline, out, RUN))
    assert f"skipping checkpoint step8: non-finite weights in {name}" in capsys.readouterr().out
    assert [h["step"] for h in result.history if "loss" in h] == [8, 12]  # resumed at step 4, not 8


def test_the_per_step_check_is_the_loss_already_read():
    """train_step returns the values it read anyway; `finite` is a property of them."""
    from ems.training.metrics import StepValues

    losses = dict(loss=1.0, xtr=0.5, contrastive=0.5, distill=0.0)
    assert StepValues(losses, grad_norm=2.0, lr=1e-3).finite
    for key in ("loss", "xtr", "contrastive", "distill"):
        assert not StepValues({**losses, key: math.nan}, grad_norm=2.0, lr=1e-3).finite, key
    assert not StepValues(losses, grad_norm=math.nan, lr=1e-3).finite
    assert not StepValues(losses, grad_norm=math.inf, lr=1e-3).finite


def test_divergence_at_a_new_runs_first_step_is_the_one_line_diagnostic(tmp_path):
    """Step 1 of a new run started from no checkpoint: there is none to move aside."""
    from ems.training.metrics import StepValues
    from ems.training.runtime import BatchLayout
    from ems.training.saving import Checkpointer

    checkpointer = Checkpointer(
        tmp_path / "checkpoints", engine=None, rank=0, layout=BatchLayout(1, 1, 2), cfg=TrainConfig(), fixed={}
    )
    values = StepValues(dict(loss=math.nan, xtr=math.nan, contrastive=1.0, distill=0.0), grad_norm=math.nan, lr=1e-3)
    batch = {"src_lang": torch.tensor([0, 0]), "tgt_lang": torch.tensor([1, 1])}
    with pytest.raises(
        TrainingDiverged,
        match=r"^training diverged at step 1 \(epoch 0, batch 0\): loss nan \(xtr nan, "
        r"contrastive 1, distill 0\), gradient norm nan, lr 0.001; rank 0's batch: de-en 2\. Nothing non-finite "
        r"was checkpointed\. The last checkpoint: none;",
    ):
        checkpointer.stop_diverged(1, values, [batch], (0, 0), ["de", "en"])


# --- 3. a changed config on resume ---------------------------------------------------------------


def test_a_changed_lr_takes_effect_on_resume_and_is_recorded(tiny_pipeline, tmp_path):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=4, log_every=1))
    resumed = train(small_run(tiny_pipeline, out, RUN, lr=5e-4, log_every=1, save_every=6))
    schedule = LinearSchedule(5, 12)
    assert [h["lr"] for h in resumed.history if "lr" in h] == pytest.approx(
        [5e-4 * schedule(s) for s in range(5, 13)], rel=1e-6
    )
    assert yaml.safe_load((out / "train_config.yaml").read_text())["lr"] == 5e-4
    history = yaml.safe_load((out / CONFIG_HISTORY_FILE).read_text())
    assert [segment["from_step"] for segment in history] == [0, 4]
    assert history[1]["changed"] == {
        "lr": {"from": 2e-3, "to": 5e-4},
        "stop_at_step": {"from": 4, "to": None},
        "save_every": {"from": 4, "to": 6},
    }
    assert history[0]["config"]["lr"] == 2e-3


@pytest.mark.parametrize(
    "change",
    [
        {"bucket_batches": 7},
        {"model_overrides": {**SMALL_MODEL, "n_layers": 1}},
        {"seed": 4},
        {"deepspeed_overrides": {"gradient_clipping": 0.5}},
        {"adam_beta2": 0.999},  # the optimizer's state restores its own betas: a change would not take effect
    ],
)
def test_a_change_that_fixes_model_or_data_order_is_refused_on_resume(tiny_pipeline, tmp_path, change):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=4))
    key = next(iter(change))
    with pytest.raises(
        ResumeConfigError, match=rf"{key if key != 'deepspeed_overrides' else 'deepspeed'} .*->.*new out="
    ):
        train(small_run(tiny_pipeline, out, RUN, **change))


@pytest.mark.parametrize(
    "settings, expected",
    [
        (["lr=abc"], "TrainConfig: lr must be a number, got 'abc'"),
        (["no_such_key=1"], "TrainConfig: --set 'no_such_key=1': unknown key(s) ['no_such_key']; known: "),
        (
            ["model_overrides.d_modle=64"],
            "TrainConfig: --set 'model_overrides.d_modle=64': model_overrides: unknown key(s) ['d_modle']; did you "
            "mean 'd_model'?",
        ),
        (["save_every=0"], "save_every must be at least 1, got 0"),
        (["batch_size=0"], "batch_size must be at least 1, got 0"),
        (["lr=-1"], "lr must be a positive number"),
        (["autocast=fp8"], "autocast must be one of none, bf16, auto"),
        (["deepspeed_overrides.gradient_accumulation_steps=0"], "DeepSpeed rejects the config"),
        (["data=/nonexistent/shards"], "/nonexistent/shards"),
        (["vocab=/nonexistent/vocab"], "/nonexistent/vocab"),
        (["deepspeed_config=/nonexistent.json"], "/nonexistent.json"),
    ],
)
def test_bad_settings_are_one_line_and_status_2(tiny_pipeline, tmp_path, capsys, settings, expected):
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", *settings)) == 2
    assert expected in one_error_line(capsys)


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    assert run_main(main, ["--config", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml does not exist" in one_error_line(capsys)


def test_a_hand_edited_manifest_falls_back_to_the_previous_checkpoint(tiny_pipeline, tmp_path, caplog):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=8))
    (out / "checkpoints" / "step8" / "manifest.json").write_text('{"files": ["mp_rank_00_model_states.pt"]}')
    result = train(small_run(tiny_pipeline, out, RUN))
    assert "skipping checkpoint step8" in caplog.text and "manifest.json is unreadable" in caplog.text
    assert [h["step"] for h in result.history if "loss" in h] == [8, 12]


def test_all_checkpoints_bad_is_one_line(tiny_pipeline, tmp_path, capsys):
    out = tmp_path / "run"
    train(small_run(tiny_pipeline, out, RUN, stop_at_step=8))
    for tag_dir in (out / "checkpoints").glob("step*"):
        (tag_dir / MODEL_STATES).write_bytes(b"truncated")
    with pytest.raises(NoUsableCheckpointError):
        train(small_run(tiny_pipeline, out, RUN))
    capsys.readouterr()
    assert run_main(main, cli_args(tiny_pipeline, out, "max_steps=12", "warmup_steps=5")) == 2
    assert "no checkpoint verifies and holds finite weights" in one_error_line(capsys)


def test_debug_shows_the_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "ems.training.train", "--set", "lr=abc", f"out={tmp_path}"]
    plain = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert plain.returncode == 2 and plain.stderr.strip().splitlines() == [
        "error: TrainConfig: lr must be a number, got 'abc'"
    ]
    debug = subprocess.run([*command, "--debug"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ConfigError" in debug.stderr


# --- 8. a stop signal at start-up --------------------------------------------------------------------


def _catches(pid: int, signum: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see when the handler is in place")
@pytest.mark.parametrize(
    "command, stop_signal, status",
    [
        ("python -m ems.training.train", signal.SIGTERM, PREEMPTED_EXIT_CODE),
        ("ems-train", signal.SIGTERM, PREEMPTED_EXIT_CODE),
        ("python -m ems.training.train", signal.SIGINT, INTERRUPTED_EXIT_CODE),
    ],
)
def test_a_stop_signal_during_start_up_checkpoints_and_exits(tiny_pipeline, tmp_path, command, stop_signal, status):
    """SIGTERM: 99, to be requeued; SIGINT (Ctrl-C): 130, one line, no KeyboardInterrupt traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    out = tmp_path / "run"
    script = Path(sys.executable).parent / "ems-train"  # the console script pip installed beside python
    program = [sys.executable, "-m", "ems.training.train"] if command.startswith("python") else [str(script)]
    process = subprocess.Popen(
        [*program, *cli_args(tiny_pipeline, out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 30
    # SIGTERM's handler is the last of ems.stop_signals.STOP_SIGNALS installed
    while not _catches(process.pid, signal.SIGTERM) and time.time() < deadline and process.poll() is None:
        time.sleep(0.005)
    assert "libtorch" not in Path(f"/proc/{process.pid}/maps").read_text()  # caught before the slow imports
    process.send_signal(stop_signal)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == status, stderr[-2000:]
    assert "stopping at step 0" in stdout and not (out / "model").exists()
    assert stdout.rstrip().endswith(
        f"exiting with status {status} " + ("to be requeued" if status == 99 else "(interrupted; rerun to resume)")
    )
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


def test_a_second_sigint_interrupts_at_once():
    """The first Ctrl-C is a stop request (checkpoint, exit 130); a second one is Python's KeyboardInterrupt."""
    from ems.training.stopping import StopRequest

    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as request:
        os.kill(os.getpid(), signal.SIGINT)
        assert (request.signal, request.exit_code) == (signal.SIGINT, INTERRUPTED_EXIT_CODE)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == before  # restored on close


def test_a_skipped_checkpoint_is_a_warning_line_on_stderr(tmp_path):
    """What a resume tells the user about a checkpoint it skips, or a `latest` naming none, is a
    `warning: ...` line on stderr, as docs/errors.md says (it was the bare message)."""
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "step4").mkdir(parents=True)
    (checkpoints / "latest").write_text("nonsense")
    code = "import sys; from pathlib import Path; from ems.training.checkpoint import resumable_tags; "
    code += "print(list(resumable_tags(Path(sys.argv[1]))))"
    result = subprocess.run(
        [sys.executable, "-c", code, str(checkpoints)], capture_output=True, text=True, env=os.environ, check=True
    )
    assert result.stdout == "[]\n"
    assert result.stderr.splitlines() == [
        f"warning: {checkpoints / 'latest'} names no checkpoint (step<N>): ignored, the newest one that verifies is "
        "used",
        f"warning: skipping checkpoint step4: {checkpoints / 'step4'} has no manifest.json (an incomplete write); "
        "trying the previous one",
    ]
