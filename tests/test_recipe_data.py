"""`ems-prep recipe` (data_prep.recipe): a recipe's data config -> OUT/{corpus,vocab,shards}, the same
files as the data stages `ems-demo` runs before training, on a slice of the shared data."""

import hashlib

import pytest
import yaml

from data_prep.__main__ import main
from data_prep.recipe import PREPARED_FILE, RecipeDataConfig
from ems.cli import run_main

# The corpus folders of conftest's sliced_data: the Tatoeba Challenge's Afrikaans (1374 pairs)
SLICED_CORPORA = {"tatoeba_challenge": ["afr-eng"]}
SETTINGS = {
    "languages": ["af"],
    "corpora": ["tatoeba_challenge"],
    "eval_sets": ["tatoeba", "flores"],
    "heldout_per_pair": 100,
    "vocab_size": 400,
}


def _files(root):
    """{path under root: sha256} of the corpus, the vocabulary and the shards, `root` written as OUT
    where a report names a file of its own (the vocabulary's and the shards' reports do)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes().replace(str(root).encode(), b"OUT")).hexdigest()
        for part in ("corpus", "vocab", "shards")
        for path in sorted((root / part).rglob("*"))
        if path.is_file()
    }


def test_ems_prep_recipe_makes_the_files_the_demo_s_data_stages_make(sliced_data, tmp_path, capsys):
    from ems.apps.demo import Stages, prepare_data

    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump(SETTINGS))
    demo = prepare_data(RecipeDataConfig(**SETTINGS), sliced_data, tmp_path / "demo", Stages())
    argv = ["recipe", "--config", str(config), "--data-dir", str(sliced_data), "--out", str(tmp_path / "prep")]
    assert run_main(main, argv) == 0
    printed = capsys.readouterr().out
    assert "== corpus\n" in printed and "== vocab\n" in printed and "== binarize\n" in printed
    assert f"{demo['train_pairs']} training pairs, {demo['heldout_pairs']} held-out pairs in 1 languages" in printed
    files = _files(tmp_path / "prep")
    assert {"shards/train/index.json", "shards/heldout/tokens.npy", "corpus/languages.json"} <= set(files)
    assert files == _files(tmp_path / "demo")
    # run again with that config: nothing redone
    assert yaml.safe_load((tmp_path / "prep" / PREPARED_FILE).read_text())["corpus"] == demo
    assert run_main(main, argv) == 0
    assert "data prepared before with this config" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "error: the recipe's corpora are expected at {data}/tatoeba_challenge (see"),
        (["--set", "vocab=300"], "error: {config}: --set 'vocab=300': unknown key(s) ['vocab']; did you mean"),
    ],
)
def test_ems_prep_recipe_refuses_bad_input_in_one_line(tmp_path, capsys, extra, message):
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump(SETTINGS))
    (tmp_path / "data").mkdir()
    argv = ["recipe", "--config", str(config), "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    assert run_main(main, [*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.format(data=tmp_path / "data", config=config)) and err.count("\n") == 1
    assert not (tmp_path / "out" / "corpus").exists()
