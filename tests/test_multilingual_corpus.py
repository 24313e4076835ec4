"""The all-language corpus (configs/data/multilingual.yaml) on a slice of the real data: two Tatoeba
Challenge folders and three TICO-19 folders, the evaluation sets as they are."""

import json

import pytest
import yaml

from ems.configs import ConfigError, load_config
from ems.demo import LANGUAGES_FILE, DemoDataConfig, build_corpus
from tests.conftest import REPO_ROOT

EVAL_SETS = ("tatoeba", "flores200", "sib200", "mlqe", "sts2017")


@pytest.fixture(scope="module")
def sliced_data(data_dir, tmp_path_factory):
    """A data root whose corpora hold a few real folders (symbolic links into the shared data)."""
    root = tmp_path_factory.mktemp("slice")
    for name in EVAL_SETS:
        (root / name).symlink_to(data_dir / name)
    for corpus, folders in (("tatoeba_challenge", ["eng-msa", "afr-eng"]), ("tico19", ["en-am", "en-ha", "en-id"])):
        (root / corpus).mkdir()
        for folder in folders:
            (root / corpus / folder).symlink_to(data_dir / corpus / folder)
    return root


@pytest.fixture(scope="module")
def built(sliced_data, tmp_path_factory):
    cfg = load_config(DemoDataConfig, REPO_ROOT / "configs/data/multilingual.yaml")
    out = tmp_path_factory.mktemp("built")
    return build_corpus(cfg, sliced_data, out), out


def test_every_language_of_both_corpora_with_enough_pairs_is_kept_and_the_rest_counted(built):
    summary, out = built
    # eng-msa's labels, counted by hand (sort | uniq -c): ind 4289, zsm_Latn 536, max_Latn 127, zlm_Latn 24,
    # min 19, tmw_Latn 5; afr-eng: afr 1374; TICO-19: 2100 lines each of am, ha, id
    assert summary["languages"] == ["af", "am", "ha", "id", "max", "ms"]
    assert summary["imported"] == {"af": 1374, "am": 2100, "ha": 2100, "id": 4289 + 2100, "max": 127, "ms": 536}
    assert summary["left_out"] == {"min": 19, "tmw": 5, "zlm": 24}
    table = json.loads((out / "corpus" / LANGUAGES_FILE).read_text())
    assert table["by_corpus"]["tico19"] == {"am": 2100, "ha": 2100, "id": 2100}
    assert set(table["languages"]) == set(summary["languages"])
    for lang, row in table["languages"].items():
        assert row["imported"] >= row["after_clean"] >= row["heldout"] + row["train"], lang
    # 200 held out where a language has >= 400 pairs after cleaning; max (127) keeps all for training
    assert table["languages"]["max"]["heldout"] == 0 and table["languages"]["am"]["heldout"] == 200
    assert sum(row["train"] for row in table["languages"].values()) == summary["train_pairs"]


def test_every_evaluation_sentence_is_removed(built):
    summary, _ = built
    assert summary["removed_in_eval_set"] > 0


def test_multi_parallel_languages_hold_out_the_same_english_sentences(built):
    _, out = built
    english = {
        lang: set((out / "corpus" / "heldout" / "-".join(sorted((lang, "en"))) / "heldout.en").read_text().splitlines())
        for lang in ("am", "ha")
    }
    assert len(english["am"]) == 200 and english["am"] == english["ha"]
    table = json.loads((out / "corpus" / LANGUAGES_FILE).read_text())["languages"]
    # only the few pairs whose English also appears in another language's held-out pairs leave training
    assert table["am"]["train"] > 0.85 * table["am"]["after_clean"]


def test_bad_data_configs_are_one_error_naming_the_key(tmp_path):
    for values, message in (
        ({"corpora": ["opus"]}, "unknown corpus 'opus'; known: tatoeba_challenge, tico19"),
        ({"heldout_draw": "first"}, "heldout_draw must be one of random, pivot, got 'first'"),
        ({"min_pairs": 0}, "min_pairs must be at least 1, got 0"),
        ({"languages": None, "gettext_packages": ["django"]}, "gettext_packages needs an explicit languages list"),
    ):
        path = tmp_path / "data.yaml"
        path.write_text(yaml.safe_dump(values))
        with pytest.raises(ConfigError, match=message):
            load_config(DemoDataConfig, path)
