"""Shard format 2 (narrow token ids, per-pair lengths.npy) on a real binarized corpus; shards of
another format are refused in one line."""

import json
import shutil

import numpy as np
import pytest

from ems.shards import SHARD_FORMAT, PairShards, length_dtype, token_dtype


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


def test_shards_of_another_format_are_refused_in_one_line(tiny_pipeline, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(tiny_pipeline / "shards", old)
    index = json.loads((old / "index.json").read_text())
    del index["format"]
    (old / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=rf"^{old / 'index.json'}: shard format None, not 2: binarize again$"):
        PairShards(old)
