"""benchmarks/gpu_acceptance.py on CPU: the --smoke run end to end, a run cut after a stage and
inside training then resumed, and the one-line errors (no GPU without --smoke, no data)."""

import importlib.util
import json
import sys
import time

import pytest
import torch

from ems.cli import run_main
from tests.conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location("gpu_acceptance", REPO_ROOT / "benchmarks" / "gpu_acceptance.py")
gpu_acceptance = importlib.util.module_from_spec(spec)
sys.modules["gpu_acceptance"] = gpu_acceptance  # its dataclasses look their module up
spec.loader.exec_module(gpu_acceptance)

STAGES = gpu_acceptance.STAGES


def smoke(work, data_dir, *extra) -> int:
    return run_main(gpu_acceptance.main, ["--work", str(work), "--data-dir", str(data_dir), "--smoke", *extra])


def state_of(work) -> dict:
    return json.loads((work / gpu_acceptance.STATE_FILE).read_text())


@pytest.fixture(scope="module")
def smoke_run(data_dir, tmp_path_factory):
    """One uninterrupted --smoke run: (work dir, exit status, wall seconds)."""
    work = tmp_path_factory.mktemp("smoke")
    started = time.monotonic()
    status = smoke(work, data_dir)
    return work, status, time.monotonic() - started


def test_smoke_runs_every_stage_and_reports_them(smoke_run):
    work, status, seconds = smoke_run
    print(f"smoke run: {seconds:.1f} s")
    assert status == 0
    state, report = state_of(work), json.loads((work / "report.json").read_text())
    assert all(state["stages"][stage]["finished_at"] and state["stages"][stage]["runs"] == 1 for stage in STAGES)
    assert list(report["stages"]) == list(STAGES)
    checks = report["stages"]["environment"]["checks"]
    assert checks["torch"]["status"] == "ok"
    assert {checks[name]["status"] for name in ("cuda", "nccl", "bf16", "sdpa_flash", "faiss_gpu")} == {"skipped"}
    eager = report["stages"]["mfu"]["variants"]["eager"]
    assert eager["s_per_step"] > 0 and eager["tflops"] > 0 and eager["mfu"] is None  # no known peak on CPU
    data = report["stages"]["data"]
    assert data["languages"] == ["is", "lt", "vi"] and data["train_pairs"] == 900
    assert all(data["pairs_imported"][lang] >= 2000 for lang in data["languages"])
    assert data["corpus"]["removed_in_eval_set"] > 1000  # evaluation sentences left the training corpus
    training = report["training"]
    assert training["steps"] == training["max_steps"] == 10 and training["pieces"] == 1
    curve = report["learning_curve"]
    assert [row["step"] for row in curve if "loss" in row] == [2, 4, 6, 8, 10]
    assert [row["step"] for row in curve if "valid_loss" in row] == [0, 5, 10]
    tasks = report["stages"]["evaluate"]["tasks"]
    assert list(tasks) == ["tatoeba", "xsim_flores", "sib200_smoke"]
    for task in tasks.values():
        assert task["error"] is None
        assert task["trained"]["n_languages"] == 3 and task["untrained"]["n_languages"] == 1  # is lt vi; nl
    assert set(tasks["tatoeba"]["per_language"]) == {"is", "lt", "vi", "nl"}
    markdown = (work / "report.md").read_text()
    for heading in ("## Environment", "## Training-step MFU", "## Data", "## Training", "## Evaluation"):
        assert heading in markdown
    assert "| 10 | " in markdown  # the learning curve's last step


def test_a_rerun_of_a_finished_run_prints_the_report_and_changes_nothing(smoke_run, data_dir, capsys):
    work, _, _ = smoke_run
    before = (work / gpu_acceptance.STATE_FILE).read_text()
    assert smoke(work, data_dir) == 0
    assert "# GPU acceptance (smoke, cpu)" in capsys.readouterr().out
    assert (work / gpu_acceptance.STATE_FILE).read_text() == before


def test_a_cut_run_resumes_without_redoing_finished_stages(smoke_run, data_dir, tmp_path, capsys):
    work = tmp_path / "cut"
    assert smoke(work, data_dir, "--stop-after", "mfu") == 0
    assert "left: data, train, evaluate, report" in capsys.readouterr().out
    first = state_of(work)
    assert [stage for stage in STAGES if first["stages"].get(stage, {}).get("finished_at")] == ["environment", "mfu"]

    assert smoke(work, data_dir, "--stop-at-step", "5") == 0  # data, then training stopped inside
    assert "left: train, evaluate, report" in capsys.readouterr().out
    second = state_of(work)
    assert second["stages"]["train"]["finished_at"] is None and second["stages"]["train"]["output"]["steps"] == 5

    assert smoke(work, data_dir) == 0
    assert "resumed from" in capsys.readouterr().out
    last = state_of(work)
    assert len(last["invocations"]) == 3
    for stage in ("environment", "mfu"):  # not run again: the same record, the same output
        assert last["stages"][stage] == first["stages"][stage]
    assert last["stages"]["data"] == second["stages"]["data"]
    assert last["stages"]["train"]["runs"] == 2
    pieces = last["stages"]["train"]["output"]["pieces"]
    assert [(p["from_step"], p["to_step"], p["stopped_by"]) for p in pieces] == [
        (0, 5, "stop_at_step=5"),
        (5, 10, "schedule's end"),
    ]
    report = json.loads((work / "report.json").read_text())
    assert report["stages"]["mfu"] == first["stages"]["mfu"]["output"]
    # the resumed training is the uninterrupted one: every step logged once, the same validation
    # losses, the same scores (the extra training record at step 5 closes the first piece's log window)
    reference = json.loads((smoke_run[0] / "report.json").read_text())
    steps = [row["step"] for row in report["learning_curve"]]
    assert len(steps) == len(set(steps)) and steps == [0, 2, 4, 5, 6, 8, 10]
    validation = {row["step"]: row["valid_loss"] for row in report["learning_curve"] if "valid_loss" in row}
    expected = {row["step"]: row["valid_loss"] for row in reference["learning_curve"] if "valid_loss" in row}
    assert validation == pytest.approx(expected, rel=1e-5)
    for task, summary in report["stages"]["evaluate"]["tasks"].items():
        assert summary["per_language"] == pytest.approx(
            reference["stages"]["evaluate"]["tasks"][task]["per_language"], abs=1e-6
        )


def test_without_smoke_and_without_a_gpu_it_is_one_line_and_status_2(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    work = tmp_path / "gpu"
    assert run_main(gpu_acceptance.main, ["--work", str(work), "--data-dir", str(data_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA GPU here") and err.count("\n") == 1
    assert not work.exists()  # nothing started


def test_a_missing_data_directory_is_one_line_before_anything_runs(tmp_path, capsys):
    work = tmp_path / "work"
    assert run_main(gpu_acceptance.main, ["--work", str(work), "--data-dir", str(tmp_path / "nowhere"), "--smoke"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "tatoeba_challenge/" in err and err.count("\n") == 1
    assert not work.exists()


def test_a_work_directory_of_other_settings_is_refused(smoke_run, data_dir, capsys):
    work, _, _ = smoke_run
    assert (
        run_main(
            gpu_acceptance.main, ["--work", str(work), "--data-dir", str(data_dir), "--smoke", "--min-pairs", "5000"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: {work} holds a run started with other settings (min_pairs: 2000 -> 5000)")
