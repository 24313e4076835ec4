"""Pair tasks of one data-prep run side by side (slurm/prep.sh's array job): `fetch`, `clean` and
`pretokenize` with different `--pair` write into the same output directories at the same time, and
keep every pair's entries of the shared reports; a second writer of the same pair, and a writer of
the whole directory, are refused in one line. The corpus: a local parallel-sentences dataset of real
Tatoeba Challenge pairs (fixtures.hf_datasets), imported through the config's hf: corpora.

The overlap is made deterministic: while one pair's stage is in the middle of its work (its first
call of the function named below), the other command runs from start to end in the same process,
holding its own locks as a separate task would (flock locks are per open file)."""

import json
import os
from pathlib import Path

import pytest

from data_prep.__main__ import main
from ems.cli import run_main
from fixtures.hf_datasets import pairs_config

PAIRS = ("de-en", "en-fr")
# Per stage: the function a running pair task is inside of when the other task runs.
MIDDLE = {
    "fetch": "data_prep.hf.importer.import_rows",
    "clean": "data_prep.clean.clean_language_pair",
    "pretokenize": "data_prep.pretokenize._pretokenize_files",
}


@pytest.fixture(scope="module")
def config(data_dir, tmp_path_factory) -> Path:
    caps = {"de": "max_pairs: 120", "fr": "max_pairs: 100, sample: first"}
    return pairs_config(tmp_path_factory.mktemp("pairs"), data_dir, 150, caps)


def stage_args(config: Path, out: Path, stage: str, pairs: tuple[str, ...] | None) -> list[str]:
    """The command line slurm/prep.sh runs for one stage (`pairs` None: the whole corpus)."""
    args = {
        "fetch": ["--config", str(config), "--out", str(out / "raw")],
        "clean": ["--config", str(config), "--in", str(out / "raw"), "--out", str(out / "clean")],
        "pretokenize": ["--in", str(out / "clean"), "--out", str(out / "pretok"), "--workers", "1"],
    }[stage]
    return [stage, *args, *(["--pair", *pairs] if pairs else [])]


def run_during(monkeypatch, target: str, argv: list[str]) -> list[int]:
    """Make the first call of `target` run `argv` (start to end) before its own work; the list gets its status."""
    module, _, name = target.rpartition(".")
    original = getattr(__import__(module, fromlist=[name]), name)
    statuses = []

    def wrapped(*args, **kwargs):
        if not statuses:  # (its own calls of `target` come back here)
            statuses.append(None)
            statuses[0] = run_main(main, argv)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, wrapped)
    return statuses


def tree(root: Path) -> dict[str, object]:
    """{relative path: content} of every file under `root` but the lock files; JSON reports parsed,
    without the seconds an import took or the times of the files the pretokenize marker records."""
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.endswith(".lock"):
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".json":
                text = json.loads(text)
            if path.name == "hf_import_report.json":
                for entry in text.values():
                    del entry["seconds"]
            if path.name == "pretokenized.json":  # the files' contents, not when they were written
                for record in text["files"].values():
                    for fingerprint in record["inputs"] + record["outputs"]:
                        del fingerprint["mtime_ns"]
            files[str(path.relative_to(root))] = text
    return files


def test_pair_tasks_side_by_side_write_what_they_write_one_after_the_other(config, tmp_path, monkeypatch, capsys):
    sequential, parallel = tmp_path / "sequential", tmp_path / "parallel"
    for stage in MIDDLE:
        for pair in PAIRS:
            assert run_main(main, stage_args(config, sequential, stage, (pair,))) == 0, capsys.readouterr().err
    for stage, middle in MIDDLE.items():
        with monkeypatch.context() as patch:
            beside = run_during(patch, middle, stage_args(config, parallel, stage, (PAIRS[1],)))
            assert run_main(main, stage_args(config, parallel, stage, (PAIRS[0],))) == 0, capsys.readouterr().err
        assert beside == [0], capsys.readouterr().err  # it ran while the first pair's task was at work
    reference = tree(sequential)
    assert {name for name in reference if name.endswith(".json")} == {
        "raw/hf_import_report.json",
        "clean/clean_report.de-en.json",
        "clean/clean_report.en-fr.json",
        "pretok/pretokenized.json",
    }
    assert sorted(json.loads((sequential / "raw" / "hf_import_report.json").read_text())) == [
        "parallel-sentences.en-de",
        "parallel-sentences.en-fr",
    ]
    assert tree(parallel) == reference
    assert len(reference["pretok/de-en/parallel-sentences.en-de.de"].splitlines()) == 120


def one_error_line(capsys) -> str:
    """The one `error: ` line of stderr (beside the running task's progress bars); no traceback."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("stage", list(MIDDLE))
def test_a_second_writer_of_the_same_pair_is_refused_naming_the_first(stage, config, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    for before in list(MIDDLE)[: list(MIDDLE).index(stage)]:
        assert run_main(main, stage_args(config, out, before, ("de-en",))) == 0
    capsys.readouterr()
    beside = run_during(monkeypatch, MIDDLE[stage], stage_args(config, out, stage, ("de-en",)))
    assert run_main(main, stage_args(config, out, stage, ("de-en",))) == 0
    assert beside == [2]
    written = {"fetch": "raw", "clean": "clean", "pretokenize": "pretok"}[stage]
    line = one_error_line(capsys)
    assert f"{out / written / 'de-en'} is in use by another data_prep {stage}: pid {os.getpid()}" in line


def test_a_whole_directory_run_and_a_pair_task_exclude_each_other(config, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    beside = run_during(monkeypatch, MIDDLE["fetch"], stage_args(config, out, "fetch", None))
    assert run_main(main, stage_args(config, out, "fetch", ("de-en",))) == 0
    assert beside == [2]
    line = one_error_line(capsys)
    assert f"{out / 'raw'} is in use by another data_prep fetch of only part of it" in line
    assert f"{out / 'raw'}/.<part>.lock" in line

    monkeypatch.undo()
    beside = run_during(monkeypatch, MIDDLE["fetch"], stage_args(config, out, "fetch", ("en-fr",)))
    assert run_main(main, stage_args(config, out, "fetch", None)) == 0
    assert beside == [2]
    line = one_error_line(capsys)
    assert f"{out / 'raw'} is in use by another data_prep fetch: pid {os.getpid()}" in line
    assert sorted(json.loads((out / "raw" / "hf_import_report.json").read_text())) == [
        "parallel-sentences.en-de",
        "parallel-sentences.en-fr",
    ]


def test_a_pair_task_goes_on_whatever_the_clean_stage_did_to_other_pairs(config, tmp_path, capsys):
    """pretokenize --pair reads the clean reports of its own pairs: a file that another pair task could
    not clean stops that task and the whole-corpus stages, not this one."""
    out = tmp_path / "run"
    for pair in PAIRS:
        assert run_main(main, stage_args(config, out, "fetch", (pair,))) == 0
    broken = out / "raw" / "de-en"
    (broken / "broken.de").write_text("eins\nzwei\n")
    (broken / "broken.en").write_text("one\n")
    assert run_main(main, stage_args(config, out, "clean", ("de-en",))) == 2
    assert run_main(main, stage_args(config, out, "clean", ("en-fr",))) == 0
    capsys.readouterr()
    assert run_main(main, stage_args(config, out, "pretokenize", ("en-fr",))) == 0
    assert len((out / "pretok" / "en-fr" / "parallel-sentences.en-fr.fr").read_text().splitlines()) == 100
    for pairs in (("de-en",), None):
        assert run_main(main, stage_args(config, out, "pretokenize", pairs)) == 2
        assert "the clean stage failed on de-en/broken" in one_error_line(capsys)
