"""Encoder API faults (issue 13, item 6): every bad input is a clear error, every alias of a
language gives the canonical code's vectors, and cutting at max_len is said and counted."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import ems
from data_prep.vocab import train_vocab
from ems.corpus import write_parallel
from ems.encoder import TruncationWarning, export_encoder
from ems.languages import UnknownLanguageError, canonical_language
from ems.model import EMSModel
from ems.model_config import config_from_preset
from tests.conftest import SMALL_MODEL
from tests.fakes import CHINESE, ENGLISH, GERMAN

MAX_LEN = 64
# Traditional characters on purpose: `zh` converts them to simplified and segments with jieba,
# which a language code the model does not know (`cmn` before the fix) skipped.
LONG = " ".join(["save the selected objects"] * 10)  # well over MAX_LEN tokens


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A random tiny model over a vocabulary of de, en, zh, with max_len MAX_LEN."""
    root = tmp_path_factory.mktemp("faults_encoder")
    write_parallel(root / "corpus", "tiny", "de", "en", zip(GERMAN, ENGLISH))
    write_parallel(root / "corpus", "tiny", "en", "zh", zip(ENGLISH, CHINESE))
    tok = train_vocab(root / "corpus", root / "vocab", vocab_size=120, character_coverage=1.0)
    torch.manual_seed(0)
    cfg = config_from_preset(
        "tiny", vocab_size=tok.vocab_size, n_languages=len(tok.languages), max_len=MAX_LEN, **SMALL_MODEL
    )
    return ems.load(export_encoder(EMSModel(cfg).encoder, tok, root / "model"))


def test_the_fixture_model_has_the_languages_the_tests_need(model):
    assert model.languages == ["de", "en", "zh"]


@pytest.mark.parametrize("batch_size", [-1, 0])
def test_batch_size_below_one_is_a_value_error(model, batch_size):
    # before: -1 returned all-zero vectors, 0 failed in range() ("arg 3 must not be zero")
    with pytest.raises(ValueError, match=f"batch_size must be >= 1, got {batch_size}"):
        model.encode(ENGLISH, "en", batch_size=batch_size)


@pytest.mark.parametrize("batch_size", [1.5, "8", True])
def test_batch_size_that_is_no_integer_is_a_type_error(model, batch_size):
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        model.encode(ENGLISH, "en", batch_size=batch_size)


def test_encode_none_is_a_type_error(model):
    # before: "'NoneType' object is not iterable"
    with pytest.raises(TypeError, match="expected a list of sentences .*got NoneType"):
        model.encode(None, "en")


@pytest.mark.parametrize(
    "sentences, index, kind",
    [
        ([None], 0, "NoneType"),
        ([123], 0, "int"),
        (["fine", b"bytes"], 1, "bytes"),
        (["fine", "ok", 4.5], 2, "float"),
    ],
)
def test_an_item_that_is_not_str_is_a_type_error_naming_its_index(model, sentences, index, kind):
    # before: "normalize() argument 2 must be str, not int", with no index
    with pytest.raises(TypeError, match=f"sentence {index} is {kind}, not str"):
        model.encode(sentences, "en")


@pytest.mark.parametrize("lang", ["xx", "und", "", "en_XX_"])
def test_an_unknown_language_is_an_error_listing_the_models_languages(model, lang):
    # before: "xx" was accepted (Moses' defaults, no error)
    with pytest.raises(UnknownLanguageError, match="this model's languages: de en zh$"):
        model.encode(ENGLISH, lang)


@pytest.mark.parametrize("lang", ["fr", "fra", "ja"])
def test_a_language_the_model_lacks_is_an_error_listing_its_languages(model, lang):
    with pytest.raises(ValueError, match=f"language '{lang}'.* is not in this model's languages: de en zh$"):
        model.encode(ENGLISH, lang)


def test_a_language_that_is_no_str_is_a_type_error(model):
    with pytest.raises(TypeError, match="language code must be a str"):
        model.encode(ENGLISH, None)


@pytest.mark.parametrize(
    "alias, code",
    [
        ("EN", "en"),
        ("eng", "en"),
        ("en-US", "en"),
        ("cmn", "zh"),
        ("zho", "zh"),
        ("chi", "zh"),
        ("cmn_Hans", "zh"),
        ("zh-Hant", "zh"),
        ("ZH", "zh"),
        ("deu_Latn", "de"),
        ("deu", "de"),
        ("ger", "de"),
        ("De", "de"),
    ],
)
def test_an_alias_gives_the_canonical_codes_vectors(model, alias, code):
    # before: cmn, zho, cmn_Hans, zh-Hant gave other vectors than zh (no simplification, no jieba)
    sentences = {"en": ENGLISH, "de": GERMAN, "zh": CHINESE}[code]
    assert np.array_equal(model.encode(sentences, alias), model.encode(sentences, code))


@pytest.mark.parametrize("alias, code", [("cmn_Hans", "zh"), ("EN", "en"), ("deu_Latn", "de")])
def test_the_head_gets_the_resolved_code(model, alias, code):
    # before: the head got the alias (EN: same raw vectors as en, but a head trained on en refused EN)
    seen = []

    class RecordingHead:
        def meaning(self, raw, lang):
            seen.append(lang)
            return raw

    model.head = RecordingHead()
    try:
        model.encode(ENGLISH[:2], alias, view="meaning")
    finally:
        model.head = None
    assert seen == [code]


def test_tokenizer_resolves_aliases_and_rejects_unknown_languages(model):
    tok = model.tokenizer
    assert tok.encode(CHINESE, "cmn") == tok.encode(CHINESE, "zh")
    assert tok.lang_index("ENG") == tok.lang_index("en") == 1
    with pytest.raises(UnknownLanguageError, match="this vocabulary's languages: de en zh"):
        tok.encode(["hello"], "xx")
    with pytest.raises(TypeError, match="sentence 0 is int"):
        tok.encode([5], "en")


def test_truncation_warns_once_per_call_with_the_count_and_is_counted(model):
    model.truncated_sentences = 0
    short = ENGLISH[:3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vectors = model.encode([LONG, *short, LONG + " again"], "en")
    truncations = [w for w in caught if issubclass(w.category, TruncationWarning)]
    assert len(truncations) == 1
    assert f"2 of 5 en sentence(s) are longer than the model's max_len of {MAX_LEN} tokens" in str(
        truncations[0].message
    )
    assert truncations[0].filename == __file__  # points at the caller's line
    assert model.truncated_sentences == 2
    assert vectors.shape == (5, SMALL_MODEL["d_model"]) and np.isfinite(vectors).all()
    # the cut sentence is encoded as its first MAX_LEN tokens
    assert len(model.tokenizer.encode([LONG], "en")[0]) > MAX_LEN
    with pytest.warns(TruncationWarning, match="1 of 1 en sentence"):
        longer = model.encode([LONG + " and more words"], "en")
    np.testing.assert_allclose(longer[0], vectors[0], rtol=1e-5, atol=1e-6)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.encode(short, "en")
    assert not [w for w in caught if issubclass(w.category, TruncationWarning)]
    assert model.truncated_sentences == 3  # the call before added one


def test_an_evaluation_task_reports_its_truncations_once_as_a_count(model, capsys):
    from eval.report import markdown_table
    from eval.run_all import _run_task
    from eval.task import RunOptions, TaskRun, TaskType

    def run(encoder, task):
        for _ in range(3):  # three encode calls, three warnings: one count in the result
            encoder.encode([LONG, *ENGLISH[:2]], "en")
        return {"task": "t", "metric": "p_at_1", "languages": {}, "average": None}

    results = {}
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        _run_task(
            results,
            TaskType("p_at_1", run, markdown_table),
            model,
            TaskRun({"type": "t", "name": "t"}, Path("."), RunOptions()),
        )
    assert results["t"].truncated_sentences == 3 and results["t"]["truncated_sentences"] == 3
    assert not [w for w in shown if issubclass(w.category, TruncationWarning)]
    assert "t: 3 sentence(s) longer than the model's max_len tokens were cut" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tag, code",
    [
        ("de", "de"),
        ("DE", "de"),
        ("deu", "de"),
        ("ger", "de"),
        ("deu_Latn", "de"),
        ("cmn", "zh"),
        ("zho", "zh"),
        ("zh-Hans", "zh"),
        ("cmn_Hans", "zh"),
        ("EN", "en"),
        ("sh", "hbs"),
        ("hbs", "hbs"),
        ("lvs", "lv"),
        ("swh", "sw"),
        # the tags of the OPUS-MT test sets (data_prep's opus_mt_testsets)
        ("cmn_Hans", "zh"),
        ("cmn_Hant", "zh"),
        ("cmn", "zh"),
        ("zho", "zh"),
        ("yue_Hant", "yue"),
        ("wuu_Hani", "wuu"),
        ("lzh_Hani", "lzh"),
        ("ber_Latn", "ber"),
        ("hbs", "hbs"),
        ("srp_Latn", "sr"),
        ("bos_Latn", "bs"),
        ("prs", "prs"),
        ("pes_Thaa", "fa"),
        ("nor", "no"),
        ("nob_Hebr", "nb"),
        ("nno", "nn"),
        ("tgl_Latn", "tl"),
        ("tl", "tl"),
        ("toki_Latn", "tok"),
        ("kzj_Latn", "kzj"),
        ("es_419", "es"),
        ("es_LA", "es"),
        ("pt_BR", "pt"),
        ("ti_er", "ti"),
        ("ti_ET", "ti"),
        ("fuv_Latn_NG", "fuv"),
        ("kmr_Latn", "ku"),
        ("zsm_Latn", "ms"),
        ("Eng", "en"),
        ("en", "en"),
    ],
)
def test_canonical_language(tag, code):
    assert canonical_language(tag) == code


def test_canonical_language_rejects_what_is_no_language():
    with pytest.raises(UnknownLanguageError, match="'xx' does not name a registered language"):
        canonical_language("xx")
    with pytest.raises(TypeError, match="must be a str"):
        canonical_language(["de"])
