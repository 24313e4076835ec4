"""Packing on the host (ems.packing) and every attention path against a dense reference; the training
step compiled as one graph."""

import math

import numpy as np
import pytest
import torch

from ems.model import EMSModel, EncoderNetwork
from ems.model_config import config_from_preset
from ems.packing import BatchVocabulary, Packer, bucket_size
from ems.shards import PairShards
from ems.text import Tokenizer
from ems.training.batches import collate, to_device

PAD = 0
MAX_LEN = 12


def config(**overrides):
    values = dict(vocab_size=60, n_languages=4, d_model=16, n_heads=4, d_ffn=32, n_layers=2, d_lang=8, dropout=0.0)
    return config_from_preset("tiny", **{**values, "max_len": MAX_LEN, **overrides})


def batch_of(lengths: list[int], width: int | None = None, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    width = width or max(max(lengths), 1)
    ids = rng.integers(2, 60, (len(lengths), width))
    ids[np.arange(width)[None, :] >= np.asarray(lengths)[:, None]] = PAD
    return ids


def dense_reference(network: EncoderNetwork, ids: np.ndarray) -> torch.Tensor:
    """Each row alone, its real tokens only, every layer written out with an explicit softmax: the mean
    pooled u the network should give (0 for a row without tokens)."""
    cfg = network.cfg
    out = []
    for row in ids:
        tokens = torch.from_numpy(row[row != PAD][:MAX_LEN])
        if not len(tokens):
            out.append(torch.zeros(cfg.d_model))
            continue
        x = network.tok_emb(tokens) + network.pos_emb(torch.arange(len(tokens)))
        post = cfg.norm_placement == "post"
        if post:
            x = network.norm(x)
        for layer in network.layers:
            h = x if post else layer.norm1(x)
            q, k, v = layer.qkv(h).view(len(tokens), 3, cfg.n_heads, -1).permute(1, 2, 0, 3)
            weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
            attn = (weights @ v).transpose(0, 1).reshape(len(tokens), cfg.d_model)
            if post:
                x = layer.norm1(x + layer.proj(attn))
                x = layer.norm2(x + layer.ffn(x))
            else:
                x = x + layer.proj(attn)
                x = x + layer.ffn(layer.norm2(x))
        out.append((x if post else network.norm(x)).mean(dim=0))
    return torch.stack(out)


BATCHES = {
    "mixed, an empty row": [7, 0, 1, 12, 3, 12, 5, 2, 9, 4, 11],
    "one-token rows": [1, 1, 1, 1, 1],
    "rows at max_len": [12, 12, 12],
    "a single row": [5],
    "longer than max_len, cut": [15, 3],
}


@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_every_cpu_attention_path_equals_the_dense_reference(lengths, norm):
    torch.manual_seed(0)
    network = EncoderNetwork(config(norm_placement=norm)).eval()
    ids = batch_of(lengths)
    expected = dense_reference(network, ids)
    paths = {
        "sdpa, one layout": Packer(PAD, MAX_LEN),
        "matmul, one layout": Packer(PAD, MAX_LEN),
        "sdpa, groups of 3": Packer(PAD, MAX_LEN, group_rows=3),
        "matmul, groups of 2": Packer(PAD, MAX_LEN, group_rows=2),
        "sdpa, static shapes (filler tokens)": Packer(PAD, MAX_LEN, static_shapes=True),
    }
    for name, packer in paths.items():
        network.layers.apply(
            lambda m, a=name.split(",")[0]: setattr(m, "attention", a) if hasattr(m, "attention") else None
        )
        cut = packer.pad_width(ids)
        with torch.no_grad():
            got = network.pool(torch.from_numpy(cut), packer(cut))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="variable-length flash attention runs on CUDA only")
def test_varlen_attention_equals_the_dense_reference_on_cuda():
    # bf16 on the GPU against the fp32 dense reference on the CPU: within bf16's precision
    from ems.model import varlen_attention_available

    if not varlen_attention_available():
        pytest.skip("this torch has no torch.nn.attention.varlen")
    torch.manual_seed(0)
    network = EncoderNetwork(config(attention="varlen", d_model=64, n_heads=4)).eval()
    for lengths in BATCHES.values():
        ids = batch_of(lengths)
        expected = dense_reference(network, ids)
        gpu = network.cuda()
        # as the trainer packs for varlen (no padded layout), eager and compiled; and with a layout it ignores
        packers = (
            Packer(PAD, MAX_LEN, varlen=True),
            Packer(PAD, MAX_LEN, static_shapes=True, varlen=True),
            Packer(PAD, MAX_LEN),
            Packer(PAD, MAX_LEN, static_shapes=True),
        )
        for packer in packers:
            cut = packer.pad_width(ids)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                got = gpu.pool(torch.from_numpy(cut).cuda(), packer(cut).to("cuda")).float().cpu()
            torch.testing.assert_close(got, expected, rtol=0.05, atol=0.05)
        network.cpu()


def test_static_shapes_bucket_the_token_count_into_segments_no_longer_than_max_len():
    assert [bucket_size(n) for n in (1, 7, 8, 9, 17, 100, 1000)] == [1, 7, 8, 9, 18, 104, 1024]
    assert all(n <= bucket_size(n) <= n * 1.125 + 1 for n in range(1, 5000))
    packer = Packer(PAD, MAX_LEN, static_shapes=True)
    shapes = set()
    for seed, lengths in enumerate(([3, 12, 5, 1] * 25, [4, 12, 5, 1] * 25, [12] * 100)):
        packing = packer(packer.pad_width(batch_of(lengths, seed=seed)))
        segments = np.diff(packing.cu_seqlens.numpy())
        assert packing.cu_seqlens[-1] == packing.ids.shape[0] == bucket_size(sum(lengths))
        assert segments[: len(lengths)].tolist() == lengths and (segments <= MAX_LEN).all()
        assert packing.width == MAX_LEN and packing.max_seqlen == MAX_LEN
        assert (packing.ids[packing.n_real :] == PAD).all() and (packing.row_of[packing.n_real :] == 100).all()
        shapes.add((packing.ids.shape[0], packing.cu_seqlens.shape[0]))
    # 775 and 800 real tokens share a bucket: the same shapes, one compiled graph
    assert len(shapes) == 2


def test_a_static_shape_batch_vocabulary_gives_the_same_xtr_loss():
    torch.manual_seed(0)
    model = EMSModel(config(xtr_vocabulary="batch", attention="sdpa")).eval()
    ids = batch_of([3, 7, 1, 12, 5, 9], seed=2)  # 31 distinct tokens: a bucket of 32
    src, tgt = torch.from_numpy(ids[:3]), torch.from_numpy(ids[3:])
    langs = torch.tensor([0, 1, 2])
    plain = model(src, tgt, langs, langs)
    packer = Packer(PAD, MAX_LEN, static_shapes=True)
    both = packer.pad_width(ids)
    vocabulary = BatchVocabulary.of(np.concatenate([both[3:], both[:3]]), PAD, static_shapes=True)
    assert len(vocabulary.columns) > vocabulary.valid.sum()  # padded columns, masked out of the softmax
    static = model(
        torch.from_numpy(both[:3]),
        torch.from_numpy(both[3:]),
        langs,
        langs,
        packing=packer(both),
        vocabulary=vocabulary,
    )
    for key in ("loss", "xtr", "contrastive"):
        torch.testing.assert_close(static[key], plain[key], rtol=1e-5, atol=1e-5, msg=key)


@pytest.fixture(scope="module")
def real_batch(tiny_pipeline):
    """A real collated batch of 16 pairs of tiny_pipeline's shards (django's catalogs), packed with static
    shapes as a compiled step packs it, and a model of its vocabulary (the all-language recipe's objectives)."""
    shards = PairShards(tiny_pipeline / "shards")
    tokenizer = Tokenizer.load(tiny_pipeline / "vocab")
    torch.manual_seed(0)
    model = EMSModel(
        config_from_preset(
            "tiny",
            vocab_size=tokenizer.vocab_size,
            n_languages=len(tokenizer.languages),
            d_model=32,
            d_ffn=64,
            d_lang=8,
            xtr_weight=2.0,
            xtr_vocabulary="batch",
            dropout=0.0,  # the eager and compiled steps draw different dropout masks
        )
    )
    packer = model.encoder.packer(static_shapes=True)
    return model, collate(shards, np.arange(16), model.cfg.max_len, packer=packer, batch_vocabulary=True)


def test_the_training_step_compiles_as_one_graph(real_batch):
    """torch.compile(fullgraph=True) of the forward (both sides, XTR and contrastive losses) and its backward
    on a real batch: any read of a device value on the host (`.item()`, `nonzero`, a shape that depends on the
    data) breaks the graph and fails this test; so do shapes torch cannot follow: the model that packed on the
    device (`nonzero` for the real tokens, `int(ends.max())` per group, `torch.unique` for XTR's batch
    vocabulary) failed it in its compiled backward ("expected size 32==32, stride 57==56", torch 2.13). The
    compiled step's loss and gradients are the eager step's."""
    model, batch = real_batch
    eager = model(**batch)
    eager["loss"].backward()
    eager_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(**batch)
    out["loss"].backward()
    torch.testing.assert_close(out["loss"], eager["loss"], rtol=1e-4, atol=1e-4)
    for name, p in model.named_parameters():
        if name in eager_grads:
            torch.testing.assert_close(p.grad, eager_grads[name], rtol=1e-3, atol=1e-4, msg=name)


def test_collate_hands_over_everything_the_forward_reads(real_batch):
    model, batch = real_batch
    moved = to_device(batch, torch.device("cpu"))
    assert moved["packing"].n_real == int((batch["src"] != PAD).sum() + (batch["tgt"] != PAD).sum())
    assert moved["src"].shape[1] == model.cfg.max_len  # static shapes: every row padded to max_len
    torch.testing.assert_close(
        model(**moved)["loss"],
        model(batch["src"], batch["tgt"], batch["src_lang"], batch["tgt_lang"], content_ids=batch.get("content_ids"))[
            "loss"
        ],
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="device-to-host synchronisation is a CUDA matter")
def test_twenty_training_steps_read_nothing_back_from_the_gpu(real_batch):
    # set_sync_debug_mode("error") raises at any operation that waits for the device (.item(), nonzero, a
    # blocking copy to the host): the step as the loop runs it (packed on the host, bf16, varlen) has none.
    from benchmarks.bare_step import bare_step

    model, batch = real_batch
    plain = {key: value for key, value in batch.items() if key not in ("packing", "vocabulary")}
    step = bare_step(model.cfg, plain, torch.device("cuda"), dtype="bf16")
    step()  # the first step: allocations, kernel selection
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(20):
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_a_packer_refuses_length_groups_where_attention_takes_the_whole_batch():
    with pytest.raises(ValueError, match="static shapes"):
        Packer(PAD, MAX_LEN, group_rows=2, static_shapes=True)
    with pytest.raises(ValueError, match="variable-length"):
        Packer(PAD, MAX_LEN, group_rows=2, varlen=True)
    assert Packer(PAD, MAX_LEN, varlen=True)(batch_of([3, 1])).layout is None
    assert Packer(PAD, MAX_LEN)(batch_of([3, 1])).layout.width == 3
