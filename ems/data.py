"""Reading binarized pair shards and cutting them into training batches.

The batch order is a pure function of (seed, epoch), so a data position is just
(epoch, global batch index) and resuming from it replays exactly the same batches.

One global batch = `global_batch_size` pairs = world_size ranks x accumulation micro-batches.
Every rank computes the same (cheap, index-only) order and reads only its own rows from the
memory-mapped shards: sub-batch s = micro_step * world_size + rank takes rows s, s + S, s + 2S, ...
of the length-sorted global batch (S = world_size * accumulation), so the sub-batches are
disjoint, their union is the global batch, and all of them have nearly the same lengths.
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
        return self.side_lengths().max(axis=1)

    def side_lengths(self) -> np.ndarray:
        """(n_pairs, 2) token counts of each pair's first and second side."""
        lengths = np.diff(self.offsets)
        return np.stack([lengths[0::2], lengths[1::2]], axis=1)

    def language_pair_groups(self) -> dict[str, np.ndarray]:
        """{"l1-l2": pair indices} from the index's per-file [start, end) ranges; files of the
        same language pair (several corpora) form one group."""
        groups: dict[str, list[np.ndarray]] = {}
        for entry in self.index["files"]:
            groups.setdefault(f"{entry['l1']}-{entry['l2']}", []).append(np.arange(entry["start"], entry["end"]))
        return {name: np.concatenate(parts) for name, parts in groups.items()}


def temperature_proportions(sizes: np.ndarray, temperature: float) -> np.ndarray:
    """Sampling probability of each group, q_i ∝ (n_i / N)^(1/T): T=1 is proportional to size,
    larger T flattens towards uniform (XLM, mBERT; T=5 in the EMS paper when on)."""
    if temperature <= 0:
        raise ValueError(f"sampling temperature must be > 0, not {temperature}")
    weights = (sizes / sizes.sum()) ** (1.0 / temperature)
    return weights / weights.sum()


def apportion(total: int, proportions: np.ndarray) -> np.ndarray:
    """Integer counts summing to `total`, closest to total * proportions (largest remainders)."""
    exact = total * proportions
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: total - counts.sum()]] += 1
    return counts


@dataclass
class BatchOrder:
    """Global batches of pair indices for one epoch: the epoch's pairs (all pairs shuffled, or
    a temperature sample over language pairs), sorted by length inside windows of
    `bucket_batches` batches (little padding), cut into batches, the batches shuffled. Every
    batch mixes whatever language pairs fall into its length bucket.

    `lengths` is (n,) one length per pair, or (n, 2) both sides' lengths (`PairShards.side_lengths`).
    With both, pairs are sorted by the first side's length and, within it, by the second's, going
    up and down in turn ("snake" order), so each batch is tight on both sides: the sides of a pair
    differ in length, and sorting by one number leaves the other side ragged (on the demo shards,
    batch 152: 0.80 real tokens sorting by the longer side, 0.96 in snake order, windows of 1000 batches).

    With `temperature`, an epoch holds len(lengths) pairs drawn per language-pair group in the
    exact proportions `temperature_proportions` (rounded by `apportion`): a group smaller than
    its share repeats (each pass a new permutation), a larger one is subsampled."""

    lengths: np.ndarray
    global_batch_size: int
    seed: int = 0
    bucket_batches: int = 1000
    groups: dict[str, np.ndarray] | None = None  # needed for temperature sampling
    temperature: float | None = None

    def __post_init__(self) -> None:
        self.lengths = np.asarray(self.lengths)
        if self.lengths.ndim not in (1, 2) or (self.lengths.ndim == 2 and self.lengths.shape[1] != 2):
            raise ValueError(f"lengths must have shape (n,) or (n, 2), got {self.lengths.shape}")
        if len(self.lengths) < self.global_batch_size:
            raise ValueError(
                f"{len(self.lengths)} pairs cannot fill one batch of {self.global_batch_size}; lower the batch size"
            )
        if self.temperature is not None and not self.groups:
            raise ValueError("temperature sampling needs the language-pair groups (PairShards.language_pair_groups)")

    def batches_per_epoch(self) -> int:
        return len(self.lengths) // self.global_batch_size

    def group_counts(self) -> dict[str, int]:
        """Pairs drawn from each language-pair group per epoch under temperature sampling."""
        sizes = np.array([len(g) for g in self.groups.values()])
        counts = apportion(len(self.lengths), temperature_proportions(sizes, self.temperature))
        return dict(zip(self.groups, counts.tolist()))

    def _epoch_pairs(self, epoch: int, rng: np.random.Generator) -> np.ndarray:
        if self.temperature is None:
            return rng.permutation(len(self.lengths))
        drawn = []
        for members, count in zip(self.groups.values(), self.group_counts().values()):
            passes = -(-count // len(members))
            drawn.append(np.concatenate([rng.permutation(members) for _ in range(passes)])[:count])
        return rng.permutation(np.concatenate(drawn))

    def _length_order(self, part: np.ndarray) -> np.ndarray:
        if self.lengths.ndim == 1:
            return np.argsort(self.lengths[part], kind="stable")
        first, second = self.lengths[part, 0], self.lengths[part, 1]
        return np.lexsort((np.where(first % 2 == 0, second, -second), first))

    def epoch(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        order = self._epoch_pairs(epoch, rng)
        n_batches = self.batches_per_epoch()
        order = order[: n_batches * self.global_batch_size]  # the remainder lands in other epochs' batches
        window = self.bucket_batches * self.global_batch_size
        for start in range(0, len(order), window):
            part = order[start : start + window]
            order[start : start + window] = part[self._length_order(part)]
        batches = order.reshape(n_batches, self.global_batch_size)
        return list(batches[rng.permutation(n_batches)])


def sub_batch(batch: np.ndarray, micro_step: int, rank: int, world_size: int, accumulation: int = 1) -> np.ndarray:
    """This rank's rows of one global batch at one accumulation micro-step (see the module docstring)."""
    n_sub = world_size * accumulation
    if len(batch) % n_sub:
        raise ValueError(f"a global batch of {len(batch)} pairs does not split into {n_sub} equal sub-batches")
    return batch[micro_step * world_size + rank :: n_sub]


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


def real_and_padded_tokens(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """(non-pad tokens, token slots) of a collated batch's `src` and `tgt` tensors; their ratio
    is the share of real tokens (1 = no padding)."""
    real = int((batch["src"] != PAD_ID).sum() + (batch["tgt"] != PAD_ID).sum())
    return real, batch["src"].numel() + batch["tgt"].numel()


def iterate_batches(
    shards: PairShards, order: BatchOrder, max_len: int, start: tuple[int, int] = (0, 0),
    rank: int = 0, world_size: int = 1, accumulation: int = 1,
) -> Iterator[tuple[tuple[int, int], list[dict[str, torch.Tensor]]]]:
    """Endless stream of ((epoch, batch index), this rank's `accumulation` micro-batches of the
    global batch), from data position `start`."""
    epoch, batch_idx = start
    while True:
        batches = order.epoch(epoch)
        for b in range(batch_idx, len(batches)):
            yield (epoch, b), [
                collate(shards, sub_batch(batches[b], m, rank, world_size, accumulation), max_len)
                for m in range(accumulation)
            ]
        epoch, batch_idx = epoch + 1, 0
