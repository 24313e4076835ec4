"""data_prep.hf: Hugging Face datasets as a corpus source. Small datasets in each layout are built with
`datasets` from real pairs of the shared data (Tatoeba Challenge de-en and fr-en, TICO-19 ar-en) and
imported through the real code paths: streamed and prepared, local files and a Hub id answered from
the datasets cache offline; the corpus written is compared with the pairs computed by hand."""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data_prep.__main__ import main
from data_prep.config import CorpusSpec, PrepConfig
from data_prep.hf.errors import HFImportError
from data_prep.hf.importer import import_hf
from data_prep.hf.report import REPORT_FILE
from data_prep.hf.rows import Pair
from ems.cli import run_main
from ems.configs import ConfigError, load_config
from ems.corpus import list_parallel, read_parallel
from ems.languages import split_language_pair
from fixtures.hf_datasets import tatoeba_challenge_pairs, write_parallel_sentences
from tests.conftest import REPO_ROOT

N = 240  # real pairs per language pair


def lines(path: Path, n: int = N) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:n]


@pytest.fixture(scope="module")
def real(data_dir):
    """{xx: [(English, other), ...]}: the first N pairs of Tatoeba Challenge de-en, fr-en and TICO-19 ar-en."""
    tico = data_dir / "tico19" / "en-ar"
    return {
        "de": tatoeba_challenge_pairs(data_dir, "deu", N),
        "fr": tatoeba_challenge_pairs(data_dir, "fra", N),
        "ar": list(zip(lines(tico / "tico19-test.en"), lines(tico / "tico19-test.ar"))),
    }


def corpus(out: Path, pair: str, name: str) -> list[tuple[str, str]]:
    """The (l1, l2) pairs of `out/<pair>/<name>.*`."""
    files = [f for f in list_parallel(out, [pair]) if f.name == name]
    assert len(files) == 1, (pair, name, list_parallel(out))
    return list(read_parallel(files[0].path_l1, files[0].path_l2))


def english_other(pairs, pair: str) -> list[tuple[str, str]]:
    """(English, other) pairs in the order of the pair folder's two languages."""
    return [(e, o) if pair.startswith("en-") else (o, e) for e, o in pairs]


@pytest.fixture(scope="module")
def parallel_sentences(real, tmp_path_factory):
    pairs = {lang: real[lang] for lang in ("de", "fr")}
    return write_parallel_sentences(tmp_path_factory.mktemp("ps") / "parallel-sentences", pairs)


def test_readme_configs_load_hub_style_and_give_the_real_pairs(parallel_sentences, real, tmp_path):
    import datasets

    assert datasets.get_dataset_config_names(str(parallel_sentences)) == ["en-de", "en-fr"]
    for lang in ("de", "fr"):
        entry = import_hf(CorpusSpec(hf=f"{parallel_sentences}:en-{lang}"), tmp_path, progress=False)
        pair = "-".join(sorted(("en", lang)))
        name = f"parallel-sentences.en-{lang}"
        assert entry["name"] == name and entry["layout"] == "english/non_english"
        assert corpus(tmp_path, pair, name) == english_other([(e.strip(), o.strip()) for e, o in real[lang]], pair)
        assert entry["pairs"][pair] == {
            "read": N,
            "kept": N,
            "skipped": {},
            "cap": None,
            "sample": None,
            "files": [f"{pair}/{name}.{pair[:2]}", f"{pair}/{name}.{pair[3:]}"],
        }
    with pytest.raises(HFImportError, match="has no config 'en-ja'.* en-de, en-fr"):
        import_hf(CorpusSpec(hf=f"{parallel_sentences}:en-ja"), tmp_path, progress=False)


def layouts(real, root: Path) -> dict:
    """One dataset per layout, from the real pairs: {case: (CorpusSpec, {pair: expected (l1, l2) pairs})}."""
    from datasets import Dataset, DatasetDict

    de, fr, ar = real["de"], real["fr"], real["ar"]
    cases = {}
    # translation dicts, save_to_disk with two splits; the test split is asked for
    DatasetDict(
        {
            "train": Dataset.from_dict({"translation": [{"de": o, "en": e} for e, o in de[:10]]}),
            "test": Dataset.from_dict({"translation": [{"de": o, "en": e} for e, o in de]}),
        }
    ).save_to_disk(root / "wmt")
    cases["translation, save_to_disk"] = (
        CorpusSpec(hf=str(root / "wmt"), split="test"),
        {"de-en": [(o, e) for e, o in de]},
    )
    # src/tgt with per-row language columns in JSON lines (three pairs mixed, both directions)
    rows = [{"src": e, "tgt": o, "src_lang": "eng", "tgt_lang": "deu_Latn"} for e, o in de]
    rows += [{"src": o, "tgt": e, "src_lang": "fra_Latn", "tgt_lang": "eng_Latn"} for e, o in fr]
    rows += [{"src": e, "tgt": o, "src_lang": "en", "tgt_lang": "arb_Arab"} for e, o in ar]
    random.Random(0).shuffle(rows)
    (root / "mixed.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))

    def in_order(lang):
        picked = [r for r in rows if lang in (r["src_lang"][:2], r["tgt_lang"][:2])]
        return [(r["src"], r["tgt"]) if r["src_lang"][:2] < r["tgt_lang"][:2] else (r["tgt"], r["src"]) for r in picked]

    cases["src/tgt, language columns, jsonl"] = (
        CorpusSpec(hf=str(root / "mixed.jsonl")),
        {"de-en": in_order("de"), "en-fr": in_order("fr"), "ar-en": in_order("ar")},
    )
    # sentence1/sentence2 with --languages, TSV whose texts hold quotes and words pandas reads as missing
    tsv = [("sentence1", "sentence2"), *[(o, e) for e, o in fr], ('« Il a dit "NA" »', "None")]
    (root / "fr-en.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in tsv))
    cases["sentence1/sentence2, --languages, tsv"] = (
        CorpusSpec(hf=str(root / "fr-en.tsv"), languages=["fra", "eng"]),
        {"en-fr": [(b, a) for a, b in tsv[1:]]},
    )
    # named columns and a config-less parquet file, CSV twin
    Dataset.from_dict({"ar_text": [o for _, o in ar], "en_text": [e for e, _ in ar]}).to_csv(
        root / "ar.csv", index=False
    )
    cases["--columns, csv"] = (
        CorpusSpec(hf=str(root / "ar.csv"), columns={"source": "ar_text", "target": "en_text"}, languages=["ar", "en"]),
        {"ar-en": [(o, e) for e, o in ar]},
    )
    return cases


@pytest.fixture(scope="module")
def layout_cases(real, tmp_path_factory):
    return layouts(real, tmp_path_factory.mktemp("layouts"))


@pytest.mark.parametrize(
    "case",
    [
        "translation, save_to_disk",
        "src/tgt, language columns, jsonl",
        "sentence1/sentence2, --languages, tsv",
        "--columns, csv",
    ],
)
def test_each_layout_writes_exactly_the_real_pairs(layout_cases, case, tmp_path):
    spec, expected = layout_cases[case]
    entry = import_hf(spec, tmp_path, progress=False)
    assert sorted(entry["pairs"]) == sorted(expected)
    for pair, pairs in expected.items():
        stripped = [(a.strip(), b.strip()) for a, b in pairs]
        assert corpus(tmp_path, pair, entry["name"]) == stripped
        assert entry["pairs"][pair]["read"] == entry["pairs"][pair]["kept"] == len(stripped)
    assert entry["rows_read"] == sum(map(len, expected.values()))


def test_translation_dicts_of_several_languages_give_each_rows_pair(real, tmp_path):
    """A `translation` column whose dicts span de, en and fr: each row's two texts make its pair."""
    rows = [{"translation": {"de": o, "en": e}} for e, o in real["de"][:50]]
    rows += [{"translation": {"en": e, "fr": o}} for e, o in real["fr"][:40]]
    rows.insert(7, {"translation": {"de": "Drei.", "en": "Three.", "fr": "Trois."}})  # not one pair
    (tmp_path / "multi.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    entry = import_hf(CorpusSpec(hf=str(tmp_path / "multi.jsonl")), tmp_path / "out", progress=False)
    assert entry["skipped"] == {"not_two_texts": {"translation": 1}}
    assert corpus(tmp_path / "out", "de-en", "multi") == [(o.strip(), e.strip()) for e, o in real["de"][:50]]
    assert corpus(tmp_path / "out", "en-fr", "multi") == [(e.strip(), o.strip()) for e, o in real["fr"][:40]]
    picked = import_hf(CorpusSpec(hf=str(tmp_path / "multi.jsonl"), languages=["fra", "eng"]), tmp_path / "fr")
    assert list(picked["pairs"]) == ["en-fr"] and picked["pairs"]["en-fr"]["kept"] == 41  # the row of three too
    assert picked["pairs"]["en-fr"]["skipped"] == {"null": 50}  # the de-en rows have no French


@pytest.mark.parametrize("case", ["parquet README configs", "src/tgt, language columns, jsonl", "--columns, csv"])
def test_streaming_and_prepared_give_the_same_corpus(layout_cases, parallel_sentences, case, tmp_path):
    spec = CorpusSpec(hf=f"{parallel_sentences}:en-fr") if case.startswith("parquet") else layout_cases[case][0]
    streamed = import_hf(spec, tmp_path / "streamed", progress=False)
    prepared = import_hf(spec, tmp_path / "prepared", streaming=False, cache_dir=tmp_path / "cache", progress=False)
    assert list((tmp_path / "cache").rglob("*.arrow"))  # prepared in the datasets cache (Arrow files), then read
    assert streamed["pairs"] == prepared["pairs"]
    for pair in streamed["pairs"]:
        assert corpus(tmp_path / "streamed", pair, streamed["name"]) == corpus(
            tmp_path / "prepared", pair, prepared["name"]
        )


@pytest.fixture(scope="module")
def scored(real, tmp_path_factory):
    """A mined-bitext style parquet file: the real de-en pairs with a laser_score each (some missing)."""
    from datasets import Dataset

    rng = random.Random(7)
    pairs = real["de"] * 6  # 1440 rows: more than one batch
    scores = [None if i % 37 == 0 else round(rng.uniform(0.9, 1.3), 4) for i in range(len(pairs))]
    path = tmp_path_factory.mktemp("scored") / "nllb-de-en.parquet"
    Dataset.from_dict(
        {"source": [o for _, o in pairs], "target": [e for e, _ in pairs], "laser_score": scores}
    ).to_parquet(path)
    return path, [(o.strip(), e.strip(), s) for (e, o), s in zip(pairs, scores)]


def test_min_score_and_the_first_n_cap_are_exact(scored, tmp_path):
    path, rows = scored
    eligible = [(o, e) for o, e, s in rows if s is not None and s >= 1.1]
    entry = import_hf(CorpusSpec(hf=str(path), languages=["de", "en"], min_score=1.1), tmp_path, progress=False)
    assert corpus(tmp_path, "de-en", "nllb-de-en") == eligible
    counts = entry["pairs"]["de-en"]
    assert counts["skipped"] == {
        "no_score": sum(s is None for _, _, s in rows),
        "below_min_score": sum(s is not None and s < 1.1 for _, _, s in rows),
    }
    assert counts["read"] == len(rows) == counts["kept"] + sum(counts["skipped"].values())
    first = import_hf(
        CorpusSpec(hf=str(path), languages=["de", "en"], min_score=1.1, max_pairs=50, sample="first", name="first"),
        tmp_path,
        progress=False,
    )
    assert corpus(tmp_path, "de-en", "first") == eligible[:50]
    assert first["stopped_early"] and first["rows_read"] < len(rows)  # stopped within the batch that filled it


def test_the_reservoir_sample_is_exact_seeded_and_in_the_sources_order(scored, tmp_path):
    path, rows = scored
    eligible = [(o, e) for o, e, s in rows if s is not None and s >= 1.0]

    def sample(seed, cap, out):
        spec = CorpusSpec(hf=str(path), languages=["de", "en"], min_score=1.0, max_pairs=cap, seed=seed, name="s")
        entry = import_hf(spec, tmp_path / out, progress=False)
        return entry, corpus(tmp_path / out, "de-en", "s")

    entry, kept = sample(0, 100, "a")
    assert len(kept) == 100 and entry["pairs"]["de-en"]["skipped"]["over_cap"] == len(eligible) - 100
    rest = iter(eligible)
    assert all(pair in rest for pair in kept)  # eligible pairs, in the source's order (a subsequence)
    assert sample(0, 100, "b")[1] == kept and sample(1, 100, "c")[1] != kept
    assert sample(0, 10**6, "d")[1] == eligible  # a cap above the pairs keeps them all


def test_algorithm_r_gives_every_pair_the_same_chance():
    """Over 4000 seeds, each of 20 eligible pairs is in a sample of 5 with probability 1/4."""
    hits = [0] * 20
    for seed in range(4000):
        pair = Pair("de", "en", cap=5, sample="reservoir", seed=seed)
        for row in range(20):
            pair.keep(row, f"de {row}", f"en {row}", open_writer=None)
        assert len(pair.reservoir) == 5
        for row, _, _ in pair.reservoir:
            hits[row] += 1
    assert all(abs(h / 4000 - 0.25) < 0.035 for h in hits), hits  # 5 sd of a binomial(4000, 1/4) share


def test_bad_rows_are_counted_under_their_reason(real, tmp_path):
    from datasets import Dataset

    good = real["de"][:20]
    bad = [  # (English, German, the German side's language tag)
        (None, "Ein Satz.", "de"),
        ("   ", "Leer.", "de"),
        ("Two\nlines.", "Zwei Zeilen.", "de"),
        ("Line\u2028separator.", "Trenner.", "de"),
        ("Fine.", "Gut.", "xx-invalid"),
        ("Same.", "Same.", "en"),
        ("Missing.", "Fehlt.", None),
    ]
    rows = {"src": [e for e, _ in good] + [e for e, _, _ in bad], "tgt": [o for _, o in good] + [o for _, o, _ in bad]}
    rows["src_lang"] = ["en"] * (len(good) + len(bad))
    rows["tgt_lang"] = ["de"] * len(good) + [tag for _, _, tag in bad]
    Dataset.from_dict(rows).to_parquet(tmp_path / "bad.parquet")
    entry = import_hf(CorpusSpec(hf=str(tmp_path / "bad.parquet")), tmp_path / "out", progress=False)
    assert entry["skipped"] == {"same_language": {"en": 1}, "unknown_language": {"None": 1, "xx-invalid": 1}}
    assert entry["pairs"]["de-en"]["skipped"] == {"null": 1, "empty": 1, "line_break": 2}
    assert corpus(tmp_path / "out", "de-en", "bad") == [(o.strip(), e.strip()) for e, o in good]
    # mixed JSON values: a number where a text should be
    (tmp_path / "mixed.jsonl").write_text(
        "".join(json.dumps({"src": s, "tgt": "Hallo.", "src_lang": "en", "tgt_lang": "de"}) + "\n" for s in ["Hi.", 5])
    )
    entry = import_hf(CorpusSpec(hf=str(tmp_path / "mixed.jsonl")), tmp_path / "out", progress=False)
    assert entry["pairs"]["de-en"] | {"files": []} == {
        "read": 2,
        "kept": 1,
        "skipped": {"not_text": 1},
        "cap": None,
        "sample": None,
        "files": [],
    }


@pytest.mark.parametrize(
    "build, flags, message",
    [
        ("ps", ["--columns", "source=english", "target=german"], "no column target=german; its columns: english, "),
        ("ps", ["--languages", "de", "xx"], "'xx' does not name a registered language"),
        ("ps", ["--min-score", "1.0"], "min_score needs a score column"),
        ("ps", ["--split", "test"], "has no split 'test'; its splits: train"),
        ("ints", [], "the source column 'src' holds Value\\('int64'\\), not text"),
        ("odd", [], "no column layout recognised; its columns: a, b"),
        ("nolang", [], "cannot tell the languages of the columns src and tgt"),
        ("empty", [], "has no rows"),
        ("keys", [], "the translation column's key\\(s\\) \\['xx'\\] name no language"),
        ("allbad", [], "no pair kept of the 2 rows read"),
    ],
)
def test_bad_datasets_are_one_clear_error_and_write_nothing(
    parallel_sentences, tmp_path, capsys, build, flags, message
):
    import re

    from datasets import Dataset

    data = {
        "ints": {"src": [1, 2], "tgt": ["a", "b"], "src_lang": ["en", "en"], "tgt_lang": ["de", "de"]},
        "odd": {"a": ["x"], "b": ["y"]},
        "nolang": {"src": ["x"], "tgt": ["y"]},
        "empty": {"english": [], "non_english": []},
        "keys": {"translation": [{"xx": "a", "en": "b"}]},
        "allbad": {"english": ["", None], "non_english": ["a", "b"]},
    }
    if build == "ps":
        source = f"{parallel_sentences}:en-de"
    elif build in ("empty", "allbad"):  # a folder per config, as parallel-sentences has
        (tmp_path / "folder" / "en-de").mkdir(parents=True)
        Dataset.from_dict(data[build]).to_parquet(tmp_path / "folder" / "en-de" / "train.parquet")
        source = f"{tmp_path / 'folder'}:en-de"
    else:
        Dataset.from_dict(data[build]).to_parquet(tmp_path / f"{build}.parquet")
        source = str(tmp_path / f"{build}.parquet")
    capsys.readouterr()
    assert run_main(main, ["import", "--format", "hf", source, "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err  # a progress bar, then the one line
    assert err.endswith("\n") and "Traceback" not in err, err
    assert err.split("\n")[-2].startswith("error: ") and re.search(message, err.split("\n")[-2]), err
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_a_killed_import_resumes_and_a_finished_one_reads_nothing(parallel_sentences, real, tmp_path, monkeypatch):
    import data_prep.hf.importer
    from ems.corpus import ParallelWriter

    spec = CorpusSpec(hf=f"{parallel_sentences}:en-de")
    write = ParallelWriter.write

    def killed_after_100(self, a, b):
        if self.count == 100:
            raise KeyboardInterrupt("killed")
        write(self, a, b)

    with monkeypatch.context() as patch:
        patch.setattr(ParallelWriter, "write", killed_after_100)
        with pytest.raises(KeyboardInterrupt):
            import_hf(spec, tmp_path, progress=False)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no file looks finished, no report entry
    (tmp_path / "de-en").mkdir()
    (tmp_path / "de-en" / "parallel-sentences.en-de.de.partial").write_text("left by a SIGKILL\n")
    done = import_hf(spec, tmp_path, progress=False)
    assert done["status"] == "imported" and done["pairs"]["de-en"]["kept"] == N
    assert not list(tmp_path.rglob("*.partial"))

    def no_reading(*args, **kwargs):
        raise AssertionError("the finished import read its source again")

    monkeypatch.setattr(data_prep.hf.importer, "open_dataset", no_reading)
    again = import_hf(spec, tmp_path, progress=False)
    assert again["status"] == "exists" and again["pairs"] == done["pairs"]
    monkeypatch.undo()
    capped = import_hf(CorpusSpec(hf=spec.hf, max_pairs=10), tmp_path, progress=False)  # new settings: redone
    assert capped["status"] == "imported" and len(corpus(tmp_path, "de-en", "parallel-sentences.en-de")) == 10
    report = json.loads((tmp_path / REPORT_FILE).read_text())
    assert (
        list(report) == ["parallel-sentences.en-de"]
        and report["parallel-sentences.en-de"]["settings"]["max_pairs"] == 10
    )


def hub_cache(parallel_sentences: Path, cache: Path, repo: str = "sentence-transformers/parallel-sentences-talks"):
    """The datasets cache as `load_dataset(repo, "en-de")` leaves it online: the Arrow files that the parquet
    builder prepares, under <owner>___<name>/en-de/<version>/<hash>/. Built offline from the local copy
    (same builder, same files) and moved to the Hub id's folder."""
    from datasets import load_dataset_builder

    builder = load_dataset_builder(str(parallel_sentences), "en-de", cache_dir=str(cache / "build"))
    builder.download_and_prepare()
    prepared = Path(builder.cache_dir)
    owner, name = repo.split("/")
    target = cache / f"{owner}___{name}" / prepared.relative_to(cache / "build" / parallel_sentences.name)
    target.parent.mkdir(parents=True)
    shutil.move(prepared, target)
    for arrow in target.glob("*.arrow"):
        arrow.rename(arrow.with_name(arrow.name.replace(parallel_sentences.name, name, 1)))
    shutil.rmtree(cache / "build")
    return repo


@pytest.mark.parametrize("offline", ["HF_HUB_OFFLINE=1", "the Hub does not answer"])
def test_offline_a_hub_id_is_read_from_the_datasets_cache(parallel_sentences, real, tmp_path, monkeypatch, offline):
    import datasets
    from huggingface_hub import constants

    repo = hub_cache(parallel_sentences, tmp_path / "cache")
    if offline == "HF_HUB_OFFLINE=1":  # what the variable sets when datasets is imported
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    else:  # refused at once, with a network or without (whatever HF_HUB_OFFLINE was when the hub was imported)
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    entry = import_hf(CorpusSpec(hf=f"{repo}:en-de"), tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)
    assert entry["name"] == "parallel-sentences-talks.en-de"
    expected = english_other([(e.strip(), o.strip()) for e, o in real["de"]], "de-en")
    assert corpus(tmp_path / "out", "de-en", entry["name"]) == expected
    assert datasets.config.HF_HUB_OFFLINE == (offline == "HF_HUB_OFFLINE=1")  # switched back after the import
    with pytest.raises(HFImportError, match="the datasets cache .* does not hold it"):
        import_hf(CorpusSpec(hf=f"{repo}:en-fr"), tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)


def test_an_unreachable_hub_id_is_one_line_without_retries(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    env.pop("HF_HUB_OFFLINE", None), env.pop("HF_DATASETS_OFFLINE", None)
    done = subprocess.run(
        [sys.executable, "-m", "data_prep", "import", "--format", "hf", "nobody/nothing:en-de", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    # huggingface_hub retries a request that finds no network 5 times over ~23 s, logging each retry
    assert done.returncode == 2 and "Retry" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "error: nobody/nothing:en-de: no such local path, the Hugging Face Hub is not used "
        "(http://127.0.0.1:9 does not answer: "
    )
    assert f"the datasets cache {tmp_path / 'cache'} does not hold it" in done.stderr
    assert done.stderr.endswith("import the local path: ems-prep import --format hf DIR:en-de\n")


def test_configs_take_hf_corpora_beside_opus_ones(parallel_sentences, tmp_path, capsys):
    """`fetch` / `all` run a config's hf: corpora (no OPUS source needed when it has no OPUS corpus), and the
    distillation teacher reads the English sentences of that import."""
    import numpy as np

    from data_prep.binarize import content_id
    from data_prep.teacher import build_teacher_store
    from ems.teacher_store import TeacherStore

    config = tmp_path / "hf.yaml"
    config.write_text(
        "languages: [en, de, fr]\npivot: en\ncorpora:\n"
        f"  - {{hf: '{parallel_sentences}:en-de', max_pairs: 100}}\n"
        f"  - {{hf: '{parallel_sentences}:en-fr', max_pairs: 80, sample: first}}\n"
        "vocab: {vocab_size: 400, max_sentences: 10000}\n"
    )
    assert run_main(main, ["fetch", "--config", str(config), "--out", str(tmp_path / "raw"), "--pair", "en-fr"]) == 0
    assert [f.l1 + "-" + f.l2 for f in list_parallel(tmp_path / "raw")] == ["en-fr"]
    assert run_main(main, ["all", "--config", str(config), "--out", str(tmp_path / "run"), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"hf:{parallel_sentences}:en-de\tde-en\timported\t100" in printed
    assert len(corpus(tmp_path / "run" / "raw", "en-fr", "parallel-sentences.en-fr")) == 80
    shards = tmp_path / "run" / "shards"
    assert json.loads((shards / "index.json").read_text())["n_pairs"] > 150

    class Teacher:
        model_id = "stub"

        def encode(self, sentences, lang):
            assert lang == "en"
            return np.array([[len(s), s.count(" ")] for s in sentences], dtype=np.float32)

    report = build_teacher_store(
        shards,
        tmp_path / "run" / "pretok",
        "npy:stub",
        encoder=Teacher(),
        text_root=tmp_path / "run" / "clean",
        progress=False,
    )

    def english(root, pair):
        files = list_parallel(root, [pair])[0]
        return [texts[files.l2 == "en"] for texts in read_parallel(files.path_l1, files.path_l2)]

    pretok_ids = {content_id(s) for pair in ("de-en", "en-fr") for s in english(tmp_path / "run" / "pretok", pair)}
    assert report["encoded"] == len(pretok_ids) > 150  # every English sentence of the import, once
    originals = english(tmp_path / "run" / "clean", "de-en")[:20]
    keys = np.array([content_id(s) for s in english(tmp_path / "run" / "pretok", "de-en")[:20]], dtype=np.uint64)
    vectors, found = TeacherStore(report["store"]).lookup(keys)
    assert found.all()
    np.testing.assert_array_equal(vectors, Teacher().encode(originals, "en"))  # the teacher read the real text

    opus_too = tmp_path / "both.yaml"
    opus_too.write_text(config.read_text().replace("corpora:\n", "corpora:\n  - {name: TED2020, release: v1}\n"))
    assert run_main(main, ["fetch", "--config", str(opus_too), "--out", str(tmp_path / "x")]) == 2
    assert "lists OPUS corpora: give --mirror DIR or --downloads DIR" in capsys.readouterr().err


def test_hf_corpus_specs_are_checked_when_the_config_loads(parallel_sentences):
    base = {"languages": ["en", "de"], "pivot": "en"}

    def problems(*corpora):
        with pytest.raises(ConfigError) as error:
            load_config(PrepConfig, values={**base, "corpora": list(corpora)})
        return str(error.value)

    assert "gives the pair en-fr, not one of the pairs ['de-en']" in problems({"hf": f"{parallel_sentences}:en-fr"})
    assert "languages must name two languages" in problems({"hf": "x/y", "languages": ["de"]})
    assert "columns: unknown role(s) ['text']" in problems({"hf": "x/y", "columns": {"text": "a"}})
    assert "split applies to hf: corpora only" in problems({"name": "TED2020", "release": "v1", "split": "train"})
    assert "sample must be one of reservoir, first" in problems({"hf": "x/y", "sample": "random"})
    loaded = load_config(PrepConfig, values={**base, "corpora": [{"hf": "x/y", "languages": ["deu_Latn", "eng"]}]})
    assert loaded.hf_corpora[0].languages == ["de", "en"] and loaded.hf_corpora[0].hf_pair() == "de-en"


@pytest.mark.parametrize(
    "name, pair",
    [
        ("en-de", ("en", "de")),
        ("eng_Latn-deu_Latn", ("en", "de")),
        ("en-pt-br", ("en", "pt")),
        ("zh-tw-en", ("zh", "en")),
        ("en-zho_Hans", ("en", "zh")),
        ("en-xx", None),
        ("default", None),
    ],
)
def test_language_pair_names(name, pair):
    assert split_language_pair(name) == pair
