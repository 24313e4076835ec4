import json

import pytest
import torch

from ems.encoder import read_config
from ems.model import EMSModel, EncoderNetwork
from ems.model_config import PRESET_MAX_LEN, PRESETS, EMSConfig, config_from_preset
from ems.packing import Packer

PAD = 0


def small_config(**overrides) -> EMSConfig:
    values = dict(vocab_size=100, n_languages=4, d_model=32, n_heads=4, d_ffn=64, n_layers=2, d_lang=8, dropout=0.1)
    return config_from_preset("tiny", **{**values, **overrides})


def test_padding_does_not_change_u():
    torch.manual_seed(0)
    encoder = EncoderNetwork(small_config()).eval()
    short = torch.tensor([[5, 17, 42]])
    batch = torch.tensor([[5, 17, 42, PAD, PAD, PAD, PAD], [9, 8, 7, 6, 5, 4, 3]])
    alone = encoder(short)
    padded = encoder(batch)[:1]
    torch.testing.assert_close(alone, padded, rtol=1e-5, atol=1e-6)
    # and the pad embedding itself is not what makes it equal: changing a real token changes u
    assert not torch.allclose(alone, encoder(torch.tensor([[5, 17, 43]])))


def test_u_is_mean_of_final_states_over_real_tokens():
    torch.manual_seed(0)
    encoder = EncoderNetwork(small_config(norm_placement="pre")).eval()  # pre-LN: a final norm before pooling
    tokens = torch.tensor([[5, 17, 42, PAD]])
    states = {}
    encoder.norm.register_forward_hook(lambda m, i, o: states.setdefault("h", o))
    u = encoder(tokens)
    assert states["h"].shape == (3, 32)  # the final norm sees the 3 real tokens' states only
    torch.testing.assert_close(u, states["h"].mean(dim=0, keepdim=True))


def test_truncates_to_max_len():
    torch.manual_seed(0)
    encoder = EncoderNetwork(small_config(max_len=4)).eval()
    long = torch.tensor([[5, 6, 7, 8, 9, 10]])
    torch.testing.assert_close(encoder(long), encoder(long[:, :4]))


def test_every_preset_keeps_long_sentences_whole():
    assert PRESET_MAX_LEN >= 280  # Thai's 99th percentile on FLORES-200 devtest (docs/results/multilingual.md)
    assert all(config_from_preset(name, vocab_size=100, n_languages=2).max_len == PRESET_MAX_LEN for name in PRESETS)


def test_paper_preset_shapes():
    cfg = config_from_preset("ems-paper")
    # max_len: the paper's 120 cut 2.5% of FLORES-200 devtest (45% of Thai) with this corpus's vocabulary
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ffn, cfg.max_len) == (6, 1024, 16, 4096, PRESET_MAX_LEN)
    assert (cfg.d_lang, cfg.d_contrastive, cfg.contrastive_temperature, cfg.dropout) == (128, 128, 0.1, 0.1)
    assert cfg.vocab_size == 60_000 + 62 + 2 and cfg.n_languages == 62
    # the paper's training settings, not the recipes' defaults (dropout 0, loss on u, batch softmax)
    assert (cfg.contrastive_projection, cfg.xtr_vocabulary, cfg.norm_placement) == (True, "full", "post")


def test_the_defaults_are_the_recipes_choices():
    # docs/results/peer.md#how-the-demos-other-settings-were-chosen: every sized preset takes them
    for name in ("tiny", "small", "base", "medium"):
        cfg = config_from_preset(name, vocab_size=100, n_languages=2)
        assert (cfg.dropout, cfg.contrastive_projection, cfg.xtr_vocabulary) == (0.0, False, "batch")
        assert (cfg.norm_placement, cfg.embedding_norm) == ("post", False)


def test_a_config_json_saved_before_norm_placement_is_pre_ln(tmp_path):
    # config.json lists every field; one without norm_placement predates it (and post-LN): its layers are
    # pre-LN, whatever the default now is
    saved = {"vocab_size": 100, "n_languages": 4, "d_model": 32, "n_heads": 4, "d_ffn": 64, "n_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert read_config(tmp_path / "config.json").norm_placement == "pre"
    (tmp_path / "config.json").write_text(json.dumps({**saved, "norm_placement": "post"}))
    assert read_config(tmp_path / "config.json").norm_placement == "post"


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model preset"):
        config_from_preset("huge")
    with pytest.raises(ValueError, match="unknown model config keys"):
        config_from_preset("tiny", vocab_size=10, n_languages=2, d_modle=8)
    with pytest.raises(ValueError, match="divisible"):
        EMSConfig(vocab_size=10, n_languages=2, d_model=30, n_heads=4)
    assert set(PRESETS) >= {"ems-paper", "tiny"}


def test_heads_are_separate_from_encoder_state():
    model = EMSModel(small_config())
    assert not any(k.startswith(("xtr", "contrastive")) for k in model.encoder.state_dict())


def test_training_attention_matches_sdpa_without_dropout():
    import numpy as np

    from ems.model import attention_with_dropout
    from ems.packing import Layout

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 3, 5, 4).unbind(0)
    layout = Layout.of(np.array([3, 5]))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=layout.mask)
    torch.testing.assert_close(attention_with_dropout(q, k, v, layout.bias, 0.0), expected)


def test_training_step_with_an_empty_sentence_stays_finite():
    torch.manual_seed(0)
    model = EMSModel(small_config()).train()
    src = torch.tensor([[PAD, PAD, PAD], [5, 6, 7]])
    tgt = torch.tensor([[8, 9, PAD], [10, PAD, PAD]])
    loss = model(src, tgt, torch.tensor([0, 1]), torch.tensor([2, 3]))["loss"]
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_attention_implementations_agree_and_a_bad_name_is_an_error():
    torch.manual_seed(0)
    tokens = torch.randint(2, 50, (3, 7))
    tokens[0, 4:] = 0
    outputs = []
    for attention in ("sdpa", "matmul", "auto"):
        torch.manual_seed(1)
        model = EncoderNetwork(small_config(attention=attention)).eval()
        outputs.append(model(tokens))
    torch.testing.assert_close(outputs[0], outputs[1])
    torch.testing.assert_close(outputs[0], outputs[2])
    with pytest.raises(ValueError, match="attention must be"):
        small_config(attention="flash")


def test_length_groups_give_the_same_vectors_and_gradients_as_one_layout():
    # Rows of mixed lengths (one empty), several groups of length-sorted rows, each padded to its own
    # longest: the same u and the same gradients as one (B, L) layout, with and without dropout's
    # matmul path. A wrong ungrouping (rows swapped between groups) changes u.
    torch.manual_seed(0)
    lengths = torch.tensor([7, 0, 1, 12, 3, 12, 5, 2, 9, 4, 11])
    tokens = torch.randint(3, 100, (len(lengths), 12))
    tokens[torch.arange(12)[None, :] >= lengths[:, None]] = PAD
    packed = Packer(PAD, 12, group_rows=3)(tokens.numpy())
    assert len(packed.groups) == 4
    assert [group.layout.width for group in packed.groups] == [
        2,
        5,
        11,
        12,
    ]  # lengths sorted 0 1 2 | 3 4 5 | 7 9 11 | 12 12
    for attention in ("sdpa", "matmul"):
        grouped = EncoderNetwork(small_config(attention_group_rows=3, attention=attention, dropout=0.0))
        whole = EncoderNetwork(small_config(attention_group_rows=0, attention=attention, dropout=0.0))
        whole.load_state_dict(grouped.state_dict())
        a, b = grouped(tokens), whole(tokens)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        a.square().sum().backward()
        b.square().sum().backward()
        for (name, p), q in zip(grouped.named_parameters(), whole.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert not torch.allclose(whole(tokens)[3], whole(tokens)[5])  # the two 12-token rows differ


def test_table13_component_options():
    # "- L_cntrs_mlp": the contrastive loss acts on u itself; "- langs tok": XTR's prediction does
    # not depend on the target language.
    torch.manual_seed(0)
    model = EMSModel(small_config(contrastive_projection=False, xtr_language_token=False, dropout=0.0)).eval()
    u = torch.randn(2, 32)
    torch.testing.assert_close(model.contrastive_head(u), u)
    torch.testing.assert_close(model.xtr_head(u, torch.tensor([0, 1])), model.xtr_head(u, torch.tensor([3, 2])))
    assert model.xtr_head.lang_emb is None
    paper = EMSModel(small_config(dropout=0.0, contrastive_projection=True)).eval()
    assert not torch.allclose(paper.xtr_head(u, torch.tensor([0, 1])), paper.xtr_head(u, torch.tensor([3, 2])))
    assert paper.contrastive_head(u).shape == (2, paper.cfg.d_contrastive)
    with pytest.raises(ValueError, match="attention_group_rows"):
        small_config(attention_group_rows=-1)


def _post_ln_reference(encoder: EncoderNetwork, tokens: torch.Tensor) -> torch.Tensor:
    """BERT's layer order written out densely on the padded batch: LayerNorm(embeddings), then per layer
    x = LN1(x + attention(x)), x = LN2(x + ffn(x)); the mean of the last states over real tokens."""
    mask = tokens != PAD
    positions = torch.arange(tokens.shape[1])
    x = encoder.norm(encoder.tok_emb(tokens) + encoder.pos_emb(positions)[None])
    b, t, d = x.shape
    for layer in encoder.layers:
        h = layer.n_heads
        q, k, v = layer.qkv(x).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // h) ** 0.5
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = layer.norm1(x + layer.proj(attn))
        x = layer.norm2(x + layer.ffn(x))
    return (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def test_post_layernorm_is_bert_s_layer_order():
    # norm_placement "post" (the peer's network) against the dense reference above, with length groups
    # too; the pre-LN encoder with the same weights gives other vectors, and a bad placement is refused.
    torch.manual_seed(0)
    lengths = torch.tensor([7, 1, 12, 3, 5])
    tokens = torch.randint(3, 100, (len(lengths), 12))
    tokens[torch.arange(12)[None, :] >= lengths[:, None]] = PAD
    for group_rows in (0, 2):
        post = EncoderNetwork(small_config(norm_placement="post", attention_group_rows=group_rows)).eval()
        torch.testing.assert_close(post(tokens), _post_ln_reference(post, tokens), rtol=1e-5, atol=1e-5)
    pre = EncoderNetwork(small_config(norm_placement="pre")).eval()
    pre.load_state_dict(post.state_dict())
    assert not torch.allclose(pre(tokens), post(tokens), atol=1e-3)
    with pytest.raises(ValueError, match="norm_placement must be one of pre, post"):
        small_config(norm_placement="sandwich")
    with pytest.raises(ValueError, match="embedding_norm is for pre-LN layers"):
        small_config(norm_placement="post", embedding_norm=True)


def test_embedding_norm_normalises_the_embeddings_of_pre_ln_layers():
    # pre-LN layers over LayerNorm(token + position embeddings): the pre-LN encoder whose embeddings are
    # replaced by their normalised values gives the same vectors
    torch.manual_seed(0)
    tokens = torch.tensor([[5, 17, 42, PAD], [9, 8, 7, 6]])
    normed = EncoderNetwork(small_config(norm_placement="pre", embedding_norm=True)).eval()
    with torch.no_grad():
        normed.embedding_norm.weight.uniform_(0.5, 1.5)
        normed.embedding_norm.bias.uniform_(-0.5, 0.5)
    plain = EncoderNetwork(small_config(norm_placement="pre")).eval()
    plain.load_state_dict({k: v for k, v in normed.state_dict().items() if not k.startswith("embedding_norm")})
    captured = {}
    normed.embedding_norm.register_forward_hook(lambda m, i, o: captured.setdefault("x", o))
    u = normed(tokens)
    plain.pos_emb.register_forward_hook(lambda m, i, o: torch.zeros_like(o))
    plain.tok_emb.register_forward_hook(lambda m, i, o: captured["x"])
    torch.testing.assert_close(plain(tokens), u)
    unnormed = EncoderNetwork(small_config(norm_placement="pre")).eval()
    unnormed.load_state_dict(plain.state_dict())
    assert not torch.allclose(unnormed(tokens), u, atol=1e-3)  # the norm changes the vectors
