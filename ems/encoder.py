"""Inference: a saved model directory -> `encode(sentences, lang)` -> float32 (n, d) numpy array.

A model directory holds `model.safetensors` (encoder weights only; the training heads are
not exported), `config.json` (EMSConfig) and the tokenizer files (`spm.model`,
`ems_tokenizer.json`), and optionally `head/`: a meaning/language head trained on top of the
frozen encoder (`python -m eval.train_head`), which `encode(..., view="meaning"|"language")` applies.

`encode` checks its input: `lang` must name one of the model's languages (aliases resolve through
ems.languages: `EN`, `eng` -> `en`; `cmn`, `zho`, `zh-Hans` -> `zh`; `deu_Latn` -> `de`), the
sentences must be a list of str and `batch_size` an integer >= 1. A sentence longer than the model's
`max_len` tokens is cut to its first `max_len` tokens, as in training; each `encode` call that cuts
any warns once (TruncationWarning, with the count), and `EMSEncoder.truncated_sentences` counts them
over the encoder's life.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import warnings
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ems.heads import VIEWS, load_head
from ems.languages import resolve_language
from ems.model import EMSConfig, EncoderNetwork
from ems.text import Tokenizer

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
HEAD_DIR = "head"


class TruncationWarning(UserWarning):
    """Some sentences (`count` of them) were longer than the model's max_len tokens and were cut."""

    def __init__(self, message: str, count: int = 0):
        super().__init__(message)
        self.count = count


def check_batch_size(batch_size: int) -> None:
    """TypeError unless `batch_size` is an integer (not a bool), ValueError unless it is >= 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise TypeError(f"batch_size must be an integer >= 1, got {type(batch_size).__name__}: {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


def export_encoder(encoder: EncoderNetwork, tokenizer: Tokenizer, out_dir: str | Path) -> Path:
    """Write the inference model directory (weights, config, tokenizer); returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in encoder.state_dict().items()}
    save_file(state, str(out_dir / WEIGHTS_FILE))
    (out_dir / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(encoder.cfg), indent=2) + "\n")
    tokenizer.save(out_dir)
    return out_dir


class EMSEncoder:
    """A trained EMS sentence encoder: preprocessing + SentencePiece + transformer + mean pooling,
    optionally with a meaning/language `head` (ems.heads) for the non-raw views."""

    def __init__(self, encoder: EncoderNetwork, tokenizer: Tokenizer, device: str | torch.device = "cpu", head=None):
        self.model = encoder.eval().to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.head = head
        self.truncated_sentences = 0  # sentences cut at max_len tokens by `encode`, all calls together

    @property
    def languages(self) -> list[str]:
        return self.tokenizer.languages

    @property
    def dim(self) -> int:
        return self.model.cfg.d_sentence

    @torch.inference_mode()
    def encode(self, sentences: list[str], lang: str, batch_size: int = 128, view: str = "raw") -> np.ndarray:
        """Sentences in language `lang` -> (n, d) float32 mean-pooled vectors u (view "raw"), or
        the head's meaning or language part of them (view "meaning" / "language").

        Sentences are batched by token length, so the output does not depend on the order
        of the input beyond float rounding. `lang` is one of `languages` or an alias of one (see the
        module docstring); an unknown or other language is an UnknownLanguageError (a ValueError)
        that lists the model's languages. `sentences` must be a list (any iterable) of str (TypeError
        naming the first bad index). An empty sentence is an error (it has no tokens to pool).
        Sentences over max_len tokens are cut: one TruncationWarning per call, counted in
        `truncated_sentences`.
        """
        check_batch_size(batch_size)
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
        if view != "raw" and self.head is None:
            raise ValueError(
                f"view {view!r} needs a head saved with the model in <model dir>/{HEAD_DIR}/; "
                "train one with `python -m eval.train_head --encoder ems:DIR --head NAME ...`"
            )
        lang = resolve_language(lang, self.languages)
        raw = self._encode_raw(sentences, lang, batch_size)
        return raw if view == "raw" else getattr(self.head, view)(raw, lang)

    def _encode_raw(self, sentences: list[str], lang: str, batch_size: int) -> np.ndarray:
        ids = self.tokenizer.encode(sentences, lang)
        empty = [i for i, seq in enumerate(ids) if not seq]
        if empty:
            raise ValueError(f"{len(empty)} sentence(s) have no tokens after preprocessing (first at index {empty[0]})")
        max_len = self.model.cfg.max_len
        truncated = sum(len(seq) > max_len for seq in ids)
        if truncated:
            self.truncated_sentences += truncated
            warnings.warn(
                TruncationWarning(
                    f"{truncated} of {len(ids)} {lang} sentence(s) are longer than the model's max_len of "
                    f"{max_len} tokens and were cut to their first {max_len} tokens",
                    truncated,
                ),
                stacklevel=4,  # the caller of encode (under torch.inference_mode)
            )
        return embed_token_ids(self.model, ids, batch_size, self.device)


@torch.inference_mode()
def embed_token_ids(
    model: EncoderNetwork, ids: list[list[int]], batch_size: int = 128, device: str | torch.device = "cpu"
) -> np.ndarray:
    """Token-id sequences (none empty) -> (n, d) float32 sentence vectors from `model` as it is
    (its train/eval mode is the caller's), batched by length, each cut at the model's max_len
    (silently: `EMSEncoder.encode` counts and warns). `batch_size` must be an integer >= 1."""
    check_batch_size(batch_size)
    max_len = model.cfg.max_len
    ids = [seq[:max_len] for seq in ids]
    out = np.zeros((len(ids), model.cfg.d_sentence), dtype=np.float32)
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = max(len(ids[i]) for i in chunk)
        tokens = torch.full((len(chunk), width), model.cfg.pad_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            tokens[row, : len(ids[i])] = torch.tensor(ids[i])
        out[chunk] = model(tokens.to(device)).float().cpu().numpy()
    return out


def initialize_from(encoder: EncoderNetwork, tokenizer: Tokenizer, model_dir: str | Path) -> str:
    """Copy the weights of the model in `model_dir` (an `export_encoder` directory) into `encoder`,
    whose vocabulary is `tokenizer`'s: the "extend a trained model to new languages" start.

    Token embeddings are matched by piece (language tokens <2xx> included), so a new vocabulary,
    e.g. one trained with the new languages' text, keeps the rows of every piece it shares with the
    model's and its other rows stay as initialised; positions up to the shorter max_len are copied.
    Every other tensor must have the model's shape, except an output projection (d_output) that
    only one of them has, which keeps its initialisation. Returns a one-line summary; ValueError
    for a model of another width or depth."""
    model_dir = Path(model_dir)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"init_from={model_dir} is not an EMS model directory: {name} is missing")
    source = load_file(str(model_dir / WEIGHTS_FILE))
    source_tokenizer = Tokenizer.load(model_dir)
    target = encoder.state_dict()
    copied, kept = [], []
    with torch.no_grad():
        for name, tensor in target.items():
            if name in ("tok_emb.weight", "pos_emb.weight") and source[name].shape[1] != tensor.shape[1]:
                raise ValueError(
                    f"init_from={model_dir}: {name} is {tuple(tensor.shape)} here and {tuple(source[name].shape)} "
                    "there; the model preset and overrides must match the model's (d_model, n_layers, d_ffn)"
                )
            if name == "tok_emb.weight":
                old_ids = {source_tokenizer.sp.id_to_piece(i): i for i in range(source_tokenizer.vocab_size)}
                pairs = [
                    (i, old_ids[tokenizer.sp.id_to_piece(i)])
                    for i in range(tokenizer.vocab_size)
                    if tokenizer.sp.id_to_piece(i) in old_ids
                ]
                new_rows, old_rows = (torch.tensor(side, dtype=torch.long) for side in zip(*pairs))
                tensor[new_rows] = source[name][old_rows].to(tensor.dtype)
                shared_pieces = len(pairs)
            elif name == "pos_emb.weight":
                n = min(len(tensor), len(source[name]))
                tensor[:n] = source[name][:n]
            elif name.startswith("output_projection.") and (name not in source or source[name].shape != tensor.shape):
                kept.append(name)
                continue
            elif name not in source or source[name].shape != tensor.shape:
                found = tuple(source[name].shape) if name in source else "nothing"
                raise ValueError(
                    f"init_from={model_dir}: {name} is {tuple(tensor.shape)} here and {found} there; "
                    "the model preset and overrides must match the model's (d_model, n_layers, d_ffn)"
                )
            else:
                tensor.copy_(source[name])
            copied.append(name)
    encoder.load_state_dict(target)
    summary = f"{len(copied)} tensors copied, token embeddings of {shared_pieces} of {tokenizer.vocab_size} pieces"
    return summary + (f"; kept as initialised: {', '.join(kept)}" if kept else "")


def load(path: str | Path, device: str = "cpu") -> EMSEncoder:
    """Load a model directory written by `export_encoder` (safetensors: no pickle is executed),
    with the head in `<path>/head/` if there is one."""
    path = Path(path)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} is not an EMS model directory: {name} is missing")
    cfg = EMSConfig.from_dict(json.loads((path / CONFIG_FILE).read_text()))
    encoder = EncoderNetwork(cfg)
    encoder.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
    return EMSEncoder(encoder, Tokenizer.load(path), device, head=_load_head(path / HEAD_DIR))


def _load_head(directory: Path):
    """The head saved in `directory`, or None if there is none."""
    if not directory.is_dir():
        return None
    return load_head(directory)
