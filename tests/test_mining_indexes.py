"""ems.mining's index kinds (flat, ivf, ivf-sq8, ivf-pq, hnsw): planted pairs found, recall
against exact search, index sizes, spec strings, and GPU sharding (faked: no GPU here)."""

import faiss
import numpy as np
import pytest

import ems.mining.index_kinds
from ems.apps.mine import main as mine_main
from ems.cli import run_main
from ems.mining.index_kinds import INDEX_KINDS, IndexSpec, build_index, index_bytes, parse_index_spec, resolve_index
from ems.mining.margin import RETRIEVAL, margin_neighbours, mine

# Each kind's recall@4 of the exact 4 nearest neighbours on `clustered` (measured: ivf 1.0,
# ivf-sq8 0.98, ivf-pq 0.93 with re-ranking, hnsw 1.0), with a margin for other faiss builds.
MIN_RECALL = {"flat": 1.0, "ivf": 0.95, "ivf-sq8": 0.9, "ivf-pq": 0.8, "hnsw": 0.95}


def clustered(n: int = 3000, dim: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (n, dim) in 60 Gaussian clusters; y = x plus small noise, shuffled: y[where[i]] is x[i]'s
    planted translation."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((60, dim))
    x = (centres[rng.integers(0, 60, n)] + 0.5 * rng.standard_normal((n, dim))).astype(np.float32)
    where = rng.permutation(n)
    y = np.empty_like(x)
    y[where] = x + 0.1 * rng.standard_normal((n, dim)).astype(np.float32)
    return x, y, where


@pytest.fixture(scope="module")
def data():
    x, y, where = clustered()
    return x, y, where, margin_neighbours(x, y, index_type="flat")


@pytest.mark.parametrize("kind", INDEX_KINDS)
def test_each_kind_finds_the_planted_pairs_and_the_exact_neighbours(data, kind):
    x, y, where, exact = data
    spec = "ivf-pq:train_size=3000" if kind == "ivf-pq" else kind
    nb = margin_neighbours(x, y, index_type=spec)
    pairs = RETRIEVAL["forward"](nb)  # = mine(x, y, mode="forward", index_type=spec)
    assert np.mean(pairs.tgt[np.argsort(pairs.src)] == where) >= 0.99
    recall = np.mean([len(set(a) & set(b)) / 4 for a, b in zip(nb.fwd_ids.tolist(), exact.fwd_ids.tolist())])
    assert recall >= MIN_RECALL[kind], (kind, recall)


def test_quantised_indexes_are_smaller_and_sizes_match_faiss(data):
    _, y, _, _ = data
    sizes = {}
    for kind in INDEX_KINDS:
        index = build_index("y", y, "ivf-pq:train_size=3000" if kind == "ivf-pq" else kind)
        sizes[kind] = index_bytes(index)
        assert sizes[kind] == pytest.approx(len(faiss.serialize_index(index)), rel=0.01)
    assert sizes["ivf-pq"] < sizes["ivf-sq8"] < sizes["flat"] < sizes["hnsw"]
    assert sizes["flat"] == y.size * 4


def test_pq_without_reranking_distorts_margins_and_reranking_mends_them(data):
    x, y, _, exact = data
    errors = {}
    for rerank in (0, 4):
        nb = margin_neighbours(x, y, index_type=IndexSpec("ivf-pq", train_size=3000, rerank=rerank))
        errors[rerank] = np.abs(nb.fwd_scores[:, 0] - exact.fwd_scores[:, 0]).mean()
    assert errors[4] < errors[0] / 3


def test_spec_strings_and_defaults():
    assert parse_index_spec("ivf-pq:nprobe=32,m=16") == IndexSpec("ivf-pq", nprobe=32, pq_m=16)
    assert parse_index_spec("hnsw:m=16,ef_search=128") == IndexSpec("hnsw", hnsw_m=16, ef_search=128)
    assert parse_index_spec("ivf") == IndexSpec("ivf")
    large = resolve_index(IndexSpec(), 4_000_000, 1024)
    assert (large.kind, large.n_lists, large.nprobe, large.train_size) == ("ivf-sq8", 8000, 32, 512_000)
    assert resolve_index(IndexSpec("ivf-pq"), 10_000, 1024).pq_m == 256
    assert resolve_index(IndexSpec("ivf-pq"), 10_000, 100).pq_m == 25
    assert resolve_index(IndexSpec("ivf-pq"), 10_000, 100).rerank == 4
    assert resolve_index(IndexSpec(), 999_999, 8).kind == "flat"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("ivfpq", "unknown kind 'ivfpq'; expected one of auto, flat, ivf, ivf-sq8, ivf-pq, hnsw"),
        ("ivf-pq:nprobe=x", "option 'nprobe=x': must be an integer, got 'x'"),
        ("ivf:m=8", "bad option 'm=8'; ivf takes n_lists, nprobe, train_size"),
        ("flat:nprobe=4", "bad option 'nprobe=4'; flat takes no options"),
        ("hnsw:ef_search=0", "ef_search must be an integer >= 1, got 0"),
    ],
)
def test_bad_spec_strings_are_one_clear_error(spec, message, tmp_path, capsys):
    with pytest.raises(ValueError, match="index '") as error:
        parse_index_spec(spec)
    assert message in str(error.value)
    argv = [
        "--src",
        tmp_path / "a",
        "--src-lang",
        "de",
        "--tgt",
        tmp_path / "b",
        "--tgt-lang",
        "en",
        "--out",
        tmp_path / "out.tsv",
        "--src-embeddings",
        tmp_path / "a.npy",
        "--tgt-embeddings",
        tmp_path / "b.npy",
        "--index",
        spec,
    ]
    capsys.readouterr()
    assert run_main(mine_main, [str(arg) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and err.startswith("error: index ") and message in err and "Traceback" not in err


def test_pq_m_must_divide_the_dimension(data):
    x, y, _, _ = data
    with pytest.raises(ValueError, match="m=5 must divide the dimension 32"):
        mine(x, y, index_type="ivf-pq:m=5")


class _Options:
    shard = False
    useFloat16 = False


@pytest.mark.parametrize("kind, float16", [("ivf", False), ("ivf-pq", True), ("flat", False)])
def test_gpus_get_a_sharded_index(monkeypatch, data, kind, float16):
    x, y, where, _ = data
    requests = []

    def to_all_gpus(index, co=None, ngpu=-1):
        requests.append(co)
        return index  # stands in for the GPU index: the CPU one searches the same

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 2, raising=False)
    monkeypatch.setattr(faiss, "GpuMultipleClonerOptions", _Options, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", to_all_gpus)
    nb = margin_neighbours(x, y, index_type=f"{kind}:train_size=3000" if kind == "ivf-pq" else kind)
    assert len(requests) == 2 and all(co.shard and co.useFloat16 == float16 for co in requests)
    assert nb.index_bytes == 0  # not measured on GPUs
    assert np.mean(nb.fwd_ids[:, 0] == where) >= 0.99


def test_hnsw_stays_on_the_cpu_when_there_are_gpus(monkeypatch, data):
    x, y, _, _ = data
    monkeypatch.setattr(ems.mining.index_kinds, "gpu_count", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", lambda *a, **k: pytest.fail("hnsw has no GPU index"))
    assert isinstance(build_index("y", y, "hnsw"), faiss.IndexHNSWFlat)
