"""Shard format 2 (narrow token ids, per-pair lengths.npy) on a real binarized corpus, and the
format-1 shards written before it: the same sentences, lengths, batch order and batches."""

import json
import shutil

import numpy as np

from ems.shards import SHARD_FORMAT, PairShards, length_dtype, token_dtype
from ems.training.batch_order import BatchOrder
from ems.training.batches import collate


def test_narrowest_dtypes():
    assert [token_dtype(n) for n in (1000, 65536, 65537, 250_000)] == ["<u2", "<u2", "<i4", "<i4"]
    assert [length_dtype(n) for n in (0, 255, 256, 65535, 65536)] == ["<u1", "<u1", "<u2", "<u2", "<i4"]


def test_new_shards_are_narrow_and_their_lengths_are_the_offsets(tiny_pipeline):
    directory = tiny_pipeline / "shards"
    index = json.loads((directory / "index.json").read_text())
    shards = PairShards(directory)
    assert (
        index["format"] == SHARD_FORMAT == 2 and index["token_dtype"] == "uint16" and index["length_dtype"] == "uint8"
    )
    assert shards.tokens.dtype == np.uint16 and shards.lengths.dtype == np.uint8
    diffs = np.diff(np.asarray(shards.offsets))
    assert np.array_equal(shards.side_lengths(), np.stack([diffs[0::2], diffs[1::2]], axis=1))
    assert shards.side_lengths().dtype == np.int32 and int(shards.lengths.max()) == int(diffs.max())


def _format_1_copy(directory, out):
    """The same shards as format 1 wrote them: int32 tokens, no lengths.npy, no format keys."""
    shutil.copytree(directory, out)
    np.save(out / "tokens.npy", np.load(directory / "tokens.npy").astype("<i4"))
    (out / "lengths.npy").unlink()
    index = json.loads((out / "index.json").read_text())
    for key in ("format", "token_dtype", "length_dtype"):
        index.pop(key)
    (out / "index.json").write_text(json.dumps(index))
    return out


def test_format_1_shards_read_the_same(tiny_pipeline, tmp_path):
    new = PairShards(tiny_pipeline / "shards")
    old = PairShards(_format_1_copy(tiny_pipeline / "shards", tmp_path / "old"))
    assert old.tokens.dtype == np.int32 and old.lengths is None
    assert (tmp_path / "old" / "tokens.npy").stat().st_size > (tiny_pipeline / "shards" / "tokens.npy").stat().st_size
    assert np.array_equal(old.side_lengths(), new.side_lengths())
    orders = [BatchOrder(np.minimum(shards.side_lengths(), 16), 8, seed=3).epoch(0) for shards in (new, old)]
    assert all(np.array_equal(a, b) for a, b in zip(*orders))
    for batch in orders[0][:3]:
        a, b = collate(new, batch, max_len=16), collate(old, batch, max_len=16)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
