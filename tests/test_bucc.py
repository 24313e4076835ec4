"""Margin-based mining (ems.mining), the BUCC task (eval.evaluators.bucc) and the FLORES-BUCC builder,
on hand-built cases whose margins, pairs and P/R/F1 are worked out in the comments."""

from pathlib import Path

import numpy as np
import pytest

from ems.cli import MissingDataError
from ems.configs import ConfigError, load_config
from ems.mining.margin import margin_neighbours, mine
from eval.evaluators.bucc import (
    BuccConfig,
    best_threshold,
    evaluate_bucc,
    load_bucc_split,
    precision_recall_f1,
    read_bucc_sentences,
    unique_texts,
)
from eval.make_flores_bucc import build_flores_bucc
from eval.task import RunOptions, TaskRun
from tests.fakes import TableEncoder

SQRT3_2 = np.sqrt(3) / 2


def bucc_config(languages: list[str], **keys) -> BuccConfig:
    """A BUCC task config read by the config system, as from a YAML file."""
    return load_config(BuccConfig, values={"name": "bucc", "data_subdir": "bucc", "languages": languages, **keys})


def unit(degrees: float) -> list[float]:
    return [np.cos(np.radians(degrees)), np.sin(np.radians(degrees))]


def test_margin_values_by_hand():
    # x0 at 0°, x1 at 90°; y0 at 0°, y1 at 60°. cos: x0y0 = 1, x0y1 = 1/2, x1y0 = 0, x1y1 = √3/2.
    # k = 2 covers the whole other side: avg_x = (3/4, √3/4), avg_y = (1/2, (1/2 + √3/2)/2).
    x, y = np.array([unit(0), unit(90)]), np.array([unit(0), unit(60)])
    avg_y1 = (0.5 + SQRT3_2) / 2
    nb = margin_neighbours(x, y, k=2, margin="ratio")
    np.testing.assert_allclose(nb.avg_x, [0.75, SQRT3_2 / 2], atol=1e-6)
    np.testing.assert_allclose(nb.avg_y, [0.5, avg_y1], atol=1e-6)
    # ratio margin(x0, y0) = 1 / ((3/4 + 1/2) / 2) = 1.6; margin(x0, y1) = (1/2) / ((3/4 + avg_y1) / 2)
    assert nb.fwd_ids[0].tolist() == [0, 1]
    np.testing.assert_allclose(nb.fwd_scores[0], [1.6, 0.5 / ((0.75 + avg_y1) / 2)], atol=1e-6)
    # margin(x1, y1) = (√3/2) / ((√3/4 + avg_y1) / 2); the backward side sees the same pair.
    expected_11 = SQRT3_2 / ((SQRT3_2 / 2 + avg_y1) / 2)
    assert nb.fwd_ids[1, 0] == 1 and nb.bwd_ids[1, 0] == 1
    np.testing.assert_allclose([nb.fwd_scores[1, 0], nb.bwd_scores[1, 0]], [expected_11] * 2, atol=1e-6)
    distance = margin_neighbours(x, y, k=2, margin="distance")
    np.testing.assert_allclose(distance.fwd_scores[0, 0], 1 - 0.625, atol=1e-6)
    absolute = margin_neighbours(x, y, k=2, margin="absolute")
    np.testing.assert_allclose(absolute.fwd_scores[1], [SQRT3_2, 0.0], atol=1e-6)


def test_margin_scores_match_numpy_brute_force_in_chunks():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 16)), rng.normal(size=(200, 16))
    nb = margin_neighbours(x, y, k=4, chunk_rows=7)  # 43 faiss calls per direction
    xn, yn = x / np.linalg.norm(x, axis=1, keepdims=True), y / np.linalg.norm(y, axis=1, keepdims=True)
    cos = xn @ yn.T
    top_x, top_y = np.sort(cos, axis=1)[:, -4:], np.sort(cos.T, axis=1)[:, -4:]
    avg_x, avg_y = top_x.mean(axis=1), top_y.mean(axis=1)
    ratio = cos / ((avg_x[:, None] + avg_y[None, :]) / 2)
    np.testing.assert_array_equal(nb.fwd_ids, np.argsort(-cos, axis=1)[:, :4])
    rows = np.arange(300)[:, None]
    np.testing.assert_allclose(nb.fwd_scores, ratio[rows, nb.fwd_ids], rtol=1e-5)
    forward = mine(x, y, mode="forward")
    best_ratio = ratio[rows, nb.fwd_ids].max(axis=1)
    np.testing.assert_allclose(np.sort(forward.score)[::-1], np.sort(best_ratio)[::-1], rtol=1e-5)
    ivf = mine(x, y, mode="forward", index_type="ivf")  # few lists, all probed: exact here
    np.testing.assert_allclose(ivf.score, forward.score, rtol=1e-5)


def _rss_file_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssFile:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_memory_mapped_embeddings_give_the_same_pairs_without_staying_resident(tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(20_000, 256)).astype(np.float32), rng.normal(size=(20_000, 256)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    x_map, y_map = np.load(tmp_path / "x.npy", mmap_mode="r"), np.load(tmp_path / "y.npy", mmap_mode="r")
    before = _rss_file_kib()
    mapped = mine(x_map, y_map, mode="max", chunk_rows=1000)
    grown_mib = (_rss_file_kib() - before) / 1024
    # the two files are 39 MiB: read through the mappings and kept mapped, they would all be resident
    assert grown_mib < 8, f"mapped embedding pages stayed resident: +{grown_mib:.1f} MiB"
    in_memory = mine(x, y, mode="max", chunk_rows=1000)
    np.testing.assert_array_equal(mapped.src, in_memory.src)
    np.testing.assert_array_equal(mapped.tgt, in_memory.tgt)
    np.testing.assert_array_equal(mapped.score, in_memory.score)


def test_retrieval_modes_by_hand():
    # absolute margin, k = 1: scores are cosines. x0 (1, 0), x1 (.8, .6), x2 (0, 1); y0 (1, 0),
    # y1 (.6, .8), y2 (-1, 0). Forward: x0->y0 (1), x1->y1 (.96), x2->y1 (.8). Backward: y0->x0 (1),
    # y1->x1 (.96), y2->x2 (0, the others are negative).
    x = np.array([[1, 0], [0.8, 0.6], [0, 1]])
    y = np.array([[1, 0], [0.6, 0.8], [-1, 0]])

    def pairs(mode):
        mined = mine(x, y, k=1, margin="absolute", mode=mode)
        return list(zip(mined.src.tolist(), mined.tgt.tolist())), [round(float(s), 4) for s in mined.score]

    assert pairs("forward") == ([(0, 0), (1, 1), (2, 1)], [1.0, 0.96, 0.8])
    assert pairs("backward") == ([(0, 0), (1, 1), (2, 2)], [1.0, 0.96, 0.0])
    assert pairs("intersect") == ([(0, 0), (1, 1)], [1.0, 0.96])
    # max: best first, each sentence once: (2, 1) loses y1 to (1, 1); (2, 2) is still free.
    assert pairs("max") == ([(0, 0), (1, 1), (2, 2)], [1.0, 0.96, 0.0])
    with pytest.raises(ValueError, match="mode must be one of"):
        mine(x, y, mode="union")
    with pytest.raises(ValueError, match="margin must be one of"):
        mine(x, y, margin="cosine")
    with pytest.raises(ValueError, match="same dimension"):
        mine(x, np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        mine(np.array([[np.nan, 1.0]]), y)
    with pytest.raises(ValueError, match="non-empty"):
        mine(np.zeros((0, 2)), y)


def test_threshold_and_f1_by_hand():
    # Cuts: after 1 -> F1 2/(1+3); after 2 -> 2*2/(2+3) = 0.8 (best); after 3 -> 4/6.
    assert best_threshold([0.9, 0.8, 0.7, 0.6], [True, True, False, False], n_gold=3) == pytest.approx(0.75)
    # The best cut is after the last candidate: keep everything.
    assert best_threshold([0.9, 0.8, 0.7, 0.6], [True, True, False, True], n_gold=4) == pytest.approx(0.6)
    # Tied scores cannot be split: the cut after the first 0.8 (F1 1.0) is not allowed; the
    # remaining cuts give 2/3, then 2*2/(3+2) = 0.8 (best, threshold (0.8 + 0.5) / 2), then 4/6.
    assert best_threshold([0.9, 0.8, 0.8, 0.5], [True, True, False, False], n_gold=2) == pytest.approx(0.65)
    assert best_threshold([0.9], [False], n_gold=2) == float("inf")
    with pytest.raises(ValueError, match="sorted"):
        best_threshold([0.1, 0.9], [True, True], n_gold=2)
    scores = precision_recall_f1({("a", "1"), ("b", "2"), ("c", "9")}, {("a", "1"), ("b", "2"), ("d", "4"), ("e", "5")})
    assert scores["precision"] == pytest.approx(200 / 3) and scores["recall"] == 50.0
    assert scores["f1"] == pytest.approx(2 * (200 / 3) * 50 / (200 / 3 + 50))
    assert precision_recall_f1(set(), {("a", "1")})["f1"] == 0.0


def write_split(directory: Path, lang: str, split: str, xx: dict, en: dict, gold: list | None):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{lang}-en.{split}.{lang}").write_text(
        "".join(f"{i}\t{s}\n" for i, s in xx.items()), encoding="utf-8"
    )
    (directory / f"{lang}-en.{split}.en").write_text("".join(f"{i}\t{s}\n" for i, s in en.items()), encoding="utf-8")
    if gold is not None:
        (directory / f"{lang}-en.{split}.gold").write_text("".join(f"{a}\t{b}\n" for a, b in gold), encoding="utf-8")


VECTORS = {
    ("de", "Hund"): [1, 0, 0],
    ("de", "Katze"): [0, 1, 0],
    ("de", "Baum"): [0, 0, 1],
    ("de", "Haus"): [1, 0, 0],
    ("en", "dog"): [1, 0.1, 0],
    ("en", "cat"): [0.1, 1, 0],
    ("en", "car"): [0, 0.3, 1],
    ("en", "house"): [1, 0, 0.2],
    ("en", "tree"): [0, 0.5, 1],
}


def test_bucc_end_to_end_with_duplicates_threshold_and_test_f1(tmp_path):
    # Training: a3 repeats a1's text. Absolute margin, k = 1: text pairs Hund-dog (cos 1/√1.01 = .995),
    # Katze-cat (.995), Baum-car (1/√1.09 = .958). Hund-dog stands for (a1, b1) and (a3, b1), so
    # the best threshold (.995 + .958) / 2 keeps 3 id pairs, 2 of them gold: P 66.7, R 100, F1 80.
    write_split(
        tmp_path,
        "de",
        "training",
        {"a1": "Hund", "a2": "Katze", "a3": "Hund", "a4": "Baum"},
        {"b1": "dog", "b2": "cat", "b3": "car"},
        [("a1", "b1"), ("a2", "b2")],
    )
    # Test: Haus-house (1/√1.04 = .981) passes; Baum prefers car (.958) to tree (1/√1.25 = .894) and
    # car's pair is below the threshold: 1 of 2 gold found, P 100, R 50, F1 66.7.
    write_split(
        tmp_path,
        "de",
        "test",
        {"c1": "Haus", "c2": "Baum"},
        {"d1": "house", "d2": "tree", "d3": "car"},
        [("c1", "d1"), ("c2", "d2")],
    )
    config = bucc_config(["de", "fr"], k=1, margin="absolute", mode="max")
    result = evaluate_bucc(TableEncoder(VECTORS), TaskRun(config, tmp_path, RunOptions(progress=False)))
    de = result["languages"]["de"]
    assert de["threshold"] == pytest.approx((1 / np.sqrt(1.01) + 1 / np.sqrt(1.09)) / 2, abs=1e-6)
    assert de["train"]["n_predicted"] == 3 and de["train"]["precision"] == pytest.approx(200 / 3)
    assert de["train"]["recall"] == 100.0 and de["train"]["f1"] == pytest.approx(80.0)
    assert de["test"] == {
        "precision": 100.0,
        "recall": 50.0,
        "f1": pytest.approx(200 / 3),
        "n_predicted": 1,
        "n_gold": 2,
    }
    assert result["average"] == {"train_f1": pytest.approx(80.0), "test_f1": pytest.approx(200 / 3), "n_languages": 1}
    assert (
        result["skipped"] == {}
        and list(result["data_errors"]) == ["fr"]
        and "fr-en.training.fr" in result["data_errors"]["fr"]
    )

    only_fr = evaluate_bucc(
        TableEncoder(VECTORS, languages=["en", "fr"]), TaskRun(config, tmp_path, RunOptions(progress=False))
    )
    assert only_fr["skipped"]["not covered by the encoder"] == ["de"]
    only_de = RunOptions(canonical=["de"], progress=False)  # the run's language filter: fr's bad files are not read
    assert evaluate_bucc(TableEncoder(VECTORS), TaskRun(config, tmp_path, only_de))["data_errors"] == {}
    with pytest.raises(MissingDataError, match=r"nowhere.*de-en\.training\.de"):
        evaluate_bucc(
            TableEncoder(VECTORS), TaskRun(bucc_config(["de"]), tmp_path / "nowhere", RunOptions(progress=False))
        )
    with pytest.raises(ConfigError) as error:  # every problem of the config at once, each naming its key
        bucc_config([], margin="cosine", mode="union", index="ivf:bogus=1")
    assert error.value.problems == [
        "languages must list at least one language",
        "margin must be one of ratio, distance, absolute; got 'cosine'",
        "mode must be one of forward, backward, max, intersect; got 'union'",
        "index 'ivf:bogus=1': bad option 'bogus=1'; ivf takes n_lists, nprobe, train_size",
    ]


def test_a_bucc_task_config_takes_any_index_spec(tmp_path):
    # `index:` in a BUCC task YAML is an index spec, as `ems-mine --index` reads it (both use
    # ems.mining.index_kinds.parse_index_spec); it used to refuse anything but a bare kind.
    from eval.run_all import run_all

    data = tmp_path / "data"
    write_split(
        data / "mining",
        "de",
        "training",
        {"a1": "Hund", "a2": "Katze", "a3": "Baum"},
        {"b1": "dog", "b2": "cat", "b3": "car"},
        [("a1", "b1"), ("a2", "b2")],
    )
    configs = tmp_path / "configs"
    configs.mkdir()
    task = "type: bucc\nname: {name}\ndata_subdir: mining\nlanguages: [de]\nk: 1\nmargin: absolute\nindex: {index}\n"
    for name, index in (("flat", "flat"), ("sq8", "ivf-sq8:nprobe=64"), ("bad", "ivf-sq8:nprobe=x")):
        (configs / f"{name}.yaml").write_text(task.format(name=name, index=index), encoding="utf-8")
    suite = configs / "suite.yaml"
    suite.write_text("tasks: [flat.yaml, sq8.yaml, bad.yaml]\n", encoding="utf-8")
    results = run_all(TableEncoder(VECTORS), data, progress=False, suite_path=suite, print_tables=False)
    assert results["sq8"].error is None and results["sq8"]["settings"]["index"] == "ivf-sq8:nprobe=64"
    assert results["sq8"]["languages"]["de"]["train"] == results["flat"]["languages"]["de"]["train"]
    assert results["sq8"]["languages"]["de"]["train"]["f1"] == 100.0  # Hund-dog, Katze-cat (.995) over Baum-car (.958)
    assert results["bad"].error == (  # refused when its config is read: one line naming the file and the key
        f"{configs / 'bad.yaml'}: index 'ivf-sq8:nprobe=x': option 'nprobe=x': must be an integer, got 'x'"
    )
    assert bucc_config(["de"], index="hnsw:ef_search=128").index == "hnsw:ef_search=128"


def test_bucc_reader_on_the_official_layout(data_dir):
    fixture = data_dir / "fixtures" / "bucc_format"
    training = load_bucc_split(fixture, "fr", "training")
    assert len(training.xx) == 3 and len(training.en) == 9  # fr ends with an empty line, en without a newline
    assert training.xx_ids[0] == "fr-000000001" and training.en[0].startswith("Whether Pygmalion")
    expected_gold = {
        ("fr-000000001", "en-000000009"),
        ("fr-000000002", "en-000000001"),
        ("fr-000000003", "en-000000005"),
    }
    assert training.gold == expected_gold
    sample = load_bucc_split(fixture, "fr", "sample")
    assert sample.xx_ids == ["fr-000000002"] and sample.gold == {("fr-000000002", "en-000014960")}


def test_bucc_reader_rejects_bad_files(tmp_path):
    (tmp_path / "x.de").write_text("a1\tHund\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.de:2: expected"):
        read_bucc_sentences(tmp_path / "x.de")
    (tmp_path / "x.de").write_text("a1\tHund\na1\tKatze\n", encoding="utf-8")
    with pytest.raises(ValueError, match="1 sentence id"):
        read_bucc_sentences(tmp_path / "x.de")
    write_split(tmp_path, "de", "training", {"a1": "Hund"}, {"b1": "dog"}, [("a1", "b9")])
    with pytest.raises(ValueError, match=r"gold:1: id pair \['a1', 'b9'\]"):
        load_bucc_split(tmp_path, "de", "training")
    write_split(tmp_path, "de", "training", {"a1": "Hund"}, {"b1": "dog"}, [])
    assert (
        "non-empty gold"
        in evaluate_bucc(TableEncoder(VECTORS), TaskRun(bucc_config(["de"]), tmp_path, RunOptions(progress=False)))[
            "data_errors"
        ]["de"]
    )
    assert unique_texts(["a", "b", "c"], ["x", "y", "x"]) == (["x", "y"], [["a", "c"], ["b"]])


def test_flores_bucc_builder_hides_real_pairs(data_dir, tmp_path):
    record = build_flores_bucc(data_dir, tmp_path, ["de"], gold=20, tatoeba_distractors=30)
    assert record["counts"]["de"]["training"] == {"xx": 20 + 243 + 30, "en": 20 + 243 + 30, "gold": 20}
    flores_de = (data_dir / "flores200" / "devtest" / "deu.devtest").read_text(encoding="utf-8").splitlines()
    flores_en = (data_dir / "flores200" / "devtest" / "eng.devtest").read_text(encoding="utf-8").splitlines()
    for split, lines in (("training", range(0, 506)), ("test", range(506, 1012))):
        s = load_bucc_split(tmp_path, "de", split)
        xx, en = dict(zip(s.xx_ids, s.xx)), dict(zip(s.en_ids, s.en))
        assert len(s.gold) == 20
        for a, b in s.gold:  # each gold pair is line i of FLORES de and line i of FLORES en
            i = flores_de.index(xx[a])
            assert i in lines and flores_en[i] == en[b]
        # FLORES lines without their partner on the other side: half of the 486 non-gold lines each
        flores_only_xx = [t for t in s.xx if t in flores_de and flores_en[flores_de.index(t)] not in s.en]
        assert len(flores_only_xx) == 243
