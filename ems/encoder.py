"""Inference: a saved model directory -> `encode(sentences, lang)` -> float32 (n, d) numpy array.

A model directory holds `model.safetensors` (encoder weights only; the training heads are
not exported), `config.json` (EMSConfig), the tokenizer files (`spm.model`,
`ems_tokenizer.json`) and `manifest.json` (the size and sha256 of those four, checked when the model
loads), and optionally `head/`: a meaning/language head trained on top of the
frozen encoder (`python -m eval.train_head`), which `encode(..., view="meaning"|"language")` applies.

`encode` checks its input: `lang` must name one of the model's languages (aliases resolve through
ems.languages: `EN`, `eng` -> `en`; `cmn`, `zho`, `zh-Hans` -> `zh`; `deu_Latn` -> `de`), the
sentences must be a list of str, `batch_size` and `batch_tokens` None or integers >= 1. A sentence
longer than the model's `max_len` tokens is cut to its first `max_len` tokens, as in training; each
`encode` call that cuts any warns once (TruncationWarning, with the count), and
`EMSEncoder.truncated_sentences` counts them over the encoder's life.
`encode_zero_shot` encodes sentences of a language the model was not trained on (no language is
checked; each sentence is preprocessed as its script suggests): what `ems:DIR,unseen=neutral`
(ems.encoder_kinds) uses for such languages.

Speed: `encode` runs under torch.inference_mode, sorts the sentences by token length and batches
them by padded tokens (`token_batches`), in bf16 where bf16 is the faster type (ems.precision:
the trainer's `autocast: auto` decision; bf16 vectors are within a row cosine of 0.9999 of fp32's
on FLORES-200 sentences), and can tokenise in worker processes (`tokenizer_workers`,
ems.tokenizer_pool). benchmarks/encode_throughput.py measures it against sentence-transformers.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ems.artifacts import file_record, read_manifest_files, sha256_file, write_json
from ems.corpus import inside_folder, resolve_inside
from ems.heads import VIEWS, load_head
from ems.languages import resolve_language
from ems.model import EncoderNetwork, check_tensor_shapes, encoder_shapes, load_weights, weight_shapes
from ems.model_config import EMSConfig
from ems.precision import autocast_dtype, precision_name
from ems.text import SPM_FILE, TOKENIZER_FILE, UNKNOWN_LANGUAGE, Tokenizer, checked_sentences
from ems.tokenizer_pool import MIN_POOL_PART, TokenizerPool

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
HEAD_DIR = "head"
# {"files": {name: {"bytes", "sha256"}}} of the files that make the model (MODEL_FILES), written with them
MANIFEST_FILE = "manifest.json"
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, SPM_FILE, TOKENIZER_FILE)
# Padded tokens (rows x longest) per forward pass, by device type. CPU: small batches stay in cache;
# GPUs: big batches keep the device busy (measured: docs/results/throughput.md).
CPU_BATCH_TOKENS = 2048
GPU_BATCH_TOKENS = 16384


class TruncationWarning(UserWarning):
    """Some sentences (`count` of them) were longer than the model's max_len tokens and were cut."""

    def __init__(self, message: str, count: int = 0):
        super().__init__(message)
        self.count = count


def check_batch_sizes(batch_size: int | None, batch_tokens: int | None) -> None:
    """Each of `batch_size` and `batch_tokens` is None (no limit / the device's default) or an
    integer (not a bool) >= 1: TypeError or ValueError naming it otherwise."""
    for name, value in (("batch_size", batch_size), ("batch_tokens", batch_tokens)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer >= 1, got {type(value).__name__}: {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def default_batch_tokens(device: str | torch.device) -> int:
    """The padded tokens per forward pass that `encode` batches by on `device` when not told."""
    return CPU_BATCH_TOKENS if torch.device(device).type == "cpu" else GPU_BATCH_TOKENS


def export_encoder(encoder: EncoderNetwork, tokenizer: Tokenizer, out_dir: str | Path) -> Path:
    """Write the inference model directory (weights, config, tokenizer); returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in encoder.state_dict().items()}
    save_file(state, str(out_dir / WEIGHTS_FILE))
    (out_dir / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(encoder.cfg), indent=2) + "\n")
    tokenizer.save(out_dir)
    write_model_manifest(out_dir)
    return out_dir


def write_model_manifest(directory: Path) -> None:
    """MANIFEST_FILE of a model directory: the size and sha256 of each of its MODEL_FILES (written
    before it), which `check_model_manifest` checks when the model is loaded."""
    write_json(directory / MANIFEST_FILE, {"files": {name: file_record(directory / name) for name in MODEL_FILES}})


def check_model_manifest(directory: Path) -> None:
    """ValueError (one line naming the file) when a file that the model directory's MANIFEST_FILE
    records is missing or no longer the file it records (an edit of config.json that the weights
    cannot show, such as n_heads or norm_placement, a damaged copy); a directory without a manifest is
    not checked: sentence-transformers' save of the exported module (a model fine-tuned there) writes the
    four files without one. Each file is read once. Like a checkpoint's,
    the manifest finds accidents, not tampering: anyone can write it again."""
    manifest = directory / MANIFEST_FILE
    if not manifest.is_file():
        return
    home = f"the model directory {directory}"
    inside_folder(directory, manifest, home)
    try:
        recorded = read_manifest_files(manifest)
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested too deep, another shape
        reason = " ".join(str(error).split())
        raise ValueError(f"{manifest} is not a model manifest ({reason}): export the model again") from None
    for name, entry in recorded.items():
        path = resolve_inside(directory, name, manifest, home)
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing, though {manifest} records it as part of the model")
        size = path.stat().st_size
        if size != entry["bytes"]:
            differs = f"{size} bytes, not {entry['bytes']}"
        elif sha256_file(path) != entry["sha256"]:
            differs = "its sha256"
        else:
            continue
        raise ValueError(
            f"{path} is not the file the model was saved with ({differs}, as {manifest} records): it was "
            f"edited or damaged since; put the saved file back, or export the model again"
        )


class EMSEncoder:
    """A trained EMS sentence encoder: preprocessing + SentencePiece + transformer + mean pooling,
    optionally with a meaning/language `head` (ems.heads) for the non-raw views.

    `precision` (ems.precision.PRECISIONS) is the forward pass's float type; "auto" is bf16 where
    bf16 matmuls are faster than fp32 (GPUs, CPUs with AMX/AVX512-BF16), as the trainer's `autocast:
    auto` decides, else fp32; `precision` afterwards names the one chosen. With `tokenizer_workers`
    N > 0, an encode call of enough sentences tokenises them in N worker processes and this one
    (ems.tokenizer_pool; the pool starts at the first such call, `close` ends it)."""

    def __init__(
        self,
        encoder: EncoderNetwork,
        tokenizer: Tokenizer,
        device: str | torch.device = "cpu",
        head=None,
        precision: str = "auto",
        tokenizer_workers: int = 0,
    ):
        self.model = encoder.eval().to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.head = head
        self.dtype = autocast_dtype(precision, self.device)
        if isinstance(tokenizer_workers, bool) or not isinstance(tokenizer_workers, int) or tokenizer_workers < 0:
            raise ValueError(f"tokenizer_workers must be an integer >= 0, got {tokenizer_workers!r}")
        self.tokenizer_workers = tokenizer_workers
        self._pool: TokenizerPool | None = None
        self.truncated_sentences = 0  # sentences cut at max_len tokens by `encode`, all calls together

    @property
    def languages(self) -> list[str]:
        return self.tokenizer.languages

    @property
    def dim(self) -> int:
        return self.model.cfg.d_sentence

    @property
    def precision(self) -> str:
        """The forward pass's float type: "bf16", "fp16" or "fp32"."""
        return precision_name(self.dtype)

    def close(self) -> None:
        """End the tokenizer workers, if any started (a later encode starts them again)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @torch.inference_mode()
    def encode(
        self,
        sentences: list[str],
        lang: str,
        batch_size: int | None = None,
        view: str = "raw",
        batch_tokens: int | None = None,
    ) -> np.ndarray:
        """Sentences in language `lang` -> (n, d) float32 mean-pooled vectors u (view "raw"), or
        the head's meaning or language part of them (view "meaning" / "language").

        Sentences are sorted by token length and batched by `batch_tokens` padded tokens (and at
        most `batch_size` sentences, if given; see `token_batches`), so the output does not depend
        on the order of the input beyond float rounding. `lang` is one of `languages` or an alias of
        one (see the module docstring); an unknown or other language is an UnknownLanguageError (a
        ValueError) that lists the model's languages. `sentences` must be a list (any iterable) of
        str (TypeError naming the first bad index); none is an empty (0, d) array. An empty sentence
        is an error (it has no tokens to pool). Sentences over max_len tokens are cut: one
        TruncationWarning per call, counted in `truncated_sentences`.
        """
        check_batch_sizes(batch_size, batch_tokens)
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
        if view != "raw" and self.head is None:
            raise ValueError(
                f"view {view!r} needs a head saved with the model in <model dir>/{HEAD_DIR}/; "
                "train one with `python -m eval.train_head --encoder ems:DIR --head NAME ...`"
            )
        lang = resolve_language(lang, self.languages)
        raw = self._encode_raw(checked_sentences(sentences), lang, batch_size, batch_tokens)
        return raw if view == "raw" else getattr(self.head, view)(raw, lang)

    @torch.inference_mode()
    def encode_zero_shot(
        self, sentences: list[str], batch_size: int | None = None, batch_tokens: int | None = None
    ) -> np.ndarray:
        """Sentences in a language that is none of `languages` -> (n, d) float32 raw vectors: the
        zero-shot use of this language-agnostic encoder (its input has no language token; a language
        only picks the pre-tokenizer). Each sentence is preprocessed as its script suggests
        (ems.text.Tokenizer.encode_guessed: the model's zh/ja segmenter for Han/kana text, else
        language-neutral Moses), as the exported models do without a language; the rest is `encode`'s
        (batching, truncation warnings). Sentences and sizes are checked as there."""
        check_batch_sizes(batch_size, batch_tokens)
        sentences = checked_sentences(sentences)
        ids = self.tokenizer.encode_guessed(sentences)
        return self._encode_raw(sentences, UNKNOWN_LANGUAGE, batch_size, batch_tokens, ids)

    def _token_ids(self, sentences: list[str], lang: str) -> list[list[int]]:
        if self.tokenizer_workers and len(sentences) >= 2 * MIN_POOL_PART:
            if self._pool is None:
                self._pool = TokenizerPool(self.tokenizer, self.tokenizer_workers)
                weakref.finalize(self, self._pool.close)  # no workers left behind by a dropped encoder
            return self._pool.encode(sentences, lang)
        return self.tokenizer.encode(sentences, lang)

    def _encode_raw(
        self,
        sentences: list[str],
        lang: str,
        batch_size: int | None,
        batch_tokens: int | None,
        ids: list[list[int]] | None = None,
    ) -> np.ndarray:
        ids = self._token_ids(sentences, lang) if ids is None else ids
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
        return embed_token_ids(self.model, ids, batch_size, self.device, batch_tokens=batch_tokens, dtype=self.dtype)


def token_batches(lengths: Sequence[int], batch_tokens: int, batch_size: int | None = None) -> list[np.ndarray]:
    """The indices of `lengths` sorted by length (ties in input order), cut into batches of
    consecutive ones: a batch grows while its padded size, rows x its longest, stays within
    `batch_tokens` (a longer sequence is a batch of its own) and, with `batch_size`, while it
    has fewer than that many rows."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        rows = end - start
        if end == len(order) or rows == batch_size or (rows + 1) * lengths[order[end]] > batch_tokens:
            batches.append(order[start:end])
            start = end
    return batches


@torch.inference_mode()
def embed_token_ids(
    model: EncoderNetwork,
    ids: list[list[int]],
    batch_size: int | None = None,
    device: str | torch.device = "cpu",
    *,
    batch_tokens: int | None = None,
    dtype: torch.dtype | None = None,
) -> np.ndarray:
    """Token-id sequences (none empty) -> (n, d) float32 sentence vectors from `model` as it is
    (its train/eval mode is the caller's), each cut at the model's max_len (silently:
    `EMSEncoder.encode` counts and warns), sorted by length and batched by tokens (`token_batches`:
    `batch_tokens`, and `batch_size` sentences at most if given; integers >= 1), the forward pass
    under autocast to `dtype` (None: as the caller runs it, fp32 by default)."""
    check_batch_sizes(batch_size, batch_tokens)
    device = torch.device(device)
    batch_tokens = default_batch_tokens(device) if batch_tokens is None else batch_tokens
    max_len = model.cfg.max_len
    lengths = [min(len(seq), max_len) for seq in ids]
    out = np.zeros((len(ids), model.cfg.d_sentence), dtype=np.float32)
    packer = model.packer()
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        for batch in token_batches(lengths, batch_tokens, batch_size):
            tokens = np.full((len(batch), lengths[batch[-1]]), model.cfg.pad_id, dtype=np.int64)
            for row, i in enumerate(batch.tolist()):
                tokens[row, : lengths[i]] = ids[i][:max_len]
            packing = packer(tokens).to(device)  # packed on the host: nothing read back from the device
            out[batch] = model(torch.from_numpy(tokens).to(device), packing).float().cpu().numpy()
    return out


def read_config(config_file: Path) -> EMSConfig:
    """The EMSConfig in `config_file` (a model directory's config.json); ValueError naming the file."""
    try:
        values = json.loads(config_file.read_text(encoding="utf-8"))
        if not isinstance(values, dict):
            raise ValueError("not a JSON object of EMSConfig fields")
        # a config.json without norm_placement was saved before the field (and post-LN) existed: its model is
        # pre-LN, not the default post-LN
        return EMSConfig.from_dict({"norm_placement": "pre", **values})
    except (ValueError, TypeError, RecursionError) as error:  # malformed or too deeply nested JSON, bad fields
        raise ValueError(f"{config_file}: {' '.join(str(error).split())}") from None


def check_model_directory(path: str | Path) -> tuple[EMSConfig, Tokenizer]:
    """The config and tokenizer of the model directory `path`, everything in it checked before any
    weight is loaded: the directory and its files exist, config.json is an EMSConfig, the tokenizer
    passes Tokenizer's checks (ems.text.check_vocabulary), its piece and language counts are the
    config's (EMSConfig.check_vocabulary), model.safetensors holds exactly the tensors of the
    config's encoder, shape for shape (ems.model.check_tensor_shapes, from the file's header), and
    every file is the one the directory's manifest records (check_model_manifest).
    FileNotFoundError or ValueError, one line naming the file and what is wrong."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model directory {path} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory (expected an EMS model directory)")
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} is not an EMS model directory: {name} is missing")
        inside_folder(path, path / name, f"the model directory {path}")
    cfg = read_config(path / CONFIG_FILE)
    tokenizer = Tokenizer.load(path)
    cfg.check_vocabulary(tokenizer.vocab_size, len(tokenizer.languages), path)
    check_tensor_shapes(
        encoder_shapes(cfg), weight_shapes(path / WEIGHTS_FILE), str(path / WEIGHTS_FILE), _model_of(path)
    )
    check_model_manifest(path)
    return cfg, tokenizer


def _model_of(path: Path) -> str:
    return f"the model of {path / CONFIG_FILE}"


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
    _, source_tokenizer = check_model_directory(model_dir)
    source = load_file(str(model_dir / WEIGHTS_FILE))
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


def load(path: str | Path, device: str = "cpu", precision: str = "auto", tokenizer_workers: int = 0) -> EMSEncoder:
    """Load a model directory written by `export_encoder` (safetensors: no pickle is executed),
    with the head in `<path>/head/` if there is one; `precision` and `tokenizer_workers` as EMSEncoder's.
    A directory that is missing or not a whole, consistent model (check_model_directory) is a
    FileNotFoundError or ValueError of one line."""
    path = Path(path)
    cfg, tokenizer = check_model_directory(path)
    encoder = EncoderNetwork(cfg)
    load_weights(encoder, path / WEIGHTS_FILE, _model_of(path))
    return EMSEncoder(encoder, tokenizer, device, _load_head(path / HEAD_DIR), precision, tokenizer_workers)


def _load_head(directory: Path):
    """The head saved in `directory`, or None if there is none."""
    if not directory.is_dir():
        return None
    return load_head(directory)
