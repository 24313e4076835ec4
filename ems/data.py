"""Reading binarized pair shards and cutting them into training batches.

The batch order is a pure function of (seed, epoch), so a data position is just
(epoch, batch index) and resuming from it replays exactly the same batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from data_prep.binarize import INDEX_FILE
from ems.text import PAD_ID


class PairShards:
    """Memory-mapped view of a `data_prep.binarize` output directory."""

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        if not (directory / INDEX_FILE).is_file():
            raise FileNotFoundError(f"{directory} has no {INDEX_FILE}: run data_prep binarize first")
        self.index = json.loads((directory / INDEX_FILE).read_text())
        self.tokens = np.load(directory / "tokens.npy", mmap_mode="r")
        self.offsets = np.load(directory / "offsets.npy", mmap_mode="r")
        self.langs = np.load(directory / "langs.npy", mmap_mode="r")
        if len(self.offsets) != 2 * len(self.langs) + 1:
            raise ValueError(f"{directory}: offsets.npy and langs.npy disagree on the number of pairs")
        self.languages: list[str] = self.index["languages"]

    def __len__(self) -> int:
        return len(self.langs)

    def sentence(self, k: int) -> np.ndarray:
        return self.tokens[self.offsets[k] : self.offsets[k + 1]]

    def pair_lengths(self) -> np.ndarray:
        """(n_pairs,) the longer side's token count of each pair."""
        lengths = np.diff(self.offsets)
        return np.maximum(lengths[0::2], lengths[1::2])


@dataclass
class BatchOrder:
    """Global batches of pair indices for one epoch: shuffled, then sorted by length inside
    windows of `bucket_batches` batches (little padding), then the batches shuffled."""

    lengths: np.ndarray
    global_batch_size: int
    seed: int = 0
    bucket_batches: int = 50

    def __post_init__(self) -> None:
        if len(self.lengths) < self.global_batch_size:
            raise ValueError(
                f"{len(self.lengths)} pairs cannot fill one batch of {self.global_batch_size}; lower the batch size"
            )

    def batches_per_epoch(self) -> int:
        return len(self.lengths) // self.global_batch_size

    def epoch(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.lengths))
        n_batches = self.batches_per_epoch()
        order = order[: n_batches * self.global_batch_size]  # the remainder lands in other epochs' batches
        window = self.bucket_batches * self.global_batch_size
        for start in range(0, len(order), window):
            part = order[start : start + window]
            order[start : start + window] = part[np.argsort(self.lengths[part], kind="stable")]
        batches = order.reshape(n_batches, self.global_batch_size)
        return list(batches[rng.permutation(n_batches)])


def collate(shards: PairShards, indices: np.ndarray, max_len: int) -> dict[str, torch.Tensor]:
    """Pair indices -> padded (B, L) `src`/`tgt` id tensors and (B,) language indices."""
    sides = []
    for side in (0, 1):
        seqs = [shards.sentence(2 * int(i) + side)[:max_len] for i in indices]
        width = max(len(s) for s in seqs)
        out = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
        for row, seq in zip(out, seqs):
            row[: len(seq)] = seq
        sides.append(torch.from_numpy(out))
    langs = torch.from_numpy(np.asarray(shards.langs[indices], dtype=np.int64))
    return {"src": sides[0], "tgt": sides[1], "src_lang": langs[:, 0], "tgt_lang": langs[:, 1]}


def iterate_batches(
    shards: PairShards, order: BatchOrder, max_len: int, start: tuple[int, int] = (0, 0),
    rank: int = 0, world_size: int = 1,
) -> Iterator[tuple[tuple[int, int], dict[str, torch.Tensor]]]:
    """Endless stream of ((epoch, batch index), this rank's share of the global batch), from `start`."""
    epoch, batch_idx = start
    while True:
        batches = order.epoch(epoch)
        for b in range(batch_idx, len(batches)):
            yield (epoch, b), collate(shards, batches[b][rank::world_size], max_len)
        epoch, batch_idx = epoch + 1, 0
