"""Faults of a run's artifacts (issue 44, cases 3 and 4): shard index ranges that do not match the
rows' languages, a full disk at any of a run's writes (the final model export above all), a
re-export killed between its two renames, and a YAML config that gives a key twice. Each has one
clear outcome: one line `error: ...` and status 2, or the run recovering by itself."""

import builtins
import errno
import io
import json
import os
import re
import shutil

import pytest

from ems.cli import run_main
from ems.training.train import main
from tests.fakes import cli_args, copy_shards, no_deepspeed, one_error_line, untrained_model

pytestmark = pytest.mark.faults

NO_SPACE = f"{os.strerror(errno.ENOSPC)}"
# what safetensors raises when the disk fills while it writes model.safetensors
SAFETENSORS_NO_SPACE = f"Error while serializing: I/O error: {NO_SPACE} (os error {errno.ENOSPC})"


# --- case 3: index.json's file ranges against langs.npy -------------------------------------------


def _move_boundary(index: dict, rows: int = 338) -> int:
    """files[0] takes the first `rows` pairs of files[1] (both n_pairs fixed up); returns the old boundary."""
    first, second = index["files"][:2]
    boundary = first["end"]
    first["end"] = boundary + rows
    first["n_pairs"] = first["end"] - first["start"]
    second["start"] = boundary + rows
    second["n_pairs"] = second["end"] - second["start"]
    return boundary


def _swap_labels(index: dict) -> int:
    """files[0] and files[1] swap their language pairs (ranges unchanged): every row of files[0] is wrong."""
    first, second = index["files"][:2]
    for key in ("l1", "l2", "sides"):
        first[key], second[key] = second[key], first[key]
    return first["start"]


@pytest.mark.parametrize("tamper", [_move_boundary, _swap_labels], ids=["boundary-moved", "labels-swapped"])
def test_index_ranges_that_disagree_with_the_rows_languages_are_refused_on_open(
    tiny_pipeline, tmp_path, capsys, monkeypatch, tamper
):
    from ems.shards import PairShards

    untampered = PairShards(tiny_pipeline / "shards")  # binarize's own shards load
    for name, members in untampered.language_pair_groups().items():
        ids = {tuple(int(i) for i in row) for row in untampered.langs[members]}
        assert {"-".join(sorted(untampered.languages[i] for i in pair)) for pair in ids} == {name}

    shards = copy_shards(tiny_pipeline, tmp_path)
    index = json.loads((shards / "index.json").read_text())
    first_wrong_row = tamper(index)
    (shards / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=rf"files\[0\] .* row {first_wrong_row} of langs.npy"):
        PairShards(shards)

    no_deepspeed(monkeypatch)
    assert (
        run_main(main, cli_args(tiny_pipeline, tmp_path / "run", f"data={shards}", "pair_sampling_temperature=5")) == 2
    )
    line = one_error_line(capsys)
    assert str(shards / "index.json") in line and f"row {first_wrong_row} of langs.npy" in line
    assert not (tmp_path / "run").exists()  # refused before the run started


# --- case 4: a full disk at the run's writes -----------------------------------------------------


def _safetensors_disk_full(monkeypatch, where: str) -> None:
    """safetensors' writes into a path containing `where` fail as on a full disk."""
    import safetensors.torch
    from safetensors import SafetensorError

    real = safetensors.torch.serialize_file

    def serialize_file(tensors, filename, *args, **kwargs):
        if where in str(filename):
            raise SafetensorError(SAFETENSORS_NO_SPACE)
        return real(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "serialize_file", serialize_file)


class _FullDiskFile:
    """A file opened for writing whose writes fail with ENOSPC (what a full disk does)."""

    def __init__(self, file):
        self.file = file

    def write(self, data):
        raise OSError(errno.ENOSPC, NO_SPACE)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def _files_disk_full(monkeypatch, name: str) -> None:
    """Every file opened for writing whose name contains `name` fails its writes as on a full disk."""
    real_open = io.open

    def fake_open(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and name in os.fspath(file) and set(mode) & set("wax+"):
            return _FullDiskFile(opened)
        return opened

    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(builtins, "open", fake_open)


@pytest.mark.parametrize("exported", ["model", "model-init"])
def test_disk_full_at_a_model_export_of_a_run_is_one_line_and_status_2(
    tiny_pipeline, tmp_path, capsys, monkeypatch, exported
):
    import ems

    out = tmp_path / "run"
    _safetensors_disk_full(monkeypatch, f".{exported}.partial")
    assert run_main(main, cli_args(tiny_pipeline, out, "export_init=true")) == 2
    line = one_error_line(capsys)
    assert f"could not write {out / exported}" in line and NO_SPACE in line, line
    assert "MiB free on the filesystem of" in line and "free space and rerun" in line
    assert not (out / exported).exists()
    assert [p.name for p in (out / f".{exported}.partial").iterdir()] == [".lock"]  # nothing half-written kept
    if exported == "model":  # the last checkpoint was saved before the export: a rerun only exports
        assert (out / "checkpoints" / "latest").read_text().strip() == "step4"
        monkeypatch.undo()
        assert run_main(main, cli_args(tiny_pipeline, out, "export_init=true")) == 0
        assert ems.load(out / "model").encode(["Hallo"], lang="de").shape[0] == 1


def test_disk_full_in_ems_export_is_the_same_one_line(tiny_pipeline, tmp_path, capsys, monkeypatch):
    from ems.apps import export

    model, _ = untrained_model(tiny_pipeline, tmp_path / "model")
    out = tmp_path / "exported"
    _safetensors_disk_full(monkeypatch, ".exported.partial")
    assert run_main(export.main, [str(model), str(out), "--format", "hf"]) == 2
    line = one_error_line(capsys)
    assert f"could not write {out} (export): {SAFETENSORS_NO_SPACE}" in line
    assert "MiB free on the filesystem of" in line and not out.exists()


@pytest.mark.parametrize(
    "name, settings",
    [
        ("run_metadata.json", ()),
        ("train_config.yaml", ()),
        ("train_config_history.yaml", ()),
        ("valid_sample.json", ("valid_data={valid}", "valid_pairs=20")),
        ("metrics.jsonl", ("log_every=2",)),
    ],
)
def test_disk_full_at_each_file_a_run_writes_is_one_line_naming_it(
    tiny_pipeline, tmp_path, capsys, monkeypatch, name, settings
):
    out = tmp_path / "run"
    settings = [setting.format(valid=tiny_pipeline / "valid_shards") for setting in settings]
    _files_disk_full(monkeypatch, name)
    assert run_main(main, cli_args(tiny_pipeline, out, *settings)) == 2
    line = one_error_line(capsys)
    assert f"could not write {out / name}" in line and NO_SPACE in line and "MiB free" in line, line
    if name != "metrics.jsonl":  # written whole or not at all: a rerun never reads half a file
        assert not (out / name).exists() and not list(out.glob(f".{name}*"))
    monkeypatch.undo()
    assert run_main(main, cli_args(tiny_pipeline, out, *settings)) == 0  # space freed: the run goes on


# --- case 4: a re-export killed between its two renames ------------------------------------------


def test_a_re_export_killed_between_its_renames_loses_nothing_and_leaves_nothing(tiny_pipeline, tmp_path, capsys):
    from ems.apps.export import main as export_main
    from ems.artifacts import staged_directory

    final = tmp_path / "model"
    for version in ("v1", "v2"):
        with staged_directory(final, "model export", replace=True) as staging:
            (staging / "weights").write_text(version)
    # killed after `model/` became `.model.old` and before the new one took its place
    final.rename(tmp_path / ".model.old")
    assert run_main(export_main, [str(final), str(tmp_path / "out"), "--format", "hf"]) == 2
    assert f"{tmp_path / '.model.old'} holds the previous one" in one_error_line(capsys)  # a loader says so
    with staged_directory(final, "model export", replace=True) as staging:  # the next write recovers
        assert (final / "weights").read_text() == "v2"
        (staging / "weights").write_text("v3")
    assert (final / "weights").read_text() == "v3" and [p.name for p in tmp_path.iterdir()] == ["model"]
    # killed after both renames, before the old one was removed: the next write removes it
    shutil.copytree(final, tmp_path / ".model.old")
    with staged_directory(final, "model export", replace=True) as staging:
        assert not (tmp_path / ".model.old").exists()
        (staging / "weights").write_text("v4")
    assert (final / "weights").read_text() == "v4" and not (tmp_path / ".model.old").exists()


def test_a_run_restores_or_removes_a_model_old_when_it_starts(tiny_pipeline, tmp_path):
    import ems
    from ems.training.stopping import PREEMPTED_EXIT_CODE, STOP_FILE

    out = tmp_path / "run"
    assert run_main(main, cli_args(tiny_pipeline, out)) == 0
    (out / "model").rename(out / ".model.old")  # a kill between the re-export's two renames
    (out / STOP_FILE).touch()  # the rerun stops before it exports again: only its start can recover
    assert run_main(main, cli_args(tiny_pipeline, out, "max_steps=8")) == PREEMPTED_EXIT_CODE
    assert not (out / ".model.old").exists()
    assert ems.load(out / "model").encode(["Hallo"], lang="de").shape[0] == 1

    shutil.copytree(out / "model", out / ".model.old")  # a kill after both renames
    (out / STOP_FILE).touch()
    assert run_main(main, cli_args(tiny_pipeline, out, "max_steps=8")) == PREEMPTED_EXIT_CODE
    assert not (out / ".model.old").exists() and (out / "model" / "model.safetensors").is_file()


# --- a YAML key given twice ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("max_steps: 4\nlr: 0.001\nmax_steps: 8\n", "max_steps", (1, 3)),
        ("model_overrides:\n  d_model: 64\n  n_heads: 4\n  d_model: 32\n", "model_overrides.d_model", (2, 4)),
    ],
    ids=["top-level", "nested"],
)
def test_a_yaml_config_with_a_key_twice_is_refused_naming_the_file_the_key_and_both_lines(
    tmp_path, capsys, text, key, lines
):
    from ems.configs import ConfigError, load_config
    from ems.training.config import TrainConfig

    path = tmp_path / "train.yaml"
    path.write_text(text)
    assert run_main(main, ["--config", str(path)]) == 2
    line = one_error_line(capsys)
    assert str(path) in line and f"key {key!r} appears twice, at lines {lines[0]} and {lines[1]}" in line, line
    # a --set value is read the same way; merge keys (`<<: *defaults`) still fill in unset keys
    with pytest.raises(ConfigError, match="key 'd_model' appears twice"):
        load_config(TrainConfig, None, ["model_overrides={d_model: 64, d_model: 32}"])
    merged = tmp_path / "merged.yaml"
    merged.write_text("model_overrides:\n  <<: {d_model: 64, n_heads: 4}\n  d_model: 32\n")
    assert load_config(TrainConfig, merged).model_overrides == {"d_model": 32, "n_heads": 4}


# --- a full disk while binarize writes (issue "Reliability V", item 10) ---------------------------


class _DevFullFile(_FullDiskFile):
    """A file opened for writing at `path` whose bytes go to /dev/full, which refuses every write
    with ENOSPC: what a full disk does, to Python's writes and numpy's `tofile` (a short write) alike."""

    def __init__(self, path):
        super().__init__(open("/dev/full", "wb"))
        self.name = os.fspath(path)

    def write(self, data):
        return self.file.write(data)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "name, reason",
    [
        ("tokens.bin", "the disk is full (ENOSPC) or over quota: a short write, "),  # a part, numpy's tofile
        (
            "tokens.npy.partial",
            f"{NO_SPACE} [errno {errno.ENOSPC}]",
        ),  # the join: its .npy header reaches the disk first
        ("content_ids.npy.partial", f"{NO_SPACE} [errno {errno.ENOSPC}]"),
    ],
)
def test_disk_full_in_binarize_is_one_line_naming_the_file(tiny_pipeline, tmp_path, capsys, monkeypatch, name, reason):
    """Was: `error: 36339 requested and 14336 written`, no file named, no word of a full disk."""
    import data_prep.binarize
    from data_prep.__main__ import main as prep_main

    def full_open(file, mode="r", *args, **kwargs):
        if "w" in mode and os.fspath(file).endswith(name):
            return _DevFullFile(file)
        return open(file, mode, *args, **kwargs)

    out = tmp_path / "shards"
    monkeypatch.setattr(data_prep.binarize, "open", full_open, raising=False)
    argv = ["binarize", "--in", str(tiny_pipeline / "corpus" / "train"), "--vocab", str(tiny_pipeline / "vocab")]
    argv += ["--out", str(out), "--workers", "1"]
    assert run_main(prep_main, argv) == 2
    line = one_error_line(capsys)
    failed = f"{out}/parts/[^ /]+/{name}" if name == "tokens.bin" else re.escape(str(out / name))
    assert re.match(f"error: could not write {failed} \\(binarize\\): {re.escape(reason)}", line), line
    assert "MiB free on the filesystem of" in line and "the finished parts are kept: free space and rerun" in line
    assert not (out / "index.json").exists() and not list(out.glob("*.partial"))
    monkeypatch.undo()
    assert run_main(prep_main, argv) == 0  # space freed: the rerun finishes
    assert json.loads((out / "index.json").read_text())["n_pairs"] > 0


def test_numpy_short_write_is_a_full_disk_naming_the_file(tmp_path):
    """numpy's `tofile` says only `36339 requested and 14336 written` (an OSError without errno)."""
    from ems.artifacts import writing

    with pytest.raises(Exception) as raised, writing(tmp_path / "tokens.npy", "binarize"):
        raise OSError("36339 requested and 14336 written")
    assert str(raised.value).startswith(
        f"could not write {tmp_path / 'tokens.npy'} (binarize): the disk is full (ENOSPC) or over quota: "
        "a short write, 14336 of 36339 items written; "
    )
