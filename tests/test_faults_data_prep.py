"""Faults of data prep (issue 13): what a hostile but fair user does to `python -m data_prep`,
`python -m data_prep.gettext_corpus`, an OPUS mirror and a data config, and the one clear outcome
each must have. Offline: the OPUS mirror is built from real FLORES-200 text (fixtures.opus_mirror)."""

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from data_prep.__main__ import main
from data_prep.config import CorpusSpec
from data_prep.gettext_catalogs import parse_mo, parse_po
from data_prep.gettext_corpus import build_gettext_corpus
from data_prep.gettext_corpus import main as gettext_main
from data_prep.opus import FetchError, FetchJob, OnlineSource
from ems.cli import run_main
from ems.configs import ConfigError
from ems.corpus import list_parallel, read_parallel, write_parallel
from fixtures.opus_mirror import build_mirror, edit_sentence_archive, flores_lines
from tests.conftest import REPO_ROOT

CONFIG = "languages: [de, en]\npivot: en\ncorpora:\n  - {name: TED2020, release: v1}\n"
DJANGO_DE = Path(importlib.util.find_spec("django").submodule_search_locations[0]) / "conf/locale/de/LC_MESSAGES"


def one_error_line(capsys) -> str:
    """The `error: ` line that ends stderr; no traceback. Lines as a terminal shows them: split at
    newlines only (after a carriage return, as opustools' progress text ends, a line goes on)."""
    err = capsys.readouterr().err
    errors = [line for line in err.split("\n") if line.startswith("error")]
    assert "Traceback" not in err and len(errors) == 1 and err.rstrip().endswith(errors[0]), err[-3000:]
    return errors[0]


@pytest.fixture
def mirror(data_dir, tmp_path):
    """TED2020 v1 de-en: FLORES-200 devtest lines 0-29 in three documents of 10 sentences."""
    root = tmp_path / "opus"
    build_mirror(root, "TED2020", "v1", data_dir, [("de", "en")], lines=slice(0, 30), docs=3)
    return root


def fetch_cli(tmp_path, mirror) -> tuple[int, Path]:
    config = tmp_path / "data.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "raw"
    return run_main(main, ["fetch", "--config", str(config), "--mirror", str(mirror), "--out", str(out)]), out


def fetched_entry(out: Path) -> dict:
    [entry] = json.loads((out / "fetch_report.json").read_text(encoding="utf-8"))["fetched"]
    return entry


# --- OPUS fetch -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alignment",
    [
        "<html><body>503 Service Unavailable</body></html>\n",  # XML that names no pair: was "fetched 0", rc 0
        "503 Service Unavailable\nplease retry\n",  # not XML at all: was opustools' traceback
    ],
    ids=["xml_naming_no_pair", "not_xml"],
)
def test_alignment_file_that_is_not_xml_fails_leaves_no_file_and_is_fetched_after_the_fix(
    alignment, mirror, data_dir, tmp_path, capsys
):
    alignment_file = mirror / "TED2020" / "v1" / "xml" / "de-en.xml.gz"
    good = alignment_file.read_bytes()
    with gzip.open(alignment_file, "wt", encoding="utf-8") as file:
        file.write(alignment)

    status, out = fetch_cli(tmp_path, mirror)

    assert status == 2
    assert "TED2020 v1 de-en" in one_error_line(capsys)
    assert sorted(path.name for path in out.rglob("*")) == ["fetch_report.json"]  # no corpus file, no pair folder
    assert fetched_entry(out)["status"] == "failed"

    # What the old code left behind (empty files) is not "exists" either: the next run fetches.
    (out / "de-en").mkdir()
    (out / "de-en" / "TED2020.de").write_bytes(b"")
    (out / "de-en" / "TED2020.en").write_bytes(b"")
    alignment_file.write_bytes(good)
    assert fetch_cli(tmp_path, mirror)[0] == 0
    assert fetched_entry(out) | {"status": "fetched", "pairs": 30} == fetched_entry(out)
    assert (out / "de-en" / "TED2020.en").read_text(encoding="utf-8").splitlines() == flores_lines(data_dir, "en")[:30]
    assert fetch_cli(tmp_path, mirror)[0] == 0 and fetched_entry(out)["status"] == "exists"


def test_missing_sentence_document_is_counted_per_corpus(mirror, data_dir, tmp_path, capsys):
    edit_sentence_archive(mirror, "TED2020", "v1", "en", lambda name, data: None if name.endswith("doc1.xml") else data)

    status, out = fetch_cli(tmp_path, mirror)

    assert status == 0
    entry = fetched_entry(out)
    assert entry["documents_missing"] == 1 and entry["missing_documents"] == ["en/doc1.xml.gz"]
    assert entry["pairs"] == 20 and entry["empty_side"] == 0
    en = flores_lines(data_dir, "en")
    assert (out / "de-en" / "TED2020.en").read_text(encoding="utf-8").splitlines() == en[:10] + en[20:30]
    err = capsys.readouterr().err
    assert "warning: TED2020 de-en: 1 document(s) missing" in err
    # opustools' progress text ("Measuring file ...\\r", no newline) is not passed on: a later error: line
    # would start mid-line
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("warning: ")], err


def test_truncated_document_pairs_with_an_empty_side_are_counted_not_fetched(mirror, tmp_path, capsys):
    def cut(name, data):
        return data[: len(data) // 2] if name.endswith("en/doc1.xml") else data

    edit_sentence_archive(mirror, "TED2020", "v1", "en", cut)

    status, out = fetch_cli(tmp_path, mirror)

    assert status == 0
    entry = fetched_entry(out)
    assert entry["empty_side"] > 0 and entry["pairs"] + entry["empty_side"] == 30
    pairs = list(read_parallel(out / "de-en" / "TED2020.de", out / "de-en" / "TED2020.en"))
    assert len(pairs) == entry["pairs"] and all(de and en for de, en in pairs)
    assert f"{entry['empty_side']} pair(s) with an empty side left out" in capsys.readouterr().err


def test_a_download_that_is_not_a_zip_is_removed_and_downloaded_again(tmp_path, monkeypatch):
    job = FetchJob(CorpusSpec("TED2020", "v1"), "de", "en", "de", "en")
    source = OnlineSource(tmp_path, catalog="local")  # lists from the catalogue shipped in opustools
    monkeypatch.setattr("data_prep.opus.download", lambda url, target: target.write_bytes(b"<html>503</html>"))
    with pytest.raises(FetchError, match="is not a zip file .*rerun to download again"):
        source.prepare(job)
    assert not source.zip_path(job).exists()

    source.zip_path(job).write_bytes(b"<html>503</html>")  # left by an older version: not "already downloaded"

    def good_zip(url, target):
        with zipfile.ZipFile(target, "w") as archive:
            archive.writestr("TED2020.de-en.de", "Hallo\n")
            archive.writestr("TED2020.de-en.en", "Hello\n")

    monkeypatch.setattr("data_prep.opus.download", good_zip)
    source.prepare(job)
    assert list(source.reader(job).yieldPairs()) == [("Hallo", "Hello")]


# --- gettext ----------------------------------------------------------------------------------------


def test_po_catalogs_are_read_as_their_compiled_mo(tmp_path, capsys):
    po, mo = (DJANGO_DE / "django.po").read_bytes(), (DJANGO_DE / "django.mo").read_bytes()
    entries, warnings = parse_po(po, "django.po")
    assert set(entries) == set(parse_mo(mo, "django.mo")) and warnings == []

    wheel = tmp_path / "pkg.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/locale/de/LC_MESSAGES/django.po", po)  # no .mo: read
        archive.writestr(
            "pkg/locale/fr/LC_MESSAGES/django.po",
            b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "Yes"\nmsgstr "\xff\xfe"\n',
        )
        archive.writestr("pkg/locale/ja/LC_MESSAGES/django.mo", mo)
        archive.writestr("pkg/locale/ja/LC_MESSAGES/django.po", b"never read: its .mo is")
    assert (
        run_main(
            gettext_main,
            [str(tmp_path / "out"), "--packages", "--wheels", str(wheel), "--min-pairs", "100", "--heldout-size", "20"],
        )
        == 0
    )
    report = json.loads((tmp_path / "out" / "corpus_report.json").read_text(encoding="utf-8"))
    assert report["catalog_files"] == {"mo_read": 1, "po_read": 1, "po_left_for_mo": 1}
    assert sorted(report["languages"]) == ["de", "ja"] and report["languages"]["de"]["entries_read"] == len(entries)
    [skipped] = report["skipped_catalogs"]
    assert (
        skipped["catalog"] == "pkg.whl:pkg/locale/fr/LC_MESSAGES/django.po" and "not a readable .po" in skipped["error"]
    )
    assert "catalog files: 1 .mo and 1 .po read, 1 .po left for the .mo beside them" in capsys.readouterr().out


def test_gettext_command_line_errors_are_one_line_with_status_2(tmp_path, capsys):
    assert run_main(gettext_main, [str(tmp_path / "out"), "--min-pairs", "10", "--heldout-size", "10"]) == 2
    assert (
        one_error_line(capsys)
        == "error: min_pairs (10) must exceed heldout_size (10), or a language could end up with no training pairs"
    )
    assert run_main(gettext_main, [str(tmp_path / "out"), "--packages", "no_such_package_ems"]) == 2
    assert "is not installed" in one_error_line(capsys)


def test_gettext_builds_from_a_wheel_with_only_po_files(tmp_path):
    wheel = tmp_path / "po_only.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/locale/de/LC_MESSAGES/django.po", (DJANGO_DE / "django.po").read_bytes())
    report = build_gettext_corpus(tmp_path / "out", packages=(), wheels=[wheel], min_pairs=100, heldout_size=20)
    assert report["languages"]["de"]["heldout_pairs"] == 20 and report["catalog_files"]["po_read"] == 1


# --- language folders and configs --------------------------------------------------------------------


def test_a_pair_folder_outside_the_config_is_an_error_at_clean_and_vocab(data_dir, tmp_path, capsys):
    raw = tmp_path / "raw"
    en, de, fr = (flores_lines(data_dir, lang)[:50] for lang in ("en", "de", "fr"))
    write_parallel(raw, "c", "de", "en", zip(de, en))
    write_parallel(raw, "c", "en", "xx", zip(en, fr))
    config = tmp_path / "data.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    clean = ["clean", "--config", str(config), "--in", str(raw), "--out", str(tmp_path / "clean")]
    clean += ["--data-dir", str(tmp_path)]

    assert run_main(main, clean) == 2
    line = one_error_line(capsys)
    assert "en-xx (xx)" in line and str(config) in line and "de-en" not in line
    assert not (tmp_path / "clean").exists()
    assert run_main(main, ["vocab", "--config", str(config), "--in", str(raw), "--out", str(tmp_path / "vocab")]) == 2
    assert "en-xx (xx)" in one_error_line(capsys)
    assert run_main(main, [*clean, "--pair", "de-en"]) == 0  # the pairs it reads are fine


@pytest.mark.parametrize(
    "text, message",
    [
        (CONFIG + "clean: {max_chars: abc}\n", "clean: max_chars must be an integer, got 'abc'"),
        (CONFIG + "clean: {max_chars: 0}\n", "clean: max_chars must be an integer >= 1, got 0"),
        (CONFIG + "clean: {max_length_ratio: 0.5}\n", "clean: max_length_ratio must be a finite number >= 1, got 0.5"),
        (CONFIG + "clean: {eval_sets: tatoeba}\n", "clean: eval_sets must be a list of strings, got 'tatoeba'"),
        (CONFIG + "clean: {eval_sets: [xnli]}\n", "clean: eval_sets names unknown evaluation set(s) ['xnli']"),
        (CONFIG + "vocab: {sampling_alpha: 2}\n", "vocab: sampling_alpha must be a finite number from 0 to 1, got 2"),
        (
            CONFIG + "vocab: {character_coverage: 0.5}\n",
            "vocab: character_coverage must be a finite number from 0.98 to 1",
        ),
        (CONFIG + "vocab: {vocab_size: 3}\n", "vocab: vocab_size 3 leaves no room for pieces"),
        (
            "languages: [de, en]\npivot: en\ncorpora: [{name: TED2020, release: 2020}]\n",
            "corpora[0]: release must be a string, got 2020 (quote it in YAML)",
        ),
        ("languages: de en\npivot: en\n", "languages must be a list of strings, got 'de en'"),
        (
            "languages: [nb, en]\npivot: en\nopus_codes: {nb: [nb, no]}\n",
            "opus_codes.nb[1] must be a string, got False (YAML reads no, yes, off, on as false or true: quote it)",
        ),
        (CONFIG + "clean: {max_chars: [1, 2}\n", "not a readable YAML file"),
    ],
    ids=[
        "max_chars_abc",
        "max_chars_0",
        "ratio_below_1",
        "eval_sets_string",
        "eval_set_unknown",
        "sampling_alpha",
        "coverage",
        "vocab_size",
        "release_number",
        "languages_string",
        "opus_code_boolean",
        "bad_yaml",
    ],
)
def test_bad_config_values_are_one_line_naming_file_and_key(text, message, tmp_path, capsys):
    config = tmp_path / "data.yaml"
    config.write_text(text, encoding="utf-8")
    assert run_main(main, ["clean", "--config", str(config), "--in", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {config}: ") and message in line


def test_every_problem_of_a_config_and_its_overrides_is_in_the_one_line(tmp_path, capsys):
    config = tmp_path / "data.yaml"
    config.write_text(CONFIG + "clean: {max_chars: abc, lowercase: 1}\nvocab: {size: 8000}\n", encoding="utf-8")
    assert (
        run_main(
            main,
            [
                "clean",
                "--config",
                str(config),
                "--in",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
                "--set",
                "vocab.sampling_alpha=warm",
                "clean.eval_sets=tatoeba",
            ],
        )
        == 2
    )
    assert one_error_line(capsys) == (
        f"error: {config}: clean: max_chars must be an integer, got 'abc'; "
        "clean: lowercase must be true or false, got 1; "
        "clean: eval_sets must be a list of strings, got 'tatoeba'; vocab: unknown key(s) ['size']; known: "
        "['character_coverage', 'max_sentences', 'sampling_alpha', 'vocab_size']; "
        "vocab: sampling_alpha must be a number, got 'warm'"
    )


def test_set_overrides_the_config_on_the_command_line(tmp_path, capsys):
    config = tmp_path / "data.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    assert run_main(main, ["pairs", "--config", str(config), "--set", "languages=[de, en, fr]", "pivot=fr"]) == 0
    assert capsys.readouterr().out.split() == ["de-fr", "en-fr"]
    assert run_main(main, ["pairs", "--config", str(config), "--set", "vocab.vocab_size=3"]) == 2
    assert one_error_line(capsys) == (
        f"error: {config}: vocab: vocab_size 3 leaves no room for pieces: it counts pad, unk and 2 language tokens too"
    )


def test_debug_shows_the_traceback_in_process_and_from_the_command_line(tmp_path, monkeypatch):
    config = tmp_path / "data.yaml"
    config.write_text(CONFIG + "clean: {max_chars: abc}\n", encoding="utf-8")
    argv = ["clean", "--config", str(config), "--in", str(tmp_path), "--out", str(tmp_path / "o")]
    with pytest.raises(ConfigError, match="max_chars"):
        run_main(main, [*argv, "--debug"])
    monkeypatch.setenv("EMS_DEBUG", "1")
    with pytest.raises(ConfigError, match="max_chars"):
        run_main(main, argv)
    monkeypatch.delenv("EMS_DEBUG")

    env = {key: value for key, value in os.environ.items() if key != "EMS_DEBUG"}
    plain = subprocess.run(
        [sys.executable, "-m", "data_prep", *argv], capture_output=True, text=True, cwd=REPO_ROOT, env=env
    )
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr == f"error: {config}: clean: max_chars must be an integer, got 'abc'\n"
    debug = subprocess.run(
        [sys.executable, "-m", "data_prep", *argv, "--debug"], capture_output=True, text=True, cwd=REPO_ROOT, env=env
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "ConfigError" in debug.stderr


# --- damaged arrow / parquet files (issue 62, case 4) -------------------------------------------------


def _hf_source(layout: str, root: Path) -> tuple[Path, Path]:
    """(the source to import, its data file) of 50 de-en rows in `layout`."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"de": f"Hallo Welt {i}.", "en": f"Hello world {i}."} for i in range(50)]
    if layout == "save_to_disk":
        datasets.Dataset.from_dict({"translation": rows}).save_to_disk(str(root / "saved"))
        return root / "saved", next((root / "saved").glob("*.arrow"))
    if layout == "arrow":
        table = pa.table({"translation": rows})
        with pa.OSFile(str(root / "pairs.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return root / "pairs.arrow", root / "pairs.arrow"
    pq.write_table(pa.table({"translation": rows}), root / "pairs.parquet")
    return root / "pairs.parquet", root / "pairs.parquet"


@pytest.mark.parametrize("layout", ["save_to_disk", "arrow", "parquet"])
def test_a_byte_overwritten_inside_an_arrow_or_parquet_file_is_one_line_naming_it(layout, tmp_path, capsys):
    """Four bytes overwritten at several places inside a valid file: each import reads rows it can
    vouch for (status 0) or ends in one line naming the file. Was (save_to_disk): `SystemError: Negative
    size passed to PyUnicode_New` from deep inside pyarrow, status 1, an empty output folder left."""
    source, data_file = _hf_source(layout, tmp_path)
    whole = data_file.read_bytes()
    refused = 0
    for k in range(2, 15):
        position = len(whole) * k // 16
        data_file.write_bytes(whole[:position] + b"\xff" * 4 + whole[position + 4 :])
        out = tmp_path / f"out{k}"
        status = run_main(main, ["import", "--format", "hf", str(source), "--out", str(out), "--languages", "de", "en"])
        if status == 0:
            counts = [len(list(read_parallel(f.path_l1, f.path_l2))) for f in list_parallel(out)]
            assert counts and all(counts), capsys.readouterr().err
        else:
            assert status == 2 and str(data_file) in one_error_line(capsys)
            refused += 1
    assert refused  # the places hit include the file's offsets or framing
