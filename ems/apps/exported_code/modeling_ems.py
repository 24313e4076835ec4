"""The EMS encoder as a transformers model:

    model = AutoModel.from_pretrained(DIR, trust_remote_code=True)
    model(input_ids).pooler_output          # EMS token ids (pad: 0) -> sentence vectors
    model.encode(sentences, lang="de")      # text -> numpy vectors, as ems.load(...).encode

Written by `ems-export` (python -m ems.apps.export), copied from the EMS source's ems/apps/exported_code/.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.utils import cached_file

from .ems_core import (
    CONFIG_FILE,
    SPM_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    EMSConfig,
    EMSTextTokenizer,
    EncoderNetwork,
    check_tensor_shapes,
    check_tokenizer,
    embed_token_ids,
    encoder_shapes,
    model_files,
    weight_shapes,
)


def _model_files(model: str | Path, where: dict) -> dict[str, Path]:
    """The model's files as transformers finds them (cached_file with `where`: revision, subfolder,
    ...), checked (ems_core.model_files)."""
    return model_files(
        model,
        where.get("subfolder", ""),
        lambda name: cached_file(model, name, **where, _raise_exceptions_for_missing_entries=False),
    )


class EMSHFConfig(PretrainedConfig):
    """`ems`: the EMS model config (ems.model_config.EMSConfig's fields); `default_language`: the language
    `encode` preprocesses text as when not given one (None: each sentence's script decides)."""

    model_type = "ems"

    def __init__(self, ems: dict | None = None, default_language: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.ems = ems
        self.default_language = default_language


class EMSHFModel(PreTrainedModel):
    """input_ids (B, L), 0 where padded -> pooler_output (B, d): the mean-pooled EMS sentence vectors."""

    config_class = EMSHFConfig
    base_model_prefix = "ems"
    main_input_name = "input_ids"

    def __init__(self, config: EMSHFConfig):
        super().__init__(config)
        self.encoder = EncoderNetwork(EMSConfig.from_dict(config.ems))
        self.text_tokenizer: EMSTextTokenizer | None = None  # read from the model's files on first use
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Nothing: every weight is in model.safetensors, and a model built from a config alone keeps
        PyTorch's initialisation."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs) -> EMSHFModel:
        """transformers' from_pretrained, with ems.load's checks: first the model's files (each there,
        none a symlink out of a local model folder: ems_core.model_files), then model.safetensors
        against the config's model (the tensor names and shapes: transformers would leave a missing
        tensor as uninitialised memory), then the tokenizer files (a vocabulary or language list that
        is not the model's fails here, not at encode). One line (ValueError, FileNotFoundError) for
        the first that fails."""
        where = {
            key: kwargs[key]
            for key in ("cache_dir", "token", "revision", "local_files_only", "subfolder")
            if key in kwargs
        }
        weights_file = _model_files(pretrained_model_name_or_path, where)[WEIGHTS_FILE]
        config = kwargs.get("config")
        if getattr(config, "ems", None) is None:
            config = EMSHFConfig.from_pretrained(pretrained_model_name_or_path, **where)
        shapes = encoder_shapes(EMSConfig.from_dict(config.ems))
        expected = {f"encoder.{name}": shape for name, shape in shapes.items()}
        check_tensor_shapes(
            expected, weight_shapes(weights_file), weights_file, f"the model of {weights_file.parent / CONFIG_FILE}"
        )
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model.load_text_tokenizer(**where)
        return model

    def load_text_tokenizer(self, **where) -> EMSTextTokenizer:
        """The model's tokenizer (spm.model, ems_tokenizer.json), checked against its config; `where`:
        cached_file's options (revision, token, ...)."""
        files = _model_files(self.name_or_path, where)
        spm_file = files[SPM_FILE]
        tokenizer = EMSTextTokenizer(spm_file, files[TOKENIZER_FILE], self.config.default_language)
        check_tokenizer(self.encoder.cfg, tokenizer, spm_file)
        self.text_tokenizer = tokenizer
        return tokenizer

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs
    ) -> BaseModelOutputWithPooling:
        if attention_mask is not None:
            input_ids = input_ids.masked_fill(attention_mask == 0, self.encoder.cfg.pad_id)
        return BaseModelOutputWithPooling(pooler_output=self.encoder(input_ids))

    def tokenize(self, sentences: list[str], lang: str | None = None) -> list[list[int]]:
        """Sentences in `lang` (None: config.default_language, or each one's script) -> token ids."""
        if self.text_tokenizer is None:
            self.load_text_tokenizer()
        return self.text_tokenizer.encode(sentences, lang)

    def encode(self, sentences: list[str], lang: str | None = None, batch_size: int | None = None) -> np.ndarray:
        """Sentences -> (n, d) float32 sentence vectors, as ems.load(DIR).encode(sentences, lang)."""
        return embed_token_ids(self.encoder, self.tokenize(sentences, lang), batch_size, self.device)
