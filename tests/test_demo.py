"""The demo's wiring, end to end on a small slice of the real data: two languages, a few steps."""

import json

import pytest
import yaml

from ems.apps.demo import CHART_FILE, REPORT_FILE, main
from ems.cli import run_main
from ems.training.stopping import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from ems.training.train import TrainResult
from eval.results import read_results as stored_results


def test_demo_runs_every_stage_and_writes_its_report(data_dir, tmp_path, capsys):
    data_config = tmp_path / "data.yaml"
    data_config.write_text(yaml.safe_dump({"languages": ["de", "ja"], "heldout_per_pair": 50, "vocab_size": 2000}))
    out = tmp_path / "demo"
    status = main(
        [
            "--out",
            str(out),
            "--data-dir",
            str(data_dir),
            "--data-config",
            str(data_config),
            "--set",
            "max_steps=6",
            "warmup_steps=2",
            "batch_size=32",
            "log_every=3",
            "valid_every=3",
            "probe_every=3",
            "probe_sentences=20",
            "valid_pairs=64",
            "save_every=6",
            "model_overrides.d_model=32",
            "model_overrides.n_heads=2",
            "model_overrides.d_ffn=64",
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0
    for stage in ("corpus", "vocab", "binarize", "train", "eval"):
        assert f"== {stage} ==" in printed
    assert printed.count("### tatoeba") == 1  # the tables are printed once
    report = (out / REPORT_FILE).read_text()
    assert "### tatoeba" in report and "### flores200" in report and "### heldout" in report
    trained = stored_results(out / "eval" / "trained")
    assert set(trained["tatoeba"]["languages"]) == set(trained["flores200"]["languages"]) == {"de", "ja"}
    assert trained["tatoeba"]["languages"]["de"]["n"] == 1000  # the full test set
    assert trained["heldout"]["languages"]["de"]["n"] == 50
    # no training pair shares a sentence with an evaluation set
    clean_report = json.loads((out / "corpus" / "clean" / "clean_report.json").read_text())
    assert sum(f["dropped"].get("in_eval_set", 0) for p in clean_report["pairs"] for f in p["files"]) > 1000
    assert (out / CHART_FILE).is_file() and (out / "run" / "curves.png").is_file()


def test_demo_without_its_corpus_is_one_clear_error(tmp_path, capsys):
    assert run_main(main, ["--out", str(tmp_path / "demo"), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the recipe's corpora are expected at ") and err.count("\n") == 1


@pytest.mark.parametrize("status", [PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE])
def test_a_stopped_training_ends_the_demo_with_one_line_and_the_trainers_status(tmp_path, capsys, monkeypatch, status):
    # before: a TypeError from deep inside the evaluation (no model directory to load); a Ctrl-C's 130 as the
    # trainer's own command line gives it
    monkeypatch.setattr("ems.apps.demo.prepare_data", lambda *args: {})
    monkeypatch.setattr(
        "ems.training.train.train",
        lambda cfg: TrainResult(40, 1800, [], model_dir=None, preempted=True, exit_code=status),
    )
    assert run_main(main, ["--out", str(tmp_path / "demo"), "--data-dir", str(tmp_path)]) == status
    err = capsys.readouterr().err
    assert err.startswith("error: training stopped at step 40 of 1800") and err.count("\n") == 1


def test_the_data_config_s_preprocessing_is_the_vocabulary_s(tmp_path, monkeypatch):
    # RecipeDataConfig.preprocessing reaches SentencePiece and is saved with the vocabulary (encoding applies it):
    # without the word pre-tokenizer "Hallo, Welt!" keeps its comma on the word; with it (the default) Moses
    # splits it off.
    import data_prep.recipe
    from data_prep.recipe import RecipeDataConfig
    from ems.apps.demo import Stages, prepare_data
    from ems.corpus import write_parallel
    from ems.text import Preprocessing, Tokenizer

    words = "hallo welt haus baum katze hund wasser feuer erde luft".split()

    def fake_corpus(data_cfg, data_dir, out):
        for split in ("train", "heldout"):
            pairs = [(f"{a}, {b}!", f"{b}, {a}!") for a in words for b in words]
            write_parallel(out / "corpus" / split, "toy", "de", "en", pairs * 3)
        return {"languages": ["de"]}

    monkeypatch.setattr(
        data_prep.recipe, "RECIPE_STAGES", (("corpus", fake_corpus), *data_prep.recipe.RECIPE_STAGES[1:])
    )
    seen = {}
    for name, preprocessing in (("raw", Preprocessing(moses=False)), ("moses", Preprocessing())):
        out = tmp_path / name
        data_cfg = RecipeDataConfig(languages=["de"], vocab_size=30, preprocessing=preprocessing)
        prepare_data(data_cfg, tmp_path, out, Stages())
        tokenizer = Tokenizer.load(out / "vocab")
        assert tokenizer.preprocessing == preprocessing
        seen[name] = tokenizer.preprocess(["Hallo, Welt!"], "de")[0]
    assert seen == {"raw": "hallo, welt!", "moses": "hallo , welt !"}
