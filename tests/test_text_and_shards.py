"""Vocabulary, preprocessing, binarized shards and batch order on a real (small) corpus."""

import json

import numpy as np
import pytest

from data_prep.binarize import binarize, content_id
from ems.corpus import list_parallel, read_parallel
from ems.shards import PairShards
from ems.text import FIRST_LANG_ID, PAD_ID, UNK_ID, Preprocessing, Tokenizer, lang_token
from ems.training.batch_order import BatchOrder
from ems.training.batches import collate, iterate_batches


def test_vocab_has_pad_unk_and_one_token_per_language(tiny_pipeline):
    tok = Tokenizer.load(tiny_pipeline / "vocab")
    assert tok.languages == ["de", "en", "fr", "ja"]
    assert tok.sp.id_to_piece(PAD_ID) == "<pad>" and tok.sp.id_to_piece(UNK_ID) == "<unk>"
    for i, lang in enumerate(tok.languages):
        assert tok.sp.piece_to_id(lang_token(lang)) == FIRST_LANG_ID + i == tok.lang_token_id(lang)
    assert tok.vocab_size == 1000
    with pytest.raises(ValueError, match="'ru' is not in this vocabulary"):
        tok.lang_index("ru")


def test_preprocessing_is_lowercase_then_moses_and_shared_by_encode(tiny_pipeline):
    tok = Tokenizer.load(tiny_pipeline / "vocab")
    assert Preprocessing()("Don't SAVE, please.", "en") == "don 't save , please ."
    assert tok.encode(["Don't SAVE, please."], "en") == tok.encode(["don't save, please."], "en")
    assert tok.encode(["Don't SAVE, please."], "en") == [tok.sp.encode("don 't save , please .")]


def test_shards_hold_exactly_the_tokenized_corpus(tiny_pipeline):
    tok = Tokenizer.load(tiny_pipeline / "vocab")
    shards = PairShards(tiny_pipeline / "shards")
    index = json.loads((tiny_pipeline / "shards" / "index.json").read_text())
    assert [(f["l1"], f["l2"]) for f in index["files"]] == [("de", "en"), ("en", "fr"), ("en", "ja")]
    assert index["pivot"] == "en"
    for files, entry in zip(list_parallel(tiny_pipeline / "corpus" / "train"), index["files"]):
        pairs = list(read_parallel(files.path_l1, files.path_l2))
        assert entry["end"] - entry["start"] == len(pairs) - entry["skipped_empty_after_tokenization"]
        other = files.l1 if files.l2 == "en" else files.l2
        assert entry["sides"] == [other, "en"]  # the pivot is side 2
        for k in (0, len(pairs) // 2, len(pairs) - 1):
            i = entry["start"] + k
            texts = dict(zip((files.l1, files.l2), pairs[k]))
            assert shards.sentence(2 * i).tolist() == tok.encode([texts[other]], other)[0]
            assert shards.sentence(2 * i + 1).tolist() == tok.encode([texts["en"]], "en")[0]
            assert shards.langs[i].tolist() == [tok.lang_index(other), tok.lang_index("en")]
            assert shards.content_ids[i].tolist() == [content_id(texts[other]), content_id(texts["en"])]


def test_binarize_rejects_language_missing_from_vocab(tiny_pipeline, tmp_path):
    from ems.corpus import write_parallel

    write_parallel(tmp_path / "corpus", "x", "en", "ru", [("hello", "привет")])
    with pytest.raises(ValueError, match="'ru' is not in this vocabulary"):
        binarize(tmp_path / "corpus", tiny_pipeline / "vocab", tmp_path / "shards")


def test_batch_order_is_deterministic_and_covers_each_pair_once_per_epoch(tiny_pipeline):
    shards = PairShards(tiny_pipeline / "shards")
    order = BatchOrder(shards.pair_lengths(), global_batch_size=16, seed=5)
    epoch0 = order.epoch(0)
    assert all(np.array_equal(a, b) for a, b in zip(epoch0, BatchOrder(shards.pair_lengths(), 16, seed=5).epoch(0)))
    flat = np.concatenate(epoch0)
    assert len(flat) == len(np.unique(flat)) == order.batches_per_epoch() * 16
    assert not np.array_equal(np.concatenate(order.epoch(1)), flat)
    # length bucketing: padding is a small share of each batch's tokens
    lengths = shards.pair_lengths()
    real = sum(lengths[b].sum() for b in epoch0)
    padded = sum(lengths[b].max() * len(b) for b in epoch0)
    assert real / padded > 0.85


def _rows(tensor):
    return [[t for t in row if t != PAD_ID] for row in tensor.tolist()]


def test_ranks_split_the_global_batch_and_resume_position_replays(tiny_pipeline):
    shards = PairShards(tiny_pipeline / "shards")
    order = BatchOrder(shards.pair_lengths(), global_batch_size=8, seed=1)
    [whole] = next(iterate_batches(shards, order, 120))[1]
    [rank0] = next(iterate_batches(shards, order, 120, rank=0, world_size=2))[1]
    [rank1] = next(iterate_batches(shards, order, 120, rank=1, world_size=2))[1]
    assert _rows(rank0["src"]) == _rows(whole["src"])[0::2]
    assert _rows(rank1["tgt"]) == _rows(whole["tgt"])[1::2]

    stream = iterate_batches(shards, order, 120)
    batches = [next(stream) for _ in range(5)]
    resumed_pos, resumed = next(iterate_batches(shards, order, 120, start=(0, 3)))
    assert resumed_pos == batches[3][0] == (0, 3)
    assert all(np.array_equal(resumed[0][k], batches[3][1][0][k]) for k in resumed[0])


def test_padded_gathers_what_reading_sentence_by_sentence_gives(tiny_pipeline):
    shards = PairShards(tiny_pipeline / "shards")
    chosen = np.random.default_rng(0).choice(2 * len(shards), size=40, replace=False)
    for max_len in (3, 1000):
        rows = [shards.sentence(int(k))[:max_len] for k in chosen]
        expected = np.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=np.int64)
        for out, row in zip(expected, rows):
            out[: len(row)] = row
        got = shards.padded(chosen, max_len, PAD_ID)
        assert got.dtype == np.int64 and np.array_equal(got, expected)
    assert shards.padded(np.array([], dtype=np.int64), 8, PAD_ID).shape == (0, 0)


def test_collate_pads_with_pad_id_and_truncates():
    class FakeShards:
        tokens = np.array([5, 6, 7, 8, 9, 10, 11, 12], dtype=np.int32)
        offsets = np.array([0, 3, 4, 6, 8], dtype=np.int64)  # pair 0: [5 6 7] / [8]; pair 1: [9 10] / [11 12]
        langs = np.array([[0, 1], [2, 1]], dtype=np.int16)
        content_ids = np.array([[3, 2**64 - 1], [5, 2**63]], dtype=np.uint64)
        padded = PairShards.padded

        def check_whole(self) -> None:  # plain arrays: nothing mapped that could shrink
            pass

    fake = FakeShards()
    batch = collate(fake, np.array([0, 1]), max_len=2)
    assert batch["src"].tolist() == [[5, 6], [9, 10]]
    assert batch["tgt"].tolist() == [[8, PAD_ID], [11, 12]]
    assert batch["src_lang"].tolist() == [0, 2] and batch["tgt_lang"].tolist() == [1, 1]
    # uint64 content ids travel as int64 bit patterns: equal ids stay equal, distinct ones distinct
    assert batch["content_ids"].tolist() == [[3, -1], [5, -(2**63)]]
