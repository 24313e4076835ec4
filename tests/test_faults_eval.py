"""Issue 13, evaluation rows: bad input costs one language, not a task or the run; results.json is
always written; every eval command line turns a user error into one `error: ...` line and exit
status 2 (--debug / EMS_DEBUG=1: the traceback).

Each test names its row: input -> before -> now. The CLIs run in-process through ems.cli.run_main
with a cheap trigram encoder plugged in as an encoder kind; two tests run `python -m eval.run_all`
for real, with precomputed (`npy:`) embeddings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ems.encoder_kinds
from ems.apps.mine import main as mine_main
from ems.cli import USAGE_EXIT_CODE, run_main
from ems.encoder_kinds import EncoderKind, embedding_key
from eval.curves import main as curves_main
from eval.faults import NOT_RUN_EXIT_CODE, not_run
from eval.make_flores_bucc import main as make_flores_bucc_main
from eval.results import read_results as stored_results
from eval.run_all import main as run_all_main
from eval.run_all import run_all
from eval.train_head import main as train_head_main
from tests.conftest import REPO_ROOT
from tests.fakes import TrigramEncoder, write_pair, write_tatoeba

PAIRS = {
    "deu": [
        ("Ich habe Hunger.", "I am hungry."),
        ("Guten Tag!", "Good day!"),
        ("Wo ist der Bahnhof?", "Where is the station?"),
    ],
    "fra": [("J'ai faim.", "I am hungry."), ("Bonjour !", "Good day!"), ("Où est la gare ?", "Where is the station?")],
    "spa": [
        ("Tengo hambre.", "I am hungry."),
        ("¡Buenos días!", "Good day!"),
        ("¿Dónde está la estación?", "Where is the station?"),
    ],
}


@pytest.fixture
def trigram_kind(monkeypatch):
    """`--encoder trigram` (any language) and `--encoder bilingual` (languages de, en; returned) for the CLIs."""
    bilingual = TrigramEncoder(languages=["de", "en"])
    monkeypatch.setitem(
        ems.encoder_kinds.ENCODER_KINDS, "trigram", EncoderKind(lambda path, device: TrigramEncoder(), "none", {})
    )
    monkeypatch.setitem(
        ems.encoder_kinds.ENCODER_KINDS, "bilingual", EncoderKind(lambda path, device: bilingual, "none", {})
    )
    monkeypatch.delenv("EMS_DEBUG", raising=False)
    return bilingual


def tatoeba_data(root: Path, codes=("deu", "fra", "spa")) -> Path:
    """A data root whose tatoeba/ holds the PAIRS of `codes`."""
    for code in codes:
        write_tatoeba(root / "tatoeba", code, PAIRS[code])
    return root


def cli(main, argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, stderr) of a command line run in-process as `python -m ...` runs it."""
    capsys.readouterr()
    status = run_main(main, [str(arg) for arg in argv])
    return status, capsys.readouterr().err


def assert_one_error_line(err: str, *fragments: str) -> str:
    """stderr ends with exactly one `error: ...` line holding every fragment, and has no traceback."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.rstrip("\n").splitlines()[-1] == errors[0], err
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]


def read_results(out: Path) -> dict:
    return {name: result.to_dict() for name, result in stored_results(out).items()}


def run_all_cli(data: Path, out: Path, capsys, *extra) -> tuple[str, dict]:
    """`eval.run_all --encoder trigram` on `data` with something not runnable: exit status 2 is
    asserted; returns (stderr, the results.json written)."""
    status, err = cli(run_all_main, ["--encoder", "trigram", "--data-dir", data, "--out", out, *extra], capsys)
    assert status == NOT_RUN_EXIT_CODE == 2
    return err, stored_results(out)


def assert_scored(task_result: dict, *languages: str) -> None:
    for lang in languages:
        assert task_result["languages"][lang]["n"] > 0 and 0 <= task_result["languages"][lang]["mean"] <= 100


# --- Tatoeba rows (item 5) --------------------------------------------------------------------


def test_tatoeba_999_vs_1000_lines_costs_only_that_language(data_dir, tmp_path, capsys, trigram_kind):
    """999 vs 1000 lines in one real pair -> before: traceback, no results.json -> now: that language
    is listed with the line counts, the others are scored, results.json is written, exit status 2."""
    real = data_dir / "tatoeba"
    if not real.is_dir():
        pytest.skip(f"{real} missing")
    tatoeba = tmp_path / "data" / "tatoeba"
    tatoeba.mkdir(parents=True)
    for code in ("deu", "fra"):
        for side in (code, "eng"):
            name = f"tatoeba.{code}-eng.{side}"
            (tatoeba / name).write_bytes((real / name).read_bytes())
    english = (tatoeba / "tatoeba.fra-eng.eng").read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(english) == 1000
    (tatoeba / "tatoeba.fra-eng.eng").write_text("".join(english[:999]), encoding="utf-8")

    out = tmp_path / "out"
    err, results = run_all_cli(tmp_path / "data", out, capsys)
    assert_one_error_line(err, "could not run tatoeba/fr", str(out / "results.json"))
    tatoeba_result = results["tatoeba"]
    assert list(tatoeba_result["data_errors"]) == ["fr"]
    assert (
        "has 1000 lines but" in tatoeba_result["data_errors"]["fr"] and "has 999" in tatoeba_result["data_errors"]["fr"]
    )
    assert_scored(tatoeba_result, "de")
    assert tatoeba_result["languages"]["de"]["n"] == 1000 and "fr" not in tatoeba_result["languages"]
    assert "- fr: " in (out / "report.md").read_text(encoding="utf-8")


def test_tatoeba_bad_utf8_costs_only_that_language(tmp_path, capsys, trigram_kind):
    """A Tatoeba file that is not UTF-8 -> before: traceback, no results.json -> now: listed as
    "not valid UTF-8", the other languages scored, exit status 2."""
    data = tatoeba_data(tmp_path / "data")
    (data / "tatoeba" / "tatoeba.spa-eng.spa").write_bytes("Tengo hambre.\n".encode("latin-1") + b"\xff\xfe\n\xe1\n")
    err, results = run_all_cli(data, tmp_path / "out", capsys)
    assert_one_error_line(err, "tatoeba/es")
    result = results["tatoeba"]
    assert "tatoeba.spa-eng.spa is not valid UTF-8" in result["data_errors"]["es"]
    assert_scored(result, "de", "fr")


def test_one_missing_tatoeba_file_keeps_the_good_languages(tmp_path, capsys, trigram_kind):
    """One of a requested language's two files missing -> before: the whole task dropped, good
    languages included -> now: that language listed with the file and where to get it, the others
    scored, exit status 2."""
    data = tatoeba_data(tmp_path / "data")
    missing = data / "tatoeba" / "tatoeba.fra-eng.fra"
    missing.unlink()
    err, results = run_all_cli(data, tmp_path / "out", capsys, "--languages", "deu,fra,spa")
    assert_one_error_line(err, "could not run tatoeba/fr;")
    result = results["tatoeba"]
    assert result["data_errors"]["fr"].startswith(f"missing Tatoeba file {missing}: download")
    assert_scored(result, "de", "es")


def test_spa_file_without_eng_is_reported_not_ignored(tmp_path, capsys, trigram_kind):
    """tatoeba.spa-eng.spa without tatoeba.spa-eng.eng, all languages discovered -> before: es
    ignored without a word, exit 0 -> now: es listed with the missing .eng file, exit status 2."""
    data = tatoeba_data(tmp_path / "data")
    (data / "tatoeba" / "tatoeba.spa-eng.eng").unlink()
    err, results = run_all_cli(data, tmp_path / "out", capsys)
    assert_one_error_line(err, "tatoeba/es")
    result = results["tatoeba"]
    assert "tatoeba.spa-eng.eng" in result["data_errors"]["es"]
    assert_scored(result, "de", "fr")


# --- the same exit status for every kind of missing input (item 5) ---------------------------


def _no_data_dir(data: Path, heldout: Path) -> tuple[Path, Path]:
    return data.parent / "no-such-data", heldout


def _no_heldout_dir(data: Path, heldout: Path) -> tuple[Path, Path]:
    return data, heldout.parent / "no-such-heldout"


def _one_file_missing(data: Path, heldout: Path) -> tuple[Path, Path]:
    (data / "tatoeba" / "tatoeba.deu-eng.eng").unlink()
    return data, heldout


def _one_file_unreadable(data: Path, heldout: Path) -> tuple[Path, Path]:
    (heldout / "de-en" / "gettext.de").write_bytes(b"\xc3\x28\n\xa0\xa1\n")  # invalid UTF-8
    return data, heldout


@pytest.mark.parametrize(
    "break_input, not_run_item, still_scored",
    [
        (_no_data_dir, "tatoeba", ("heldout", "de")),
        (_no_heldout_dir, "heldout", ("tatoeba", "de")),
        (_one_file_missing, "tatoeba/de", ("tatoeba", "fr")),
        (_one_file_unreadable, "heldout/de", ("tatoeba", "de")),
    ],
    ids=["data-dir", "heldout-dir", "one-file", "unreadable-file"],
)
def test_every_kind_of_missing_input_exits_2_and_writes_results(
    tmp_path, capsys, trigram_kind, break_input, not_run_item, still_scored
):
    """Missing --data-dir -> before: exit 1; missing --heldout -> before: exit 0 (the task silently
    in results.json); one missing or unreadable file -> before: traceback. Now all: exit status 2,
    one error line naming what could not run, results.json written with the rest scored."""
    data = tatoeba_data(tmp_path / "data", ("deu", "fra"))
    heldout = tmp_path / "heldout"
    write_pair(heldout, "de-en", "gettext", {"de": ["Datei öffnen", "Speichern"], "en": ["Open file", "Save"]})
    data, heldout = break_input(data, heldout)
    err, results = run_all_cli(data, tmp_path / "out", capsys, "--heldout", heldout)
    assert_one_error_line(err, f"could not run {not_run_item};")
    assert not_run(results) == [not_run_item]
    task, lang = still_scored
    assert_scored(results[task], lang)


# --- every task degrades per language (item 5) ------------------------------------------------

MLQE_HEADER = "index\toriginal\ttranslation\tscores\tmean\tz_scores\tz_mean\tmodel_scores"


def _lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def _suite_with_one_bad_item_per_task(tmp_path: Path) -> Path:
    data, configs = tmp_path / "data", tmp_path / "configs"
    words = ["one", "two", "three", "four", "five", "six"]
    _lines(data / "flores" / "eng.devtest", words)
    _lines(data / "flores" / "deu.devtest", ["eins", "zwei", "drei", "vier", "fünf", "sechs"])
    _lines(data / "flores" / "fra.devtest", ["un", "deux", "trois"])  # 3 lines against 6
    for split in ("training", "test"):
        _lines(data / "bucc" / f"de-en.{split}.de", ["a1\tHund", "a2\tKatze"])
        _lines(data / "bucc" / f"de-en.{split}.en", ["b1\tdog", "b2\tcat"])
        _lines(data / "bucc" / f"de-en.{split}.gold", ["a1\tb1", "a2\tb2"])
    _lines(data / "bucc" / "fr-en.training.en", ["b1\tdog"])
    _lines(data / "bucc" / "fr-en.training.gold", ["a1\tb1"])
    (data / "bucc" / "fr-en.training.fr").write_bytes(b"a1\tchien \xe9\n")  # Latin-1, not UTF-8
    _lines(data / "retrieval" / "q.de", ["eins", "zwei", "drei"])
    _lines(data / "retrieval" / "c.en", ["one", "two", "three"])  # q.fr is missing
    _lines(data / "sts" / "good.tsv", [f"uno {i}\tone {i % 3}\t{i % 5}" for i in range(6)])
    (data / "sts" / "bad.tsv").write_bytes(b"\xff\xfebad\tfile\t1\n")
    rows = [f"{i}\tsrc {i}\tmt {i * i}\t[1]\t1\t[0]\t{np.sin(i):.3f}\t0" for i in range(6)]
    _lines(data / "mlqe" / "en-de" / "test20.ende.df.short.tsv", [MLQE_HEADER] + rows)
    _lines(data / "mlqe" / "en-zh" / "test20.enzh.df.short.tsv", ["index\toriginal"] + rows)  # header lacks columns
    configs.mkdir()
    (configs / "flores.yaml").write_text("type: flores\nname: flores\ndata_subdir: flores\nlanguages: [de, fr]\n")
    (configs / "bucc.yaml").write_text("type: bucc\nname: bucc\ndata_subdir: bucc\nlanguages: [de, fr]\nk: 1\n")
    (configs / "retrieval.yaml").write_text(
        "type: large_retrieval\nname: retrieval\ndata_subdir: retrieval\nn_queries: 2\nn_candidates: 3\nk: 1\npairs:\n"
        "  - {src: q.de, tgt: c.en, src_lang: de}\n  - {src: q.fr, tgt: c.en, src_lang: fr}\n"
    )
    (configs / "sts.yaml").write_text(
        "type: sts\nname: sts\ndata_subdir: sts\ntracks:\n"
        "  - {name: good, file: good.tsv, langs: [es, en]}\n"
        "  - {name: bad, file: bad.tsv, langs: [ar, en]}\n"
    )
    (configs / "mlqe.yaml").write_text(
        "type: qe\nname: mlqe\ndata_subdir: mlqe\nsplit: test20\npairs: [en-de, en-zh]\n"
    )
    (configs / "suite.yaml").write_text(
        "tasks: [flores.yaml, bucc.yaml, retrieval.yaml, sts.yaml, mlqe.yaml, gone.yaml]\n"
    )
    return configs / "suite.yaml"


def test_every_task_with_per_language_files_skips_only_the_bad_one(tmp_path, capsys):
    """One bad or missing file in each task type (misaligned FLORES, non-UTF-8 BUCC, missing
    retrieval file, non-UTF-8 STS track, MLQE header without its columns) and a suite entry whose
    config is gone -> before: tracebacks (ValueError) or whole tasks dropped -> now: each bad item
    listed with its reason in results.json and report.md, every good item scored."""
    suite = _suite_with_one_bad_item_per_task(tmp_path)
    out = tmp_path / "out"
    results = run_all(
        TrigramEncoder(), tmp_path / "data", out_dir=out, suite_path=suite, progress=False, print_tables=False
    )
    assert not_run(results) == ["flores/fr", "bucc/fr", "retrieval/fr-en", "sts/bad", "mlqe/en-zh", "gone"]
    saved = read_results(out)
    assert "has 3 lines but" in saved["flores"]["data_errors"]["fr"] and "de" in saved["flores"]["languages"]
    assert (
        "fr-en.training.fr is not valid UTF-8" in saved["bucc"]["data_errors"]["fr"]
        and "de" in saved["bucc"]["languages"]
    )
    assert "q.fr" in saved["retrieval"]["data_errors"]["fr-en"] and "de-en" in saved["retrieval"]["languages"]
    assert (
        "bad.tsv is not valid UTF-8" in saved["sts"]["data_errors"]["bad"]
        and saved["sts"]["languages"]["good"]["n"] == 6
    )
    assert (
        "lacks column(s) translation" in saved["mlqe"]["data_errors"]["en-zh"]
        and saved["mlqe"]["languages"]["en-de"]["n"] == 6
    )
    assert "missing task config" in saved["gone"]["error"]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert (
        report.count("Not run, bad or missing data (1):") == 5 and "### gone\n\nNot run: missing task config" in report
    )
    err = capsys.readouterr().err
    assert "flores/fr: not run: " in err and "mlqe/en-zh: not run: " in err and "Traceback" not in err


def _link_out(path: Path, elsewhere: Path) -> Path:
    """`path` (a file or folder) moved to `elsewhere` and replaced by a symlink to it; returns `path`."""
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    path.rename(elsewhere)
    path.symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    return path


def test_a_data_file_a_symlink_leads_out_of_its_folder_is_a_data_error_of_every_task(tmp_path, capsys):
    """A file (MLQE: a pair folder) that a symlink leads out of a task's data folder -> before: read
    and scored as the task's data -> now: a data error of its item naming the link and where it
    leads, as every other folder reader refuses it (ems.corpus.inside_folder); the rest still runs."""
    suite = _suite_with_one_bad_item_per_task(tmp_path)
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    linked = {
        ("flores", "de"): data / "flores" / "deu.devtest",
        ("bucc", "de"): data / "bucc" / "de-en.test.en",
        ("retrieval", "de-en"): data / "retrieval" / "c.en",
        ("sts", "good"): data / "sts" / "good.tsv",
        ("mlqe", "en-de"): data / "mlqe" / "en-de",
    }
    for path in linked.values():
        _link_out(path, elsewhere / path.parent.name / path.name)
    out = tmp_path / "out"
    run_all(TrigramEncoder(), data, out_dir=out, suite_path=suite, progress=False, print_tables=False)
    saved = read_results(out)
    for (task, item), path in linked.items():
        reason = saved[task]["data_errors"][item]
        assert (
            reason.startswith(f"{path}") and f" leads to {elsewhere}" in reason and "outside the data folder" in reason
        )
        assert item not in saved[task]["languages"]


def test_a_tatoeba_or_heldout_file_linked_out_is_not_scored(tmp_path, capsys, trigram_kind):
    data = tatoeba_data(tmp_path / "data", ("deu", "fra"))
    heldout = tmp_path / "heldout"
    write_pair(heldout, "de-en", "gettext", {"de": ["Datei öffnen", "Speichern"], "en": ["Open file", "Save"]})
    tatoeba_file = _link_out(data / "tatoeba" / "tatoeba.deu-eng.deu", tmp_path / "elsewhere" / "deu")
    pair_dir = _link_out(heldout / "de-en", tmp_path / "elsewhere" / "de-en")
    err, results = run_all_cli(data, tmp_path / "out", capsys, "--heldout", heldout)
    assert_one_error_line(err, "could not run tatoeba/de, heldout/de;")
    assert results["tatoeba"]["data_errors"]["de"].startswith(f"{tatoeba_file} leads to {tmp_path / 'elsewhere'}")
    assert results["heldout"]["data_errors"]["de"].startswith(f"{pair_dir}/gettext.de leads to")
    assert_scored(results["tatoeba"], "fr")


def test_results_json_is_written_even_when_a_task_crashes(tmp_path):
    """An encoder that raises (a bug, not bad input) -> before: no results.json -> now: results.json
    holds what ran and the crashed task, and the error still propagates with its traceback."""

    class Broken(TrigramEncoder):
        def encode(self, sentences, lang):
            raise RuntimeError("encoder exploded")

    data = tatoeba_data(tmp_path / "data", ("deu",))
    heldout = tmp_path / "heldout"
    write_pair(heldout, "de-en", "gettext", {"de": ["Datei"], "en": ["File"]})
    with pytest.raises(RuntimeError, match="exploded"):
        run_all(Broken(), data, heldout, tmp_path / "out", progress=False, print_tables=False)
    assert read_results(tmp_path / "out") == {
        "tatoeba": {"task": "tatoeba", "type": "tatoeba", "error": "crashed: RuntimeError: encoder exploded"}
    }


# --- ems.apps.mine --src-lang / --tgt-lang (item 4) -----------------------------------------------


def _mine_argv(tmp_path: Path, encoder: str, src_lang: str, tgt_lang: str = "en") -> list:
    return [
        "--encoder",
        encoder,
        "--src",
        tmp_path / "src.txt",
        "--src-lang",
        src_lang,
        "--tgt",
        tmp_path / "tgt.txt",
        "--tgt-lang",
        tgt_lang,
        "--out",
        tmp_path / "mined" / "pairs.tsv",
        "--k",
        "1",
    ]


def test_mine_rejects_an_unknown_language_before_reading_files(tmp_path, capsys, trigram_kind):
    """`ems.apps.mine --src-lang xx` -> before: ran (and wrote pairs) -> now: one error line naming the
    encoder's languages (an EMS-like encoder) or saying the code is no language (an encoder of any
    language), exit status 2, before any file is read (--src does not even exist) or written."""
    status, err = cli(mine_main, _mine_argv(tmp_path, "bilingual", "xx"), capsys)
    assert status == 2
    assert_one_error_line(err, "--src-lang", "'xx'", "the encoder's languages: de en")
    status, err = cli(mine_main, _mine_argv(tmp_path, "bilingual", "de", "fr"), capsys)
    assert status == 2
    assert_one_error_line(err, "--tgt-lang", "language 'fr' is not in the encoder's languages: de en")
    status, err = cli(mine_main, _mine_argv(tmp_path, "trigram", "xx"), capsys)
    assert status == 2
    assert_one_error_line(err, "--src-lang", "'xx' does not name a registered language")
    assert not (tmp_path / "mined").exists()

    # an alias of one of the encoder's languages resolves, and mining runs
    (tmp_path / "src.txt").write_text("Hund\nKatze\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("dog\ncat\n", encoding="utf-8")
    status, err = cli(mine_main, _mine_argv(tmp_path, "bilingual", "deu", "EN"), capsys)
    assert status == 0 and "Traceback" not in err
    assert trigram_kind.calls == [("de", 2), ("en", 2)]  # the encoder got its own codes
    assert (tmp_path / "mined" / "pairs.tsv").read_text(encoding="utf-8").count("\n") >= 1


# --- every eval command line: one error line, status 2, --debug (item 4) ---------------------


def _cli_cases(tmp_path: Path) -> dict:
    """{command: (main, argv with one user error, a fragment of the message, the exception type)}."""
    missing = tmp_path / "missing"
    return {
        "eval.run_all --suite": (
            run_all_main,
            [
                "--encoder",
                "trigram",
                "--data-dir",
                tmp_path,
                "--suite",
                missing / "suite.yaml",
                "--out",
                tmp_path / "out",
            ],
            "missing suite config",
            FileNotFoundError,
        ),
        "eval.run_all --model": (
            run_all_main,
            ["--model", missing, "--data-dir", tmp_path],
            "does not exist",
            Exception,
        ),
        "eval.run_all --encoder": (
            run_all_main,
            ["--encoder", "laser", "--data-dir", tmp_path, "--out", tmp_path / "o"],
            "encoder 'laser': unknown kind 'laser'",
            ValueError,
        ),
        "ems.apps.mine": (
            mine_main,
            _mine_argv(tmp_path, "trigram", "xx"),
            "'xx' does not name a registered language",
            ValueError,
        ),
        "eval.train_head": (
            train_head_main,
            [
                "--encoder",
                "trigram",
                "--head",
                "centering",
                "--flores",
                missing,
                "--languages",
                "de",
                "--out",
                tmp_path / "head",
            ],
            "lacks the files of",
            OSError,
        ),
        "eval.curves": (curves_main, [missing], "metrics.jsonl not found", FileNotFoundError),
        "eval.make_flores_bucc": (
            make_flores_bucc_main,
            ["--data-dir", missing, "--out", tmp_path / "bucc", "--languages", "de"],
            "no FLORES-200 devtest file for 'de'",
            OSError,
        ),
    }


@pytest.mark.parametrize(
    "command",
    [
        "eval.run_all --suite",
        "eval.run_all --model",
        "eval.run_all --encoder",
        "ems.apps.mine",
        "eval.train_head",
        "eval.curves",
        "eval.make_flores_bucc",
    ],
)
def test_every_eval_command_line_gives_one_error_line_and_status_2(
    command, tmp_path, capsys, monkeypatch, trigram_kind
):
    """A user error in each eval command line -> before: tracebacks (a missing --suite), exit 1
    (mine, curves, make_flores_bucc) or usage text (train_head, run_all) -> now: one `error: ...`
    line, exit status 2; --debug or EMS_DEBUG=1 shows the traceback (the exception propagates)."""
    main, argv, fragment, exception = _cli_cases(tmp_path)[command]
    status, err = cli(main, argv, capsys)
    assert status == USAGE_EXIT_CODE == 2
    assert err.count("\n") == 1
    assert_one_error_line(err, fragment)
    with pytest.raises(exception, match=fragment.replace("(", r"\(")):
        run_main(main, [str(arg) for arg in argv] + ["--debug"])
    monkeypatch.setenv("EMS_DEBUG", "1")
    with pytest.raises(exception):
        run_main(main, [str(arg) for arg in argv])


# --- the real command line --------------------------------------------------------------------


def _precomputed(directory: Path, data: Path) -> None:
    """npy:DIR embeddings for every Tatoeba file under data/tatoeba, as ems.encoder_kinds expects."""
    directory.mkdir(parents=True, exist_ok=True)
    encoder = TrigramEncoder()
    for path in sorted((data / "tatoeba").glob("tatoeba.*")):
        lang = "en" if path.suffix == ".eng" else {".deu": "de", ".fra": "fr", ".spa": "es"}[path.suffix]
        sentences = path.read_text(encoding="utf-8").splitlines()
        np.save(directory / f"{embedding_key(sentences, lang)}.npy", encoder.encode(sentences, lang))


def _python_m(*argv) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "EMS_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", *map(str, argv)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_real_cli_misaligned_tatoeba_pair_and_missing_suite(tmp_path):
    """The same rows through `python -m eval.run_all`: a misaligned pair -> exit 2, results.json with
    the good language scored; a missing --suite -> one error line, exit 2, nothing else written."""
    data = tatoeba_data(tmp_path / "data", ("deu", "fra"))
    _precomputed(tmp_path / "npy", data)
    with open(data / "tatoeba" / "tatoeba.fra-eng.eng", "a", encoding="utf-8") as f:
        f.write("One line too many.\n")
    out = tmp_path / "out"
    done = _python_m("eval.run_all", "--encoder", f"npy:{tmp_path / 'npy'}", "--data-dir", data, "--out", out)
    assert done.returncode == 2, done.stderr
    assert_one_error_line(done.stderr, "could not run tatoeba/fr;")
    results = read_results(out)
    assert results["tatoeba"]["languages"]["de"]["n"] == 3 and "has 3 lines" in results["tatoeba"]["data_errors"]["fr"]

    done = _python_m(
        "eval.run_all",
        "--encoder",
        f"npy:{tmp_path / 'npy'}",
        "--data-dir",
        data,
        "--suite",
        tmp_path / "nope.yaml",
        "--out",
        tmp_path / "out2",
    )
    assert done.returncode == 2 and done.stderr == f"error: missing suite config {tmp_path / 'nope.yaml'}\n"
    assert not (tmp_path / "out2").exists()
