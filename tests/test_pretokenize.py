"""Per-language pre-tokenizers behind one function, the saved preprocessing's backward
compatibility, and the corpus-wide pretokenize stage."""

import json
import shutil
from dataclasses import asdict

import pytest

from data_prep.pretokenize import MARKER_FILE, corpus_preprocessing, pretokenize_corpus
from ems.corpus import read_parallel, write_parallel
from ems.text import Preprocessing, Tokenizer, _mecab, pretokenize


def test_each_language_gets_its_tokenizer():
    assert pretokenize("我们在北京吃了烤鸭。", "zh") == "我们 在 北京 吃 了 烤鸭 。"
    assert pretokenize("私は東京で寿司を食べました。", "ja") == "私 は 東京 で 寿司 を 食べ まし た 。"
    assert pretokenize("Don't stop, please.", "en") == "Don 't stop , please ."
    assert pretokenize("C'est l'été.", "fr") == "C' est l' été ."
    # without CJK segmenters every language goes through Moses, which leaves Chinese unsplit
    assert pretokenize("我们在北京吃了烤鸭。", "zh", segment_cjk=False) == "我们在北京吃了烤鸭。"


def test_japanese_dictionary_is_the_pip_installed_one():
    dictionary = _mecab().dictionary_info[0]["filename"]
    assert "unidic_lite" in dictionary


def test_preprocessing_lowercases_before_segmenting():
    assert Preprocessing()("ＡＢＣ社は大きい。", "ja") == "abc 社 は 大きい 。"
    assert Preprocessing(moses=False)("Don't STOP.", "en") == "don't stop."


def test_chinese_is_converted_to_simplified_and_japanese_kanji_are_not():
    assert Preprocessing()("我們在臺灣吃了烤鴨。", "zh") == "我们 在 台湾 吃 了 烤鸭 。"
    assert Preprocessing()("我们在台湾吃了烤鸭。", "zh") == "我们 在 台湾 吃 了 烤鸭 。"
    kept = Preprocessing(simplify_chinese=False)("我們在臺灣。", "zh")
    assert "我們" in kept and "臺" in kept
    assert Preprocessing()("東京で漢字を書く。", "ja") == "東京 で 漢字 を 書く 。"


@pytest.mark.parametrize("key", ["segment_cjk", "simplify_chinese"])
def test_a_tokenizer_file_without_a_preprocessing_setting_is_refused_in_one_line(tiny_pipeline, tmp_path, key):
    vocab = tmp_path / "vocab"
    shutil.copytree(tiny_pipeline / "vocab", vocab)
    meta = json.loads((vocab / "ems_tokenizer.json").read_text())
    del meta["preprocessing"][key]
    (vocab / "ems_tokenizer.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=f"preprocessing lacks the settings {key}: build the vocabulary again$"):
        Tokenizer.load(vocab)


@pytest.fixture
def raw_corpus(tmp_path):
    write_parallel(tmp_path / "raw", "toy", "en", "ja", [("I ate SUSHI.", "寿司を食べた。"), ("Hello!", "こんにちは!")])
    write_parallel(tmp_path / "raw", "toy", "en", "zh", [("We're in Beijing.", "我们在北京。")])
    return tmp_path / "raw"


def test_pretokenize_corpus_writes_the_encoder_preprocessing_in_workers_and_resumes(raw_corpus, tmp_path):
    entries = pretokenize_corpus(raw_corpus, tmp_path / "pretok", workers=2)
    assert [(e["pair"], e["status"], e["kept"]) for e in entries] == [("en-ja", "done", 2), ("en-zh", "done", 1)]
    pairs = list(read_parallel(tmp_path / "pretok" / "en-ja" / "toy.en", tmp_path / "pretok" / "en-ja" / "toy.ja"))
    assert pairs == [("i ate sushi .", "寿司 を 食べ た 。"), ("hello !", "こんにちは !")]
    assert corpus_preprocessing(tmp_path / "pretok") == Preprocessing()
    assert corpus_preprocessing(raw_corpus) is None

    again = pretokenize_corpus(raw_corpus, tmp_path / "pretok", workers=1, pairs=["en-zh"])
    assert [(e["pair"], e["status"]) for e in again] == [("en-zh", "exists")]
    with pytest.raises(ValueError, match="was pretokenized with"):
        pretokenize_corpus(raw_corpus, tmp_path / "pretok", Preprocessing(lowercase=False))
    assert json.loads((tmp_path / "pretok" / MARKER_FILE).read_text())["preprocessing"]["lowercase"] is True


# --- the marker never lies (issue 62, case 2) ----------------------------------------------------------


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _outputs(root):
    """The corpus files, and the marker without the times of the files it records (the contents)."""
    files = _files(root)
    marker = json.loads(files.pop(MARKER_FILE))
    for record in marker["files"].values():
        for fingerprint in record["inputs"] + record["outputs"]:
            del fingerprint["mtime_ns"]
    return {**files, MARKER_FILE: marker}


def test_pretokenize_into_its_own_input_is_refused_in_one_line(raw_corpus, capsys):
    """Was: "exists" for every file, and a marker saying the raw text was tokenized (rc 0)."""
    from data_prep.__main__ import main
    from ems.cli import run_main

    before = _files(raw_corpus)
    for out in (raw_corpus, raw_corpus / "en-ja" / "pretok"):
        assert run_main(main, ["pretokenize", "--in", str(raw_corpus), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: the output folder {out} is "), err
        assert "that the stage reads: choose another output folder" in err
    assert _files(raw_corpus) == before  # no marker, no lock file, nothing


def test_a_folder_prefilled_with_files_of_the_same_names_is_pretokenized_again(raw_corpus, tmp_path, capsys):
    """An output folder holding untokenized files of the same names (the clean stage's output, say):
    every file is written again, as into an empty folder, and so is the marker. Was: "exists" for
    each, untokenized text marked as tokenized, and binarize recorded "pretokenized_corpus": true."""
    reference = tmp_path / "reference"
    pretokenize_corpus(raw_corpus, reference)
    prefilled = tmp_path / "prefilled"
    shutil.copytree(raw_corpus, prefilled)
    entries = pretokenize_corpus(raw_corpus, prefilled)
    assert [e["status"] for e in entries] == ["redone", "redone"]
    assert _outputs(prefilled) == _outputs(reference)
    assert corpus_preprocessing(prefilled) == Preprocessing()
    assert [e["status"] for e in pretokenize_corpus(raw_corpus, prefilled)] == ["exists", "exists"]


def test_a_changed_input_or_output_is_pretokenized_again(raw_corpus, tmp_path):
    out = tmp_path / "pretok"
    pretokenize_corpus(raw_corpus, out)
    write_parallel(raw_corpus, "toy", "en", "zh", [("We're in Shanghai.", "我们在上海。")])
    (out / "en-ja" / "toy.ja").write_text("寿司を食べた。\nこんにちは!\n", encoding="utf-8")  # untokenized
    assert [(e["pair"], e["status"]) for e in pretokenize_corpus(raw_corpus, out)] == [
        ("en-ja", "redone"),
        ("en-zh", "redone"),
    ]
    assert (out / "en-zh" / "toy.en").read_text(encoding="utf-8") == "we 're in shanghai .\n"
    assert (out / "en-ja" / "toy.ja").read_text(encoding="utf-8") == "寿司 を 食べ た 。\nこんにちは !\n"


@pytest.mark.parametrize("fault", ["unrecorded_file", "changed_file", "marker_only", "damaged_marker"])
def test_a_marker_that_does_not_vouch_for_every_file_is_refused_by_binarize(
    fault, raw_corpus, tiny_pipeline, tmp_path, capsys
):
    """vocab and binarize take a marked folder's lines as tokenized only if the marker records every
    file as pretokenize wrote it; else one line naming the file (was: shards of untokenized text
    recorded as "pretokenized_corpus": true)."""
    from data_prep.__main__ import main
    from ems.cli import run_main

    shutil.rmtree(raw_corpus / "en-zh")  # the vocabulary's languages only: de, en, fr, ja
    out = tmp_path / "pretok"
    pretokenize_corpus(raw_corpus, out)
    if fault == "unrecorded_file":
        write_parallel(out, "extra", "en", "ja", [("Untokenized TEXT.", "寿司を食べた。")])
    elif fault == "changed_file":
        (out / "en-ja" / "toy.en").write_text("I ate SUSHI.\nHello!\n", encoding="utf-8")
    elif fault == "marker_only":  # a marker written by hand
        (out / MARKER_FILE).write_text(json.dumps({"preprocessing": asdict(Preprocessing())}))
    else:
        (out / MARKER_FILE).write_text('{"preprocessing": ')
    argv = ["binarize", "--in", str(out), "--vocab", str(tiny_pipeline / "vocab"), "--out", str(tmp_path / "shards")]
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    expected = {
        "unrecorded_file": f"{out / 'en-ja' / 'extra.en'} is not recorded in {out / MARKER_FILE}",
        "changed_file": f"{out / 'en-ja' / 'toy.en'} has changed since it was recorded in {out / MARKER_FILE}",
        "marker_only": f"{out / MARKER_FILE} is not a pretokenize marker (no record of the files it wrote",
        "damaged_marker": f"{out / MARKER_FILE} is not a pretokenize marker (",
    }[fault]
    assert expected in err and "pretokenize again into an empty folder" in err
    assert not (tmp_path / "shards" / "index.json").exists()


@pytest.mark.parametrize("stage", ["pretokenize", "clean"])
def test_a_corpus_file_in_the_output_folder_that_the_stage_does_not_write_is_refused(
    stage, raw_corpus, tmp_path, capsys
):
    """A pre-filled output folder holding a corpus file of a pair the stage writes, under a name it does
    not write: a later stage would read it as this one's output (was: kept, and read by vocab and
    binarize as pretokenized or cleaned text)."""
    from data_prep.__main__ import main
    from ems.cli import run_main

    out = tmp_path / "out"
    write_parallel(out, "stale", "en", "ja", [("Untokenized TEXT.", "寿司を食べた。")])
    config = tmp_path / "data.yaml"
    config.write_text("languages: [en, ja, zh]\npivot: en\nclean:\n  eval_sets: []\n", encoding="utf-8")
    argv = {
        "pretokenize": ["pretokenize"],
        "clean": ["clean", "--config", str(config), "--data-dir", str(tmp_path / "no-eval")],
    }[stage]
    assert run_main(main, [*argv, "--in", str(raw_corpus), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {out / 'en-ja' / 'stale.en'} is in the output folder {out} but is not written from ")
    assert not (out / "en-ja" / "toy.en").exists()
