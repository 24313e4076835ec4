"""Tests for the Moses-style parallel corpus format in ems.corpus."""

import pytest

from ems.corpus import (
    CorpusError,
    ParallelFiles,
    ReadReport,
    list_parallel,
    pair_dir_name,
    read_parallel,
    write_parallel,
)


def write_bytes_pair(tmp_path, lines_l1: bytes, lines_l2: bytes):
    pair_dir = tmp_path / "de-en"
    pair_dir.mkdir()
    path_l1, path_l2 = pair_dir / "toy.de", pair_dir / "toy.en"
    path_l1.write_bytes(lines_l1)
    path_l2.write_bytes(lines_l2)
    return path_l1, path_l2


def test_pair_dir_name_is_alphabetical():
    assert pair_dir_name("en", "de") == "de-en"
    assert pair_dir_name("en", "fr") == "en-fr"
    assert pair_dir_name("yue", "en") == "en-yue"


@pytest.mark.parametrize("l1, l2", [("en", "en"), ("", "en"), ("de-at", "en"), ("en", "x/y")])
def test_pair_dir_name_rejects_bad_codes(l1, l2):
    with pytest.raises(CorpusError):
        pair_dir_name(l1, l2)


def test_write_read_round_trip_puts_each_side_in_its_language_file(tmp_path):
    pairs = [("Bonjour le monde", "Hello world"), ("Merci", "Thanks"), ("Oui ?", "Yes?")]
    path_fr, path_en = write_parallel(tmp_path, "toy", "fr", "en", pairs)

    assert path_fr == tmp_path / "en-fr" / "toy.fr"
    assert path_en == tmp_path / "en-fr" / "toy.en"
    assert path_en.read_text(encoding="utf-8") == "Hello world\nThanks\nYes?\n"
    report = ReadReport()
    assert list(read_parallel(path_en, path_fr, report)) == [(en, fr) for fr, en in pairs]
    assert report.to_dict() == {
        "read": 3,
        "kept": 3,
        "skipped_empty": 0,
        "skipped_invalid_utf8": 0,
        "skipped_too_long": 0,
        "path_l1": str(path_en),
        "path_l2": str(path_fr),
    }


@pytest.mark.parametrize("bad_text", ["two\nlines", "carriage\rreturn", "line\u2028separator"])
def test_write_parallel_rejects_line_breaks_and_writes_nothing(tmp_path, bad_text):
    with pytest.raises(CorpusError, match="pair 2 .* the de text contains a line break"):
        write_parallel(tmp_path, "toy", "de", "en", [("gut", "good"), (bad_text, "bad")])
    assert not (tmp_path / "de-en").exists()  # the partial files and the emptied pair folder are removed


def test_write_parallel_rejects_non_text(tmp_path):
    with pytest.raises(CorpusError, match="the en side is NoneType"):
        write_parallel(tmp_path, "toy", "de", "en", [("gut", None)])


def test_unequal_line_counts_raise_with_both_counts_and_paths(tmp_path):
    path_de, path_en = write_bytes_pair(tmp_path, b"eins\nzwei\ndrei\n", b"one\ntwo\n")

    with pytest.raises(CorpusError) as raised:
        list(read_parallel(path_de, path_en))
    message = str(raised.value)
    assert f"{path_de} has 3 lines" in message
    assert f"{path_en} has 2 lines" in message

    with pytest.raises(CorpusError, match="has 2 lines.*has 3 lines"):
        list(read_parallel(path_en, path_de))


def test_invalid_utf8_line_is_skipped_and_alignment_kept(tmp_path):
    path_de, path_en = write_bytes_pair(
        tmp_path,
        "eins\nzw\xffei\ndrei\nvier\n".encode("latin-1"),
        b"one\ntwo\nthree\n\xc3\x28four\n",
    )
    report = ReadReport()

    assert list(read_parallel(path_de, path_en, report)) == [("eins", "one"), ("drei", "three")]
    assert report.read == 4
    assert report.kept == 2
    assert report.skipped_invalid_utf8 == 2
    assert report.skipped_empty == 0


def test_empty_sides_are_skipped_and_line_endings_stripped(tmp_path):
    path_de, path_en = write_bytes_pair(
        tmp_path,
        b"\xef\xbb\xbfeins\r\n\r\n  drei  \r\nvier\r\n",
        b"one\r\ntwo\r\nthree\r\n \t \r\n",
    )
    report = ReadReport()

    assert list(read_parallel(path_de, path_en, report)) == [("eins", "one"), ("drei", "three")]
    assert (report.read, report.kept, report.skipped_empty) == (4, 2, 2)


def test_last_line_without_newline_is_read(tmp_path):
    path_de, path_en = write_bytes_pair(tmp_path, b"eins\nzwei", b"one\ntwo\n")
    assert list(read_parallel(path_de, path_en)) == [("eins", "one"), ("zwei", "two")]


def test_missing_file_raises_corpus_error(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        list(read_parallel(tmp_path / "a.de", tmp_path / "a.en"))


def test_list_parallel_is_sorted_and_ignores_non_corpus_files(tmp_path):
    write_parallel(tmp_path, "b", "en", "fr", [("Hi", "Salut")])
    write_parallel(tmp_path, "a", "en", "fr", [("Hi", "Salut")])
    write_parallel(tmp_path, "a", "en", "de", [("Hi", "Hallo")])
    (tmp_path / "de-en" / "README.txt").write_text("not a corpus file")
    (tmp_path / "report.json").write_text("{}")

    assert list_parallel(tmp_path) == [
        ParallelFiles("de", "en", "a", tmp_path / "de-en" / "a.de", tmp_path / "de-en" / "a.en"),
        ParallelFiles("en", "fr", "a", tmp_path / "en-fr" / "a.en", tmp_path / "en-fr" / "a.fr"),
        ParallelFiles("en", "fr", "b", tmp_path / "en-fr" / "b.en", tmp_path / "en-fr" / "b.fr"),
    ]


def test_list_parallel_missing_counterpart_names_the_file(tmp_path):
    write_parallel(tmp_path, "ok", "de", "en", [("Hallo", "Hello")])
    (tmp_path / "de-en" / "Europarl.de-en.de").write_text("Hallo\n", encoding="utf-8")

    with pytest.raises(CorpusError, match=r"Europarl\.de-en\.de has no counterpart"):
        list_parallel(tmp_path)


def test_list_parallel_rejects_missing_root_and_unsorted_pair_dir(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        list_parallel(tmp_path / "nowhere")
    (tmp_path / "en-de").mkdir()
    with pytest.raises(CorpusError, match="expected 'de-en'"):
        list_parallel(tmp_path)
