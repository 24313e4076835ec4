"""The fast encode path (issue 28, item 3): batches by tokens give the vectors of one-at-a-time
encoding in input order, bf16 stays within a row cosine of fp32 on real sentences, tokenising in
worker processes gives the ids of one process, and the edge inputs keep their defined results."""

import warnings

import numpy as np
import pytest
import torch

import ems
from ems.encoder import TruncationWarning, token_batches
from ems.encoder_kinds import load_encoder
from ems.languages import flores_file
from ems.precision import bf16_is_fast
from ems.text import Tokenizer
from ems.tokenizer_pool import MIN_POOL_PART, TokenizerPool


@pytest.fixture(scope="module")
def flores(data_dir) -> dict[str, list[str]]:
    """The first 200 FLORES-200 devtest lines of de and ja (real news and wiki sentences, 3 to 80+ words)."""
    lines = {}
    for lang in ("de", "ja"):
        text = flores_file(data_dir / "flores200" / "devtest", lang, "devtest").read_text(encoding="utf-8")
        lines[lang] = text.splitlines()[:200]
    return lines


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_token_batches_by_hand():
    # sorted: 1 (index 1), 3 (2), 3 (3), 5 (0), 9 (4); budget 8: [1, 3] pads to 6, a third row to 9
    assert [b.tolist() for b in token_batches([5, 1, 3, 3, 9], 8)] == [[1, 2], [3], [0], [4]]
    assert [b.tolist() for b in token_batches([2, 2, 2, 2, 2], 100, batch_size=2)] == [[0, 1], [2, 3], [4]]
    assert token_batches([], 8) == []


def test_token_batches_against_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(200):
        lengths = rng.integers(1, 40, size=int(rng.integers(1, 60))).tolist()
        budget, cap = int(rng.integers(1, 200)), [None, int(rng.integers(1, 8))][trial % 2]
        batches = [b.tolist() for b in token_batches(lengths, budget, cap)]
        flat = [i for batch in batches for i in batch]
        assert flat == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))  # every index once, by length
        for batch, following in zip(batches, [*batches[1:], None]):
            longest = max(lengths[i] for i in batch)
            assert len(batch) == 1 or len(batch) * longest <= budget
            assert cap is None or len(batch) <= cap
            if following:  # greedy: the next sequence did not fit
                grown = len(batch) + 1
                assert grown * lengths[following[0]] > budget or (cap is not None and grown > cap)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_token_batches_give_the_vectors_of_one_at_a_time_encoding_in_input_order(model_dir, flores, precision):
    model = ems.load(model_dir, precision=precision)
    lines = flores["de"][:60]
    perm = np.random.default_rng(1).permutation(len(lines))
    shuffled = [lines[i] for i in perm]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        batched = model.encode(shuffled, "de", batch_tokens=300)  # several batches of mixed size
        alone = np.concatenate([model.encode([line], "de") for line in shuffled])
        reference = model.encode(lines, "de", batch_tokens=10_000)  # one batch, input order
    assert len(token_batches([len(s) for s in model.tokenizer.encode(shuffled, "de")], 300)) > 5
    if precision == "fp32":
        np.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-6)
    else:  # a bf16 product may round the other way in another batch shape
        assert row_cosines(batched, alone).min() >= 0.9999
    assert row_cosines(batched, reference[perm]).min() >= 0.9999


def test_bf16_is_within_the_cosine_of_fp32_on_real_sentences(model_dir, flores):
    fp32, bf16 = ems.load(model_dir, precision="fp32"), ems.load(model_dir, precision="bf16")
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    for lang, lines in flores.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncationWarning)
            exact, low = fp32.encode(lines, lang), bf16.encode(lines, lang)
        assert np.abs(exact - low).max() > 1e-4, lang  # bf16 did run
        assert row_cosines(exact, low).min() >= 0.999, lang


def test_auto_precision_is_the_trainers_decision(model_dir):
    expected = "bf16" if bf16_is_fast("cpu") else "fp32"
    assert ems.load(model_dir).precision == expected
    assert load_encoder(f"ems:{model_dir},precision=fp32,batch_tokens=64").model.precision == "fp32"
    with pytest.raises(ValueError, match="precision must be one of auto, bf16, fp16, fp32; got 'fp8'"):
        ems.load(model_dir, precision="fp8")


def test_encoding_without_gradients_uses_sdpa_on_cpu(model_dir, monkeypatch):
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    model = ems.load(model_dir, precision="fp32")
    vectors = model.encode(["Save", "Change password"], "en")
    assert len(calls) == model.model.cfg.n_layers
    tokens = torch.tensor([model.tokenizer.encode(["Save"], "en")[0]])
    with torch.enable_grad():
        trained_path = model.model(tokens)  # with gradients: attention_with_dropout
    assert len(calls) == model.model.cfg.n_layers
    np.testing.assert_allclose(trained_path.detach().numpy()[0], vectors[0], rtol=1e-5, atol=1e-6)


def test_a_tokenizer_pool_gives_the_ids_of_one_process(model_dir, flores):
    tokenizer = Tokenizer.load(model_dir)
    with TokenizerPool(tokenizer, 2) as pool:
        for lang, lines in flores.items():
            assert len(lines) >= 3 * MIN_POOL_PART  # three parts: here and two workers
            assert pool.encode(lines, lang) == tokenizer.encode(lines, lang), lang
        chunks = [flores["ja"][i : i + 30] for i in range(0, 120, 30)]
        ahead = list(pool.tokenized_ahead(chunks, "ja"))
    assert ahead == [(chunk, tokenizer.encode(chunk, "ja")) for chunk in chunks]


def test_tokenizer_workers_give_the_vectors_of_one_process(model_dir, flores):
    single = ems.load(model_dir)
    pooled = ems.load(model_dir, tokenizer_workers=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        np.testing.assert_array_equal(pooled.encode(flores["ja"], "ja"), single.encode(flores["ja"], "ja"))
    assert pooled._pool is not None  # the call was big enough to use it
    pooled.close()
    assert pooled._pool is None
    with pytest.raises(ValueError, match="tokenizer_workers must be an integer >= 0, got -1"):
        ems.load(model_dir, tokenizer_workers=-1)


def test_no_sentences_an_empty_one_and_a_long_one(model_dir, flores):
    model = ems.load(model_dir, tokenizer_workers=1)
    none = model.encode([], "de")
    assert none.shape == (0, model.dim) and none.dtype == np.float32
    with pytest.raises(ValueError, match=r"1 sentence\(s\) have no tokens after preprocessing \(first at index 1\)"):
        model.encode(["Hallo", ""], "de")
    assert model._pool is None  # small calls tokenise here
    max_len = model.model.cfg.max_len
    long = " ".join(flores["de"][:8])  # eight sentences in one: ~400 tokens
    with pytest.warns(TruncationWarning, match=f"1 of 2 de sentence.*max_len of {max_len}"):
        vectors = model.encode([long, "Hallo"], "de", batch_tokens=16)  # each sentence over the budget: alone
    first = model.tokenizer.encode([long], "de")[0][:max_len]
    with torch.autocast("cpu", dtype=model.dtype, enabled=model.dtype is not None):
        expected = model.model(torch.tensor([first])).detach().float().numpy()
    assert row_cosines(vectors[:1], expected)[0] >= 0.9999


@pytest.mark.parametrize(
    "sizes, error, message",
    [
        ({"batch_tokens": 0}, ValueError, "batch_tokens must be >= 1, got 0"),
        ({"batch_tokens": 2.5}, TypeError, "batch_tokens must be an integer >= 1, got float"),
        ({"batch_tokens": True}, TypeError, "batch_tokens must be an integer >= 1, got bool"),
    ],
)
def test_a_bad_batch_tokens_is_refused_before_tokenising(model_dir, monkeypatch, sizes, error, message):
    model = ems.load(model_dir)
    monkeypatch.setattr(model, "tokenizer", None)  # tokenising would fail on None
    with pytest.raises(error, match=message):
        model.encode(["Save"], "en", **sizes)
