"""The generic bitext task on a corpus laid out like NTREX-128 (real FLORES-200 lines written as
newstest2019-ref.<code>.txt / newstest2019-src.eng.txt), run by `python -m eval.run_all`; margin
scoring and LASER's duplicate rule on hand-built vectors."""

import numpy as np
import pytest

from ems.configs import ConfigError, load_config
from eval.evaluators.bitext import BitextConfig, evaluate_bitext
from eval.evaluators.retrieval import read_lines
from eval.results import read_results as stored_results
from eval.run_all import main as run_all_main
from eval.task import RunOptions, TaskRun
from tests.fakes import TableEncoder, TrigramEncoder

N = 30
# NTREX file codes (3-letter, BCP-47 with region or script) -> the FLORES file holding the same language
NTREX_FROM_FLORES = {"deu": "deu", "fra-CA": "fra", "zho-CN": "cmn_Hans", "srp-Cyrl": "srp_Cyrl"}


def bitext_config(source: dict, targets: dict, languages: list[str], **keys) -> BitextConfig:
    """A bitext task config read by the config system, as from a YAML file."""
    values = {"name": "bitext", "data_subdir": "bitext", "source": source, "targets": targets, "languages": languages}
    return load_config(BitextConfig, values={**values, **keys})


def write_ntrex_like(data_dir, root):
    corpus = root / "ntrex" / "NTREX-128"
    corpus.mkdir(parents=True)
    flores = data_dir / "flores200" / "devtest"
    for code, stem in {"eng": "eng", **NTREX_FROM_FLORES}.items():
        name = "newstest2019-src.eng.txt" if code == "eng" else f"newstest2019-ref.{code}.txt"
        (corpus / name).write_text(
            "".join(f"{line}\n" for line in read_lines(flores / f"{stem}.devtest")[:N]), encoding="utf-8"
        )
    (corpus / f"newstest2019-ref.{'cmn_Hant'}.txt").write_text(  # a FLORES code in a file name works too
        "".join(f"{line}\n" for line in read_lines(flores / "cmn_Hant.devtest")[:N]), encoding="utf-8"
    )


def write_config(path, languages, **extra):
    lines = [
        "type: bitext",
        "name: ntrex",
        "data_subdir: ntrex/NTREX-128",
        'source: {pattern: "newstest2019-src.{lang}.txt", lang: eng}',
        'targets: {pattern: "newstest2019-ref.{lang}.txt"}',
        f"languages: [{', '.join(languages)}]",
    ]
    lines += [f"{key}: {value}" for key, value in extra.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (path.parent / "suite.yaml").write_text(f"tasks: [{path.name}]\n", encoding="utf-8")


def run_suite_with_trigrams(tmp_path, monkeypatch) -> int:
    """ems-eval of tmp_path/suite.yaml on tmp_path/data with the trigram encoder, out to tmp_path/out."""
    monkeypatch.setattr("eval.run_all.load_encoder", lambda spec, cache_dir, device: TrigramEncoder())
    argv = ["--encoder", "trigram", "--data-dir", str(tmp_path / "data"), "--suite", str(tmp_path / "suite.yaml")]
    return run_all_main([*argv, "--out", str(tmp_path / "out")])


def test_ems_eval_runs_the_generic_task_on_an_ntrex_layout(data_dir, tmp_path, monkeypatch):
    write_ntrex_like(data_dir, tmp_path / "data")
    codes = [*NTREX_FROM_FLORES, "cmn_Hant", "spa"]  # spa: no file, a data error that costs only spa
    write_config(tmp_path / "ntrex.yaml", codes)
    status = run_suite_with_trigrams(tmp_path, monkeypatch)
    result = stored_results(tmp_path / "out")["ntrex"]
    assert status == 2 and list(result["data_errors"]) == ["spa"]
    assert list(result["languages"]) == ["deu", "fra-CA", "zho-CN", "srp-Cyrl", "cmn_Hant"]
    assert {row["n"] for row in result["languages"].values()} == {N}
    assert result["languages"]["deu"]["source"] == "newstest2019-ref.deu.txt"
    assert result["languages"]["deu"]["mean"] > 20  # trigrams on news text; chance: 3.3%
    assert "P@1 (%) by cosine" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")


def test_a_misspelled_code_is_one_error_line(data_dir, tmp_path, monkeypatch, capsys):
    write_ntrex_like(data_dir, tmp_path / "data")
    write_config(tmp_path / "ntrex.yaml", ["deu", "frnch"])
    status = run_suite_with_trigrams(tmp_path, monkeypatch)
    err = capsys.readouterr().err
    assert status == 2 and "ntrex: not run:" in err and "frnch" in err


def test_languages_the_encoder_lacks_are_listed_and_codes_map_to_its_own(data_dir, tmp_path):
    write_ntrex_like(data_dir, tmp_path)
    config = bitext_config(
        {"pattern": "newstest2019-src.{lang}.txt", "lang": "eng"},
        {"pattern": "newstest2019-ref.{lang}.txt"},
        ["deu", "zho-CN", "srp-Cyrl"],
    )
    encoder = TrigramEncoder(languages=["en", "de", "zh"])
    result = evaluate_bitext(encoder, TaskRun(config, tmp_path / "ntrex" / "NTREX-128", RunOptions(progress=False)))
    assert list(result["languages"]) == ["deu", "zho-CN"] and result["skipped"] == {
        "not covered by the encoder": ["srp-Cyrl"]
    }
    assert sorted(set(encoder.calls)) == [("de", N), ("en", N), ("zh", N)]  # English encoded once, codes as the model's


def test_margin_scoring_and_laser_duplicates_on_hand_built_vectors(tmp_path):
    # The hand-computed case of tests/test_xsim.py (k = 2): cosine picks the hub y1 for x0 and x2
    # (xx2en 1 of 3), the ratio margin picks every gold (3 of 3); both get every en->xx right.
    x = {"a": [0.6, 0.8, 0.0], "b": [0.28, 0.96, 0.0], "c": [0.0, 0.8, 0.6]}
    y = {"A": [1, 0, 0], "B": [0, 1, 0], "C": [0, 0, 1]}
    (tmp_path / "src.eng").write_text("A\nB\nC\n", encoding="utf-8")
    (tmp_path / "ref.deu").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "ref.fra").write_text("a\nb\nc\n", encoding="utf-8")
    encoder = TableEncoder(
        {
            **{("de", s): v for s, v in x.items()},
            **{("fr", s): v for s, v in x.items()},
            **{("en", s): v for s, v in y.items()},
        }
    )
    sides = ({"pattern": "src.{lang}", "lang": "eng"}, {"pattern": "ref.{lang}"})

    def deu(**settings) -> dict:
        config = bitext_config(*sides, ["deu"], **settings)
        return evaluate_bitext(encoder, TaskRun(config, tmp_path, RunOptions(progress=False)))

    cosine = deu()["languages"]["deu"]
    assert cosine["xx2en"] == pytest.approx(100 / 3) and cosine["en2xx"] == 100.0
    margin = deu(scoring="margin", k=2)
    assert margin["languages"]["deu"]["xx2en"] == 100.0 and margin["settings"]["margin"] == "ratio"
    # English side "A", "B", "B": x2's pick y1 now has its gold's text; counted only with the rule.
    (tmp_path / "src.eng").write_text("A\nB\nB\n", encoding="utf-8")
    encoder.vectors[("en", "B")] = [0, 1, 0]
    y_dup = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    encoder.encode = lambda sentences, lang: (
        y_dup if lang == "en" else np.array([x[s] for s in sentences], dtype=np.float32)
    )
    off, on = deu()["languages"]["deu"], deu(laser_duplicates=True)
    assert off["xx2en"] == pytest.approx(100 / 3) and off["duplicate_hits"] == 0
    assert on["languages"]["deu"]["xx2en"] == pytest.approx(200 / 3) and on["languages"]["deu"]["duplicate_hits"] == 1
    assert on["laser_duplicates"] is True
    with pytest.raises(ConfigError, match=r"^BitextConfig: scoring must be one of cosine, margin; got 'dot'$"):
        bitext_config(*sides, ["deu"], scoring="dot")
