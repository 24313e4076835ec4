"""Zero-shot classification: the MLP evaluator on hand-checked synthetic embeddings, the MLDoc /
webis-cls-10 / SIB-200 readers on fixtures and real data, and the task inside eval.run_all."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from ems.cli import MissingDataError
from ems.configs import ConfigError, load_config
from ems.languages import FLORES_FILES, flores_languages
from eval.evaluators.classification import (
    ClassificationConfig,
    MlpSettings,
    document_embeddings,
    score_classification,
)
from eval.evaluators.classification_data import (
    BAD_RECORD,
    EMPTY_TEXT,
    MALFORMED,
    MLDOC_SOURCE,
    NEUTRAL_RATING,
    UNKNOWN_LABEL,
    ClassificationTask,
    Document,
    read_mldoc,
    read_sib200,
    read_task,
    read_webis_cls10,
    sib200_language_code,
    sib200_languages,
    split_sentences,
)
from eval.results import read_results as stored_results
from eval.run_all import run_all
from tests.fakes import TableEncoder, TrigramCountEncoder, classification_config

FIXTURES = Path(__file__).parent / "fixtures"
REPO_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "eval"
FAST = MlpSettings(hidden=16, epochs=60, batch_size=16)  # 4 steps per epoch on the 60 synthetic documents


def test_document_embedding_is_the_mean_of_its_sentences_one_call_per_split():
    rng = np.random.default_rng(0)
    vectors = {("de", f"s{i}"): rng.normal(size=4) for i in range(5)}
    encoder = TableEncoder(vectors)
    documents = [Document(["s0", "s1", "s2"], "a"), Document(["s3"], "b"), Document(["s4", "s0"], "a")]
    got = document_embeddings(encoder, documents, "de")
    expected = np.stack([np.mean([vectors[("de", s)] for s in d.sentences], axis=0) for d in documents])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert encoder.calls == [("de", 6)]
    with pytest.raises(ValueError, match="at least one sentence"):
        document_embeddings(encoder, [Document([], "a")], "de")


def _synthetic_task() -> tuple[ClassificationTask, dict]:
    """3 classes at 3·e_k (+ noise) in `aa`; `cc` embeds the same texts identically; `bb` rotates
    them by the cyclic permutation e0->e1->e2->e0 (orthogonal, det +1), so class k looks like k+1."""
    rng = np.random.default_rng(1)
    rotation = np.eye(8)[[2, 0, 1, 3, 4, 5, 6, 7]]  # rotation @ e0 = e1, @ e1 = e2, @ e2 = e0
    vectors, splits = {}, {"train": 60, "dev": 15, "test": 30}
    documents = {split: [] for split in splits}
    for split, n in splits.items():
        for i in range(n):
            label = i % 3
            text = f"{split}-{i}"
            vector = 3 * np.eye(8)[label] + rng.normal(scale=0.1, size=8)
            vectors[("de", text)] = vectors[("ja", text)] = vector
            vectors[("fr", text)] = rotation @ vector
            documents[split].append(Document([text], "xyz"[label]))
    test = {lang: documents["test"] for lang in ("de", "fr", "ja")}
    return ClassificationTask("synthetic", ["x", "y", "z"], "de", documents["train"], documents["dev"], test), vectors


def test_mlp_is_perfect_in_language_and_fooled_by_a_rotation():
    task, vectors = _synthetic_task()
    encoder = TableEncoder(vectors, languages=["de", "fr", "ja"])
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    result = score_classification(encoder, classification_config([0, 1, 2], FAST), task, progress=False)
    assert torch.rand(1) == before  # the global torch RNG is left alone
    assert result["in_language"] == {"n": 30, "accuracy": 100.0, "std": 0.0, "per_seed": [100.0] * 3}
    assert result["languages"]["ja"]["accuracy"] == 100.0
    assert result["languages"]["fr"]["accuracy"] <= 5.0  # every test point sits on the next class's centroid
    assert result["average"] == {
        "n_languages": 2,
        "accuracy": pytest.approx((100 + result["languages"]["fr"]["accuracy"]) / 2),
    }
    assert result["dev"]["accuracy"] == 100.0 and len(result["dev"]["best_epoch"]) == 3
    # one encode call per split and language: train, dev, then the three test sets
    assert encoder.calls == [("de", 60), ("de", 15), ("de", 30), ("fr", 30), ("ja", 30)]
    again = score_classification(TableEncoder(vectors), classification_config([0, 1, 2], FAST), task, progress=False)
    assert again["languages"] == result["languages"] and again["dev"] == result["dev"]


def test_mlp_std_over_seeds_and_uncovered_languages():
    task, vectors = _synthetic_task()
    for doc in task.test["fr"][:10]:  # make fr's accuracy depend on the seed: some points halfway
        vectors[("fr", doc.sentences[0])] = np.full(8, 0.3)
    result = score_classification(
        TableEncoder(vectors, languages=["de", "fr"]), classification_config([0, 1], FAST), task, progress=False
    )
    row = result["languages"]["fr"]
    assert row["accuracy"] == pytest.approx(np.mean(row["per_seed"])) and row["std"] == pytest.approx(
        np.std(row["per_seed"])
    )
    assert result["skipped"]["not covered by the encoder"] == ["ja"]
    none = score_classification(
        TableEncoder(vectors, languages=["fr"]), classification_config([0], FAST), task, progress=False
    )
    assert none["languages"] == {} and none["average"] is None
    assert none["skipped"]["not covered by the encoder"] == ["de (the train language: nothing evaluated)"]
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "ClassificationConfig: mlp: unknown key(s) ['layers']; known (MlpConfig fields): ['batch_size', 'dropout', "
            "'epochs', 'hidden', 'learning_rate', 'preset', 'weight_decay']"
        ),
    ):
        load_config(
            ClassificationConfig,
            values={
                "name": "c",
                "data_subdir": "c",
                "format": "mldoc",
                "languages": "all",
                "mlp": {"hidden": 8, "layers": 2},
            },
        )
    one_layer = load_config(
        ClassificationConfig,
        values={"name": "c", "data_subdir": "c", "format": "mldoc", "languages": "all", "mlp": {"hidden": 8}},
    )
    assert one_layer.mlp == MlpSettings(hidden=(8,))
    with pytest.raises(ValueError, match="dropout"):
        MlpSettings(dropout=1.5)


def test_split_sentences():
    assert split_sentences("One. Two!  Three? four") == ["One.", "Two!", "Three?", "four"]
    assert split_sentences("选举于周日举行。新议会将于下月开会！") == ["选举于周日举行。", "新议会将于下月开会！"]
    assert split_sentences("v1.2 is out. Yes", split=False) == ["v1.2 is out. Yes"]
    assert split_sentences("   ") == []


def test_mldoc_reader_on_fixture():
    task = read_mldoc(FIXTURES / "mldoc", ["de", "fr", "zh", "pt"])
    assert (task.name, task.labels, task.train_language) == ("mldoc", ["CCAT", "ECAT", "GCAT", "MCAT"], "en")
    assert len(task.train) == 8 and len(task.dev) == 4
    assert task.train[0] == Document(
        ["Acme Corp said on Monday it would buy a rival toolmaker.", "The deal needs approval from regulators."], "CCAT"
    )
    assert list(task.test) == ["en", "de", "zh"]
    assert [d.label for d in task.test["de"]] == ["CCAT", "ECAT", "MCAT"]
    assert task.test["zh"][0].sentences == ["选举于周日举行。", "新议会将于下月开会！"]
    assert task.skipped == {
        "not in MLDoc": ["pt"],
        MALFORMED: ["german.test: 1 of 6"],
        UNKNOWN_LABEL: ["german.test: 1 of 6"],
        EMPTY_TEXT: ["german.test: 1 of 6"],
    }
    assert task.data_errors == {
        "fr": f"missing MLDoc file {FIXTURES / 'mldoc' / 'french.test'}; build it from {MLDOC_SOURCE}"
    }
    whole = read_mldoc(FIXTURES / "mldoc", ["de"], max_documents=2, split=False)
    assert whole.train[0].sentences == [
        "Acme Corp said on Monday it would buy a rival toolmaker. The deal needs approval from regulators."
    ]
    assert len(whole.train) == 2 and len(whole.test["de"]) == 2


def test_mldoc_reader_bad_input(tmp_path):
    with pytest.raises(MissingDataError, match=r"english\.train\.1000.*english\.dev.*RCV1.*facebookresearch/MLDoc"):
        read_mldoc(tmp_path, None)
    with pytest.raises(MissingDataError, match=r"english\.train\.500"):
        read_mldoc(FIXTURES / "mldoc", None, train_size=500)
    with pytest.raises(ValueError, match="MLDoc has no language 'pt'"):
        read_mldoc(FIXTURES / "mldoc", None, train_language="pt")
    (tmp_path / "english.train.1000").write_text("SPORT\tGoal!\nno tab\n", encoding="utf-8")
    (tmp_path / "english.dev").write_text("CCAT\tFine.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"english\.train\.1000: no usable document"):
        read_mldoc(tmp_path, None)


def test_webis_cls10_reader_on_fixture():
    task = read_webis_cls10(FIXTURES / "webis_cls10", ["de", "fr", "ja"], dev_fraction=0.2)
    assert task.labels == ["negative", "positive"] and task.name == "amazon"
    assert len(task.train) == 8 and len(task.dev) == 2
    assert {d.sentences[0] for d in task.train + task.dev} >= {
        "A wonderful story.",
        "The plot drags & the ending is silly.",
    }
    assert [d.label for d in task.test["en"]] == ["positive", "negative"]
    assert task.test["de"] == [
        Document(["Ein wunderbares Buch.", "Sehr empfehlenswert!"], "positive"),
        Document(['Langweilig "und" zu lang.'], "negative"),
    ]
    assert task.test["ja"] == [
        Document(["とても面白い本です。", "また読みたい！"], "positive"),
        Document(["退屈でした。"], "negative"),
    ]
    webis = FIXTURES / "webis_cls10"
    assert task.skipped == {
        BAD_RECORD: ["de/books/test.review: 2 of 6"],
        NEUTRAL_RATING: ["de/books/test.review: 1 of 6"],
        EMPTY_TEXT: ["de/books/test.review: 1 of 6"],
    }
    assert list(task.data_errors) == ["fr"] and str(webis / "fr" / "books" / "test.review") in task.data_errors["fr"]
    again = read_webis_cls10(webis, ["de"], dev_fraction=0.2)
    assert again.dev == task.dev  # the held-out dev part is fixed


def test_webis_cls10_reader_bad_input(tmp_path):
    with pytest.raises(MissingDataError, match=r"en/books/train\.review.*zenodo"):
        read_webis_cls10(tmp_path, None)
    with pytest.raises(MissingDataError, match=r"en/music/train\.review"):
        read_webis_cls10(FIXTURES / "webis_cls10", None, category="music")
    with pytest.raises(ValueError, match="dev_fraction"):
        read_webis_cls10(FIXTURES / "webis_cls10", None, dev_fraction=1.0)
    with pytest.raises(ValueError, match=r"unknown reader settings \['categroy'\]"):
        read_task("webis_cls10", FIXTURES / "webis_cls10", None, categroy="dvd")
    with pytest.raises(ValueError, match="unknown classification data format"):
        read_task("xml", FIXTURES / "webis_cls10", None)


def test_sib200_language_codes():
    assert sib200_language_code("deu_Latn") == "de"
    assert (
        sib200_language_code("npi_Deva") == "ne"
    )  # individual language -> its macrolanguage, as ems.languages.FLORES_FILES
    assert sib200_language_code("yor_Latn") == "yo"
    assert sib200_language_code("arb_Arab", 2) == "ar" and sib200_language_code("arb_Latn", 2) == "ar-latn"
    assert sib200_language_code("zho_Hans", 2) == "zh" and sib200_language_code("zho_Hant", 2) == "zh-hant"
    assert sib200_language_code("kas_Deva", 2) == "ks-deva" and sib200_language_code("prs_Arab") == "prs"
    with pytest.raises(ValueError, match="FLORES-200 language code"):
        sib200_language_code("german")
    assert sib200_language_code("twi_Latn") == "twi" and sib200_language_code("fuv_Latn") == "fuv"  # FLORES' keys


def test_sib200_keys_are_the_flores_keys_of_the_same_sentences(data_dir):
    """SIB-200's sentences are FLORES-200's: per-language tables (eval.language_groups) join the two
    tasks on the language key, so each SIB directory must get the key of its FLORES file, not a
    second name (SIB `tw` beside FLORES `twi` split Twi into two rows; `ff` for fuv_Latn put a TICO-19
    language among the unseen)."""
    sib = {key.lower(): name for key, name in sib200_languages(data_dir / "sib200").items()}
    flores = {
        key.lower(): path.stem for key, path in flores_languages(data_dir / "flores200" / "devtest", "devtest").items()
    }
    assert len(sib) == 205 and len(flores) == 205
    assert {key: sib[key] for key in sib.keys() - flores.keys()} == {"nqo": "nqo_Nkoo"}  # not in this FLORES copy
    assert flores.keys() - sib.keys() == {"msa"}  # Helsinki-NLP's second copy of Malay (zsm is `ms`)


def _sib_fixture(root: Path) -> Path:
    header = "index_id\tcategory\ttext"
    for name, rows in {
        "eng_Latn": ["1\tsports\tA goal.", "2\tbogus\tHuh.", "3\tsports", "4\ttravel\t  "],
        "deu_Latn": ["1\tsports\tEin Tor."],
    }.items():
        (root / name).mkdir(parents=True)
        (root / name / "labels.txt").write_text("sports\ntravel\n", encoding="utf-8")
        for split in ("train", "dev", "test"):
            (root / name / f"{split}.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return root


def test_sib200_reader_skips_and_missing_files(tmp_path):
    root = _sib_fixture(tmp_path / "sib")
    task = read_sib200(root, ["de", "xx"])
    assert task.train == [Document(["A goal."], "sports")] and task.test["de"] == [Document(["Ein Tor."], "sports")]
    assert task.skipped["not in SIB-200"] == ["xx"]
    assert task.skipped[UNKNOWN_LABEL] == [f"eng_Latn/{s}.tsv: 1 of 4" for s in ("train", "dev", "test")]
    assert task.skipped["malformed line (not 3 columns)"][0] == "eng_Latn/train.tsv: 1 of 4"
    assert task.skipped[EMPTY_TEXT][0] == "eng_Latn/train.tsv: 1 of 4"
    (root / "deu_Latn" / "test.tsv").unlink()
    missing_test = read_sib200(root, ["de"])  # costs de only
    assert list(missing_test.test) == ["en"] and re.search(
        r"deu_Latn/test\.tsv.*sib-200", missing_test.data_errors["de"]
    )
    with pytest.raises(MissingDataError, match="train language 'fr'"):
        read_sib200(root, None, train_language="fr")
    with pytest.raises(MissingDataError, match="missing SIB-200 directory"):
        read_sib200(tmp_path / "nowhere", None)
    (root / "eng_Latn" / "dev.tsv").write_text("id\tlabel\tsentence\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected the header"):
        read_sib200(root, None)


def test_sib200_real_data_codes_agree_with_flores(data_dir):
    languages = sib200_languages(data_dir / "sib200")
    assert len(languages) == 205 and len(set(languages.values())) == 205
    sib_isos = {name.split("_")[0] for name in languages.values()}
    for lang, stem in FLORES_FILES.items():  # every FLORES language SIB has under the same ISO code maps alike
        if stem.split("_")[0] in sib_isos:
            assert languages[lang].split("_")[0] == stem.split("_")[0], lang
    assert languages["zh"] == "zho_Hans" and languages["ar"] == "arb_Arab" and languages["en"] == "eng_Latn"


def test_sib200_real_data_with_a_hashing_encoder(data_dir):
    task = read_sib200(data_dir / "sib200", ["de", "fr", "ja"])
    rows = (data_dir / "sib200" / "deu_Latn" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert [(d.sentences[0], d.label) for d in task.test["de"]] == [tuple(r.split("\t")[2:0:-1]) for r in rows]
    assert (len(task.train), len(task.dev), len(task.labels)) == (701, 99, 7) and task.skipped == {}
    result = score_classification(TrigramCountEncoder(), classification_config([0, 1], MlpSettings(epochs=20)), task)
    assert {lang: row["n"] for lang, row in result["languages"].items()} == {"de": 204, "fr": 204, "ja": 204}
    # character trigrams carry topic within English (chance is 1/7 = 14%), hardly across scripts
    assert result["in_language"]["accuracy"] > 30
    assert result["languages"]["ja"]["accuracy"] < result["in_language"]["accuracy"] - 10


def test_run_all_with_classification_tasks(tmp_path, data_dir):
    suite = tmp_path / "suite.yaml"
    (tmp_path / "mldoc.yaml").write_text(
        "type: classification\nname: mldoc\ndata_subdir: mldoc\nformat: mldoc\nlanguages: [en, de, fr, zh]\n"
        "seeds: 2\nmlp: {hidden: 8, epochs: 5}\n",
        encoding="utf-8",
    )
    suite.write_text(f"tasks:\n  - {REPO_CONFIGS / 'sib200.yaml'}\n  - mldoc.yaml\n", encoding="utf-8")
    out = tmp_path / "out"
    results = run_all(
        TrigramCountEncoder(),
        data_dir,
        out_dir=out,
        languages=["de", "fra", "ko"],
        max_sentences=60,
        progress=False,
        suite_path=suite,
        task_dirs={"mldoc": FIXTURES / "mldoc"},
    )
    sib = results["sib200"]
    assert sib["metric"] == "accuracy" and list(sib["languages"]) == ["de", "fr", "ko"]
    assert sib["in_language"]["n"] == 60 and sib["settings"]["seeds"] == [0, 1, 2, 3, 4]
    mldoc = results["mldoc"]
    assert list(mldoc["languages"]) == ["de"] and mldoc["skipped"]["not a language of this task"] == ["ko"]
    assert list(mldoc["data_errors"]) == ["fr"] and "french.test" in mldoc["data_errors"]["fr"]
    saved = stored_results(out)
    assert saved["sib200"]["languages"]["de"]["accuracy"] == pytest.approx(sib["languages"]["de"]["accuracy"])
    report = (out / "report.md").read_text(encoding="utf-8")
    de = sib["languages"]["de"]
    assert f"| de | 60 | {de['accuracy']:.1f} ± {de['std']:.1f} |" in report
    assert "| en (in-language) | 60 |" in report and "**average** (3, zero-shot)" in report
    assert (out / "results.png").stat().st_size > 0


def test_run_all_rejects_bad_classification_config(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "type: classification\nname: bad\ndata_subdir: mldoc\nformat: mldoc\nlanguages: all\nmlp: {layers: 3}\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text("tasks: [bad.yaml]\n", encoding="utf-8")
    results = run_all(TrigramCountEncoder(), FIXTURES, progress=False, suite_path=tmp_path / "suite.yaml")
    assert (
        "bad.yaml: mlp: unknown key(s) ['layers']" in results["bad"]["error"]
    )  # the task is not run, the suite goes on
