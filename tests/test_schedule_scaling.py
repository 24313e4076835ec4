"""The batch-size-aware schedule (ems.training.schedule.effective_schedule): the paper's 608-pair baseline is
unchanged, warm-up in samples keeps the same share of the data at 64 GPUs, lr scaling rules."""

import math

import pytest

from ems.training.config import TrainConfig
from ems.training.schedule import effective_schedule

PAPER = 152 * 4


def test_the_papers_global_batch_keeps_lr_and_warmup():
    for rule in ("none", "linear", "sqrt"):
        cfg = TrainConfig(lr=3e-4, warmup_steps=10_000, lr_scaling=rule)
        assert effective_schedule(cfg, PAPER) == effective_schedule(TrainConfig(), PAPER)
        assert (
            effective_schedule(cfg, PAPER).lr == pytest.approx(3e-4)
            and effective_schedule(cfg, PAPER).warmup_steps == 10_000
        )
    cfg = TrainConfig(warmup_samples=10_000 * PAPER)
    assert effective_schedule(cfg, PAPER).warmup_steps == 10_000


def test_64_gpus_keep_the_warmup_share_and_scale_lr():
    global_batch = 64 * 152  # 16x the paper's
    cfg = TrainConfig(lr=3e-4, warmup_samples=10_000 * PAPER, lr_scaling="sqrt")
    schedule = effective_schedule(cfg, global_batch)
    assert schedule.warmup_steps == 625 and schedule.lr == pytest.approx(1.2e-3)
    assert effective_schedule(TrainConfig(lr=3e-4, lr_scaling="linear"), global_batch).lr == pytest.approx(4.8e-3)
    assert effective_schedule(TrainConfig(warmup_samples=1000), 300).warmup_steps == math.ceil(1000 / 300)
    # 3 epochs of 143M pairs: the paper's 10k warm-up steps would be 23% of the run, 625 are 1.4%
    steps = math.ceil(3 * 143_000_000 / global_batch)
    line = schedule.describe(cfg, steps, world_size=64, accumulation=1)
    assert "global batch 9728 pairs (64 ranks x 1 accumulation x 152)" in line
    assert "peak lr 0.0012 (lr 0.0003 x 16 ** 0.5 (sqrt scaling from 608 pairs))" in line
    assert "warm-up 625 steps = 6,080,000 pairs (warmup_samples 6,080,000 / 9728), 1.4% of 44100 steps" in line
    assert 10_000 / steps > 0.22


def test_bad_values_are_one_error():
    with pytest.raises(ValueError, match="lr_scaling must be one of none, linear, sqrt, got 'cubic'"):
        TrainConfig(lr_scaling="cubic")
    with pytest.raises(ValueError, match="warmup_samples must be at least 0 or null"):
        TrainConfig(warmup_samples=-5)
    with pytest.raises(ValueError, match="reference_global_batch must be at least 1"):
        TrainConfig(reference_global_batch=0)
