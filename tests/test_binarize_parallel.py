"""Offline end to end on a local OPUS mirror of real FLORES-200 text (fetch -> clean ->
pretokenize -> vocab -> shards), shards independent of the worker count, resumed binarization,
and language-balanced vocabulary sampling."""

import hashlib
import json

import numpy as np
import pytest

import data_prep.binarize as binarize_module
from data_prep.__main__ import main
from data_prep.binarize import binarize
from data_prep.vocab import language_quotas
from ems.corpus import list_parallel, read_parallel
from ems.shards import PairShards
from ems.text import Preprocessing, Tokenizer
from fixtures.opus_mirror import build_mirror

SHARD_FILES = ("tokens.npy", "offsets.npy", "langs.npy", "index.json")


@pytest.fixture(scope="module")
def prepared(data_dir, tmp_path_factory):
    """`python -m data_prep all` on a mirror with TED2020 de-en, en-ja, en-zh (300 pairs each)."""
    root = tmp_path_factory.mktemp("e2e")
    build_mirror(root / "opus", "TED2020", "v1", data_dir, [("de", "en"), ("en", "ja"), ("en", "zh")])
    (root / "config.yaml").write_text(
        "languages: [de, en, ja, zh]\npivot: en\n"
        "corpora:\n  - {name: TED2020, release: v1, max_pairs: 280}\n"
        "clean:\n  eval_sets: [tatoeba, sts]\n"
        "vocab:\n  vocab_size: 2000\n  sampling_alpha: 0.5\n  max_sentences: 100000\n  character_coverage: 0.98\n"
    )
    args = [
        "all",
        "--config",
        str(root / "config.yaml"),
        "--mirror",
        str(root / "opus"),
        "--out",
        str(root / "run"),
        "--data-dir",
        str(data_dir),
        "--workers",
        "2",
    ]
    assert main(args) == 0
    return root / "run"


def digest(directory):
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in SHARD_FILES}


def test_end_to_end_reports_every_stage(prepared):
    fetched = json.loads((prepared / "raw" / "fetch_report.json").read_text())
    assert [(e["pair"], e["pairs"], e["capped"]) for e in fetched["fetched"]] == [
        ("de-en", 280, True),
        ("en-ja", 280, True),
        ("en-zh", 280, True),
    ]
    cleaned = json.loads((prepared / "clean" / "clean_report.json").read_text())
    assert cleaned["eval_sets"]["tatoeba"]["sentences"] > 100_000
    for pair in cleaned["pairs"]:
        entry = pair["files"][0]
        assert entry["read"] == 280 and entry["kept"] + sum(entry["dropped"].values()) == 280 and entry["kept"] > 250
    vocab_report = json.loads((prepared / "vocab" / "vocab_report.json").read_text())
    assert vocab_report["pretokenized_corpus"] is True and vocab_report["languages"] == ["de", "en", "ja", "zh"]


def test_shards_hold_the_pretokenized_corpus_with_per_pair_ranges(prepared):
    tokenizer = Tokenizer.load(prepared / "vocab")
    assert tokenizer.preprocessing == Preprocessing() and tokenizer.vocab_size == 2000
    shards = PairShards(prepared / "shards")
    index = shards.index
    assert [(f["l1"], f["l2"]) for f in index["files"]] == [("de", "en"), ("en", "ja"), ("en", "zh")]
    assert index["files"][0]["start"] == 0 and index["files"][-1]["end"] == len(shards) == index["n_pairs"]
    for files, entry in zip(list_parallel(prepared / "pretok"), index["files"]):
        lines = list(read_parallel(files.path_l1, files.path_l2))
        assert entry["end"] - entry["start"] == len(lines) - entry["skipped_empty_after_tokenization"]
        # en is the pivot (in every pair): always side 2, so en-ja and en-zh pairs are stored ja/zh first
        assert entry["sides"] == [files.l1, "en"] if files.l2 == "en" else [files.l2, "en"]
        swap = entry["sides"][0] != files.l1
        for k in (0, len(lines) - 1):
            i = entry["start"] + k
            first, second = lines[k][::-1] if swap else lines[k]
            assert shards.sentence(2 * i).tolist() == tokenizer.sp.encode(first)
            assert shards.sentence(2 * i + 1).tolist() == tokenizer.sp.encode(second)
            assert shards.langs[i].tolist() == [tokenizer.lang_index(lang) for lang in entry["sides"]]
    # the shards equal what the encoder computes from the raw, uncleaned-case text
    raw_ja = next(read_parallel(prepared / "raw" / "en-ja" / "TED2020.en", prepared / "raw" / "en-ja" / "TED2020.ja"))[
        1
    ]
    start = index["files"][1]["start"]
    assert shards.sentence(2 * start).tolist() == tokenizer.encode([raw_ja], "ja")[0]


def test_worker_count_does_not_change_the_shards(prepared, tmp_path, monkeypatch):
    binarize(prepared / "pretok", prepared / "vocab", tmp_path / "one", workers=1)
    binarize(prepared / "pretok", prepared / "vocab", tmp_path / "three", workers=3)
    assert digest(tmp_path / "one") == digest(tmp_path / "three") == digest(prepared / "shards")
    # nor does the join's step size (a few rows per step: every part is joined in many steps)
    monkeypatch.setattr("data_prep.binarize.JOIN_ROWS", 7)
    binarize(prepared / "pretok", prepared / "vocab", tmp_path / "small-steps", workers=1)
    assert digest(tmp_path / "small-steps") == digest(prepared / "shards")
    assert not (tmp_path / "three" / "parts").exists()


def test_an_interrupted_binarization_resumes_from_finished_parts(prepared, tmp_path, monkeypatch):
    def interrupted_join(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(binarize_module, "_join", interrupted_join)
    with pytest.raises(KeyboardInterrupt):
        binarize(prepared / "pretok", prepared / "vocab", tmp_path / "shards", workers=2)
    parts = sorted((tmp_path / "shards" / "parts").glob("*/part.json"))
    assert len(parts) == 3 and not (tmp_path / "shards" / "index.json").exists()
    # finished parts are not encoded again: only binarize's own vocabulary check loads the tokenizer
    monkeypatch.undo()
    loads = []
    real_load = Tokenizer.load
    monkeypatch.setattr(Tokenizer, "load", lambda directory: loads.append(directory) or real_load(directory))
    binarize(prepared / "pretok", prepared / "vocab", tmp_path / "shards", workers=1)
    assert len(loads) == 1
    assert digest(tmp_path / "shards") == digest(prepared / "shards")


def test_a_finished_part_of_inputs_changed_since_is_encoded_again(prepared, tmp_path, monkeypatch):
    """A part is trusted by its record of the inputs it was made from, not by its name (issue 62,
    case 2): was the old part's pairs in the shards of the changed corpus."""
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(prepared / "clean", corpus)
    monkeypatch.setattr(binarize_module, "_join", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        binarize(corpus, prepared / "vocab", tmp_path / "shards")
    monkeypatch.undo()
    files = [f for f in list_parallel(corpus) if f.l1 == "de"][0]
    for path in (files.path_l1, files.path_l2):  # the same names, half the pairs
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    resumed = binarize(corpus, prepared / "vocab", tmp_path / "shards")
    fresh = binarize(corpus, prepared / "vocab", tmp_path / "fresh")
    assert resumed["files"] == fresh["files"] and resumed["n_pairs"] == fresh["n_pairs"]
    assert digest(tmp_path / "shards") == digest(tmp_path / "fresh")


def test_binarize_refuses_a_corpus_pretokenized_differently(prepared, tmp_path):
    other = tmp_path / "vocab"
    other.mkdir()
    (other / "spm.model").write_bytes((prepared / "vocab" / "spm.model").read_bytes())
    meta = json.loads((prepared / "vocab" / "ems_tokenizer.json").read_text())
    meta["preprocessing"]["lowercase"] = False
    (other / "ems_tokenizer.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="was pretokenized with"):
        binarize(prepared / "pretok", other, tmp_path / "shards")


def test_language_quotas_come_in_the_counts_order_whatever_the_hash_seed():
    """The vocabulary report lists languages as the corpus counts them: a set's order (which changes with
    PYTHONHASHSEED) would also change the float sums behind the quotas from one process to the next."""
    counts = {f"l{i:02d}": 50 + 37 * i for i in range(30)}
    quotas = language_quotas(counts, 0.3, 2_000)
    assert list(quotas) == list(counts) and sum(quotas.values()) == pytest.approx(2_000, abs=30)


def test_language_quotas_follow_the_temperature_within_the_budget():
    assert language_quotas({"a": 1000, "b": 10}, 0.5, 100) == {"a": 91, "b": 9}
    assert language_quotas({"a": 1000, "b": 10}, 0.5, 500) == {"a": 490, "b": 10}  # b gives all it has
    assert language_quotas({"a": 1000, "b": 10}, 1.0, 10_000) == {"a": 1000, "b": 10}
    flat = language_quotas({"a": 1000, "b": 100, "c": 100}, 0.0, 300)
    assert flat == {"a": 100, "b": 100, "c": 100}
    assert np.isclose(sum(language_quotas({"a": 7, "b": 5000}, 0.3, 800).values()), 800, atol=1)


@pytest.mark.slow
def test_slurm_array_tasks_and_join_give_the_same_shards(prepared, data_dir, tmp_path):
    """slurm/prep.sh run as SLURM would: one task per pair (in any order), then the join step."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    config, mirror, out = prepared.parent / "config.yaml", prepared.parent / "opus", tmp_path / "run"
    out.mkdir()
    pairs = subprocess.run(
        [sys.executable, "-m", "data_prep", "pairs", "--config", str(config)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (out / "pairs.txt").write_text(pairs)
    env = {
        **os.environ,
        "CONFIG": str(config),
        "OUT": str(out),
        "MIRROR": str(mirror),
        "DATA_DIR": str(data_dir),
        "PYTHON": sys.executable,
        "SLURM_JOB_ID": "1",
        "SLURM_CPUS_PER_TASK": "1",
    }
    for task in (2, 0, 1):
        subprocess.run(
            ["bash", "slurm/prep.sh"],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
            env={**env, "STAGE": "pair", "SLURM_ARRAY_TASK_ID": str(task)},
        )
    subprocess.run(
        ["bash", "slurm/prep.sh"], cwd=REPO_ROOT, check=True, capture_output=True, env={**env, "STAGE": "join"}
    )

    assert sorted(p.name for p in (out / "raw").glob("fetch_report.*.json")) == [
        "fetch_report.de-en.json",
        "fetch_report.en-ja.json",
        "fetch_report.en-zh.json",
    ]
    for name in ("tokens.npy", "offsets.npy", "langs.npy"):
        assert (out / "shards" / name).read_bytes() == (prepared / "shards" / name).read_bytes()
