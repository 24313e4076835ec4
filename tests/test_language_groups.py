"""eval.language_groups: results split by each language's training pairs. Group boundaries, pairs
read from a hand-written index.json, and the averages of a hand-written results.json, each
expected number counted by hand in the comments."""

import csv
import json

import pytest

from ems.cli import run_main
from eval.language_groups import group_of, grouped_results, main, training_pairs, write_grouped


@pytest.mark.parametrize(
    "pairs, group",
    [
        (28_000, "≥10k pairs"),
        (10_000, "≥10k pairs"),
        (9_999, "1k–10k"),
        (1_000, "1k–10k"),
        (999, "<1k"),
        (1, "<1k"),
        (0, "unseen"),
        (None, "unseen"),
    ],
)
def test_group_boundaries(pairs, group):
    assert group_of(pairs) == group


def test_negative_pairs_are_an_error():
    with pytest.raises(ValueError, match="cannot be negative"):
        group_of(-1)


def _index(directory, files):
    directory.mkdir(parents=True, exist_ok=True)
    entries, start = [], 0
    for l1, l2, n, with_count in files:
        entry = {"name": "corpus", "l1": l1, "l2": l2, "start": start, "end": start + n}
        if with_count:
            entry["n_pairs"] = n
        entries.append(entry)
        start += n
    index = {"languages": sorted({f[0] for f in files} | {f[1] for f in files}), "files": entries, "n_pairs": start}
    (directory / "index.json").write_text(json.dumps(index), encoding="utf-8")
    return directory


def test_training_pairs_add_up_per_language(tmp_path):
    shards = _index(
        tmp_path / "shards",
        [
            ("de", "en", 6_000, True),
            ("de", "en", 5_000, True),  # a second corpus of de-en: de has 11,000
            ("en", "fr", 999, True),
            ("zh", "en", 1_000, False),  # no n_pairs: its [start, end) range counts
        ],
    )
    # en is a side of all four: 6,000 + 5,000 + 999 + 1,000 = 12,999
    assert training_pairs(shards) == {"de": 11_000, "en": 12_999, "fr": 999, "zh": 1_000}
    with pytest.raises(FileNotFoundError, match="has no index.json"):
        training_pairs(tmp_path / "nowhere")


def _task(name, type_name, metric, rows):
    return {"task": name, "type": type_name, "metric": metric, "languages": rows, "average": None, "skipped": {}}


RESULTS = {
    "schema_version": 2,
    "tasks": {
        "tatoeba": _task(
            "tatoeba",
            "tatoeba",
            "p_at_1",
            {"de": {"mean": 90.0}, "fr": {"mean": 80.0}, "zh": {"mean": 70.0}, "wuu": {"mean": 20.0}},
        ),
        "flores200": _task(
            "flores200",
            "flores",
            "p_at_1",
            {
                "de": {"mean": 85.0},
                "zh": {"mean": 60.0},
                "zh-Hant": {"mean": 50.0},
                "ace-Arab": {"mean": 10.0},
                "ace-Latn": {"mean": 30.0},
            },
        ),
        "xsim_flores200": _task(
            "xsim_flores200",
            "xsim",
            "xsim_error",
            {
                "deu": {"language": "de", "xx2en": 5.0, "mean": 99.0},
                "cmn_Hant": {"xx2en": 40.0, "mean": 99.0},  # a row written before `language`: keyed from the stem
            },
        ),
        "sib200": _task(
            "sib200",
            "classification",
            "accuracy",
            {"de": {"accuracy": 80.0}, "zh-hant": {"accuracy": 50.0}, "ace-arab": {"accuracy": 20.0}},
        ),
        "sts2017": _task("sts2017", "sts", "sts_correlation", {"ar-en": {"pearson": 0.5}}),  # not grouped
        "bucc2018": {"task": "bucc2018", "type": "bucc", "error": "missing data"},  # did not run
    },
}
# pairs by language: de 12,000 (≥10k), zh 1,000 given as cmn (1k–10k; zh-Hant counts zh's), fr 999 (<1k);
# wuu, ace-Arab, ace-Latn have none (unseen)
PAIRS = {"de": 12_000, "cmn": 1_000, "fr": 999, "en": 14_000}


@pytest.fixture
def results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS, ensure_ascii=False), encoding="utf-8")
    return path


def test_grouped_rows_and_hand_counted_group_averages(results_file, tmp_path):
    rows = grouped_results(results_file, PAIRS)
    assert len(rows) == 4 + 5 + 2 + 3  # tatoeba, flores, xsim, sib rows; sts and the failed task left out
    by_key = {(row["task"], row["language"]): row for row in rows}
    assert by_key["flores200", "zh-Hant"] == {
        "task": "flores200",
        "type": "flores",
        "language": "zh-Hant",
        "canonical": "zh",
        "group": "1k–10k",
        "training_pairs": 1_000,
        "score": 50.0,
    }
    assert by_key["xsim_flores200", "zh-Hant"]["score"] == 40.0  # xx2en, not the mean
    assert by_key["sib200", "ace-Arab"]["group"] == "unseen" and by_key["sib200", "zh-Hant"]["training_pairs"] == 1_000

    paths = write_grouped(rows, tmp_path / "out", PAIRS)
    assert [p.name for p in paths] == ["per_language.csv", "by_group.md", "p_at_1_vs_pairs.png"]
    markdown = (tmp_path / "out" / "by_group.md").read_text(encoding="utf-8")
    # group: languages | tatoeba | flores200 | xsim (xx2en) | sib200, each "average (n)":
    # ≥10k: de                      -> 90 | 85 | 5 | 80
    # 1k–10k: zh, zh-Hant           -> zh 70 | (60 + 50) / 2 = 55 | zh-Hant 40 | zh-Hant 50
    # <1k: fr                       -> 80 | – | – | –
    # unseen: wuu, ace-Arab, ace-Latn -> wuu 20 | (10 + 30) / 2 = 20 | – | ace-Arab 20
    # all: 7 languages              -> (90 + 80 + 70 + 20) / 4 = 65 | (85 + 60 + 50 + 10 + 30) / 5 = 47
    #                                  | (5 + 40) / 2 = 22.5 | (80 + 50 + 20) / 3 = 50
    for line in [
        "| ≥10k pairs | 1 | 90.00 (1) | 85.00 (1) | 5.00 (1) | 80.00 (1) |",
        "| 1k–10k | 2 | 70.00 (1) | 55.00 (2) | 40.00 (1) | 50.00 (1) |",
        "| <1k | 1 | 80.00 (1) | – | – | – |",
        "| unseen | 3 | 20.00 (1) | 20.00 (2) | – | 20.00 (1) |",
        "| **all** | 7 | 65.00 (4) | 47.00 (5) | 22.50 (2) | 50.00 (3) |",
    ]:
        assert line in markdown.splitlines()
    # Tatoeba over its 112 languages: de ≥10k, zh 1k–10k, fr <1k, the other 109 unseen (wuu evaluated)
    for line in [
        "| ≥10k pairs | 1 | 1 | 90.00 |",
        "| 1k–10k | 1 | 1 | 70.00 |",
        "| <1k | 1 | 1 | 80.00 |",
        "| unseen | 109 | 1 | 20.00 |",
        "| **all** | 112 | 4 | 65.00 |",
    ]:
        assert line in markdown.splitlines()

    with open(tmp_path / "out" / "per_language.csv", encoding="utf-8", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == [
        "language",
        "canonical",
        "group",
        "training_pairs",
        "tatoeba",
        "flores200",
        "xsim_flores200",
        "sib200",
    ]
    assert [line[0] for line in table[1:]] == ["de", "zh", "zh-Hant", "fr", "ace-Arab", "ace-Latn", "wuu"]
    assert table[3] == ["zh-Hant", "zh", "1k–10k", "1000", "", "50.00", "40.00", "50.00"]  # SIB's zh-hant: one row
    assert (tmp_path / "out" / "p_at_1_vs_pairs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_line_and_its_errors(results_file, tmp_path, capsys):
    shards = _index(tmp_path / "shards", [("de", "en", 12_000, True), ("zh", "en", 1_000, True)])
    out = tmp_path / "groups"
    assert run_main(main, [str(results_file), "--train-data", str(shards), "--out", str(out)]) == 0
    assert "| ≥10k pairs | 1 | 90.00 (1) |" in (out / "by_group.md").read_text(encoding="utf-8")
    capsys.readouterr()
    for argv, message in [
        ([str(tmp_path / "none.json"), "--train-data", str(shards)], "no results file"),
        ([str(results_file), "--train-data", str(tmp_path)], "has no index.json"),
    ]:
        assert run_main(main, [*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    (tmp_path / "sts.json").write_text(
        json.dumps({"schema_version": 2, "tasks": {"sts2017": RESULTS["tasks"]["sts2017"]}}), encoding="utf-8"
    )
    assert run_main(main, [str(tmp_path / "sts.json"), "--train-data", str(shards), "--out", str(out)]) == 2
    assert "no per-language results" in capsys.readouterr().err
