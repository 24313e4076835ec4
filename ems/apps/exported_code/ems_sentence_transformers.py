"""The EMS encoder as a sentence-transformers input module:

    model = SentenceTransformer(DIR, trust_remote_code=True)
    model.encode(sentences, lang="de")      # lang: optional, see ems_sentence_transformers.json

Written by `ems-export` (python -m ems.apps.export), copied from the EMS source's ems/apps/exported_code/.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from safetensors.torch import save_file
from sentence_transformers.base.modules import InputModule

from .ems_core import (
    CONFIG_FILE,
    SPM_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    EMSTextTokenizer,
    EncoderNetwork,
    load_model,
    model_files,
    pad_token_ids,
)


class EMSSentenceEncoder(InputModule):
    """Text -> EMS preprocessing and SentencePiece ids (`preprocess`) -> mean-pooled sentence vectors
    (`forward`, features["sentence_embedding"])."""

    config_file_name = "ems_sentence_transformers.json"
    config_keys = ["default_language"]
    # Declared so that `encode(..., lang="de")` is accepted; `preprocess`, which gets every
    # encode keyword, is what uses it.
    forward_kwargs = {"lang"}

    def __init__(self, encoder: EncoderNetwork, tokenizer: EMSTextTokenizer):
        super().__init__()
        self.encoder = encoder
        self.tokenizer = tokenizer

    @property
    def default_language(self) -> str | None:
        return self.tokenizer.default_language

    @property
    def max_seq_length(self) -> int:
        return self.encoder.cfg.max_len

    def get_embedding_dimension(self) -> int:
        return self.encoder.cfg.d_sentence

    def preprocess(self, inputs: list[str], prompt: str | None = None, lang: str | None = None, **kwargs) -> dict:
        """Sentences in `lang` (None: the default language, or each one's script) -> {"input_ids"}."""
        if prompt:
            inputs = self._prepend_prompt(inputs, prompt)
        return {"input_ids": pad_token_ids(self.tokenizer.encode(inputs, lang), self.encoder.cfg)}

    def forward(self, features: dict, **kwargs) -> dict:
        features["sentence_embedding"] = self.encoder(features["input_ids"])
        return features

    def save(self, output_path: str, *args, **kwargs) -> None:
        state = {name: tensor.detach().cpu().contiguous() for name, tensor in self.encoder.state_dict().items()}
        save_file(state, str(Path(output_path, WEIGHTS_FILE)))
        Path(output_path, CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(self.encoder.cfg), indent=2) + "\n")
        self.tokenizer.save(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token=None,
        cache_folder=None,
        revision=None,
        local_files_only: bool = False,
        **kwargs,
    ) -> EMSSentenceEncoder:
        where = dict(
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        files = model_files(
            model_name_or_path, subfolder, lambda name: cls.load_file_path(model_name_or_path, name, **where)
        )
        config = cls.load_config(model_name_or_path, **where)
        return cls(
            *load_model(
                files[CONFIG_FILE],
                files[WEIGHTS_FILE],
                files[SPM_FILE],
                files[TOKENIZER_FILE],
                config.get("default_language"),
            )
        )
