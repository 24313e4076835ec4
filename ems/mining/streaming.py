"""Streaming input for mining: the distinct lines of a text file found in one pass and handed
out in shards, the texts of a shard read back by byte offset, and (for `ems:` encoders)
tokenisation in a process pool while the model encodes.

Memory: the scan keeps, per distinct non-empty line, an 8-byte blake2b digest in a set (about
70 bytes a line, whatever the lines' length) and the byte offsets and line numbers of the current
shard only; encoding holds one chunk of lines and its vectors (plus one chunk per tokeniser
worker). Two different lines share a digest with probability ~n^2 / 2^65 (1e-6 at 10M distinct
lines); the later one is then dropped as a duplicate.

Lines end at "\\n" only; a trailing "\\r" is dropped (as eval.evaluators.retrieval.read_lines), and
so is a UTF-8 byte order mark at the start of the file (Windows editors write one): the first
line's offset is the byte after it, so it is in no text, vector or output line.
Empty (or whitespace-only) lines are skipped and counted; so are lines that are not UTF-8,
lines holding a NUL byte (binary debris in a crawl, not sentences), lines holding a tab (the
mined pairs are written as tab-separated columns, where it would shift every column after it) and
lines holding another character str.splitlines breaks on (a lone \\r, \\v, \\f, \\x1c-\\x1e, \\x85,
U+2028, U+2029: a line-splitting reader of the TSV would break the row there), each reason counted
with its first line number, so nothing is lost silently.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.corpus import has_line_break
from ems.encoder_kinds import CachedEncoder, EMSDirectoryEncoder, encode_checked
from ems.tokenizer_pool import TokenizerPool

DEFAULT_CHUNK_LINES = 20_000
NOT_UTF8, NUL_BYTE, TAB, LINE_BREAK = "not UTF-8", "a NUL byte", "a tab", "a line break inside"


@dataclass
class LineCounts:
    """What a scan of one file found: `lines` in all, `empty` (or whitespace-only) ones, `distinct`
    non-empty ones, `skipped` {reason: count} and `first_skipped` {reason: 1-based line number}
    for lines that are not UTF-8 or hold a NUL byte, a tab or a line break inside, and the file's
    `fingerprint` (size, mtime_ns and the blake2b digest of every byte read)."""

    lines: int = 0
    empty: int = 0
    distinct: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    first_skipped: dict[str, int] = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)

    def skip(self, reason: str, number: int) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.first_skipped.setdefault(reason, number)

    def describe_skipped(self) -> str:
        """ "2 not UTF-8 (first: line 17), 1 with a NUL byte (line 40)", or "" when none were."""
        with_ = (NUL_BYTE, TAB, LINE_BREAK)
        return ", ".join(
            f"{count} {'with ' if reason in with_ else ''}{reason} (first: line {self.first_skipped[reason]})"
            for reason, count in self.skipped.items()
        )


def _opened(path: Path):
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing input file {path}")
    return open(path, "rb")


def _text(raw: bytes) -> str | None:
    """The line's text without its line ending, or None for bytes that are not UTF-8."""
    try:
        return raw.decode("utf-8").removesuffix("\n").rstrip("\r")
    except UnicodeDecodeError:
        return None


def scan_distinct(path: Path, shard_lines: int, on_shard: Callable[[int, np.ndarray], None]) -> LineCounts:
    """One pass over `path`: its distinct non-empty lines (by an 8-byte blake2b digest of the
    text) in file order, handed to `on_shard(shard number, (n, 2) int64 array)` `shard_lines` at
    a time (the last shard may be shorter), each row the byte offset and 0-based line number of a
    distinct line's first occurrence (the first line's offset is after a leading byte order
    mark, which is no part of its text). Returns the counts (`LineCounts`); MissingDataError if the
    file is not there."""
    if shard_lines < 1:
        raise ValueError(f"shard_lines must be >= 1, got {shard_lines}")
    counts, seen, digest = LineCounts(), set(), hashlib.blake2b()
    rows, shards = array("q"), 0
    with _opened(path) as f:
        mtime_ns, offset = os.fstat(f.fileno()).st_mtime_ns, 0
        for number, raw in enumerate(f):
            digest.update(raw)
            bom = len(codecs.BOM_UTF8) if number == 0 and raw.startswith(codecs.BOM_UTF8) else 0
            line = raw[bom:]
            text = None if b"\0" in line else _text(line)
            if text is None:
                counts.skip(NOT_UTF8 if b"\0" not in line else NUL_BYTE, number + 1)
            elif not text.strip():
                counts.empty += 1
            elif "\t" in text:
                counts.skip(TAB, number + 1)
            elif has_line_break(text):
                counts.skip(LINE_BREAK, number + 1)
            else:
                key = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
                if key not in seen:
                    seen.add(key)
                    rows.extend((offset + bom, number))
                    if len(rows) == 2 * shard_lines:
                        on_shard(shards, np.frombuffer(rows, dtype=np.int64).reshape(-1, 2))
                        rows, shards = array("q"), shards + 1
            offset += len(raw)
            counts.lines = number + 1
    if rows:
        on_shard(shards, np.frombuffer(rows, dtype=np.int64).reshape(-1, 2))
    counts.distinct = len(seen)
    counts.fingerprint = {"size": offset, "mtime_ns": mtime_ns, "blake2b": digest.hexdigest()}
    return counts


def texts_at(path: Path, offsets: np.ndarray, chunk_lines: int = DEFAULT_CHUNK_LINES) -> Iterator[list[str]]:
    """The texts of the lines of `path` that start at the ascending byte `offsets`, in order,
    `chunk_lines` at a time: one sequential read from the first offset to the last line."""
    if chunk_lines < 1:
        raise ValueError(f"chunk_lines must be >= 1, got {chunk_lines}")
    wanted = iter(offsets.tolist())
    target = next(wanted, None)
    chunk: list[str] = []
    with _opened(path) as f:
        f.seek(0 if target is None else target)
        offset = f.tell()
        for raw in f:
            if target is None:
                break
            if offset == target:
                text = _text(raw)
                if text is None:
                    raise ValueError(f"{path} changed since it was scanned: the line at byte {offset} is not UTF-8")
                chunk.append(text)
                target = next(wanted, None)
                if len(chunk) == chunk_lines:
                    yield chunk
                    chunk = []
            offset += len(raw)
    if target is not None:
        raise ValueError(f"{path} changed since it was scanned: it ends before byte {target}")
    if chunk:
        yield chunk


def line_at(f, offset: int) -> str:
    """The line of the binary file `f` starting at byte `offset`, without its line ending."""
    f.seek(offset)
    return f.readline().decode("utf-8").removesuffix("\n").rstrip("\r")


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
