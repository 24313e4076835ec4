"""Per-language pre-tokenizers behind one function, the saved preprocessing's backward
compatibility, and the corpus-wide pretokenize stage."""

import json
import shutil

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


def test_tokenizer_json_without_simplify_chinese_keeps_traditional_characters(tiny_pipeline, tmp_path):
    vocab = tmp_path / "vocab"
    shutil.copytree(tiny_pipeline / "vocab", vocab)
    meta = json.loads((vocab / "ems_tokenizer.json").read_text())
    assert meta["preprocessing"]["simplify_chinese"] is True  # what a new vocabulary records
    del meta["preprocessing"]["simplify_chinese"]
    (vocab / "ems_tokenizer.json").write_text(json.dumps(meta))
    assert Tokenizer.load(vocab).preprocessing == Preprocessing(simplify_chinese=False)


def test_tokenizer_json_without_segment_cjk_loads_as_moses_for_every_language(tiny_pipeline, tmp_path):
    vocab = tmp_path / "vocab"
    shutil.copytree(tiny_pipeline / "vocab", vocab)
    meta = json.loads((vocab / "ems_tokenizer.json").read_text())
    assert meta["preprocessing"]["segment_cjk"] is True  # what a new vocabulary records
    del meta["preprocessing"]["segment_cjk"]
    (vocab / "ems_tokenizer.json").write_text(json.dumps(meta))
    old = Tokenizer.load(vocab)
    assert old.preprocessing == Preprocessing(segment_cjk=False)
    assert old.preprocess(["東京です。"], "ja") == ["東京です。"]
    assert Tokenizer.load(tiny_pipeline / "vocab").preprocess(["東京です。"], "ja") == ["東京 です 。"]


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
