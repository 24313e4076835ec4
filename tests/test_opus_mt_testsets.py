"""Tests for data_prep.opus_mt_testsets: Tatoeba Challenge and TICO-19 readers, language codes."""

import json
import shutil

import pytest

from data_prep.__main__ import main
from data_prep.opus_mt_testsets import (
    REPORT_FILE,
    TATOEBA_CHALLENGE_RELEASE,
    build_tatoeba_challenge_corpus,
    build_tico19_corpus,
    canonical_language,
)
from ems.cli import run_main
from ems.corpus import CorpusError, list_parallel, read_parallel
from ems.languages import TATOEBA_LANGUAGES, UnknownLanguageError


def write_folder(
    root, folder, code, english_code, pairs, labels=None, english_labels=None, stem=TATOEBA_CHALLENGE_RELEASE
):
    """A folder of the layout: `pairs` of (English, other) texts (bytes allowed), optional labels."""
    path = root / folder
    path.mkdir(parents=True)
    for side_code, side, side_labels in ((english_code, 0, english_labels), (code, 1, labels)):
        texts = [pair[side] if isinstance(pair[side], bytes) else pair[side].encode() for pair in pairs]
        (path / f"{stem}.{side_code}").write_bytes(b"".join(text + b"\n" for text in texts))
        if side_labels is not None:
            (path / f"{stem}.{side_code}.labels").write_text("".join(f"{label}\n" for label in side_labels))
    return path


def read_corpus(out_root, pair, name):
    files = [f for f in list_parallel(out_root, [pair]) if f.name == name]
    assert len(files) == 1, (pair, name)
    return list(read_parallel(files[0].path_l1, files[0].path_l2))


def sliced_root(tmp_path, source, folders):
    """A root holding copies of a few real folders, so a test reads only those (not links: the
    importer refuses a file a symlink leads out of the root)."""
    root = tmp_path / "slice"
    root.mkdir()
    for folder in folders:
        shutil.copytree(source / folder, root / folder)
    return root


# --- language codes ---------------------------------------------------------------------------


def test_every_laser_tatoeba_code_maps_to_the_projects_code():
    deliberate_exceptions = {}  # none: the override table covers tgl, kzj and mhr
    mismatches = {
        code: (canonical_language(code), lang)
        for code, lang, _ in TATOEBA_LANGUAGES
        if canonical_language(code) != lang
    }
    assert mismatches == deliberate_exceptions


@pytest.mark.parametrize("tag", ["", "xyz", "eng1", "und", "a_b", "x-private"])
def test_canonical_language_rejects_what_is_not_a_language(tag):
    with pytest.raises(UnknownLanguageError):
        canonical_language(tag)


# --- real data ----------------------------------------------------------------------------------


def pairs_with_labels(folder, code, prefix):
    """(English, other) pairs of a real folder whose label starts with `prefix`, read independently."""
    stem = folder / TATOEBA_CHALLENGE_RELEASE
    english = stem.with_name(stem.name + ".eng").read_text(encoding="utf-8").split("\n")
    other = stem.with_name(f"{stem.name}.{code}").read_text(encoding="utf-8").split("\n")
    labels = stem.with_name(f"{stem.name}.{code}.labels").read_text(encoding="utf-8").split("\n")
    return [(e.strip(), o.strip()) for e, o, label in zip(english, other, labels) if label.startswith(prefix)]


def test_tatoeba_challenge_real_labels_decide_the_language(data_dir, tmp_path, capsys):
    source = data_dir / "tatoeba_challenge"
    root = sliced_root(tmp_path, source, ["ara-eng", "eng-cmn_Hans", "eng-cmn_Hant", "eng-eng", "eng-jpn", "eng-zho"])
    out = tmp_path / "out"
    report = build_tatoeba_challenge_corpus(root, out, languages=["ja", "zh", "ar", "yue"])

    assert capsys.readouterr().out == ""
    assert report["skipped_folders"] == {"eng-eng": "both sides are English"}
    zho = report["folders"]["eng-zho"]
    assert zho["lines_read"] == 10390
    assert zho["kept"] == {"yue": 677 + 454 + 1, "zh": 4476 + 4450 + 11 + 3 + 1}
    assert zho["skipped"]["not_selected"]["wuu"] == 196 and "cmn_Hans" not in zho["skipped"]["not_selected"]
    ara = report["folders"]["ara-eng"]
    assert ara["kept"] == {"ar": 9642 + 3}
    assert ara["skipped"]["not_selected"] == {
        "acm": 3,
        "afb": 36,
        "apc": 5,
        "apc_Latn": 1,
        "arq": 405,
        "arq_Latn": 9,
        "ary": 18,
        "arz": 183,
    }
    assert report["folders"]["eng-jpn"]["kept"] == {"ja": 13862}
    assert report["languages"] == {"ar": 9645, "ja": 13862, "yue": 1132, "zh": 8941 + 4450 + 4476}
    assert report["merged"]["zh"] == [
        ["cmn", 1],
        ["cmn_Bopo", 3],
        ["cmn_Hans", 8900],
        ["cmn_Hant", 8952],
        ["cmn_Latn", 11],
    ]
    assert report["merged"]["yue"] == [["yue_Hans", 677], ["yue_Hant", 454], ["yue_Latn", 1]]
    assert json.loads((out / REPORT_FILE).read_text(encoding="utf-8")) == report

    # The written pairs are exactly the lines with those labels, in order.
    assert read_corpus(out, "en-zh", "tatoeba_challenge-zho") == pairs_with_labels(source / "eng-zho", "zho", "cmn")
    assert read_corpus(out, "en-yue", "tatoeba_challenge-zho") == pairs_with_labels(source / "eng-zho", "zho", "yue")
    assert read_corpus(out, "ar-en", "tatoeba_challenge-ara") == [
        (ar, en) for en, ar in pairs_with_labels(source / "ara-eng", "ara", "ara")
    ]
    assert len(read_corpus(out, "en-zh", "tatoeba_challenge-cmn_Hans")) == 4450
    assert sorted(p.name for p in (out / "en-zh").iterdir()) == [
        f"tatoeba_challenge-{name}.{code}" for name in ("cmn_Hans", "cmn_Hant", "zho") for code in ("en", "zh")
    ]


def test_tico19_real_regional_codes_fold_into_the_language(data_dir, tmp_path):
    folders = ["en-es_LA", "en-fa", "en-prs", "en-pt_BR", "en-ti", "en-ti_ER", "en-ti_ET"]
    root = sliced_root(tmp_path, data_dir / "tico19", folders)
    report = build_tico19_corpus(root, tmp_path / "out")

    assert report["languages"] == {"es": 2100, "fa": 2100, "prs": 2100, "pt": 2100, "ti": 3 * 2100}
    assert report["merged"]["es"] == [["es_419", 2100]]
    assert report["merged"]["ti"] == [["ti", 4200], ["ti_er", 2100]]
    assert [f.name for f in list_parallel(tmp_path / "out", ["en-ti"])] == ["tico19-ti", "tico19-ti_ER", "tico19-ti_ET"]
    assert report["folders"]["en-pt_BR"]["corpus"] == "tico19-pt_BR"

    merged = build_tico19_corpus(root, tmp_path / "merged", languages=["fa"], merge={"prs": "fa"})
    assert merged["languages"] == {"fa": 4200}
    assert merged["merged"] == {"fa": [["fa", 2100], ["prs", 2100]]}
    assert merged["folders"]["en-ti"]["skipped"] == {"not_selected": {"ti": 2100}}
    assert [f.name for f in list_parallel(tmp_path / "merged")] == ["tico19-fa", "tico19-prs"]


# --- hand-built folders -----------------------------------------------------------------------


def test_each_line_takes_its_labels_language_past_skipped_lines(tmp_path):
    pairs = [
        ("Hello", "مرحبا"),  # ara: kept
        ("", "فارغ"),  # empty English side
        (b"Bad \xff", "سيء"),  # invalid UTF-8
        ("Thanks", "شكرا"),  # ara: kept; misaligned labels would make it arz
        ("How are you?", "إزيك"),  # arz: not selected
        ("Hi", "Hi"),  # labelled eng: same language
        ("Salut", "أهلا"),  # English side labelled fra
        ("What", "ماذا"),  # unknown tag
        ("Broken", "wyglÄ\x85da"),  # a U+0085 line break inside the text (mojibake)
    ]
    labels = ["ara", "ara", "ara", "ara", "arz", "eng", "ara", "xyz", "ara"]
    english_labels = ["eng"] * 6 + ["fra", "eng", "eng"]
    write_folder(tmp_path / "in", "ara-eng", "ara", "eng", pairs, labels, english_labels)

    report = build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out", languages=["ar"])

    assert report["folders"]["ara-eng"] == {
        "corpus": "tatoeba_challenge-ara",
        "lines_read": 9,
        "kept": {"ar": 2},
        "skipped": {
            "english_side_not_english": {"fra": 1},
            "not_selected": {"arz": 1},
            "same_language": {"eng": 1},
            "unknown_tag": {"xyz": 1},
            "empty": 1,
            "invalid_utf8": 1,
            "line_break": 1,
        },
    }
    assert read_corpus(tmp_path / "out", "ar-en", "tatoeba_challenge-ara") == [("مرحبا", "Hello"), ("شكرا", "Thanks")]
    assert report["merged"] == {"ar": [["ara", 2]]}


def test_a_byte_order_mark_on_a_labels_file_is_not_part_of_its_first_label(tmp_path):
    folder = write_folder(tmp_path / "in", "deu-eng", "deu", "eng", [("Hello", "Hallo"), ("Yes", "Ja")], ["deu"] * 2)
    labels = folder / f"{TATOEBA_CHALLENGE_RELEASE}.deu.labels"
    labels.write_bytes(b"\xef\xbb\xbf" + labels.read_bytes())  # as a Windows editor saves it
    report = build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out", languages=["de"])
    assert report["folders"]["deu-eng"]["kept"] == {"de": 2} and not report["folders"]["deu-eng"]["skipped"]


def test_missing_labels_fall_back_to_the_folder_code_and_are_reported(tmp_path):
    folder = write_folder(tmp_path / "in", "deu-eng", "deu", "eng", [("Yes", "Ja"), ("No", "Nein")])

    report = build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out")

    assert report["folders"]["deu-eng"]["kept"] == {"de": 2}
    assert report["folders"]["deu-eng"]["labels_missing"] == [
        str(folder / f"{TATOEBA_CHALLENGE_RELEASE}.eng.labels"),
        str(folder / f"{TATOEBA_CHALLENGE_RELEASE}.deu.labels"),
    ]
    assert report["merged"] == {"de": [["deu", 2]]}
    assert read_corpus(tmp_path / "out", "de-en", "tatoeba_challenge-deu") == [("Ja", "Yes"), ("Nein", "No")]


def test_merge_folds_a_variety_into_a_selected_language(tmp_path):
    write_folder(
        tmp_path / "in",
        "en-prs",
        "prs",
        "en",
        [("Water", "آب"), ("Bread", "نان")],
        ["prs", "prs"],
        ["en", "en"],
        stem="tico19-test",
    )
    write_folder(tmp_path / "in", "en-fa", "fa", "en", [("Water", "آب")], ["fa"], ["en"], stem="tico19-test")

    unmerged = build_tico19_corpus(tmp_path / "in", tmp_path / "plain", languages=["fa"])
    merged = build_tico19_corpus(tmp_path / "in", tmp_path / "merged", languages=["fa"], merge={"prs": "fa"})

    assert unmerged["languages"] == {"fa": 1}
    assert unmerged["folders"]["en-prs"]["skipped"] == {"not_selected": {"prs": 2}}
    assert merged["languages"] == {"fa": 3}
    assert merged["merged"] == {"fa": [["fa", 1], ["prs", 2]]}
    assert read_corpus(tmp_path / "merged", "en-fa", "tico19-prs") == [("Water", "آب"), ("Bread", "نان")]


def test_a_labels_file_of_another_length_is_an_error_and_nothing_is_written(tmp_path):
    write_folder(tmp_path / "in", "deu-eng", "deu", "eng", [("Yes", "Ja")], ["deu"], ["eng"])
    folder = write_folder(
        tmp_path / "in", "eng-fra", "fra", "eng", [("Yes", "Oui"), ("No", "Non")], ["fra"], ["eng", "eng"]
    )

    with pytest.raises(CorpusError, match=r"differ in line count: .*\.fra has 2, .*\.fra\.labels has 1") as error:
        build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out")
    assert str(folder / f"{TATOEBA_CHALLENGE_RELEASE}.fra.labels") in str(error.value)
    assert not (tmp_path / "out").exists()


def test_text_files_of_different_lengths_are_an_error(tmp_path):
    folder = write_folder(tmp_path / "in", "eng-fra", "fra", "eng", [("Yes", "Oui"), ("No", "Non")])
    (folder / f"{TATOEBA_CHALLENGE_RELEASE}.fra").write_text("Oui\n", encoding="utf-8")

    with pytest.raises(
        CorpusError, match=rf"{TATOEBA_CHALLENGE_RELEASE}\.eng has 2, .*{TATOEBA_CHALLENGE_RELEASE}\.fra has 1"
    ):
        build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out")


def test_eng_eng_and_foreign_folders_are_skipped_and_reported(tmp_path):
    write_folder(tmp_path / "in", "eng-eng", "eng2", "eng1", [("Hi", "Hello")], ["eng"], ["eng"])
    write_folder(tmp_path / "in", "deu-fra", "fra", "deu", [("Ja", "Oui")])
    write_folder(tmp_path / "in", "eng-fra", "fra", "eng", [("Yes", "Oui")], ["fra"], ["eng"])

    report = build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out")

    assert report["skipped_folders"] == {
        "deu-fra": "not a folder named eng-<code> or <code>-eng",
        "eng-eng": "both sides are English",
    }
    assert list(report["folders"]) == ["eng-fra"]
    assert report["languages"] == {"fr": 1}


def test_a_missing_or_empty_root_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path / 'none'} is not a directory: expected Tatoeba Challenge"):
        build_tatoeba_challenge_corpus(tmp_path / "none", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no folder of the layout: expected TICO-19 folders en-<xx>"):
        build_tico19_corpus(tmp_path / "empty", tmp_path / "out")


def test_an_unknown_requested_language_is_an_error(tmp_path):
    write_folder(tmp_path / "in", "eng-fra", "fra", "eng", [("Yes", "Oui")], ["fra"], ["eng"])
    with pytest.raises(UnknownLanguageError, match="'xyz'"):
        build_tatoeba_challenge_corpus(tmp_path / "in", tmp_path / "out", languages=["xyz"])


# --- command line -----------------------------------------------------------------------------


def test_cli_import_prints_pairs_and_a_summary(tmp_path, capsys):
    write_folder(
        tmp_path / "in",
        "eng-zho",
        "zho",
        "eng",
        [("Tea", "茶"), ("Tea", "茶。"), ("Rice", "飯"), ("Hi", "你好")],
        ["cmn_Hans", "cmn_Hant", "yue_Hant", "wuu"],
        ["eng"] * 4,
    )
    write_folder(tmp_path / "in", "eng-eng", "eng2", "eng1", [("Hi", "Hello")])

    code = main(
        [
            "import",
            "--format",
            "tatoeba_challenge",
            "--in",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "out"),
            "--languages",
            "zh",
            "yue",
        ]
    )

    assert code == 0
    assert capsys.readouterr().out.splitlines() == [
        "en-yue\t1",
        "en-zh\t2",
        "merged: zh <- cmn_Hans 1, cmn_Hant 1 | skipped lines: not_selected 1"
        " | skipped folders: eng-eng (both sides are English)",
    ]


def test_cli_import_bad_input_is_one_error_line(tmp_path, capsys):
    assert (
        run_main(main, ["import", "--format", "tico19", "--in", str(tmp_path / "none"), "--out", str(tmp_path / "out")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'none'} is not a directory")

    write_folder(tmp_path / "in", "en-fa", "fa", "en", [("Water", "آب")], stem="tico19-test")
    assert (
        run_main(
            main,
            [
                "import",
                "--format",
                "tico19",
                "--in",
                str(tmp_path / "in"),
                "--out",
                str(tmp_path / "out"),
                "--merge",
                "prs:fa",
            ],
        )
        == 2
    )
    assert capsys.readouterr().err == "error: --merge takes FROM=TO language codes (e.g. prs=fa), got 'prs:fa'\n"
