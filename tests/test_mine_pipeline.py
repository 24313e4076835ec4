"""Mining as stages with files between them (ems.mining.pipeline): the staged run writes exactly
the TSV of the in-memory miner (ems.mining.margin.mine) for every index kind and mode and any
sharding; the local launcher's worker pool, the per-unit `stage` commands (what SLURM tasks run)
and one process give the same bytes; float16 storage, line numbers, thresholds, on-disk indexes;
the command line's options are MineOptions' fields."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from ems.apps.mine import _mining_parser, _options
from ems.apps.mine import main as mine_main
from ems.encoder_kinds import NgramEncoder
from ems.mining.pipeline.launch import mine_files
from ems.mining.pipeline.options import MineOptions
from ems.mining.pipeline.plan import unit_ranges
from eval.evaluators.retrieval import read_lines
from tests.fakes import in_memory_mine, real_sides

ENCODER = "ngram:dim=32"


@pytest.fixture(scope="module")
def inputs(data_dir, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    src, tgt = real_sides(data_dir)
    (folder / "src.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / "tgt.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return folder / "src.de", folder / "tgt.en"


def options(inputs, out: Path, **settings) -> MineOptions:
    return MineOptions(str(inputs[0]), "de", str(inputs[1]), "en", str(out), **{"encoder": ENCODER, **settings})


@pytest.mark.parametrize("index", ["flat", "ivf:n_lists=8", "ivf-sq8:n_lists=8", "ivf-pq:n_lists=8,m=8", "hnsw"])
def test_staged_run_writes_the_in_memory_miners_pairs(inputs, tmp_path, index):
    """Every mode, 37 distinct lines a shard (9 shards of src, 8 of tgt): the TSV of
    ems.mining.margin.mine over all distinct lines at once, byte for byte. One work dir: each new
    mode scores again from the same k-NN files."""
    encoder = NgramEncoder(dim=32)
    for mode in ("max", "forward", "backward", "intersect"):
        out = tmp_path / f"{mode}.tsv"
        counts = mine_files(options(inputs, out, index=index, mode=mode, shard_lines=37, work_dir=str(tmp_path / "w")))
        in_memory_mine(encoder, *inputs, tmp_path / "reference.tsv", mode=mode, index_type=index)
        assert out.read_bytes() == (tmp_path / "reference.tsv").read_bytes(), mode
        assert counts["src_distinct"] == 300 and counts["tgt_distinct"] == 260 and counts["src_empty"] == 1
        assert counts["written"] == len(out.read_text(encoding="utf-8").splitlines()) > 100
    assert len(list((tmp_path / "w" / "embed" / "src").glob("*.vectors.npy"))) == 9


def test_threshold_and_line_numbers(inputs, tmp_path):
    whole = tmp_path / "all.tsv"
    mine_files(options(inputs, whole, work_dir=str(tmp_path / "w")))
    scores = [float(line.split("\t")[0]) for line in whole.read_text(encoding="utf-8").splitlines()]
    assert scores[40] > scores[41]
    threshold = (scores[40] + scores[41]) / 2  # the TSV's scores are rounded: keep off them
    out = tmp_path / "kept.tsv"
    mine_files(options(inputs, out, threshold=threshold, line_numbers=True, work_dir=str(tmp_path / "w")))
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 41
    assert [row[:3] for row in rows] == [line.split("\t") for line in whole.read_text().splitlines()[: len(rows)]]
    src_lines, tgt_lines = read_lines(inputs[0]), read_lines(inputs[1])
    for _, src, tgt, src_number, tgt_number in rows:
        assert src_lines[int(src_number) - 1] == src and tgt_lines[int(tgt_number) - 1] == tgt
    assert any(row[1] == src_lines[3] and row[3] == "4" for row in rows)  # a repeated line: its first occurrence


def test_worker_pool_and_stage_commands_write_the_bytes_of_one_process(inputs, tmp_path, capsys):
    settings = {"index": "ivf:n_lists=8", "shard_lines": 50}
    mine_files(options(inputs, tmp_path / "one.tsv", **settings))
    mine_files(options(inputs, tmp_path / "pool.tsv", workers=2, **settings))
    assert (tmp_path / "pool.tsv").read_bytes() == (tmp_path / "one.tsv").read_bytes()

    # what slurm/mine.sh does: plan, then every unit of every step as its own command
    work = tmp_path / "staged"
    argv = ["--encoder", ENCODER, "--src", str(inputs[0]), "--src-lang", "de", "--tgt", str(inputs[1])]
    argv += ["--tgt-lang", "en", "--out", str(tmp_path / "staged.tsv"), "--index", "ivf:n_lists=8"]
    argv += ["--shard-lines", "50", "--work-dir", str(work)]
    capsys.readouterr()
    assert mine_main(["plan", *argv]) == 0
    units = dict(line.split() for line in capsys.readouterr().out.splitlines())
    assert units == {
        "embed": "0-11",
        "train": "0-1",
        "populate": "0-11",
        "merge": "0-1",
        "knn": "0-11",
        "score": "0-11",
        "write": "0",
    }
    assert mine_main(["stage", "embed", "--work-dir", str(work), "--unit", "2"]) == 0
    assert mine_main(["stage", "embed", "--work-dir", str(work), "--unit", "2"]) == 0
    assert "embed src-00002: finished before, skipped" in capsys.readouterr().err
    assert mine_main(["plan", *argv]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "embed 0-1,3-11"
    for step, spec in units.items():
        first, _, last = spec.partition("-")
        for unit in range(int(first), int(last or first) + 1):
            assert mine_main(["stage", step, "--work-dir", str(work), "--unit", str(unit)]) == 0
    assert (tmp_path / "staged.tsv").read_bytes() == (tmp_path / "one.tsv").read_bytes()


def test_float16_vectors_half_the_disk_and_nearly_the_same_pairs(inputs, tmp_path):
    mine_files(options(inputs, tmp_path / "32.tsv", mode="forward", work_dir=str(tmp_path / "w32")))
    mine_files(options(inputs, tmp_path / "16.tsv", mode="forward", dtype="float16", work_dir=str(tmp_path / "w16")))
    x32 = np.load(tmp_path / "w32" / "embed" / "src" / "00000.vectors.npy")
    x16 = np.load(tmp_path / "w16" / "embed" / "src" / "00000.vectors.npy")
    assert x16.dtype == np.float16 and x16.nbytes * 2 == x32.nbytes
    np.testing.assert_allclose(x16.astype(np.float32), x32, rtol=1e-3, atol=1e-2)
    pairs32 = {tuple(line.split("\t")[1:]) for line in (tmp_path / "32.tsv").read_text().splitlines()}
    pairs16 = {tuple(line.split("\t")[1:]) for line in (tmp_path / "16.tsv").read_text().splitlines()}
    assert len(pairs16) == len(pairs32) == 300 and len(pairs16 & pairs32) >= 0.95 * 300


def test_ivf_index_is_populated_per_shard_and_merged_on_disk(inputs, tmp_path):
    mine_files(options(inputs, tmp_path / "o.tsv", index="ivf-sq8:n_lists=8", shard_lines=60, work_dir=str(tmp_path)))
    side = tmp_path / "index" / "tgt"
    assert sorted(p.name for p in side.glob("0*.index")) == [f"0000{i}.index" for i in range(5)]
    merged = side / "merged"
    # the inverted lists (260 rows x (32 code bytes + 8 id bytes)) are in the memory-mapped file, not the index file
    assert (merged / "merged.ivfdata").stat().st_size >= 260 * 40 > (merged / "merged.index").stat().st_size / 2
    assert not list(tmp_path.rglob("*.partial"))


def wide_embeddings(inputs, folder: Path, dim: int = 1024) -> tuple[str, str]:
    """Precomputed float32 vectors, one row per line of each input, LASER's width (1024): the tgt
    rows random, the first 150 src rows near the tgt rows of their reversed translations."""
    rng = np.random.default_rng(0)
    n_src, n_tgt = (len(read_lines(path)) for path in inputs)
    tgt = rng.standard_normal((n_tgt, dim)).astype(np.float32)
    src = rng.standard_normal((n_src, dim)).astype(np.float32)
    src[:150] = tgt[:150][::-1] + 0.7 * src[:150]
    np.save(folder / "src.npy", src)
    np.save(folder / "tgt.npy", tgt)
    return str(folder / "src.npy"), str(folder / "tgt.npy")


@pytest.mark.parametrize("index", ["flat", "ivf-sq8:n_lists=8"])
def test_the_pairs_do_not_depend_on_the_sharding_or_the_search_batches(inputs, tmp_path, index):
    """One shard, 37-line shards (9 k-NN units a side), 100-line shards searched 16 queries at a
    time: the same bytes. faiss's batched inner products of 1024-d rows round differently for a
    300-query call than for smaller ones (exact search, and IVF-SQ8's coarse term), which moved the
    6th decimal of some scores; each kept neighbour and probed list is scored again alone now."""
    src, tgt = wide_embeddings(inputs, tmp_path)
    outputs = {}
    for shard_lines, chunk_rows in ((1000, 16384), (37, 16384), (100, 16)):
        out = tmp_path / f"{shard_lines}-{chunk_rows}.tsv"
        settings = {"src_embeddings": src, "tgt_embeddings": tgt, "encoder": None, "index": index}
        mine_files(options(inputs, out, shard_lines=shard_lines, chunk_rows=chunk_rows, **settings))
        outputs[shard_lines, chunk_rows] = out.read_bytes()
    assert len(outputs[1000, 16384].splitlines()) > 200
    assert outputs[37, 16384] == outputs[1000, 16384] and outputs[100, 16] == outputs[1000, 16384]


def test_a_model_encoders_pairs_do_not_depend_on_the_sharding(inputs, tmp_path, model_dir):
    """An `ems:` encoder pads and batches the sentences of one call together, so a line's vector
    depends, in its last bits, on the lines encoded with it: the embed step encodes blocks of
    --chunk-lines lines at fixed row numbers whatever the shards (37 lines: blocks across shard
    edges; 40: two blocks a shard), so the vectors and the TSV are the same bytes."""
    outputs, vectors = {}, {}
    for shard_lines in (1000, 37, 40):
        out, work = tmp_path / f"{shard_lines}.tsv", tmp_path / f"w{shard_lines}"
        settings = {"encoder": f"ems:{model_dir}", "chunk_lines": 20, "work_dir": str(work)}
        mine_files(options(inputs, out, shard_lines=shard_lines, **settings))
        outputs[shard_lines] = out.read_bytes()
        vectors[shard_lines] = np.concatenate(
            [np.load(p) for p in sorted((work / "embed" / "src").glob("*.vectors.npy"))]
        )
    assert len(vectors[37]) == 300 and len(outputs[1000].splitlines()) > 150
    for shard_lines in (37, 40):
        np.testing.assert_array_equal(vectors[shard_lines], vectors[1000])
        assert outputs[shard_lines] == outputs[1000], shard_lines


def test_unit_ranges():
    assert unit_ranges([]) == "-"
    assert unit_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_the_command_line_has_every_mine_option_with_its_type_and_default():
    required = {"src": "s.txt", "src_lang": "de", "tgt": "t.txt", "tgt_lang": "en", "out": "o.tsv"}
    changed = {
        **required,
        **{"encoder": "ngram", "src_embeddings": "s.npy", "tgt_embeddings": "t.npy", "work_dir": "w"},
        **{"threshold": 1.05, "k": 2, "margin": "distance", "mode": "intersect", "index": "flat"},
        **{"shard_lines": 7, "dtype": "float16", "line_numbers": True, "cache_dir": "c", "device": "cuda"},
        **{"chunk_lines": 3, "chunk_rows": 5, "tokenizer_workers": 2, "workers": 3},
    }
    assert set(changed) == {field.name for field in dataclasses.fields(MineOptions)}  # a new field needs a value here

    def argv(values: dict) -> list[str]:
        words = [
            [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)]) for name, value in values.items()
        ]
        return [word for option in words for word in option]

    parser = _mining_parser("ems-mine", work_dir_required=False)
    assert _options(parser.parse_args(argv(required))) == MineOptions(**required)  # every other field its default
    assert _options(parser.parse_args(argv(changed))) == MineOptions(**changed)  # parsed to its type
    with pytest.raises(SystemExit):  # `plan` needs the work dir its jobs share
        _mining_parser("ems-mine plan", work_dir_required=True).parse_args(argv(required))
    with pytest.raises(SystemExit):  # a Literal's choices
        parser.parse_args(argv({**required, "dtype": "float64"}))
