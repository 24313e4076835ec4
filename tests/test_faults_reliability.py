"""Reliability II (issue 26): one writer per run, artifacts that are whole or absent, shards that
prove what made them, archives read by their names only, and user errors found before slow work.
One test (or a few) per row of the issue's fault table; `pytest -m faults` runs them with the
other fault suites (tests/conftest.py marks every test_faults_*.py)."""

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from data_prep.opus import FetchError, OnlineSource, fetch
from ems.cli import run_main
from ems.locks import LOCK_FILE, DirectoryInUse, exclusive
from ems.training.train import main
from tests.conftest import REPO_ROOT
from tests.fakes import (
    TrigramEncoder,
    cli_args,
    copy_shards,
    mining_options,
    no_deepspeed,
    one_error_line,
    untrained_model,
    write_inputs,
)

# --- 1. two trainers on one run directory -----------------------------------------------------


def test_a_second_trainer_on_a_held_run_directory_is_refused_naming_the_holder(
    tiny_pipeline, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    with exclusive(out, "training run"):
        assert run_main(main, cli_args(tiny_pipeline, out)) == 2
    line = one_error_line(capsys)
    assert f"{out} is in use by another training run: pid {os.getpid()}" in line
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()


@pytest.mark.slow
def test_two_concurrent_trainers_exactly_one_runs(tiny_pipeline, tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "ems.training.train",
        *cli_args(tiny_pipeline, out, "max_steps=60", "log_every=5", "save_every=30"),
    ]
    first = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while f'"pid": {first.pid}' not in ((out / LOCK_FILE).read_text() if (out / LOCK_FILE).is_file() else ""):
        assert first.poll() is None and time.time() < deadline, (
            first.stdout.read() if first.poll() is not None else "timeout"
        )
        time.sleep(0.2)
    second = subprocess.run(
        [sys.executable, "-m", "ems.training.train", *cli_args(tiny_pipeline, out, "seed=4")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert first.wait(timeout=300) == 0, first.stdout.read()
    assert second.returncode == 2 and f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert steps == list(range(5, 61, 5))  # one writer: no interleaved lines
    assert "seed: 3" in (out / "train_config.yaml").read_text()


# A trainer (ems.training.train's main) that prints, after it ends, how many native threads it had each time
# it tried the run's lock file (argv[1]); the trainer's arguments follow.
COUNTING_TRAINER = """
import fcntl, os, sys
lock, real_flock, threads = sys.argv[1], fcntl.flock, []
def flock(fd, operation):
    if os.readlink(f"/proc/self/fd/{fd}") == lock:
        threads.append(len(os.listdir("/proc/self/task")))
    return real_flock(fd, operation)
fcntl.flock = flock
from ems.cli import run_main
from ems.training.train import main
status = run_main(main, sys.argv[2:])
print("threads at the lock:", threads, flush=True)
sys.exit(status)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc/self/task")
def test_a_refused_trainer_exits_2_every_time_having_started_no_thread(tiny_pipeline, tmp_path):
    """The refusal comes before torch.distributed starts (its process group's native threads, alive at
    exit, once made a refused trainer abort with status -6): at the lock the trainer is one thread
    (OMP_NUM_THREADS=1: numpy's BLAS pool starts none), and it exits 2, one line, every time."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env.update(OMP_NUM_THREADS="1")
    command = [sys.executable, "-c", COUNTING_TRAINER, str(out / LOCK_FILE), *cli_args(tiny_pipeline, out)]
    with exclusive(out, "training run"):
        for attempt in range(10):
            refused = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert refused.returncode == 2, (attempt, refused.stderr[-3000:])
            assert refused.stderr.splitlines()[-1].startswith(f"error: {out} is in use by another training run: pid")
            assert "Traceback" not in refused.stderr and "terminate called" not in refused.stderr
            threads = json.loads(refused.stdout.splitlines()[-1].removeprefix("threads at the lock: "))
            assert threads and set(threads) == {1}, refused.stdout
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from ems.locks import exclusive\n"
            f"with exclusive({str(out)!r}, 'test'):\n    print('held', flush=True); time.sleep(60)",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(DirectoryInUse, match=f"pid {holder.pid}"):
        with exclusive(out, "test"):
            pass
    holder.kill()
    holder.wait()
    with exclusive(out, "test"):  # the kernel released it: no stale lock
        pass


def test_a_data_prep_stage_refuses_an_output_directory_in_use(tmp_path, capsys):
    from data_prep.__main__ import main as prep_main

    corpus = tmp_path / "corpus" / "de-en"
    corpus.mkdir(parents=True)
    (corpus / "x.de").write_text("Hallo\n")
    (corpus / "x.en").write_text("Hello\n")
    with exclusive(tmp_path / "pretok", "data_prep pretokenize", inside=False):
        assert (
            run_main(prep_main, ["pretokenize", "--in", str(tmp_path / "corpus"), "--out", str(tmp_path / "pretok")])
            == 2
        )
    assert "is in use by another data_prep pretokenize" in capsys.readouterr().err
    assert not (tmp_path / "pretok" / "de-en").exists()


@pytest.mark.parametrize("parts", [None, ["de-en"]])
def test_a_lock_refusal_names_the_holders_stage_not_the_refused_ones(tmp_path, capsys, parts):
    """`clean` (of the whole folder, or `--pair de-en`) holds OUT: a `pretokenize` into it is told a
    `data_prep clean` holds it (it was told `data_prep pretokenize`, its own stage)."""
    from data_prep.__main__ import main as prep_main

    corpus = tmp_path / "corpus" / "de-en"
    corpus.mkdir(parents=True)
    (corpus / "x.de").write_text("Hallo\n")
    (corpus / "x.en").write_text("Hello\n")
    out = tmp_path / "clean"
    with exclusive(out, "data_prep clean", inside=False, parts=parts):
        assert run_main(prep_main, ["pretokenize", "--in", str(tmp_path / "corpus"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"error: {out} is in use by another data_prep clean" in err
    assert "pretokenize" not in err.split(":", 2)[1]


# --- 2. shards of another vocabulary of the same size -------------------------------------------


def test_shards_made_with_another_vocabulary_of_the_same_size_are_refused(tiny_pipeline, tmp_path, capsys, monkeypatch):
    from data_prep.vocab import train_vocab
    from ems.text import Tokenizer

    other = train_vocab(
        tiny_pipeline / "corpus" / "train", tmp_path / "vocab_b", vocab_size=1000, character_coverage=0.98
    )
    original = Tokenizer.load(tiny_pipeline / "vocab")
    assert other.vocab_size == original.vocab_size and other.languages == original.languages
    assert [other.sp.id_to_piece(i) for i in range(other.vocab_size)] != [
        original.sp.id_to_piece(i) for i in range(original.vocab_size)
    ]
    no_deepspeed(monkeypatch)
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", f"vocab={tmp_path / 'vocab_b'}")) == 2
    assert "were made with another vocabulary than" in one_error_line(capsys)


# --- 3. index.json is checked against the arrays ----------------------------------------------


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda index: index.update(n_pairs=index["n_pairs"] + 7), "n_pairs"),
        (lambda index: index.update(n_tokens=index["n_tokens"] - 1), "n_tokens"),
        (lambda index: index["files"][0].update(end=index["files"][0]["end"] - 5), "files[0]"),
        (lambda index: index["files"][-1].update(end=index["files"][-1]["end"] + 300), "files[2]"),
        (lambda index: index.update(token_dtype="int32"), "token_dtype"),
    ],
)
def test_an_index_that_does_not_describe_its_arrays_is_one_line_naming_the_field(
    tiny_pipeline, tmp_path, capsys, monkeypatch, edit, field
):
    shards = copy_shards(tiny_pipeline, tmp_path)
    index = json.loads((shards / "index.json").read_text())
    edit(index)
    (shards / "index.json").write_text(json.dumps(index))
    no_deepspeed(monkeypatch)
    assert (
        run_main(main, cli_args(tiny_pipeline, tmp_path / "run", f"data={shards}", "pair_sampling_temperature=5")) == 2
    )
    line = one_error_line(capsys)
    assert str(shards / "index.json") in line and field in line


def test_a_truncated_array_is_one_line_naming_the_file(tiny_pipeline, tmp_path, capsys, monkeypatch):
    shards = copy_shards(tiny_pipeline, tmp_path)
    tokens = shards / "tokens.npy"
    tokens.write_bytes(tokens.read_bytes()[: tokens.stat().st_size // 2])
    no_deepspeed(monkeypatch)
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", f"data={shards}")) == 2
    assert f"{tokens} cannot be read as an array" in one_error_line(capsys)


# --- 4. a hostile OPUS zip ------------------------------------------------------------------------


def test_a_zip_with_members_named_outside_it_reads_nothing_outside(tmp_path):
    downloads, outside = tmp_path / "downloads", tmp_path / "outside"
    downloads.mkdir()
    outside.mkdir()
    (outside / "secret.de").write_text("geheim\n")
    (outside / "secret.en").write_text("secret\n")
    with zipfile.ZipFile(downloads / "TED2020_v1_moses_de-en.txt.zip", "w") as archive:
        archive.writestr("TED2020.de-en.de", "Hallo\n")
        archive.writestr("TED2020.de-en.en", "Hello\n")
        archive.writestr(os.path.relpath(outside / "secret.de", tmp_path / "any" / "tmp" / "dir"), "x\n")
        archive.writestr(str(outside / "secret.en"), "x\n")
    from data_prep.config import PrepConfig
    from ems.configs import load_config

    config = load_config(
        PrepConfig, values={"languages": ["de", "en"], "pivot": "en", "corpora": [{"name": "TED2020", "release": "v1"}]}
    )
    with pytest.raises(FetchError, match="names a path outside the archive"):
        fetch(config, OnlineSource(downloads, catalog="local"), tmp_path / "out")
    assert not list((tmp_path / "out").rglob("TED2020.*"))


def test_a_zip_whose_language_files_are_not_the_expected_two_is_refused(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with zipfile.ZipFile(downloads / "TED2020_v1_moses_de-en.txt.zip", "w") as archive:
        archive.writestr("TED2020.de-en.de", "Hallo\n")
        archive.writestr("TED2020.de-en.en", "Hello\n")
        archive.writestr("other/extra.en", "Not this\n")
    from data_prep.config import PrepConfig
    from ems.configs import load_config

    config = load_config(
        PrepConfig, values={"languages": ["de", "en"], "pivot": "en", "corpora": [{"name": "TED2020", "release": "v1"}]}
    )
    with pytest.raises(FetchError, match=r"unexpected: other/extra.en"):
        fetch(config, OnlineSource(downloads, catalog="local"), tmp_path / "out")


def test_fetch_archives_refuse_member_names_outside_them(tmp_path):
    from data_prep.manifest_fetch import archive_members
    from ems.corpus import CorpusError

    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("good.txt", "ok")
        archive.writestr("../evil.txt", "no")
    with pytest.raises(CorpusError, match="'../evil.txt' names a path outside the archive"):
        list(archive_members(path))


# --- 5. export is whole or absent -------------------------------------------------------------


def test_an_export_killed_half_way_leaves_nothing_loadable_and_a_rerun_works(tiny_pipeline, tmp_path, monkeypatch):
    import ems
    from ems.apps import export

    model, d_model = untrained_model(tiny_pipeline, tmp_path / "model")
    out = tmp_path / "exported"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a kill between two files looks like from inside

    monkeypatch.setattr(export, "write_model_card", killed)
    with pytest.raises(KeyboardInterrupt):
        export.export_sentence_transformers(model, out)
    assert not out.exists()
    with pytest.raises(OSError):
        ems.load(out)
    monkeypatch.undo()
    # a SIGKILL leaves the hidden staging directory behind: the next export clears it
    staging = tmp_path / ".exported.partial"
    staging.mkdir(exist_ok=True)
    (staging / "modules.json").write_text("[]")
    export.export_sentence_transformers(model, out)
    assert (out / "README.md").is_file() and (out / "modules.json").is_file() and not (out / LOCK_FILE).exists()
    assert not staging.exists()
    assert ems.load(out).encode(["Hallo"], lang="de").shape == (1, d_model)


def test_a_non_empty_output_folder_is_refused_in_one_line(tiny_pipeline, tmp_path, capsys):
    from ems.apps import export

    model, _ = untrained_model(tiny_pipeline, tmp_path / "model")
    out = tmp_path / "exported"
    out.mkdir()
    (out / export.CORE_FILE).write_text("# half written\n")
    assert run_main(export.main, [str(model), str(out), "--format", "sentence-transformers"]) == 2
    assert f"{out} exists and is not an empty directory" in capsys.readouterr().err


# --- 6. disk full while saving a checkpoint ----------------------------------------------------


def test_disk_full_during_a_checkpoint_is_one_line_and_the_last_checkpoint_stays_latest(
    tiny_pipeline, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if "step8" in str(f):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    assert run_main(main, cli_args(tiny_pipeline, out, "max_steps=12", "save_every=4")) == 2
    line = one_error_line(capsys)
    assert "checkpoint save failed at step 8" in line and "the newest intact checkpoint is step4" in line
    assert (out / "checkpoints" / "latest").read_text().strip() == "step4"
    assert not [p for p in (out / "checkpoints").iterdir() if "partial" in p.name]
    monkeypatch.undo()
    assert (
        run_main(main, cli_args(tiny_pipeline, out, "max_steps=12", "save_every=4")) == 0
    )  # resumes after space is freed


# --- 7. user errors found before slow work, as one line ----------------------------------------


def test_probes_without_probe_data_are_one_line_before_deepspeed(tiny_pipeline, tmp_path, capsys, monkeypatch):
    no_deepspeed(monkeypatch)
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", "probe_every=2")) == 2
    assert "probe_every=2 needs probe_data" in one_error_line(capsys)


@pytest.mark.parametrize("key", ["data", "vocab", "valid_data", "init_from", "deepspeed_config"])
def test_a_missing_path_is_one_line_before_deepspeed(tiny_pipeline, tmp_path, capsys, monkeypatch, key):
    no_deepspeed(monkeypatch)
    assert run_main(main, cli_args(tiny_pipeline, tmp_path / "run", f"{key}={tmp_path / 'missing'}")) == 2
    assert str(tmp_path / "missing") in one_error_line(capsys)


def test_a_vocabulary_larger_than_the_corpus_allows_is_one_line(tmp_path, capsys):
    from data_prep.__main__ import main as prep_main

    corpus = tmp_path / "corpus" / "de-en"
    corpus.mkdir(parents=True)
    (corpus / "x.de").write_text("Hallo Welt\nGuten Morgen\n")
    (corpus / "x.en").write_text("Hello world\nGood morning\n")
    config = tmp_path / "data.yaml"
    config.write_text("languages: [de, en]\npivot: en\nvocab:\n  vocab_size: 5000\n")
    assert (
        run_main(
            prep_main,
            ["vocab", "--config", str(config), "--in", str(tmp_path / "corpus"), "--out", str(tmp_path / "vocab")],
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "SentencePiece cannot train a 5000-piece vocabulary" in err and "Traceback" not in err
    assert not (tmp_path / "vocab").exists()  # whole or absent


def test_run_all_takes_the_data_directory_from_ems_data_dir(tmp_path, monkeypatch, capsys):
    from eval.run_all import main as eval_main

    monkeypatch.setenv("EMS_DATA_DIR", str(tmp_path / "data"))
    assert run_main(eval_main, ["--model", str(tmp_path / "no_model")]) == 2
    assert "model directory" in capsys.readouterr().err  # past --data-dir: it came from the environment
    monkeypatch.delenv("EMS_DATA_DIR")
    with pytest.raises(SystemExit):
        eval_main(["--model", str(tmp_path / "no_model")])
    assert "--data-dir is required (or set EMS_DATA_DIR)" in capsys.readouterr().err


def test_encode_without_a_language_lists_the_models_languages(tiny_pipeline, tmp_path):
    import ems

    model = ems.load(untrained_model(tiny_pipeline, tmp_path / "model")[0])
    with pytest.raises(
        TypeError, match=r"a language code must be a str, got None; this model's languages: de en fr ja"
    ):
        model.encode(["Hallo"], lang=None)
    with pytest.raises(ValueError, match=r"sentence 1 holds a lone surrogate"):
        model.encode(["Hallo", "bad \udcff byte"], lang="de")


# --- 8. a failed clean blocks the stages after it -----------------------------------------------


def test_binarize_refuses_a_corpus_the_clean_stage_failed_on_unless_told_to_go_on(tiny_pipeline, tmp_path, capsys):
    from data_prep.__main__ import main as prep_main

    clean = tmp_path / "clean"
    shutil.copytree(tiny_pipeline / "corpus" / "train", clean)
    (clean / "clean_report.json").write_text(
        json.dumps(
            {
                "pairs": [
                    {"pair": "de-en", "files": [{"name": "django", "read": 1, "kept": 1}]},
                    {"pair": "en-fr", "files": [{"name": "django", "failed": "bad UTF-8 at line 3"}]},
                ]
            }
        )
    )
    args = [
        "binarize",
        "--in",
        str(clean),
        "--vocab",
        str(tiny_pipeline / "vocab"),
        "--out",
        str(tmp_path / "shards"),
        "--workers",
        "1",
    ]
    assert run_main(prep_main, args) == 2
    err = capsys.readouterr().err
    assert "the clean stage failed on en-fr/django: bad UTF-8 at line 3" in err and "--allow-failed" in err
    assert not (tmp_path / "shards" / "index.json").exists()
    # a later clean of that pair supersedes the failure
    time.sleep(0.01)
    (clean / "clean_report.en-fr.json").write_text(
        json.dumps({"pairs": [{"pair": "en-fr", "files": [{"name": "django"}]}]})
    )
    assert run_main(prep_main, args) == 0
    (clean / "clean_report.en-fr.json").unlink()
    shutil.rmtree(tmp_path / "shards")
    assert run_main(prep_main, [*args, "--allow-failed"]) == 0
    assert np.load(tmp_path / "shards" / "tokens.npy", mmap_mode="r").size > 0


# --- mining: one miner per work dir, the TSV whole or absent -------------------------------------


def test_a_mining_work_dir_in_use_is_refused_and_a_failed_write_leaves_no_tsv(tmp_path, monkeypatch):
    import ems.mining.pipeline.score
    from ems.mining.pipeline.files import WriteFailed
    from ems.mining.pipeline.launch import mine_files

    src, tgt = write_inputs(tmp_path)
    options = mining_options(tmp_path, src, tgt, work_dir=str(tmp_path / "work"))
    with exclusive(tmp_path / "work", "mining run"):
        with pytest.raises(DirectoryInUse, match="in use by another mining run"):
            mine_files(options, TrigramEncoder())
    real_line_at, calls = ems.mining.pipeline.score.line_at, []

    def disk_full_after_two_lines(f, offset):
        calls.append(offset)
        if len(calls) > 4:
            raise OSError(28, "No space left on device")
        return real_line_at(f, offset)

    monkeypatch.setattr(ems.mining.pipeline.score, "line_at", disk_full_after_two_lines)
    out = Path(options.out)
    with pytest.raises(WriteFailed, match=f"could not write {out}: No space left on device"):
        mine_files(options, TrigramEncoder())
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
    monkeypatch.undo()
    counts = mine_files(options, TrigramEncoder())
    assert len(out.read_text().splitlines()) == counts["written"] == 5
