"""Streaming input for mining: distinct lines of a text file found in one pass, their embeddings
written chunk by chunk into a .npy on disk, and (for `ems:` encoders) tokenisation in a process pool.

Memory: the scan keeps, per distinct non-empty line, an 8-byte blake2b digest in a set and two
int64s (byte offset and line number of its first occurrence): about 100 bytes a line, whatever
the lines' length; encoding holds one chunk of lines and its vectors (plus one chunk per
tokeniser worker). Neither grows with the size of the file's text, and the embeddings go to disk
as they are made. Two different lines share a digest with probability ~n^2 / 2^65 (1e-6 at 10M
distinct lines); the later one is then dropped as a duplicate.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder_kinds import CachedEncoder, EMSDirectoryEncoder
from ems.tokenizer_pool import TokenizerPool
from eval.evaluators.retrieval import encode_checked

DEFAULT_CHUNK_LINES = 20_000


@dataclass
class DistinctLines:
    """The distinct non-empty lines of `path` in file order: `offsets[i]` is the byte offset and
    `numbers[i]` the 0-based line number of the i-th one's first occurrence; `lines` and `empty`
    count all lines and the empty (or whitespace-only) ones. Lines end at "\\n" only, a trailing
    "\\r" is dropped (as eval.evaluators.retrieval.read_lines)."""

    path: Path
    offsets: np.ndarray
    numbers: np.ndarray
    lines: int
    empty: int

    def __len__(self) -> int:
        return len(self.offsets)


def _decoded_lines(path: Path, f) -> Iterator[tuple[int, str]]:
    """(byte offset, text) of each line of the binary file `f`; ValueError naming `path` and the
    line for bytes that are not UTF-8."""
    offset = 0
    for number, raw in enumerate(f):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path} is not valid UTF-8 (line {number + 1}: {exc})") from None
        yield offset, text.removesuffix("\n").rstrip("\r")
        offset += len(raw)


def _opened(path: Path):
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing input file {path}")
    return open(path, "rb")


def scan_distinct(path: Path) -> DistinctLines:
    """One pass over `path`: its distinct non-empty lines (by an 8-byte blake2b digest of the
    text) and line counts. MissingDataError if it is not there, ValueError if not UTF-8."""
    seen: set[bytes] = set()
    offsets, numbers = array("q"), array("q")
    lines = empty = 0
    with _opened(path) as f:
        for lines, (offset, text) in enumerate(_decoded_lines(path, f), start=1):
            if not text.strip():
                empty += 1
                continue
            digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
            if digest not in seen:
                seen.add(digest)
                offsets.append(offset)
                numbers.append(lines - 1)
    return DistinctLines(
        Path(path), np.frombuffer(offsets, dtype=np.int64), np.frombuffer(numbers, dtype=np.int64), lines, empty
    )


def text_chunks(distinct: DistinctLines, chunk_lines: int = DEFAULT_CHUNK_LINES) -> Iterator[list[str]]:
    """The texts of `distinct`'s lines in order, `chunk_lines` at a time, read in a second
    sequential pass over the file."""
    if chunk_lines < 1:
        raise ValueError(f"chunk_lines must be >= 1, got {chunk_lines}")
    wanted = iter(distinct.offsets.tolist())
    target = next(wanted, None)
    chunk: list[str] = []
    with _opened(distinct.path) as f:
        for offset, text in _decoded_lines(distinct.path, f):
            if offset != target:
                continue
            chunk.append(text)
            target = next(wanted, None)
            if len(chunk) == chunk_lines:
                yield chunk
                chunk = []
            if target is None:
                break
    if chunk:
        yield chunk


def line_at(f, offset: int) -> str:
    """The line of the binary file `f` starting at byte `offset`, without its line ending."""
    f.seek(offset)
    return f.readline().decode("utf-8").removesuffix("\n").rstrip("\r")


def write_npy(path: Path, n_rows: int, chunks: Iterable[np.ndarray]) -> np.ndarray:
    """Write the float32 row chunks (n_rows rows in all, every chunk as wide as the first) to a
    .npy file at `path` and return it memory-mapped read-only. Plain writes rather than a
    writable memory map: dirty mapped pages would count in the resident set until flushed."""
    written, dim = 0, None
    with open(path, "wb") as f:
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype=np.float32)
            if dim is None:
                dim = chunk.shape[1]
                header = {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                    "fortran_order": False,
                    "shape": (n_rows, dim),
                }
                np.lib.format.write_array_header_1_0(f, header)
            if chunk.ndim != 2 or chunk.shape[1] != dim:
                raise ValueError(f"embedding chunk of shape {chunk.shape} after chunks of width {dim}")
            f.write(chunk.tobytes())
            written += len(chunk)
    if written != n_rows or dim is None:
        raise ValueError(f"{written} embedding rows written to {path}; expected {n_rows}")
    return np.load(path, mmap_mode="r", allow_pickle=False)


def ems_model(encoder):
    """The ems.encoder.EMSEncoder inside an `ems:` encoder (cached or not), else None."""
    inner = encoder.encoder if isinstance(encoder, CachedEncoder) else encoder
    return inner.model if isinstance(inner, EMSDirectoryEncoder) else None


class _Pretokenized:
    """Stands in for an EMSEncoder's tokenizer for one encode call: hands back ids computed
    elsewhere (the pool), for exactly the sentences they were computed from."""

    def __init__(self, languages: list[str], texts: list[str], ids: list[list[int]]):
        self.languages, self.texts, self.ids = languages, texts, ids

    def encode(self, sentences: list[str], lang: str) -> list[list[int]]:
        if sentences != self.texts:
            raise RuntimeError("pretokenised ids used for other sentences")
        return self.ids


@contextmanager
def _pretokenized(model, texts: list[str], ids: list[list[int]]):
    tokenizer = model.tokenizer
    model.tokenizer = _Pretokenized(tokenizer.languages, texts, ids)
    try:
        yield
    finally:
        model.tokenizer = tokenizer


def chunk_embeddings(
    encoder, chunks: Iterable[list[str]], lang: str, tokenizer_workers: int = 0
) -> Iterator[np.ndarray]:
    """Embeddings (len(texts), d) of each chunk of texts, in order. With tokenizer_workers > 0 and
    an `ems:` encoder, chunks are tokenised (preprocessing + SentencePiece) in that many worker
    processes, ahead of the model, which runs here on the ids; the vectors are those of
    single-process encoding. Other encoders tokenise inside their own encode: a note on stderr,
    and they run as without workers."""
    model = ems_model(encoder)
    if tokenizer_workers and model is None:
        print(
            f"note: --tokenizer-workers applies to ems: encoders only; {type(encoder).__name__} tokenises in "
            "its own encode, in this process",
            file=sys.stderr,
        )
    if not tokenizer_workers or model is None:
        for texts in chunks:
            yield encode_checked(encoder, texts, lang)
        return
    with TokenizerPool(model.tokenizer, tokenizer_workers) as pool:
        for texts, ids in pool.tokenized_ahead(chunks, lang):
            with _pretokenized(model, texts, ids):
                vectors = encode_checked(encoder, texts, lang)
            yield vectors
