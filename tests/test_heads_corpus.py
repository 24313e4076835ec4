"""Heads trained on the shared parallel corpora (Tatoeba Challenge, TICO-19) instead of FLORES:
English-X pairs of a Moses-format corpus, a seeded cap per language."""

import pytest

from data_prep.opus_mt_testsets import build_tatoeba_challenge_corpus
from ems.cli import MissingDataError
from eval.evaluators.correlation import HeadTrainingConfig
from eval.parallel_data import PIVOT, capped, pivot_pairs
from eval.run_all import run_all
from tests.fakes import LanguageOffsetEncoder, tiny_suite


@pytest.fixture(scope="module")
def spanish_corpus(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("heads_corpus")
    build_tatoeba_challenge_corpus(data_dir / "tatoeba_challenge", out, ["es"])
    return out


def test_pivot_pairs_put_english_first_and_the_cap_is_a_seeded_sample(spanish_corpus):
    (pairs,) = pivot_pairs(spanish_corpus, ["es", "en"])
    assert (pairs.x_lang, pairs.y_lang) == (PIVOT, "es") and len(pairs.x) == len(pairs.y) > 1000
    assert "Tom" in " ".join(pairs.x[:200]) and "Tom" in " ".join(pairs.y[:200])  # real, aligned text
    (first,), (again,), (other,) = (capped([pairs], 50, seed) for seed in (0, 0, 1))
    assert len(first.x) == 50 and first.x == again.x and first.x != other.x
    rows = [pairs.x.index(sentence) for sentence in first.x]
    assert rows == sorted(rows)  # kept in corpus order
    assert pairs.y[rows[0]] == first.y[0]  # still aligned
    assert capped([pairs], None)[0] is pairs
    with pytest.raises(MissingDataError, match="no en-X pair files for: ja"):
        pivot_pairs(spanish_corpus, ["es", "ja"])


def test_a_correlation_task_trains_its_heads_on_a_corpus(spanish_corpus, tmp_path):
    data, suite = tiny_suite(tmp_path)
    sts = suite.parent / "sts.yaml"
    sts.write_text(
        sts.read_text().split("heads:")[0] + "heads: [centering]\n"
        f"head_training: {{pairs_dir: {spanish_corpus}, max_pairs: 40, valid_fraction: 0.25}}\n"
    )
    suite.write_text("tasks: [sts.yaml]\n")
    result = run_all(LanguageOffsetEncoder(), data, suite_path=suite, progress=False, print_tables=False)["sts"]
    assert result["views"] == ["raw", "centering"] and "error" not in result
    assert result["head_training"]["source"] == f"the corpus {spanish_corpus}"
    assert result["head_training"]["max_pairs"] == 40


def test_head_training_takes_one_source():
    with pytest.raises(ValueError, match="one of flores_subdir and pairs_dir"):
        HeadTrainingConfig(flores_subdir="f", pairs_dir="p").check(["centering"])
    with pytest.raises(ValueError, match="one of flores_subdir and pairs_dir"):
        HeadTrainingConfig(max_pairs=5).check(["centering"])
    assert HeadTrainingConfig(pairs_dir="/abs/corpus").directory("root").as_posix() == "/abs/corpus"
    assert HeadTrainingConfig(flores_subdir="f").directory("root").as_posix() == "root/f"
