"""Typed configs: YAML + key=value overrides come out as the dataclass's types, or a clear error."""

import pytest

from ems.configs import load_config
from ems.training.config import TrainConfig


def test_numbers_yaml_reads_as_strings_get_the_field_type(tmp_path):
    # YAML 1.1 reads 3e-4 (no dot) as a string: a float field must still get a float
    (tmp_path / "run.yaml").write_text("lr: 3e-4\nwarmup_steps: 1e3\nmax_epochs: 3\n")
    cfg = load_config(TrainConfig, tmp_path / "run.yaml", ["temperature=5", "out=123", "max_minutes=null",
                                                           "model_overrides.d_model=64"])
    assert (cfg.lr, cfg.warmup_steps, cfg.max_epochs, cfg.temperature) == (3e-4, 1000, 3.0, 5.0)
    assert [type(v) for v in (cfg.lr, cfg.warmup_steps, cfg.max_epochs, cfg.temperature)] == [float, int, float, float]
    assert cfg.out == "123" and cfg.max_minutes is None and cfg.model_overrides == {"d_model": 64}


@pytest.mark.parametrize("override, message", [
    ("max_steps=abc", "TrainConfig.max_steps must be int, got 'abc'"),
    ("max_steps=1.5", "TrainConfig.max_steps must be int, got 1.5"),
    ("lr=fast", "TrainConfig.lr must be float, got 'fast'"),
    ("export_init=3", "TrainConfig.export_init must be bool, got 3"),
    ("lr=null", "TrainConfig.lr cannot be null"),
    ("learning_rate=1", "unknown TrainConfig keys \\['learning_rate'\\]"),
])
def test_a_value_of_the_wrong_type_names_the_field(override, message):
    with pytest.raises(ValueError, match=message):
        load_config(TrainConfig, None, [override])
