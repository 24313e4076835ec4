"""`autocast: bf16` reaches the forward pass inside DeepSpeed's engine, and `none` stays fp32.

DeepSpeed's engine turns an enclosing torch.autocast off unless its own torch_autocast section enables
it, but it looks with torch.is_autocast_enabled(), which without a device reads CUDA's autocast only: on
a GPU the run's bf16 was silently fp32, on a CPU it was not. The tests let that check read the CPU's
autocast, so that the CPU run meets what a GPU run meets."""

import pytest
import torch

from ems.training.runtime import AUTOCAST_KEY, engine_autocast, optimizer_layout
from ems.training.train import train
from tests.conftest import small_run


@pytest.fixture
def engine_sees_cpu_autocast(monkeypatch):
    """torch.is_autocast_enabled() without a device reads the CPU's autocast, as it reads CUDA's on a GPU."""
    is_enabled = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *device: is_enabled(*(device or ("cpu",))))


def linear_output_dtypes(tiny_pipeline, out, autocast: str) -> set[torch.dtype]:
    """The dtypes of every nn.Linear output during a 2-step run (its forward passes: training and validation)."""
    seen = set()

    def record(module, inputs, output):
        if isinstance(module, torch.nn.Linear):
            seen.add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        train(small_run(tiny_pipeline, out, batch_size=16, max_steps=2, warmup_steps=1, autocast=autocast))
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize(("autocast", "dtype"), [("bf16", torch.bfloat16), ("none", torch.float32)])
def test_the_forward_pass_runs_in_the_configured_precision(
    tiny_pipeline, tmp_path, engine_sees_cpu_autocast, autocast, dtype
):
    assert linear_output_dtypes(tiny_pipeline, tmp_path / "run", autocast) == {dtype}


def test_the_autocast_section_follows_the_decision_and_is_not_part_of_the_fixed_layout():
    ds_config = {"zero_optimization": {"stage": 0}, AUTOCAST_KEY: {"enabled": False}}
    engine_autocast(ds_config, True)
    assert ds_config[AUTOCAST_KEY] == {"enabled": True, "dtype": "bfloat16", "lower_precision_safe_modules": []}
    assert optimizer_layout(ds_config) == {"zero_optimization": {"stage": 0}}
    engine_autocast(ds_config, False)
    assert AUTOCAST_KEY not in ds_config
