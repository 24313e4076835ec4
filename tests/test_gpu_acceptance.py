"""benchmarks/gpu/acceptance.py (and the modules of benchmarks/gpu/ it runs) on CPU: `prepare` on a slice of the real
data (its contents, its size limit, the segmentation table and its stand-ins), the `run --smoke` path end
to end on it, a run with too few minutes (every stage cut or failed, reported, within the minutes), the
child-process step timing and its cap, and the one-line errors."""

import dataclasses
import json
import lzma
import shutil
import tarfile
import time
from types import SimpleNamespace

import pytest
import torch

from benchmarks.gpu import acceptance as gpu_acceptance
from benchmarks.gpu import mfu as gpu_mfu
from benchmarks.gpu import prepared as gpu_prepared
from benchmarks.gpu import profiles as gpu_profiles
from benchmarks.gpu import segmenters as gpu_segmenters
from benchmarks.gpu import stage as gpu_stage
from benchmarks.gpu import step as gpu_step
from benchmarks.gpu import train as gpu_train
from ems.cli import run_main
from ems.configs import load_config
from ems.model_config import PRESETS
from ems.training.config import TrainConfig

STAGES = gpu_stage.STAGES
# The corpus folders of conftest's sliced_data: Chinese, Cantonese and Japanese among the trained languages,
# so their evaluation text goes through the segmenters (the recorded table with --segmenters table)
SLICED_CORPORA = {"tatoeba_challenge": ["afr-eng", "eng-jpn_Kana", "eng-yue_Hant"], "tico19": ["en-am", "en-zh"]}
SMALL_DATA = ["vocab_size=3000", "heldout_per_pair=30", "max_train_pairs=300"]
SMOKE_BATCH = gpu_profiles.SMOKE.train_overrides["batch_size"]  # the candidates' batch (the probe's: 8 pairs)


def main(*argv) -> int:
    return run_main(gpu_acceptance.main, [str(arg) for arg in argv])


def prepare(out, data_dir, *extra) -> int:
    return main("prepare", "--out", out, "--data-dir", data_dir, "--set", *SMALL_DATA, "--xz-preset", "0", *extra)


@pytest.fixture(scope="module")
def prepared(sliced_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared") / "gpu_data"
    started = time.monotonic()
    assert prepare(out, sliced_data) == 0
    print(f"prepare on the slice: {time.monotonic() - started:.1f} s")
    return out


@pytest.fixture(scope="module")
def smoke_run(prepared, tmp_path_factory):
    """One --smoke run on the prepared slice, segmenting through the recorded table: (work dir,
    report dir, exit status, wall seconds)."""
    work, reports = tmp_path_factory.mktemp("smoke"), tmp_path_factory.mktemp("reports")
    started = time.monotonic()
    status = main("run", "--data", prepared, "--work", work, "--report-dir", reports, "--smoke", "--segmenters=table")
    return work, reports, status, time.monotonic() - started


def archive_names(path) -> set[str]:
    with tarfile.open(path, "r:xz") as tar:
        return set(tar.getnames())


def test_prepare_keeps_only_what_the_gpu_run_reads_within_the_limit(prepared):
    manifest = json.loads((prepared / gpu_prepared.MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["eval.tar.xz", "segmentation.json.xz", "train.tar.xz"]
    assert manifest["total_bytes"] == sum(f["bytes"] for f in manifest["files"].values())
    assert gpu_prepared.directory_bytes(prepared) <= manifest["limit_mib"] * gpu_prepared.MIB
    assert manifest["languages"] == ["af", "am", "ja", "yue", "zh"]
    assert manifest["data_config"]["vocab_size"] == 3000 and manifest["data_config"]["corpora"] == list(SLICED_CORPORA)
    assert manifest["vocab"]["size"] == 3000 and len(manifest["vocab"]["sha1"]) == 40
    assert manifest["corpus"]["removed_in_eval_set"] > 0
    train = archive_names(prepared / "train.tar.xz")
    assert {"vocab/spm.model", "vocab/ems_tokenizer.json", "corpus/languages.json"} <= train
    assert {"shards/train/tokens.npy", "shards/train/index.json", "shards/heldout/index.json"} <= train
    assert not any(name.startswith(("corpus/train", "corpus/raw", "corpus/clean")) for name in train)
    evaluation = archive_names(prepared / "eval.tar.xz")
    assert {"tatoeba/tatoeba.afr-eng.afr", "flores200/devtest/afr.devtest"} <= evaluation
    # SIB-200's zero-shot protocol: English train/dev/test and labels, every other language's test only
    assert {f"sib200/eng_Latn/{name}" for name in ("train.tsv", "dev.tsv", "test.tsv", "labels.txt")} <= evaluation
    assert "sib200/afr_Latn/test.tsv" in evaluation and "sib200/afr_Latn/train.tsv" not in evaluation
    assert not any(name.startswith(("mlqe", "sts2017", "tatoeba_challenge", "tico19")) for name in evaluation)
    with lzma.open(prepared / gpu_prepared.SEGMENTATION, "rt", encoding="utf-8") as f:
        table = json.load(f)
    assert all(len(table[kind]) > 1000 for kind in ("jieba", "mecab", "opencc"))


def test_a_directory_over_the_limit_is_refused_in_one_line(prepared, sliced_data, tmp_path, capsys):
    out = tmp_path / "too_big"
    build = prepared.with_name(prepared.name + ".build")  # the data stage is kept: same config, same data
    assert prepare(out, sliced_data, "--build", build, "--max-mib", "1") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out} holds ") and "over the 1 MiB limit" in err and err.count("\n") == 1
    assert not (out / gpu_prepared.MANIFEST).exists()  # not marked prepared: the run refuses it
    assert main("run", "--data", out, "--work", tmp_path / "work", "--smoke") == 2
    assert capsys.readouterr().err.startswith(f"error: {out} is no prepared directory (no manifest.json")
    # a prepared directory checked against a smaller limit than it was made for
    assert main("run", "--data", prepared, "--work", tmp_path / "work", "--smoke", "--max-mib", "1") == 2
    err = capsys.readouterr().err
    assert "over the 1 MiB limit" in err and err.count("\n") == 1 and not (tmp_path / "work").exists()


def test_an_incomplete_or_changed_directory_is_refused_in_one_line(prepared, tmp_path, capsys):
    copy = shutil.copytree(prepared, tmp_path / "copy")
    table = copy / gpu_prepared.SEGMENTATION
    table.write_bytes(table.read_bytes()[:-10])
    assert main("run", "--data", copy, "--work", tmp_path / "work", "--smoke") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {copy} is incomplete: segmentation.json.xz has ") and err.count("\n") == 1
    table.unlink()
    assert main("run", "--data", copy, "--work", tmp_path / "work", "--smoke") == 2
    assert "segmentation.json.xz missing" in capsys.readouterr().err


def test_smoke_runs_every_stage_and_reports_them(smoke_run, prepared):
    work, reports, status, seconds = smoke_run
    print(f"smoke run: {seconds:.1f} s")
    assert status == 0
    report = json.loads((work / "report.json").read_text())
    assert (reports / "report.json").read_text() == (work / "report.json").read_text()
    assert list(report["stages"]) == list(STAGES)
    assert {stage: record["status"] for stage, record in report["stages"].items()} == dict.fromkeys(STAGES, "done")
    assert report["cuts"] == [] and report["minutes"] < report["settings"]["total_minutes"]
    checks = report["environment"]["checks"]
    assert checks["torch"]["status"] == checks["packages"]["status"] == "ok"
    assert {checks[name]["status"] for name in ("cuda", "nccl", "bf16", "sdpa_flash", "faiss_gpu")} == {"skipped"}
    assert report["segmenters"]["mode"] == "table"
    eager = report["mfu"]["variants"]["eager"]
    assert eager["s_per_step"] > 0 and eager["tflops"] > 0 and eager["mfu"] is None  # no known peak on CPU
    assert report["mfu"]["pairs"] == 8 and report["mfu"]["shapes"]["vocab_size"] == 3000
    # every candidate timed on the train config's batch (32 pairs, not the probe's 8); the choice from its own time
    timed = report["mfu"]["presets"]
    assert list(timed) == list(gpu_profiles.SMOKE.presets)
    assert all(t["s_per_step"] > 0 and t["pairs"] == SMOKE_BATCH for t in timed.values())
    choice = report["preset_choice"]
    assert choice["preset"] == "tiny" and choice["candidates"][0]["useful"] is True
    assert choice["candidates"][0]["gflop_per_pair"] > 0 and choice["predicted_steps"] >= 10
    assert [row["s_per_step"] for row in choice["candidates"]] == [t["s_per_step"] for t in timed.values()]
    chosen = timed[choice["preset"]]["s_per_step"]
    assert choice["predicted_steps"] == int(60 * choice["loop_minutes"] / chosen)
    assert f"measured on {SMOKE_BATCH} random training pairs" in choice["rule"]
    training = report["training"]
    assert training["steps"] == training["max_steps"] == 10 and training["preset"] == "tiny"
    assert training["compiled_graphs"] is None  # compile auto: eager on CPU
    # the loop of every loop preset at every loop batch, beside its bare step
    loops = report["mfu"]["loops"]
    assert [(row["preset"], row["pairs"]) for row in loops] == [("tiny", 8), ("tiny", 16)]
    for row in loops:
        assert (
            row["loop"]["pairs_per_s"] > 0 and row["bare"]["pairs_per_s"] > 0 and row["loop_over_bare_s_per_step"] > 0
        )
        assert row["compiled"] is False and row["compiled_graphs"] is None
    curve = report["learning_curve"]
    assert [row["step"] for row in curve if "loss" in row] == [2, 4, 6, 8, 10]
    assert [row["step"] for row in curve if "valid_loss" in row] == [0, 5, 10]
    tasks = report["evaluation"]["tasks"]
    assert list(tasks) == ["tatoeba", "xsim_flores_all", "sib200_smoke"]
    assert all(task["status"] == "done" and task["error"] is None for task in tasks.values())
    assert report["evaluation"]["languages"] == ["af", "am", "ja", "yue", "zh", "xh"]
    means = report["evaluation"]["groups"]["means"]
    assert set(means) == {"tatoeba", "xsim_flores200", "sib200"}
    for groups in means.values():
        assert groups["unseen"]["n"] == 1 and groups["<1k"]["n"] >= 5  # xh; the five trained languages
    markdown = (work / "report.md").read_text()
    for heading in ("## Environment", "## Training-step MFU", "## Data", "## Preset", "## Training", "## Evaluation"):
        assert heading in markdown
    assert "| 10 | " in markdown and "| unseen | 1 |" in markdown
    assert "| measured s/step |" in markdown and f"tiny {chosen:.4f} s/step on {SMOKE_BATCH} pairs" in markdown


def test_the_choice_is_the_largest_useful_timed_preset_never_an_untimed_one(smoke_run):
    """choose_preset on the smoke run's shards with made-up timings: 1 loop minute, 100 useful steps."""
    work, _, _, _ = smoke_run
    profile = dataclasses.replace(gpu_profiles.SMOKE, presets=("tiny", "small", "base"), useful_steps=100)
    base = load_config(TrainConfig, gpu_profiles.TRAIN_CONFIG, values=profile.train_overrides)

    def choose(presets: dict) -> dict:
        ctx = SimpleNamespace(
            profile=profile, train_data=work / "data" / "train", output=lambda _: {"presets": presets}
        )
        return gpu_train.choose_preset(ctx, base, loop_minutes=1.0)

    out_of_memory = {"error": "OutOfMemoryError: CUDA out of memory"}
    choice = choose({"tiny": step(0.1), "small": step(0.5), "base": out_of_memory})
    assert choice["preset"] == "small" and choice["predicted_steps"] == 120
    assert [row.get("useful") for row in choice["candidates"]] == [True, True, None]
    assert choice["candidates"][2]["error"] == out_of_memory["error"] and "s_per_step" not in choice["candidates"][2]
    choice = choose({"tiny": out_of_memory, "small": step(1.0)})  # none useful: the smallest timed; base untimed
    assert choice["preset"] == "small" and choice["predicted_steps"] == 60 and "the smallest timed" in choice["rule"]
    assert choice["candidates"][2]["error"].startswith("not timed")
    choice = choose({"tiny": {"error": "cut: over its cap of 1.50 min"}})
    assert choice["preset"] == profile.fallback_preset and "predicted_steps" not in choice
    assert "no preset's step was timed" in choice["rule"]


def step(seconds: float) -> dict:
    return {"s_per_step": seconds, "pairs": SMOKE_BATCH}


def test_a_preset_that_fails_is_an_error_and_a_cap_cuts_the_largest(smoke_run, monkeypatch):
    work, _, _, _ = smoke_run
    profile = dataclasses.replace(gpu_profiles.SMOKE, presets=("tiny", "small", "base"))
    ctx = SimpleNamespace(profile=profile, train_data=work / "data" / "train", device="cpu")
    timed: dict = {}
    with pytest.raises(gpu_stage.OutOfTime), gpu_stage.time_cap(0.002):  # 0.12 s: not all three
        gpu_mfu.time_presets(ctx, gpu_profiles.TINY, SMOKE_BATCH, "fp32", timed)
    assert list(timed) == list(profile.presets) and timed["base"]["error"].startswith("cut: over its cap")
    cut = [name for name, timing in timed.items() if "error" in timing]
    assert cut == list(profile.presets[-len(cut) :])  # the largest, from the first cut on

    def out_of_memory_for_small(cfg, *args) -> float:
        if cfg.n_layers == PRESETS["small"]["n_layers"]:  # TINY leaves the presets' depths: 2, 4, 6
            raise RuntimeError("CUDA out of memory")
        return 0.5

    monkeypatch.setattr(gpu_mfu, "step_seconds", out_of_memory_for_small)
    gpu_mfu.time_presets(ctx, gpu_profiles.TINY, SMOKE_BATCH, "fp32", timed)
    assert timed == {"tiny": step(0.5), "small": {"error": "RuntimeError: CUDA out of memory"}, "base": step(0.5)}


def test_a_run_short_of_minutes_cuts_stages_reports_them_and_ends_in_time(prepared, tmp_path):
    work = tmp_path / "work"
    started = time.monotonic()
    assert main("run", "--data", prepared, "--work", work, "--smoke", "--total-minutes", "0.4") == 0
    assert time.monotonic() - started < 0.4 * 60
    report = json.loads((work / "report.json").read_text())
    status = {stage: record["status"] for stage, record in report["stages"].items()}
    assert status == {"environment": "cut", "mfu": "cut", "train": "cut", "evaluate": "failed", "report": "done"}
    assert report["stages"]["environment"]["why"] == "no time left"
    assert "no trained model" in report["stages"]["evaluate"]["why"]
    assert report["cuts"][0] == "environment: cut: no time left"
    assert report["cuts"][4:] == ["training had 0.00 min, under the 0 wanted"]
    assert "Cut or failed: environment: cut: no time left" in (work / "report.md").read_text()


def test_the_segmentation_stand_ins_answer_as_the_installed_packages(prepared, data_dir):
    import ems.text

    chinese = (data_dir / "tatoeba" / "tatoeba.cmn-eng.cmn").read_text(encoding="utf-8").splitlines()[:50]
    japanese = (data_dir / "tatoeba" / "tatoeba.jpn-eng.jpn").read_text(encoding="utf-8").splitlines()[:50]
    preprocess = ems.text.Preprocessing()
    expected = [preprocess(s, "zh") for s in chinese] + [preprocess(s, "ja") for s in japanese]
    with gpu_segmenters.segmenters("table", prepared / gpu_prepared.SEGMENTATION) as mode:
        assert mode["mode"] == "table" and ems.text._jieba().__file__.startswith(str(gpu_segmenters.STANDINS))
        assert [preprocess(s, "zh") for s in chinese] + [preprocess(s, "ja") for s in japanese] == expected
        with pytest.raises(LookupError, match="not in the segmentation table"):
            preprocess("这句话不在任何评测集里。", "zh")
    assert not ems.text._jieba().__file__.startswith(str(gpu_segmenters.STANDINS))  # the installed one again
    assert preprocess("这句话不在任何评测集里。", "zh")


def test_a_step_timed_in_a_child_process_and_one_cut_at_its_cap(smoke_run):
    work, _, _, _ = smoke_run
    request = {
        "train_data": str(work / "data" / "train"),
        "preset": "tiny",
        "overrides": gpu_profiles.TINY,
        "pairs": 4,
        "device": "cpu",
        "dtype": "fp32",
        "timing": [1, 1],
        "work": str(work),
        "variant": "eager",
    }
    assert gpu_step.step_seconds_in_child(request, minutes=1.0) > 0
    started = time.monotonic()
    with pytest.raises(gpu_stage.OutOfTime, match="eager step cut after"):
        gpu_step.step_seconds_in_child(request, minutes=0.01)  # killed before its imports are done
    assert time.monotonic() - started < 5


def test_without_smoke_and_without_a_gpu_it_is_one_line_and_status_2(prepared, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    work = tmp_path / "gpu"
    assert main("run", "--data", prepared, "--work", work) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA GPU here") and err.count("\n") == 1
    assert not work.exists()  # nothing started


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["prepare", "--out", "{tmp}/out", "--data-dir", "{tmp}/nowhere"], "error: {tmp}/nowhere lacks tatoeba/"),
        (["run", "--data", "{tmp}/nowhere", "--work", "{tmp}/work", "--smoke"], "error: {tmp}/nowhere is no prepared"),
        (["run", "--data", "{tmp}", "--work", "{tmp}/work", "--smoke", "--total-minutes=0"], "error: --total-minutes"),
    ],
)
def test_bad_inputs_are_one_line_before_anything_runs(argv, message, tmp_path, capsys):
    assert main(*(arg.format(tmp=tmp_path) for arg in argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.format(tmp=tmp_path)) and err.count("\n") == 1
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()
