"""Tokenisation (preprocessing + SentencePiece) in worker processes: `TokenizerPool(tokenizer, workers)`.

In: an ems.text.Tokenizer and lists of sentences in one language; out: their token ids, exactly
those of `tokenizer.encode` in this process. `encode` splits one list over the workers and this
process (ems.encoder.EMSEncoder's `tokenizer_workers`); `tokenized_ahead` keeps a few lists
tokenising in the workers while the caller works on the current one (mining's chunks,
ems.mining.streaming). Workers are spawned, not forked: no fork of a process that runs torch threads.
Preprocessing is most of a sentence's tokenising (Moses, jieba, MeCab: ~0.1 ms each), so parts of
fewer than MIN_POOL_PART sentences stay in this process.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator

import numpy as np

from ems.text import Tokenizer

MIN_POOL_PART = 64

_worker_tokenizer: Tokenizer | None = None


def _start_worker(spm_path: str, languages: list[str], preprocessing) -> None:
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer(spm_path, languages, preprocessing)


def _tokenize(texts: list[str], lang: str) -> list[list[int]]:
    return _worker_tokenizer.encode(texts, lang)


class TokenizerPool:
    """`workers` (>= 1) spawned processes, each with a copy of `tokenizer`; a context manager
    (`close` on exit)."""

    def __init__(self, tokenizer: Tokenizer, workers: int):
        if workers < 1:
            raise ValueError(f"a tokenizer pool needs at least one worker, got {workers}")
        self.tokenizer, self.workers = tokenizer, workers
        self._pool = multiprocessing.get_context("spawn").Pool(
            workers, _start_worker, (tokenizer.spm_path, tokenizer.languages, tokenizer.preprocessing)
        )

    def __enter__(self) -> TokenizerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()

    def encode(self, sentences: list[str], lang: str) -> list[list[int]]:
        """`tokenizer.encode(sentences, lang)`, in up to workers + 1 contiguous parts of at least
        MIN_POOL_PART sentences: the first tokenised here while the workers do the others."""
        parts = max(1, min(self.workers + 1, len(sentences) // MIN_POOL_PART))
        bounds = np.linspace(0, len(sentences), parts + 1).astype(int).tolist()
        pending = [
            self._pool.apply_async(_tokenize, (sentences[start:end], lang))
            for start, end in zip(bounds[1:-1], bounds[2:])
        ]
        ids = self.tokenizer.encode(sentences[: bounds[1]], lang)
        for result in pending:
            ids += result.get()
        return ids

    def tokenized_ahead(self, chunks: Iterable[list[str]], lang: str) -> Iterator[tuple[list[str], list]]:
        """(texts, token ids) per chunk, in order, with up to `workers` chunks tokenising in the
        pool while the caller works on the current one (bounded: the pool's own imap reads its
        input to the end)."""
        pending: deque = deque()
        for texts in chunks:
            pending.append((texts, self._pool.apply_async(_tokenize, (texts, lang))))
            if len(pending) > self.workers:
                texts, result = pending.popleft()
                yield texts, result.get()
        while pending:
            texts, result = pending.popleft()
            yield texts, result.get()
