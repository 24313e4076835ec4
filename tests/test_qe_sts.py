"""WMT20 QE and STS2017: readers (real files and hand-made fixtures with quotes and malformed
rows), Pearson/Spearman against hand-computed values, and run_all end to end on a tiny subset."""

import numpy as np
import pytest
from scipy import stats

from ems.cli import MissingDataError
from eval.evaluators.correlation import correlations, cosine_rows
from eval.evaluators.qe import SKIP_EMPTY, SKIP_MALFORMED, SKIP_SCORE, mlqe_path, read_mlqe
from eval.evaluators.sts import StsTrack, read_sts, read_sts_tracks
from eval.results import read_results as stored_results
from eval.run_all import run_all
from tests.fakes import MLQE_HEADER, LanguageOffsetEncoder, mlqe_row, tiny_suite, write_lines


def test_mlqe_reader_keeps_quotes_and_counts_bad_rows(tmp_path):
    path = tmp_path / "en-de" / "test20.ende.df.short.tsv"
    write_lines(
        path,
        [
            MLQE_HEADER,
            mlqe_row(0, 'He said "stop', 'Er sagte "halt', "0.5"),  # an unbalanced quote must not swallow lines
            mlqe_row(1, "Plain.", "Schlicht.", "-1.25"),
            "2\ttoo\tfew",
            mlqe_row(3, "Score?", "Punkte?", "n/a"),
            mlqe_row(4, "Empty", "  ", "0.1"),
            mlqe_row(5, '"Quoted"', '„Zitiert"', "nan"),
            mlqe_row(6, '"Quoted"', '„Zitiert"', "2"),
        ],
    )
    pairs = read_mlqe(path, "en-de")
    assert (pairs.lang1, pairs.lang2) == ("en", "de")
    assert pairs.sent1 == ['He said "stop', "Plain.", '"Quoted"']
    assert pairs.sent2 == ['Er sagte "halt', "Schlicht.", '„Zitiert"']
    np.testing.assert_array_equal(pairs.gold, [0.5, -1.25, 2.0])
    assert pairs.skipped == {SKIP_MALFORMED: 1, SKIP_SCORE: 2, SKIP_EMPTY: 1}
    write_lines(path, ["index\toriginal\tmt\tz_mean", "0\ta\tb\t1"])
    with pytest.raises(ValueError, match="lacks column.*translation"):
        read_mlqe(path, "en-de")
    with pytest.raises(MissingDataError, match="missing WMT20 QE file"):
        read_mlqe(tmp_path / "nope.tsv", "en-de")
    assert mlqe_path(tmp_path, "et-en", "test20") == tmp_path / "et-en" / "test20.eten.df.short.tsv"


def test_sts_reader_fixture(tmp_path):
    path = tmp_path / "sts.tsv"
    write_lines(path, ['"Hi," he said.\t"Hola", dijo.\t4.2', "one\ttwo", "a\tb\tfive", "x\ty\t0"])
    pairs = read_sts(path, "t", "en", "es")
    assert pairs.sent1 == ['"Hi," he said.', "x"] and pairs.sent2 == ['"Hola", dijo.', "y"]
    np.testing.assert_array_equal(pairs.gold, [4.2, 0.0])
    assert pairs.skipped == {"not 3 fields": 1, "gold not a number": 1}
    sets, skipped = read_sts_tracks(
        tmp_path, [StsTrack("t", "sts.tsv", ["en", "es"]), StsTrack("u", "missing.tsv", ["en", "tr"])], max_sentences=1
    )
    assert [s.name for s in sets] == ["t"] and len(sets[0].gold) == 1 and "missing STS2017 file" in skipped["u"]
    with pytest.raises(MissingDataError, match="STS2017 directory .*nowhere does not exist"):
        read_sts_tracks(tmp_path / "nowhere", [StsTrack("u", "missing.tsv", ["en", "tr"])])


def test_readers_on_real_files(data_dir):
    pairs = read_mlqe(mlqe_path(data_dir / "mlqe", "en-de", "test20"), "en-de")
    # 1000 rows, none lost to the quote characters that 68 lines of this file contain
    assert len(pairs.gold) == 1000 and pairs.skipped == {}
    assert pairs.sent1[0] == "The Sultan appoints judges, and can grant pardons and commute sentences."
    assert pairs.gold[0] == pytest.approx(0.34937092778329654)
    assert sum('"' in s for s in pairs.sent1 + pairs.sent2) > 0
    track = read_sts(data_dir / "sts2017" / "STS2017.track4b.es-en.sent1-sent2-gold.tsv", "4b", "en", "es")
    assert len(track.gold) == 250 and track.skipped == {} and track.sent2[8] == '"Sería mucho más fácil si lo hizo".'


def test_correlations_by_hand():
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): r = 4 / sqrt(5 * 5) = 0.8; ranks equal the values
    assert correlations([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx({"pearson": 0.8, "spearman": 0.8})
    x, y = np.array([1.0, 2, 3, 100]), np.array([1.0, 2, 3, 4])
    dx, dy = x - x.mean(), y - y.mean()
    expected = (dx @ dy) / np.sqrt((dx @ dx) * (dy @ dy))
    assert correlations(x, y) == pytest.approx({"pearson": expected, "spearman": 1.0})
    assert correlations([1, 1, 1], [1, 2, 3]) == {"pearson": None, "spearman": None}
    with pytest.raises(ValueError, match="at least 3"):
        correlations([1, 2], [1, 2])
    np.testing.assert_allclose(cosine_rows(np.array([[1, 0], [1, 1]]), np.array([[0, 2], [2, 2]])), [0, 1])


def test_run_all_qe_sts_language_id_end_to_end(tmp_path):
    data, suite = tiny_suite(tmp_path)
    encoder = LanguageOffsetEncoder()
    results = run_all(encoder, data, out_dir=tmp_path / "out", suite_path=suite, progress=False)

    qe = results["mlqe"]
    assert qe["views"] == ["raw", "centering", "projection"] and list(qe["languages"]) == ["en-de"]
    assert list(qe["data_errors"]) == ["et-en"] and "missing WMT20 QE file" in qe["data_errors"]["et-en"]
    assert any("not_a_head" in items for items in qe["skipped"].values())
    # brute force: raw and centering correlations from the encoder's vectors and FLORES language means
    pairs = read_mlqe(data / "mlqe" / "en-de" / "test20.ende.df.short.tsv", "en-de")
    src, mt = encoder.encode(pairs.sent1, "en"), encoder.encode(pairs.sent2, "de")
    raw = stats.pearsonr(cosine_rows(src, mt), pairs.gold).statistic
    assert qe["languages"]["en-de"]["raw"]["pearson"] == pytest.approx(raw)
    flores = data / "flores200" / "devtest"
    lines = {
        lang: flores.joinpath(name).read_text().splitlines()
        for lang, name in (("en", "eng.devtest"), ("de", "deu.devtest"))
    }
    # centering is fit on the training split (valid_fraction 0.25 of the 12 pairs held out)
    from ems.heads import ParallelEmbeddings

    full = ParallelEmbeddings(
        encoder.encode(lines["en"], "en"),
        encoder.encode(lines["de"], "de"),
        np.ones(12, np.int64),
        np.zeros(12, np.int64),
        ["de", "en"],
    )
    train, _ = full.split(0.25, seed=0)
    mean_en, mean_de = train.x.mean(axis=0), train.y.mean(axis=0)
    centered = stats.pearsonr(cosine_rows(src - mean_en, mt - mean_de), pairs.gold).statistic
    assert qe["languages"]["en-de"]["centering"]["pearson"] == pytest.approx(centered, rel=1e-5)
    assert qe["average"]["raw"]["pearson"] == pytest.approx(raw)

    sts = results["sts"]
    assert sts["languages"]["4a"]["n"] == 7 and sts["head_training"]["languages"] == ["en", "es"]
    assert set(sts["languages"]["4a"]["projection"]) == {"pearson", "spearman"}

    lid = results["lid"]
    assert set(lid["views"]) == {"raw", "centering/meaning", "centering/language"}
    assert lid["views"]["centering/language"] == 100.0  # the language view is the language mean itself
    assert lid["lines"] == {"heads": [0, 4], "probe_train": [4, 8], "probe_test": [8, 12]}
    assert (tmp_path / "out" / "language_pca.png").stat().st_size > 1000

    saved = stored_results(tmp_path / "out")
    assert saved["lid"]["pca_plot"] == str(tmp_path / "out" / "language_pca.png")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| pair | n | raw | centering | projection |" in report and "| **average** (1) |" in report
    assert "centering/meaning" in report


def test_language_filter_and_missing_flores(tmp_path):
    data, suite = tiny_suite(tmp_path)
    (data / "flores200" / "devtest" / "spa.devtest").unlink()
    results = run_all(LanguageOffsetEncoder(), data, suite_path=suite, progress=False, languages=["de"])
    assert list(results["mlqe"]["languages"]) == ["en-de"]
    assert results["sts"]["languages"] == {}  # es-en filtered out
    assert list(results["lid"]["views"])[0] == "raw" and results["lid"]["languages_probed"] == ["de", "en"]
    results = run_all(LanguageOffsetEncoder(), data, suite_path=suite, progress=False)
    # No spa.devtest to train heads on or probe: es-en and es are data errors, the rest runs.
    assert results["sts"]["languages"] == {} and "(spa" in results["sts"]["data_errors"]["4a"]
    assert results["lid"]["languages_probed"] == ["de", "en"] and "(spa" in results["lid"]["data_errors"]["es"]
    assert list(results["mlqe"]["languages"]) == ["en-de"]


def test_repo_configs_name_real_files_and_column_languages(data_dir):
    """configs/eval/{mlqe,sts2017,sts2017_raw,language_id}.yaml parse, and every STS track's `langs`
    matches its file: each Arabic/Turkish/Spanish column is the one the config says, and an English
    column looks like none of them."""
    import re
    from pathlib import Path

    from eval.task import read_task_config, task_type

    configs = Path(__file__).resolve().parents[1] / "configs" / "eval"
    qe, _ = read_task_config(configs / "mlqe.yaml")
    assert all(mlqe_path(data_dir / qe["data_subdir"], pair, qe["split"]).is_file() for pair in qe["pairs"])
    assert read_task_config(configs / "language_id.yaml")[1] is task_type("language_id")
    looks_like = {
        "ar": lambda s: bool(re.search("[\u0600-\u06ff]", s)),
        "tr": lambda s: bool(re.search("[çğıöşü]", s)),
        "es": lambda s: bool(re.search(r"\b(el|la|los|las|una?|está|están)\b", s.lower())),
    }
    for config in ("sts2017.yaml", "sts2017_raw.yaml"):
        sts, _ = read_task_config(configs / config)
        assert len(sts["tracks"]) == 7  # every track of the release: 3 monolingual, 4 cross-lingual
        for track in sts["tracks"]:
            pairs = read_sts(data_dir / sts["data_subdir"] / track.file, track.name, *track.langs)
            for column, lang in zip((pairs.sent1, pairs.sent2), track.langs):
                if lang == "en":
                    for other, test in looks_like.items():
                        assert sum(map(test, column)) < 0.1 * len(column), (config, track.name, other)
                else:
                    assert sum(map(looks_like[lang], column)) > 0.8 * len(column), (config, track.name)
