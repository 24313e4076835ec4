"""benchmarks/train_mfu.py: its FLOP formula against a hand count and torch's own FLOP counter,
and a --quick run that must print (and write) every figure the issue asks for."""

import importlib.util
import json
import sys

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ems.flops import encoder_flops, encoder_parameters, step_flops
from ems.model import EMSModel
from ems.model_config import config_from_preset
from tests.conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location("train_mfu", REPO_ROOT / "benchmarks" / "train_mfu.py")
train_mfu = importlib.util.module_from_spec(spec)
sys.modules["train_mfu"] = train_mfu  # its dataclasses look their module up
spec.loader.exec_module(train_mfu)


def tiny_config(**overrides):
    values = dict(vocab_size=10, n_languages=2, d_model=4, n_heads=2, d_ffn=8, n_layers=1, d_lang=2, d_contrastive=3)
    return config_from_preset("tiny", **{**values, **overrides})


def test_step_flops_hand_count():
    # d=4, ffn=8, 1 layer, V=10, d_lang=2, d_contrastive=3; 2 pairs, src lengths (2, 3), tgt (1, 2).
    flops = step_flops(tiny_config(), np.array([2, 3]), np.array([1, 2]))
    # per token: qkv 4*4*3 + proj 4*4 + ffn 2*4*8 = 128 multiply-adds; 8 real tokens; x2 FLOPs x3 fwd+bwd
    assert flops.encoder == 6 * 128 * 8
    # QK^T and AV: 2 * T^2 * d multiply-adds per sentence, T^2 summed = 4 + 9 + 1 + 4
    assert flops.attention == 6 * 2 * 4 * 18
    # per sentence: XTR fc 6*6 + vocab 6*10, contrastive 4*4 + 4*3 = 124; 4 sentences; scores 2*2*3
    assert flops.heads == 6 * 124 * 4 + 6 * 12
    assert flops.total == 6144 + 864 + 3048


def test_a_batch_xtr_softmax_counts_its_candidates_not_the_vocabulary():
    full = step_flops(tiny_config(), np.array([2, 3]), np.array([1, 2]))
    batch = step_flops(tiny_config(), np.array([2, 3]), np.array([1, 2]), xtr_candidates=4)
    # the vocabulary projection: (d + d_lang) x V per sentence, 4 sentences, x6
    assert full.heads - batch.heads == 6 * 4 * 6 * (10 - 4) and full.encoder == batch.encoder


def test_encoder_parameters_hand_count():
    # d=4, ffn=8, 1 layer, V=10, max_len 5: embeddings 10*4 + 5*4 = 60; the layer: qkv 4*12 + 12 = 60,
    # out 4*4 + 4 = 20, ffn 4*8 + 8 + 8*4 + 4 = 76, two norms 2*(4 + 4) = 16, so 172; the final norm 8
    params = encoder_parameters(tiny_config(max_len=5))
    assert params == {"embeddings": 60, "layers": 172 + 8, "total": 240}
    assert encoder_parameters(tiny_config(max_len=5, d_output=3))["layers"] == 180 + 4 * 3 + 3


def test_step_flops_match_torch_flop_counter_and_skip_padding():
    """Forward + backward of the real model, counted by torch: the dense matmuls (encoder and
    heads) see only real tokens, so they match the formula on a padded batch; attention (bmm)
    runs on the padded width."""
    torch.manual_seed(0)
    cfg = tiny_config(
        vocab_size=50,
        n_languages=3,
        d_model=16,
        n_heads=2,
        d_ffn=24,
        n_layers=2,
        d_lang=4,
        d_contrastive=6,
        dropout=0.1,
        contrastive_projection=True,
        xtr_vocabulary="full",  # the heads the formula counts
    )
    model = EMSModel(cfg).train()  # dropout > 0: attention takes the bmm path, which the counter sees
    src, tgt = torch.randint(5, 50, (3, 7)), torch.randint(5, 50, (3, 6))
    src[0, 4:] = 0
    tgt[1, 2:] = 0
    langs = torch.tensor([0, 1, 2])
    with FlopCounterMode(display=False) as counter:
        model(src, tgt, langs, langs)["loss"].backward()
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}

    real = step_flops(cfg, train_mfu.real_lengths(src), train_mfu.real_lengths(tgt))
    assert counts["aten.mm"] + counts["aten.addmm"] == real.encoder + real.heads
    padded_width = encoder_flops(cfg, np.full(6, 7))
    assert counts["aten.bmm"] == padded_width.attention
    assert real.attention < padded_width.attention


def test_realistic_batch_is_padded_and_bucketed():
    cfg = config_from_preset("ems-paper")
    batch = train_mfu.realistic_batch(cfg, pairs=64, mean_length=27.0)
    assert batch["src"].shape[0] == batch["tgt"].shape[0] == 64
    lengths = np.concatenate([train_mfu.real_lengths(batch["src"]), train_mfu.real_lengths(batch["tgt"])])
    assert lengths.min() >= 2 and lengths.max() <= cfg.max_len
    width = max(batch["src"].shape[1], batch["tgt"].shape[1])
    assert 0.6 < lengths.sum() / (len(lengths) * width) < 1.0  # bucketed: little padding, but some
    real_ids = torch.cat([batch["src"][batch["src"] != 0], batch["tgt"][batch["tgt"] != 0]])
    assert real_ids.min() >= cfg.n_languages + 2 and real_ids.max() < cfg.vocab_size


def test_quick_run_reports_every_figure(tmp_path, capsys):
    out = tmp_path / "mfu.json"
    train_mfu.main(["--quick", "--steps", "1", "--warmup", "1", "--matmul-repeats", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert set(result["matmul_gflops"]) == {"fp32", "bf16"}
    for key in ("ems", "reference"):
        figures = result[key]
        assert figures["gflops"] > 0 and figures["tokens_per_s"] > 0
        peak = result["matmul_gflops"][result["step_dtype"]]
        assert figures["ratio_to_peak"] == pytest.approx(figures["gflops"] / peak)
    assert result["step_dtype"] == max(("fp32", "bf16"), key=result["matmul_gflops"].get)
    assert 0 < result["batch"]["non_pad_ratio"] <= 1
    assert result["ems_over_reference"] == pytest.approx(result["ems"]["gflops"] / result["reference"]["gflops"])
    for label in (
        "matmul peak",
        "non-pad ratio",
        "EMS (full step)",
        "nn.TransformerEncoder ref",
        f"/ {result['step_dtype']} peak",
        "tokens/s",
    ):
        assert label in printed
    assert "MFU against" not in printed and "mfu" not in result["ems"] and "full_run_hours_8gpu" not in result


def test_peak_tflops_gives_mfu(tmp_path, capsys):
    train_mfu.main(
        [
            "--quick",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--matmul-repeats",
            "1",
            "--peak-tflops",
            "0.5",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ems"]["mfu"] == pytest.approx(result["ems"]["gflops"] / 500.0)
    assert "MFU against a bf16 peak of 0.5 TFLOP/s" in capsys.readouterr().out
