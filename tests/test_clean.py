"""The streaming clean stage: normalization, filters counted by reason, deduplication,
removal of evaluation sentences, and bad input reported instead of lost."""

import json

import numpy as np
import pytest

from data_prep.__main__ import main
from data_prep.clean import (
    CleanSettings,
    EvalSetError,
    HashSet,
    clean_corpus,
    load_eval_sentences,
    normalize,
    text_hash,
)
from ems.cli import run_main
from ems.corpus import read_parallel, write_parallel
from fixtures.opus_mirror import flores_lines

NO_EVAL = HashSet()


def write_bytes(root, name, de: bytes, en: bytes):
    pair = root / "de-en"
    pair.mkdir(parents=True, exist_ok=True)
    (pair / f"{name}.de").write_bytes(de)
    (pair / f"{name}.en").write_bytes(en)


def cleaned(root):
    return list(read_parallel(root / "de-en" / "toy.de", root / "de-en" / "toy.en"))


def test_hash_set_finds_members_and_new_values_across_merges():
    members = HashSet([5, 9], merge_at=4)
    assert members.add_new(np.array([9, 1, 1, 7], dtype=np.uint64)).tolist() == [False, True, False, True]
    assert members.add_new(np.array([2, 3, 7], dtype=np.uint64)).tolist() == [True, True, False]
    assert len(members) == 6 and len(members.small) == 0  # merged into the large array
    assert members.contains(np.array([1, 2, 3, 4, 5, 9], dtype=np.uint64)).tolist() == [
        True,
        True,
        True,
        False,
        True,
        True,
    ]


def test_normalize_is_nfkc_collapsed_lowercase():
    assert normalize("  Ｈｅｌｌｏ\u00a0\tWORLD  ﬁ ") == "hello world fi"
    assert normalize("Hello", lowercase=False) == "Hello"


def test_each_filter_drops_and_counts_its_pairs(tmp_path):
    good = [(f"Das ist Satz Nummer {i}.", f"This is sentence number {i}.") for i in range(20)]
    bad = [
        ("Kontroll\x07zeichen", "control character"),  # control_characters
        ("x" * 300, "y" * 300),  # too_long (max_chars 200)
        ("Ein sehr langer deutscher Satz mit vielen Wörtern darin.", "No."),  # length_ratio
        ("Das ist Satz Nummer 3.", "This is sentence number 3."),  # duplicate (after lowercase too)
        ("DAS IST SATZ NUMMER 4.", "this is sentence number 4."),  # duplicate after normalization
    ]
    write_parallel(tmp_path / "raw", "toy", "de", "en", good + bad)
    settings = CleanSettings(max_chars=200, max_length_ratio=3.0)
    report = clean_corpus(tmp_path / "raw", tmp_path / "clean", settings, NO_EVAL)

    entry = report["pairs"][0]["files"][0]
    assert entry["read"] == 25 and entry["kept"] == 20
    assert entry["dropped"] == {"control_characters": 1, "too_long": 1, "length_ratio": 1, "duplicate": 2}
    assert cleaned(tmp_path / "clean") == [(a.lower(), b.lower()) for a, b in good]
    assert json.loads((tmp_path / "clean" / "clean_report.json").read_text()) == report


def test_duplicates_are_removed_across_the_corpora_of_a_language_pair(tmp_path):
    write_parallel(tmp_path / "raw", "a", "de", "en", [("Hallo Welt", "Hello world"), ("Guten Tag", "Good day")])
    write_parallel(tmp_path / "raw", "b", "de", "en", [("hallo welt", "hello world"), ("Tschüss", "Bye")])
    report = clean_corpus(tmp_path / "raw", tmp_path / "clean", CleanSettings(), NO_EVAL)
    files = {f["name"]: f for f in report["pairs"][0]["files"]}
    assert files["a"]["kept"] == 2 and files["b"]["kept"] == 1 and files["b"]["dropped"] == {"duplicate": 1}


def test_bad_bytes_are_counted_by_reason(tmp_path):
    huge = b"a" * 5000
    write_bytes(
        tmp_path / "raw",
        "toy",
        b"gut\n\xff\xfe kaputt\n\nlang " + huge + b"\nnoch gut\n",
        b"good\nbroken\nempty\nlong\nstill good\n",
    )
    report = clean_corpus(tmp_path / "raw", tmp_path / "clean", CleanSettings(max_line_bytes=1000), NO_EVAL)
    entry = report["pairs"][0]["files"][0]
    assert entry["read"] == 5 and entry["kept"] == 2
    assert entry["dropped"] == {"invalid_utf8": 1, "empty": 1, "huge_line": 1}
    assert cleaned(tmp_path / "clean") == [("gut", "good"), ("noch gut", "still good")]


def test_unequal_line_counts_fail_that_file_with_a_clear_message(tmp_path, capsys):
    write_bytes(tmp_path / "raw", "toy", b"a\nb\nc\n", b"x\ny\n")
    write_parallel(tmp_path / "raw", "ok", "de", "en", [("gut", "good")])
    report = clean_corpus(tmp_path / "raw", tmp_path / "clean", CleanSettings(), NO_EVAL)
    files = {f["name"]: f for f in report["pairs"][0]["files"]}
    assert "toy.de has 3 lines" in files["toy"]["failed"] and "toy.en has 2 lines" in files["toy"]["failed"]
    assert files["ok"]["kept"] == 1
    assert not (tmp_path / "clean" / "de-en" / "toy.de").exists()

    config = tmp_path / "c.yaml"
    config.write_text("languages: [de, en]\npivot: en\n")
    args = [
        "clean",
        "--config",
        str(config),
        "--in",
        str(tmp_path / "raw"),
        "--out",
        str(tmp_path / "c2"),
        "--data-dir",
        str(tmp_path),
    ]
    assert run_main(main, args) == 2
    assert "could not clean: de-en/toy:" in capsys.readouterr().err


def test_every_pair_with_a_side_in_an_evaluation_set_is_removed(data_dir, tmp_path):
    de, en = flores_lines(data_dir, "de"), flores_lines(data_dir, "en")
    fresh = [("Dieser Satz steht in keinem Testset.", "This sentence is in no test set.")]
    # one side from FLORES is enough to drop a pair; case and spacing do not hide it
    pairs = [
        (de[0], "unrelated english text"),
        ("unverwandter deutscher text", en[1].upper() + "  "),
        *zip(de[2:10], en[2:10]),
    ]
    write_parallel(tmp_path / "raw", "toy", "de", "en", pairs + fresh)
    eval_hashes, counts = load_eval_sentences(data_dir, ["flores"])
    assert counts["flores"]["files"] >= 200 and counts["flores"]["sentences"] >= 200 * 1012
    assert eval_hashes.contains(np.array([text_hash(normalize(en[5]))], dtype=np.uint64)).all()

    report = clean_corpus(
        tmp_path / "raw", tmp_path / "clean", CleanSettings(max_length_ratio=100), eval_hashes, counts
    )
    entry = report["pairs"][0]["files"][0]
    assert entry["dropped"] == {"in_eval_set": 10} and entry["kept"] == 1
    assert cleaned(tmp_path / "clean") == [tuple(s.lower() for s in fresh[0])]


def test_the_shipped_evaluation_sets_load_and_missing_ones_are_named(data_dir, tmp_path):
    _, counts = load_eval_sentences(data_dir, ["tatoeba", "sib200", "qe", "sts"])
    assert all(c["sentences"] > 1000 for c in counts.values())
    with pytest.raises(EvalSetError, match="evaluation set 'mldoc' not found: no file matches"):
        load_eval_sentences(tmp_path, ["mldoc"])
    with pytest.raises(EvalSetError, match="unknown evaluation set 'xnli'"):
        load_eval_sentences(data_dir, ["xnli"])


def test_a_sentence_in_the_other_chinese_script_counts_as_the_evaluation_sentence(tmp_path):
    data = tmp_path / "data" / "tatoeba"
    data.mkdir(parents=True)
    (data / "tatoeba.cmn-eng.cmn").write_text("我们在台湾吃了烤鸭。\n這本書很有意思。\n", encoding="utf-8")
    (data / "tatoeba.cmn-eng.eng").write_text("We ate roast duck in Taiwan.\nThis book is interesting.\n")
    eval_hashes, _ = load_eval_sentences(tmp_path / "data", ["tatoeba"])
    pairs = [
        ("we had dinner.", "我們在台灣吃了烤鴨。"),  # traditional twin of a simplified test sentence
        ("a book.", "这本书很有意思。"),  # simplified twin of a traditional test sentence
        ("a new sentence.", "這是一個新句子。"),  # in no test set, in either script
    ]
    write_parallel(tmp_path / "raw", "toy", "en", "zh", pairs)
    report = clean_corpus(tmp_path / "raw", tmp_path / "clean", CleanSettings(max_length_ratio=100), eval_hashes, {})
    assert report["pairs"][0]["files"][0]["dropped"] == {"in_eval_set": 2}
    # the kept text is not converted here: the script is the preprocessing's business (ems.text)
    kept = list(read_parallel(tmp_path / "clean" / "en-zh" / "toy.en", tmp_path / "clean" / "en-zh" / "toy.zh"))
    assert kept == [pairs[2]]
