"""xSIM against LASER's definition (source/xsim.py) on a hand-computed case, the xSIM++ reader on a
fixture in LASER's published layout, and the xsim task through eval.run_all on real FLORES files."""

import json
import re

import numpy as np
import pytest

from ems.configs import ConfigError, load_config
from eval.evaluators.retrieval import read_lines
from eval.evaluators.xsim import (
    MISALIGNED,
    XsimConfig,
    margin_picks,
    read_augmented_english,
    xsim_errors,
    xsimpp_errors,
)
from eval.run_all import run_all
from eval.task import read_task_config
from tests.fakes import TrigramEncoder

# y = the unit vectors e0, e1, e2, so cos(x_i, y_j) = x_i[j]; x rows are unit vectors too.
#            y0    y1    y2
# x0      [0.60, 0.80, 0.00]   gold y0, but y1 (a "hub", near every x) is nearer
# x1      [0.28, 0.96, 0.00]   gold y1
# x2      [0.00, 0.80, 0.60]   gold y2, y1 again nearer
X = np.array([[0.6, 0.8, 0.0], [0.28, 0.96, 0.0], [0.0, 0.8, 0.6]], dtype=np.float32)
Y = np.eye(3, dtype=np.float32)
# k = 2. avg_x (mean of each row's 2 best): x0 (0.8+0.6)/2 = 0.70, x1 (0.96+0.28)/2 = 0.62, x2 0.70.
# avg_y (mean of each column's 2 best): y0 (0.6+0.28)/2 = 0.44, y1 (0.96+0.8)/2 = 0.88, y2 (0.6+0)/2 = 0.30.
# x->y, candidates = x's 2 nearest y, margin denominators (avg_x + avg_y) / 2:
#   x0: y1 0.8 / 0.79 = 1.013 (distance 0.8 - 0.79 = 0.01)   y0 0.6 / 0.57 = 1.053 (0.03)   -> y0, right
#   x1: y1 0.96 / 0.75 = 1.280 (0.21)                         y0 0.28 / 0.53 = 0.528 (-0.25) -> y1, right
#   x2: y1 0.8 / 0.79 = 1.013 (0.01)                          y2 0.6 / 0.50 = 1.200 (0.10)   -> y2, right
# absolute (plain cosine): x0 -> y1, x1 -> y1, x2 -> y1: 2 errors of 3.
# y->x: y0 -> x0 (0.6 / 0.57 = 1.053 beats x1 0.28 / 0.53), y1 -> x1 (0.96 / 0.75 = 1.28 beats
# 0.8 / 0.79), y2 -> x2 (0.6 / 0.5); absolute: y0 -> x0 (0.6), y1 -> x1 (0.96), y2 -> x2 (0.6): no error.
HAND = {"ratio": ([0, 1, 2], [0, 1, 2]), "distance": ([0, 1, 2], [0, 1, 2]), "absolute": ([1, 1, 1], [0, 1, 2])}


@pytest.mark.parametrize("margin", ["ratio", "distance", "absolute"])
def test_margin_picks_and_errors_match_the_hand_computed_case(margin):
    forward, backward = margin_picks(X, Y, margin, k=2)
    assert (forward.tolist(), backward.tolist()) == HAND[margin]
    expected = {"ratio": (0, 0), "distance": (0, 0), "absolute": (2, 0)}[margin]
    assert xsim_errors(X, Y, margin, k=2) == expected


def test_textual_comparison_forgives_a_pick_identical_to_the_gold_sentence():
    # absolute: x0 and x2 pick y1; if y1's sentence equals x2's gold y2, x2's pick is no error (LASER's eval_text).
    assert xsim_errors(X, Y, "absolute", k=2, y_texts=["a", "b", "c"]) == (2, 0)
    assert xsim_errors(X, Y, "absolute", k=2, y_texts=["a", "b", "b"]) == (1, 0)
    with pytest.raises(ValueError, match="same"):
        xsim_errors(X, Y[:2])


def laser_ratio_errors(x: np.ndarray, y: np.ndarray, k: int = 4) -> int:
    """LASER's _score_knn + calculate_error (ratio margin, index comparison), written out in float64."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    y = y / np.linalg.norm(y, axis=1, keepdims=True)
    cos = x.astype(np.float64) @ y.T.astype(np.float64)
    avg_x = np.sort(cos, axis=1)[:, -k:].mean(axis=1)
    avg_y = np.sort(cos, axis=0)[-k:, :].mean(axis=0)
    errors = 0
    for i in range(len(x)):
        neighbours = np.argsort(-cos[i])[:k]
        scores = [cos[i, j] / ((avg_x[i] + avg_y[j]) / 2) for j in neighbours]
        errors += int(neighbours[int(np.argmax(scores))] != i)
    return errors


def write_xsimpp_fixture(directory):
    """LASER's layout: <split>_augmented/eng_Latn_augmented.devtest (one sentence a line) and
    eng_Latn_errtype.devtest.json {augmented sentence: {"src": original sentence, "errtype": type}}."""
    directory.mkdir(parents=True)
    (directory / "eng_Latn_augmented.devtest").write_text("Three dogs ran.\nA cat stood.\n", encoding="utf-8")
    errtypes = {
        "Three dogs ran.": {"src": "Two dogs ran.", "errtype": "num"},
        "A cat stood.": {"src": "A cat sat.", "errtype": "verb"},
    }
    (directory / "eng_Latn_errtype.devtest.json").write_text(json.dumps(errtypes), encoding="utf-8")


def test_xsimpp_reader_and_errors_by_transformation(tmp_path):
    write_xsimpp_fixture(tmp_path / "devtest_augmented")
    extra = read_augmented_english(tmp_path / "devtest_augmented")
    assert extra.sentences == ["Three dogs ran.", "A cat stood."]
    assert extra.origin == {"Three dogs ran.": ("Two dogs ran.", "num"), "A cat stood.": ("A cat sat.", "verb")}
    english_texts = ["A cat sat.", "Two dogs ran.", "It rains."]
    english, augmented = np.eye(5, dtype=np.float32)[:3], np.eye(5, dtype=np.float32)[3:]  # candidates 0..4 = e0..e4
    # x0 = e0 picks its gold; x1 = .6 e1 + .8 e3 picks "Three dogs ran." (made from its gold: "num");
    # x2 = .6 e2 + .8 e4 picks "A cat stood.", made from another sentence than its gold: Misaligned.
    x = np.array([[1, 0, 0, 0, 0], [0, 0.6, 0, 0.8, 0], [0, 0, 0.6, 0, 0.8]], dtype=np.float32)
    assert xsimpp_errors(x, english, augmented, english_texts, extra, "absolute", k=1) == (2, {"num": 1, MISALIGNED: 1})
    (tmp_path / "devtest_augmented" / "eng_Latn_errtype.devtest.json").write_text('{"A cat stood.": "verb"}')
    with pytest.raises(ValueError, match="errtype"):
        read_augmented_english(tmp_path / "devtest_augmented")
    with pytest.raises(FileNotFoundError, match="missing xSIM\\+\\+ file"):
        read_augmented_english(tmp_path)


def test_language_filter_reads_flores_keys(data_dir, tmp_path):
    # --languages qu,zh: Quechua's file is `quy` (key qu; canonical_language("quy") is "quy"), and zh has two files
    config = tmp_path / "xsim.yaml"
    config.write_text(
        "type: xsim\nname: xsim_flores\ndata_subdir: flores200/devtest\nlanguages: all\n", encoding="utf-8"
    )
    (tmp_path / "suite.yaml").write_text("tasks: [xsim.yaml]\n", encoding="utf-8")
    results = run_all(
        TrigramEncoder(),
        data_dir,
        out_dir=tmp_path / "out",
        languages=["qu", "zh"],
        max_sentences=20,
        progress=False,
        suite_path=tmp_path / "suite.yaml",
        print_tables=False,
    )
    assert sorted(results["xsim_flores"]["languages"]) == ["cmn_Hans", "cmn_Hant", "quy"]


def test_xsim_task_through_run_all_on_real_flores(data_dir, tmp_path):
    # Three real FLORES languages, first 40 lines after encoding every whole file; a trigram
    # encoder stands in for a model (mUSE needs ~25 s a file on this machine).
    config = tmp_path / "xsim.yaml"
    config.write_text(
        "type: xsim\nname: xsim_flores\ndata_subdir: flores200/devtest\nmargin: ratio\nk: 4\n"
        "languages: [deu, cmn_Hans, srp_Cyrl]\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text("tasks: [xsim.yaml]\n", encoding="utf-8")
    encoder = TrigramEncoder()
    results = run_all(
        encoder,
        data_dir,
        out_dir=tmp_path / "out",
        max_sentences=40,
        progress=False,
        suite_path=tmp_path / "suite.yaml",
        print_tables=False,
    )
    result = results["xsim_flores"]
    assert list(result["languages"]) == ["deu", "cmn_Hans", "srp_Cyrl"]
    assert [row["lang"] for row in result["languages"].values()] == ["de", "zh", "sr"]
    assert sorted(encoder.calls) == [("de", 1012), ("en", 1012), ("sr", 1012), ("zh", 1012)]  # whole files: cache keys
    for row in result["languages"].values():
        assert row["n"] == 40 and 0 <= row["xx2en"] <= 100 and row["mean"] == (row["xx2en"] + row["en2xx"]) / 2
    assert result["languages"]["deu"]["xx2en"] < 80  # chance: 97.5% error
    # LASER's formula in float64, one row at a time, on the same 40 German and English embeddings
    flores = data_dir / "flores200" / "devtest"
    x = TrigramEncoder().encode(read_lines(flores / "deu.devtest"), "de")[:40]
    y = TrigramEncoder().encode(read_lines(flores / "eng.devtest"), "en")[:40]
    assert result["languages"]["deu"]["xx2en"] == 100.0 * laser_ratio_errors(x, y) / 40
    assert result["languages"]["deu"]["en2xx"] == 100.0 * laser_ratio_errors(y, x) / 40
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "xSIM error rate" in report and "| deu | de | 40 |" in report
    # a misspelled stem or key is one line naming the file, when the config is read
    config.write_text(
        "type: xsim\nname: x\ndata_subdir: f\nenglish: engl\nmargin: cosine\nk: 0\nlanguages: [deutsch]\n",
        encoding="utf-8",
    )
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(config))}: margin must be one of .*; k must be a positive"
    ):
        read_task_config(config)
    config.write_text("type: xsim\nname: x\ndata_subdir: f\nenglish: engl\nlanguages: [deu, deutsch]\n")
    with pytest.raises(ConfigError) as error:
        read_task_config(config)
    engl, deutsch = error.value.problems  # the English stem too, and only the misspelled codes
    assert "'engl' does not name a registered language" in engl and "tag 'deutsch'" in deutsch


def test_xsim_and_flores_bitext_key_every_real_flores_language_alike(data_dir):
    # `languages: all` of both FLORES tasks: 203 languages (the 204 files but English, less msa, a byte copy
    # of zsm: Malay once), the bitext task keyed by language key, the xSIM task by file stem with that key
    # in each row (a no-list encoder: every file is scored)
    from ems.encoder_kinds import NgramEncoder
    from ems.languages import flores_languages
    from eval.evaluators.flores import FloresConfig, evaluate_flores
    from eval.evaluators.xsim import evaluate_xsim
    from eval.task import RunOptions, TaskRun

    split_dir = data_dir / "flores200" / "devtest"
    encoder = NgramEncoder(dim=8)
    every_file = {"name": "flores", "data_subdir": "flores200/devtest", "languages": "all"}
    flores_config, xsim_config = (load_config(cls, values=every_file) for cls in (FloresConfig, XsimConfig))
    options = RunOptions(max_sentences=8, progress=False)
    bitext = evaluate_flores(encoder, TaskRun(flores_config, split_dir, options))
    xsim = evaluate_xsim(encoder, TaskRun(xsim_config, split_dir, options))
    assert len(bitext["languages"]) == 203 and len(xsim["languages"]) == 203
    assert bitext["skipped"] == {"same text as zsm.devtest": ["msa"]} and "ms" in bitext["languages"]
    assert xsim["skipped"] == {"same text as zsm.devtest": ["msa"]} and xsim["languages"]["zsm"]["language"] == "ms"
    assert sorted(row["language"] for row in xsim["languages"].values()) == sorted(bitext["languages"])
    assert sorted(bitext["languages"]) == sorted(set(flores_languages(split_dir, "devtest")) - {"en", "msa"})
    assert xsim["languages"]["cmn_Hant"]["language"] == "zh-Hant" and "zh-Hant" in bitext["languages"]
    assert bitext["languages"]["ace-Arab"]["source"] == "ace_Arab.devtest"
    assert xsim["languages"]["deu"]["lang"] == "de"  # the code it was encoded with: the key (no language list)


def test_flores_variety_keys_are_encoded_as_the_model_language_they_name(data_dir):
    """A model with a language list (ace and ace_Arab, ak): FLORES's ace-Latn, ace-Arab and twi are
    scored, each encoded as the entry of the list it names, and keyed by FLORES's key."""
    from ems.encoder_kinds import NgramEncoder
    from eval.evaluators.flores import FloresConfig, evaluate_flores
    from eval.task import RunOptions, TaskRun

    class Listed(NgramEncoder):
        languages = ["en", "ace", "ace_Arab", "ak"]

        def __init__(self):
            super().__init__(dim=8)
            self.calls: dict[int, str] = {}

        def encode(self, sentences, lang):
            self.calls[len(self.calls)] = f"{lang}:{sentences[0][:12]}"
            return super().encode(sentences, lang)

    split_dir = data_dir / "flores200" / "devtest"
    values = {"name": "flores", "data_subdir": "flores200/devtest", "languages": ["ace-Latn", "ace-Arab", "twi"]}
    encoder = Listed()
    result = evaluate_flores(
        encoder,
        TaskRun(load_config(FloresConfig, values=values), split_dir, RunOptions(max_sentences=4, progress=False)),
    )
    assert sorted(result["languages"]) == ["ace-Arab", "ace-Latn", "twi"] and not result["skipped"]
    first = {
        name: (split_dir / f"{name}.devtest").read_text().split("\n")[0][:12]
        for name in ["ace_Arab", "ace_Latn", "twi"]
    }
    encoded = set(encoder.calls.values())
    assert {f"ace_Arab:{first['ace_Arab']}", f"ace:{first['ace_Latn']}", f"ak:{first['twi']}"} <= encoded
