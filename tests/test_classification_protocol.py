"""The classification protocol: LASER's MLP settings by default (tasks/mldoc/mldoc.sh), both transfer
directions of EMS Table 10 (en→X and X→en), and model selection on dev data only."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from ems.configs import ConfigError
from eval.evaluators.classification import (
    PRESETS,
    MlpSettings,
    mlp_settings,
    score_classification,
    train_mlps,
)
from eval.evaluators.classification_data import ClassificationTask, Document
from eval.report import classification_table
from tests.fakes import TINY, TableEncoder, WordCountEncoder, classification_config

REPO_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "eval"


def test_laser_settings_are_the_default():
    laser = {
        "hidden": (10, 8),
        "dropout": 0.2,
        "learning_rate": 1e-3,
        "weight_decay": 0.0,
        "epochs": 500,
        "batch_size": 12,
    }
    assert dataclasses.asdict(MlpSettings()) == laser
    assert mlp_settings({}) == MlpSettings() == mlp_settings({"preset": "laser"})
    assert mlp_settings({"preset": "small_64"}) == MlpSettings(hidden=64, epochs=100, batch_size=64)
    assert mlp_settings({"preset": "small_64", "epochs": 7}).epochs == 7
    assert set(PRESETS) == {"laser", "small_64"}
    with pytest.raises(ValueError, match="unknown MLP preset"):
        mlp_settings({"preset": "big"})
    for name in ("sib200", "mldoc", "amazon"):
        config = yaml.safe_load((REPO_CONFIGS / f"{name}.yaml").read_text(encoding="utf-8"))
        assert mlp_settings(config["mlp"]) == MlpSettings(), name
    assert yaml.safe_load((REPO_CONFIGS / "mldoc.yaml").read_text(encoding="utf-8"))["directions"] == ["en2xx", "xx2en"]


def _documents(lang_vectors: dict, lang: str, split: str, n: int, rng) -> list[Document]:
    documents = []
    for i in range(n):
        label = i % 2
        text = f"{split}-{i}"
        lang_vectors[(lang, text)] = 3 * np.eye(4)[label] + rng.normal(scale=0.1, size=4)
        documents.append(Document([text], "ab"[label]))
    return documents


def _two_way_task():
    """en and de each have their own train/dev/test. de embeds class k at e_k like en; fr embeds
    class k at e_{1-k} (flipped). A classifier trained on de reads en right; one trained on fr reads en
    wrong -- unless fr's embedding of en is what it trains on, which would show training on en."""
    rng = np.random.default_rng(0)
    vectors = {}
    data = {
        lang: {
            split: _documents(vectors, lang, split, n, rng) for split, n in (("train", 24), ("dev", 12), ("test", 20))
        }
        for lang in ("en", "de", "fr")
    }
    for (lang, text), vector in list(vectors.items()):
        if lang == "fr":
            vectors[(lang, text)] = vector[[1, 0, 2, 3]]
    labels = ["a", "b"]

    def task(train: str, test_languages) -> ClassificationTask:
        test = {lang: data[lang]["test"] for lang in dict.fromkeys([train, *test_languages])}
        return ClassificationTask("two_way", labels, train, data[train]["train"], data[train]["dev"], test)

    return task, vectors


def test_xx2en_trains_on_x_and_tests_on_english():
    task, vectors = _two_way_task()
    encoder = TableEncoder(vectors)
    reads = []

    def read_train_task(lang):
        reads.append(lang)
        return task(lang, ["en"])

    result = score_classification(
        encoder,
        classification_config([0, 1], directions=["en2xx", "xx2en"]),
        task("en", ["de", "fr"]),
        read_train_task,
        progress=False,
    )
    assert reads == ["de", "fr"]
    forward, reverse = result["directions"]["en2xx"], result["directions"]["xx2en"]
    assert forward["languages"] is result["languages"] and forward["average"] == result["average"]
    assert result["languages"]["de"]["accuracy"] == 100.0 and result["languages"]["fr"]["accuracy"] == 0.0
    assert reverse["languages"]["de"]["accuracy"] == 100.0 and reverse["languages"]["de"]["n"] == 20
    assert reverse["languages"]["fr"]["accuracy"] == 0.0  # trained on fr's flipped space: en is read flipped
    assert reverse["languages"]["fr"]["dev"]["accuracy"] == 100.0  # selected on fr's own dev
    assert reverse["average"] == {"n_languages": 2, "accuracy": 50.0}
    # xx2en embeds X's train and dev and the English test set (once); never X's test set
    assert ("de", 24) in encoder.calls and ("fr", 12) in encoder.calls
    assert encoder.calls.count(("en", 20)) == 1 and encoder.calls.count(("de", 20)) == 1
    report = classification_table(result, "two way")
    assert "| fr→en | 100.0 | 0.0 ± 0.0 |" in report and "**average** (2, X→en)" in report
    assert "| de | 20 | 100.0 ± 0.0 |" in report

    only = score_classification(
        TableEncoder(vectors),
        classification_config([0], directions=["xx2en"]),
        task("en", ["de"]),
        lambda lang: task(lang, ["en"]),
        progress=False,
    )
    assert only["languages"] == {} and list(only["directions"]) == ["xx2en"]
    assert "No language was evaluated." not in classification_table(only, "only")

    def broken(lang):
        raise FileNotFoundError(f"no {lang} train file")

    missing = score_classification(
        TableEncoder(vectors), classification_config([0], directions=["xx2en"]), task("en", ["de"]), broken, False
    )
    assert missing["data_errors"] == {"de (xx2en training data)": "no de train file"}
    assert missing["directions"]["xx2en"] == {"languages": {}, "average": None}
    with pytest.raises(ValueError, match="read_train_task"):
        score_classification(
            TableEncoder(vectors), classification_config([0], directions=["xx2en"]), task("en", ["de"])
        )
    with pytest.raises(ConfigError) as error:  # refused when the config is read, every problem at once
        classification_config([], directions=["de2fr"])
    assert error.value.problems == [
        "seeds: need at least one seed",
        "directions must be some of en2xx, xx2en, got ['de2fr']",
    ]


def test_poisoned_test_labels_change_no_choice():
    """Selection sees dev only: flipping every test label changes the test scores, not the kept
    epochs, dev scores or predictions."""
    rng = np.random.default_rng(3)
    vectors = {}
    train = _documents(vectors, "en", "train", 40, rng)
    dev = _documents(vectors, "en", "dev", 10, rng)
    test = _documents(vectors, "en", "test", 20, rng)
    for key in vectors:  # noisy, so that dev accuracy moves between epochs
        vectors[key] = vectors[key] + rng.normal(scale=2.0, size=4)
    poisoned = [Document(d.sentences, "b" if d.label == "a" else "a") for d in test]
    settings = MlpSettings(hidden=(8, 6), epochs=30, batch_size=6, learning_rate=0.05)
    runs = []
    for test_documents in (test, poisoned):
        task = ClassificationTask("noisy", ["a", "b"], "en", train, dev, {"en": test_documents, "de": test_documents})
        encoder = TableEncoder({**vectors, **{("de", s): v for (lang, s), v in vectors.items()}})
        runs.append(score_classification(encoder, classification_config([0, 1, 2], settings), task, progress=False))
    clean, dirty = runs
    assert clean["dev"] == dirty["dev"]  # same epochs kept, same dev accuracies
    assert len(set(clean["dev"]["best_epoch"])) > 1 or clean["dev"]["best_epoch"][0] < 30
    for lang in ("de",):
        assert clean["languages"][lang]["per_seed"] == pytest.approx(
            [100 - a for a in dirty["languages"][lang]["per_seed"]]
        )
    assert clean["in_language"]["per_seed"] == pytest.approx([100 - a for a in dirty["in_language"]["per_seed"]])


def test_seeds_are_independent_and_epochs_follow_dev():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(30, 4)).astype(np.float32), rng.integers(0, 2, 30)
    dev_x, dev_y = rng.normal(size=(10, 4)).astype(np.float32), rng.integers(0, 2, 10)
    together, dev_t, epochs_t = train_mlps(x, y, dev_x, dev_y, 2, [0, 1], TINY)
    alone, dev_a, epochs_a = train_mlps(x, y, dev_x, dev_y, 2, [1], TINY)
    assert dev_t[1] == dev_a[0] and epochs_t[1] == epochs_a[0]  # seed 1 does not depend on seed 0 running beside it
    np.testing.assert_array_equal(together.predict(dev_x)[1], alone.predict(dev_x)[0])
    np.testing.assert_allclose(together.accuracies(dev_x, dev_y), dev_t)  # the kept model is the one scored on dev


def test_run_all_runs_both_directions(tmp_path):
    import shutil

    from eval.run_all import run_all

    data = tmp_path / "mldoc"
    shutil.copytree(Path(__file__).parent / "fixtures" / "mldoc", data)
    shutil.copy(data / "english.train.1000", data / "german.train.1000")  # chinese has no training data
    shutil.copy(data / "english.dev", data / "german.dev")
    (tmp_path / "mldoc.yaml").write_text(
        "type: classification\nname: mldoc\ndata_subdir: mldoc\nformat: mldoc\nlanguages: [en, de, zh]\nseeds: 2\n"
        "directions: [en2xx, xx2en]\nmlp: {hidden: [6, 4], epochs: 3, batch_size: 4}\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text("tasks: [mldoc.yaml]\n", encoding="utf-8")
    results = run_all(
        WordCountEncoder(), tmp_path, out_dir=tmp_path / "out", progress=False, suite_path=tmp_path / "suite.yaml"
    )
    mldoc = results["mldoc"]
    assert list(mldoc["languages"]) == ["de", "zh"] and mldoc["settings"]["directions"] == ["en2xx", "xx2en"]
    reverse = mldoc["directions"]["xx2en"]
    assert list(reverse["languages"]) == ["de"] and reverse["languages"]["de"]["n"] == mldoc["in_language"]["n"]
    assert reverse["languages"]["de"]["dev"]["n"] == 4
    assert "english.train" not in mldoc["data_errors"]["zh (xx2en training data)"]
    assert "chinese.train.1000" in mldoc["data_errors"]["zh (xx2en training data)"]
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "| de→en |" in report and "**average** (1, X→en)" in report
