"""EMS: efficient and effective massively multilingual sentence encoders, trained from scratch."""

from ems.encoder import EMSEncoder, load
from ems.model import PRESETS, EMSConfig, EMSModel, SentenceEncoder, config_from_preset

__all__ = ["EMSConfig", "EMSEncoder", "EMSModel", "PRESETS", "SentenceEncoder", "config_from_preset", "load"]
