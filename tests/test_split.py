"""Tests for data_prep.split: held-out pairs that training never sees."""

import json
import shutil

import pytest

from data_prep.__main__ import main
from data_prep.clean import normalize
from data_prep.opus_mt_testsets import build_tico19_corpus
from data_prep.split import REPORT_FILE, split_heldout
from ems.cli import run_main
from ems.corpus import list_parallel, read_parallel, write_parallel

PER_PAIR = 3


def read_all(root, pair=None):
    return [p for f in list_parallel(root, pair and [pair]) for p in read_parallel(f.path_l1, f.path_l2)]


@pytest.fixture
def corpus(tmp_path):
    """de-en: 10 pairs in `a`, each with one twin in `b` that shares one side once normalised (the
    German side for even i, the English side for odd i), and an empty line; en-fr: 3 pairs."""
    root = tmp_path / "corpus"
    write_parallel(root, "a", "de", "en", [(f"Satz {i}", f"sentence {i}") for i in range(10)])
    write_parallel(
        root,
        "b",
        "de",
        "en",
        [(f"SATZ  {i}", f"other {i}") if i % 2 == 0 else (f"anders {i}", f" Sentence {i}") for i in range(10)],
    )
    for lang, line in (("de", "\n"), ("en", "empty German side\n")):
        with open(root / "de-en" / f"b.{lang}", "a", encoding="utf-8") as file:
            file.write(line)
    write_parallel(root, "c", "en", "fr", [("yes", "oui"), ("no", "non"), ("maybe", "peut-être")])
    return root


def run_split(tmp_path, corpus, seed=0, name="split"):
    train, heldout = tmp_path / name / "train", tmp_path / name / "heldout"
    return split_heldout(corpus, train, heldout, per_pair=PER_PAIR, seed=seed), train, heldout


def test_split_counts_per_pair(tmp_path, corpus):
    report, train, heldout = run_split(tmp_path, corpus)

    # A held-out pair removes exactly its twin; two twins are never both held out (they share a side).
    assert report["pairs"] == [
        {
            "pair": "de-en",
            "read": 21,
            "heldout": 3,
            "train": 14,
            "removed_overlapping_heldout": 3,
            "too_small_for_heldout": False,
            "skipped_empty": 1,
            "skipped_invalid_utf8": 0,
        },
        {
            "pair": "en-fr",
            "read": 3,
            "heldout": 0,
            "train": 3,
            "removed_overlapping_heldout": 0,
            "too_small_for_heldout": True,
            "skipped_empty": 0,
            "skipped_invalid_utf8": 0,
        },
    ]
    assert report["too_small_for_heldout"] == ["en-fr"]
    assert json.loads((heldout / REPORT_FILE).read_text(encoding="utf-8")) == report
    assert [f.name for f in list_parallel(heldout)] == ["heldout"]
    assert [f.name for f in list_parallel(train)] == ["a", "b", "c"]
    assert len(read_all(heldout, "de-en")) == 3 and len(read_all(train, "de-en")) == 14
    assert read_all(train, "en-fr") == [("yes", "oui"), ("no", "non"), ("maybe", "peut-être")]


def test_no_heldout_side_appears_in_training(tmp_path, corpus):
    for seed in range(5):
        _, train, heldout = run_split(tmp_path, corpus, seed, name=f"seed{seed}")
        held = read_all(heldout, "de-en")
        held_de, held_en = {normalize(de) for de, _ in held}, {normalize(en) for _, en in held}
        assert len(held_de) == len(held_en) == PER_PAIR  # distinct sides
        for de, en in read_all(train, "de-en"):
            assert normalize(de) not in held_de and normalize(en) not in held_en
        assert set(held) | set(read_all(train)) <= set(read_all(corpus))


def test_a_heldout_sentence_leaves_the_training_pairs_of_every_language_pair(tmp_path):
    # the English side of every de-en pair also comes with French; whichever are held out, their
    # English sentences must not stay in en-fr training (nor, as a side of another pair, anywhere)
    root = tmp_path / "corpus"
    write_parallel(root, "a", "de", "en", [(f"Satz {i}", f"sentence {i}") for i in range(8)])
    write_parallel(
        root, "b", "en", "fr", [(f"Sentence  {i}", f"phrase {i}") for i in range(8)] + [("extra", "en plus")]
    )
    report, train, heldout = run_split(tmp_path, root)
    held_en = {normalize(en) for _, en in read_all(heldout, "de-en")} | {
        normalize(en) for en, _ in read_all(heldout, "en-fr")
    }
    assert PER_PAIR <= len(held_en) <= 2 * PER_PAIR  # the two pairs may hold out the same sentence
    train_en = {normalize(de_en[1]) for de_en in read_all(train, "de-en")} | {
        normalize(en) for en, _ in read_all(train, "en-fr")
    }
    assert not held_en & train_en
    entries = {entry["pair"]: entry for entry in report["pairs"]}
    assert entries["de-en"]["train"] + entries["de-en"]["removed_overlapping_heldout"] + PER_PAIR == 8
    assert entries["en-fr"]["train"] + entries["en-fr"]["removed_overlapping_heldout"] + PER_PAIR == 9
    assert entries["de-en"]["train"] == 8 - len(held_en)  # each held-out English sentence is gone from de-en
    assert entries["en-fr"]["train"] == 9 - len(held_en)


def heldout_bytes(heldout):
    return (heldout / "de-en" / "heldout.de").read_bytes(), (heldout / "de-en" / "heldout.en").read_bytes()


def test_a_seed_gives_one_split_and_seeds_differ(tmp_path, corpus):
    first, _, heldout_1 = run_split(tmp_path, corpus, seed=7, name="one")
    again, _, heldout_2 = run_split(tmp_path, corpus, seed=7, name="two")
    assert first == again and heldout_bytes(heldout_1) == heldout_bytes(heldout_2)
    draws = {heldout_bytes(run_split(tmp_path, corpus, seed=seed, name=f"s{seed}")[2]) for seed in range(5)}
    assert len(draws) > 1


def test_bad_arguments(tmp_path, corpus):
    with pytest.raises(ValueError, match="per_pair must be at least 1"):
        split_heldout(corpus, tmp_path / "t", tmp_path / "h", per_pair=0)
    with pytest.raises(ValueError, match="must differ from the corpus root"):
        split_heldout(corpus, corpus, tmp_path / "h", per_pair=1)


def test_cli_split(tmp_path, corpus, capsys):
    args = ["split", "--in", str(corpus), "--train-out", str(tmp_path / "t"), "--heldout-out", str(tmp_path / "h")]
    assert main(args + ["--per-pair", "3", "--seed", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "de-en\theldout 3\ttrain 14\tremoved_overlapping_heldout 3",
        "en-fr\ttoo small for held-out\ttrain 3\tremoved_overlapping_heldout 0",
    ]
    assert run_main(main, args + ["--per-pair", "0"]) == 2
    assert capsys.readouterr().err == "error: per_pair must be at least 1, got 0\n"
    assert (
        run_main(
            main, ["split", "--in", str(tmp_path / "none"), "--train-out", "t", "--heldout-out", "h", "--per-pair", "1"]
        )
        == 2
    )
    assert "does not exist" in capsys.readouterr().err


def test_multi_parallel_real_corpus_keeps_heldout_english_out_of_every_file(data_dir, tmp_path):
    """TICO-19's three Tigrinya folders translate the same English lines: holding one pair out
    must remove its English sentence from the other two files as well."""
    root = tmp_path / "slice"
    root.mkdir()
    for folder in ("en-ti", "en-ti_ER", "en-ti_ET"):  # copies: the importer refuses a symlink out of the root
        shutil.copytree(data_dir / "tico19" / folder, root / folder)
    build_tico19_corpus(root, tmp_path / "corpus")

    report = split_heldout(tmp_path / "corpus", tmp_path / "train", tmp_path / "heldout", per_pair=100)

    (entry,) = report["pairs"]
    assert entry["read"] == 6300 and entry["heldout"] == 100
    assert entry["train"] + entry["removed_overlapping_heldout"] + entry["heldout"] == 6300
    assert entry["removed_overlapping_heldout"] >= 200  # each held-out English line is in all three files
    held_en = {normalize(en) for en, _ in read_all(tmp_path / "heldout")}
    assert not held_en & {normalize(en) for en, _ in read_all(tmp_path / "train")}


def _multi_parallel(root, languages, n):
    """`languages` each translating the same n English sentences (xx side: "<lang> <i>")."""
    for lang in languages:
        write_parallel(root, "multi", "en", lang, [(f"english sentence {i}", f"{lang} {i}") for i in range(n)])


@pytest.mark.parametrize("draw", ["random", "pivot"])
def test_a_pivot_draw_holds_out_the_same_english_sentences_in_every_language(tmp_path, draw):
    _multi_parallel(tmp_path / "corpus", ["de", "fr", "ja"], 100)

    report = split_heldout(tmp_path / "corpus", tmp_path / "train", tmp_path / "heldout", per_pair=20, draw=draw)

    held = {}
    for files in list_parallel(tmp_path / "heldout"):
        english = files.l1 == "en"
        held[files.l2 if english else files.l1] = {
            pair[0 if english else 1] for pair in read_parallel(files.path_l1, files.path_l2)
        }
    removed = [entry["removed_overlapping_heldout"] for entry in report["pairs"]]
    if draw == "pivot":
        # hand-counted: one set of 20 English sentences, so no training pair shares a side with another language's
        assert held["de"] == held["fr"] == held["ja"] and len(held["de"]) == 20
        assert removed == [0, 0, 0] and [entry["train"] for entry in report["pairs"]] == [80, 80, 80]
    else:  # independent draws: 20 of each language's 100 English sentences are held out elsewhere too
        assert len(held["de"] | held["fr"] | held["ja"]) > 20 and sum(removed) > 0
    assert report["draw"] == draw


def test_a_pivot_draw_depends_on_the_seed(tmp_path):
    _multi_parallel(tmp_path / "corpus", ["de"], 100)
    heldout = []
    for seed in (0, 1):
        split_heldout(tmp_path / "corpus", tmp_path / f"train{seed}", tmp_path / f"heldout{seed}", 20, seed, "pivot")
        heldout.append((tmp_path / f"heldout{seed}" / "de-en" / "heldout.en").read_text())
    assert heldout[0] != heldout[1]


def test_a_split_into_a_prefilled_folder_writes_only_its_own_outputs(tmp_path, corpus):
    # a file pair the split would not write (another name) is refused before anything is written; held-out
    # pairs left by an earlier split of a pair that is now too small for held-out are removed, not kept
    from ems.corpus import CorpusError

    train, heldout = tmp_path / "split" / "train", tmp_path / "split" / "heldout"
    write_parallel(train, "stray", "de", "en", [("alt", "old")])
    with pytest.raises(CorpusError, match=r"stray.de is in the output folder .* not written from"):
        split_heldout(corpus, train, heldout, per_pair=PER_PAIR)
    assert not heldout.exists()
    shutil.rmtree(train)
    write_parallel(heldout, "heldout", "en", "fr", [("stale", "périmé")])  # en-fr has 3 pairs: too small now
    report = split_heldout(corpus, train, heldout, per_pair=PER_PAIR)
    assert report["too_small_for_heldout"] == ["en-fr"]
    assert read_all(heldout, "en-fr") == [] and len(read_all(heldout, "de-en")) == PER_PAIR
