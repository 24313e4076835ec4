"""EMS: efficient and effective massively multilingual sentence encoders, trained from scratch.

The names below are imported on first use, so that `import ems` (and `python -m ems.training.train`, which
imports this package first) does not wait seconds for torch before its own first line runs.
"""

import importlib

_EXPORTS = {
    "EMSEncoder": "ems.encoder",
    "load": "ems.encoder",
    "PRESETS": "ems.model_config",
    "EMSConfig": "ems.model_config",
    "EMSModel": "ems.model",
    "EncoderNetwork": "ems.model",
    "config_from_preset": "ems.model_config",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ems' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
