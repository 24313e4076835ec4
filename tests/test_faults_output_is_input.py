"""An output that is one of the command's inputs (issue "Reliability V", item 1): every console
script that writes a file or folder named on its command line refuses, before it reads or writes
anything, an output that is one of its inputs: the same path, a symlink leading to it or a hard link
of it (ems.corpus.check_output_not_input). The input is left as it was."""

import os
from pathlib import Path

import pytest

from data_prep import manifest_fetch as data_fetch
from data_prep.__main__ import main as prep_main
from ems.apps.demo import main as demo_main
from ems.apps.export import main as export_main
from ems.apps.mine import main as mine_main
from ems.cli import run_main
from ems.training.train import main as train_main
from eval.run_all import main as run_all_main
from tests.fakes import one_error_line

pytestmark = pytest.mark.faults

SRC = "Der Hund bellt.\nDie Katze schläft.\nIch habe Hunger.\n"
TGT = "The dog barks.\nThe cat sleeps.\nI am hungry.\n"


def name_again(path: Path, how: str, where: Path) -> Path:
    """`path` itself, or a new name at `where` that is a symlink to it or a hard link of it."""
    if how == "same":
        return path
    if how == "symlink":
        where.symlink_to(path, target_is_directory=path.is_dir())
    else:
        os.link(path, where)
    return where


HOW = {"same": "", "symlink": " (through a symlink)", "hardlink": " (a hard link of it: one file under two names)"}


@pytest.mark.parametrize("how", list(HOW))
@pytest.mark.parametrize("side", ["src", "tgt"])
def test_mine_out_naming_its_own_input_is_refused_and_the_input_kept(side, how, tmp_path, capsys):
    """Was: the TSV written over the input, status 0."""
    src, tgt = tmp_path / "src.de", tmp_path / "tgt.en"
    src.write_text(SRC, encoding="utf-8")
    tgt.write_text(TGT, encoding="utf-8")
    named = {"src": src, "tgt": tgt}[side]
    out = name_again(named, how, tmp_path / "pairs.tsv")
    argv = ["--encoder", "ngram:dim=32", "--src", str(src), "--src-lang", "de", "--tgt", str(tgt)]
    argv += ["--tgt-lang", "en", "--out", str(out), "--k", "2", "--work-dir", str(tmp_path / "work")]
    assert run_main(mine_main, argv) == 2
    assert one_error_line(capsys) == (
        f"error: --out {out} is the input --{side} {named}{HOW[how]}: writing it would overwrite what the "
        "command reads; choose another output"
    )
    assert (src.read_text(encoding="utf-8"), tgt.read_text(encoding="utf-8")) == (SRC, TGT)
    assert not (tmp_path / "work").exists()  # refused before anything was written


def test_mine_out_naming_a_precomputed_embedding_file_is_refused(tmp_path, capsys):
    import numpy as np

    src, tgt = tmp_path / "src.de", tmp_path / "tgt.en"
    src.write_text(SRC, encoding="utf-8")
    tgt.write_text(TGT, encoding="utf-8")
    for name in ("s.npy", "t.npy"):
        np.save(tmp_path / name, np.eye(3, dtype=np.float32))
    argv = ["--src", str(src), "--src-lang", "de", "--tgt", str(tgt), "--tgt-lang", "en"]
    argv += ["--src-embeddings", str(tmp_path / "s.npy"), "--tgt-embeddings", str(tmp_path / "t.npy")]
    assert run_main(mine_main, [*argv, "--out", str(tmp_path / "t.npy")]) == 2
    assert f"is the input --tgt-embeddings {tmp_path / 't.npy'}: writing it" in one_error_line(capsys)
    assert np.load(tmp_path / "t.npy").shape == (3, 3)


@pytest.mark.parametrize("stage, given", [("binarize", "--vocab"), ("clean", "--data-dir"), ("clean", "--config")])
def test_every_prep_stage_refuses_an_out_that_is_another_of_its_inputs(stage, given, tmp_path, capsys):
    """Was (binarize --out VOCAB): the shards written into the vocabulary folder, status 0."""
    corpus, folder = tmp_path / "corpus", tmp_path / "folder"
    (corpus / "de-en").mkdir(parents=True)
    folder.mkdir()
    config = tmp_path / "data.yaml"
    config.write_text("languages: [de, en]\npivot: en\n", encoding="utf-8")
    out = config if given == "--config" else folder
    argv = {
        "binarize": ["binarize", "--in", corpus, "--vocab", folder, "--out", out, "--workers", "1"],
        "clean": ["clean", "--config", config, "--in", corpus, "--data-dir", folder, "--out", out],
    }[stage]
    assert run_main(prep_main, [str(arg) for arg in argv]) == 2
    assert one_error_line(capsys).startswith(f"error: --out {out} is the input {given} {out}: writing it")
    assert not any(folder.iterdir()) and config.read_text().startswith("languages")


def test_ems_data_manifest_written_over_a_data_file_is_refused(tmp_path, capsys):
    """Was: the manifest written over the data file it had just hashed, status 0."""
    data = tmp_path / "data"
    for dataset in data_fetch.DATASETS.values():
        (data / dataset.folder).mkdir(parents=True, exist_ok=True)
        (data / dataset.folder / "file.txt").write_text("a line\n", encoding="utf-8")
    first = data / next(iter(data_fetch.DATASETS.values())).folder / "file.txt"
    manifest = name_again(first, "hardlink", tmp_path / "manifest.tsv")
    assert run_main(data_fetch.main, ["manifest", str(data), "--manifest", str(manifest)]) == 2
    assert f"--manifest {manifest} is the input data file {first} (a hard link" in one_error_line(capsys)
    assert first.read_text(encoding="utf-8") == "a line\n"


@pytest.mark.parametrize("given", ["--data-dir", "--model", "--heldout"])
def test_eval_run_all_refuses_an_out_that_is_an_input_folder(given, tmp_path, capsys):
    """Was (--out MODEL): results.json, report.md and the chart written into the model folder."""
    folders = {name: tmp_path / name.strip("-") for name in ("--data-dir", "--model", "--heldout")}
    for folder in folders.values():
        folder.mkdir()
    out = name_again(folders[given], "symlink", tmp_path / "out")
    argv = [arg for name, folder in folders.items() for arg in (name, str(folder))] + ["--out", str(out)]
    assert run_main(run_all_main, argv) == 2
    assert f"--out {out} is the input {given} {folders[given]} (through a symlink)" in one_error_line(capsys)
    assert not any(any(folder.iterdir()) for folder in folders.values())


def test_demo_refuses_an_out_that_is_its_data_dir(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    assert run_main(demo_main, ["--out", str(data), "--data-dir", str(data)]) == 2
    assert f"--out {data} is the input --data-dir {data}: writing it" in one_error_line(capsys)
    assert not any(data.iterdir())


def test_export_refuses_an_out_that_is_the_model_folder(model_dir, tmp_path, capsys):
    out = name_again(model_dir, "symlink", tmp_path / "exported")
    before = sorted(p.name for p in model_dir.iterdir())
    assert run_main(export_main, [str(model_dir), str(out), "--format", "hf"]) == 2
    assert f"OUT {out} is the input MODEL_DIR {model_dir} (through a symlink)" in one_error_line(capsys)
    assert sorted(p.name for p in model_dir.iterdir()) == before


@pytest.mark.parametrize("given", ["data", "vocab"])
def test_training_refuses_an_out_that_is_its_data_or_vocabulary(given, tmp_path, capsys):
    folders = {name: tmp_path / name for name in ("data", "vocab")}
    for folder in folders.values():
        folder.mkdir()
    settings = [f"{name}={folder}" for name, folder in folders.items()] + [f"out={folders[given]}"]
    assert run_main(train_main, ["--set", *settings]) == 2
    assert one_error_line(capsys).startswith(f"error: out {folders[given]} is the input {given} {folders[given]}:")
    assert not any(any(folder.iterdir()) for folder in folders.values())
