"""The order of training batches over binarized pair shards (ems.shards).

The batch order is a pure function of (seed, epoch), so a data position is just
(epoch, global batch index) and resuming from it replays exactly the same batches. It is
computed one bucketing window at a time from a keyed pseudo-random permutation evaluated
pointwise (`KeyedPermutation`), so a rank holds arrays the size of one window (or of one block of
PAIRS_BLOCK positions of the pair sequence, if larger), never of the corpus.
In: shard lengths (and content ids, language-pair ranges); out: global batches of pair indices.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ems.mapped import release_mapped_pages
from ems.shards import IndexRanges


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-mixing map of uint64 values."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


PAIRS_BLOCK = 1 << 16  # positions of an epoch's pair sequence computed at once (512 KiB of indices)


@dataclass(frozen=True)
class KeyedPermutation:
    """A pseudo-random permutation of range(n) chosen by `key` (a tuple of ints), evaluated at any
    positions without building it: `perm(positions)` -> the values at those positions. A 4-round
    Feistel network on the smallest even-width bit domain holding n (< 4n values; Luby-Rackoff:
    4 rounds of a good mixing function make a pseudo-random permutation), walked until each value
    falls inside range(n), which keeps it a bijection of range(n) (cycle walking)."""

    n: int
    key: tuple[int, ...]
    rounds: int = 4

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {self.n}")

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        half = max(1, -(-max(self.n - 1, 1).bit_length() // 2))
        mask = np.uint64((1 << half) - 1)
        round_keys = np.random.SeedSequence(list(self.key)).generate_state(self.rounds, dtype=np.uint64)
        values = np.asarray(positions, dtype=np.uint64).copy()
        if values.size and (values.max() >= self.n):
            raise IndexError(f"positions outside 0..{self.n - 1}")
        outside = np.ones(values.shape, dtype=bool)
        while outside.any():
            left, right = values[outside] >> np.uint64(half), values[outside] & mask
            for round_key in round_keys:
                left, right = right, left ^ (_mix64(right ^ round_key) & mask)
            values[outside] = (left << np.uint64(half)) | right
            outside &= values >= self.n
        return values.astype(np.int64)


def temperature_proportions(sizes: np.ndarray, temperature: float, floor: int | None = None) -> np.ndarray:
    """Sampling probability of each group, q_i ∝ (n_i / N)^(1/T): T=1 is proportional to size,
    larger T flattens towards uniform (XLM, mBERT; T=5 in the EMS paper when on). With `floor`, a group
    of fewer pairs counts as `floor` pairs (n_i -> max(n_i, floor)): the small groups are drawn more often
    while the large ones keep their proportions among themselves."""
    if temperature <= 0:
        raise ValueError(f"sampling temperature must be > 0, not {temperature}")
    sizes = np.asarray(sizes, dtype=np.float64)
    if floor is not None:
        sizes = np.maximum(sizes, floor)
    weights = (sizes / sizes.sum()) ** (1.0 / temperature)
    return weights / weights.sum()


def rows_with_duplicates(batch: np.ndarray, content_ids: np.ndarray) -> int:
    """How many pairs of `batch` (pair indices) share a sentence (either side, in either position)
    with another pair of the same batch: the rows whose in-batch negatives hold a translation."""
    ids = np.asarray(content_ids[batch])
    values, counts = np.unique(_side_ids(ids)[1], return_counts=True)
    shared = values[counts > 1]
    return int((np.isin(ids[:, 0], shared) | np.isin(ids[:, 1], shared)).sum())


def _side_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row of each id, id) over both sides of (n, 2) content ids; a pair whose two sides are the
    same text counts its id once."""
    n = len(ids)
    distinct_second = ids[:, 1] != ids[:, 0]
    rows = np.concatenate([np.arange(n), np.arange(n)[distinct_second]])
    return rows, np.concatenate([ids[:, 0], ids[:, 1][distinct_second]])


def _repeating_rows(ids: np.ndarray) -> np.ndarray:
    """(n_batches, B, 2) content ids -> flat indices (b * B + j) of the rows that repeat a sentence
    held by an earlier row of their batch, in order."""
    n_batches, batch_size, _ = ids.shape
    flat = ids.reshape(-1, 2)
    rows, side_ids = _side_ids(flat)
    order = np.lexsort((rows, side_ids, rows // batch_size))
    rows, side_ids = rows[order], side_ids[order]
    repeat = (rows[1:] // batch_size == rows[:-1] // batch_size) & (side_ids[1:] == side_ids[:-1])
    return np.unique(rows[1:][repeat])


def spread_duplicates(
    batches: np.ndarray, content_ids: np.ndarray, lengths: np.ndarray, radius: int = 16, padding_budget: float = 0.005
) -> np.ndarray:
    """Swap pairs between nearby batches of one length-sorted window so that no batch holds two
    pairs sharing a sentence, adding little padding. Returns the new (n_batches, B) pair indices.

    batches: (n_batches, B) pair indices in length order; content_ids: (n, 2) and lengths: (n,) or
    (n, 2), indexed by pair. Like sentence-transformers' NoDuplicatesDataLoader, but keeping the
    length buckets: each pair that repeats a sentence of its batch is swapped with the pair within
    `radius` batches whose swap widens the two batches least (the tokens by which either batch's
    longest sentence on either side grows, times the batch size: the padding slots it adds), ties to
    the nearest batch, among pairs whose move creates no repeat in either batch. A first pass makes
    only the swaps that add no padding; a second spends at most `padding_budget` (a fraction of the
    window's token slots) on the cheapest of the rest. A repeat left over is masked in the loss."""
    batches = batches.copy()
    n_batches, batch_size = batches.shape
    ids = np.asarray(content_ids[batches])  # (n_batches, B, 2)
    lens = np.asarray(lengths[batches]).reshape(n_batches, batch_size, -1)
    maxes = lens.max(axis=1)
    members = [Counter(_side_ids(row)[1].tolist()) for row in ids]
    budget = padding_budget * float(maxes.sum()) * batch_size

    def own_ids(b: int, j: int) -> list[int]:
        return list(dict.fromkeys(ids[b, j].tolist()))

    def count(b: int, j: int, sign: int) -> None:
        for i in own_ids(b, j):
            members[b][i] += sign
            if not members[b][i]:
                del members[b][i]

    def swap_if_cheap(b: int, j: int, max_slots: float) -> float:
        """Swap repeating row j of batch b with its best partner if that adds at most max_slots
        padding slots; returns the slots added (0 when no swap was made)."""
        count(b, j, -1)
        near = [c for d in range(1, radius + 1) for c in (b + d, b - d) if 0 <= c < n_batches]
        free = [c for c in near if not any(i in members[c] for i in own_ids(b, j))]
        if free:
            in_b = np.fromiter(members[b], dtype=ids.dtype, count=len(members[b]))
            slots = batch_size * (
                np.maximum(lens[free] - maxes[b], 0).sum(axis=2)
                + np.maximum(lens[b, j] - maxes[free], 0).sum(axis=1)[:, None]
            )  # (k, B)
            slots[np.isin(ids[free], in_b).any(axis=2)] = np.iinfo(slots.dtype).max
            k, r = np.unravel_index(np.argmin(slots), slots.shape)
        if not free or slots[k, r] > max_slots:
            count(b, j, +1)
            return 0.0
        c = free[k]
        count(c, r, -1)
        for array in (batches, ids, lens):
            array[b, j], array[c, r] = array[c, r].copy(), array[b, j].copy()
        count(b, j, +1)
        count(c, r, +1)
        maxes[b], maxes[c] = lens[b].max(axis=0), lens[c].max(axis=0)
        return float(slots[k, r])

    for free_only in (True, False):
        for flat in _repeating_rows(ids).tolist():
            b, j = divmod(flat, batch_size)
            if any(members[b][i] > 1 for i in own_ids(b, j)):  # an earlier swap may have taken its twin away
                budget -= swap_if_cheap(b, j, 0.0 if free_only else budget)
    return batches


def apportion(total: int, proportions: np.ndarray) -> np.ndarray:
    """Integer counts summing to `total`, closest to total * proportions (largest remainders)."""
    exact = total * proportions
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: total - counts.sum()]] += 1
    return counts


@dataclass
class BatchOrder:
    """Global batches of pair indices for one epoch, one bucketing window at a time: window w holds
    positions [w, w + 1) x `bucket_batches` x `global_batch_size` of the epoch's pair sequence (all
    pairs in a `KeyedPermutation` keyed by (seed, epoch), or a temperature sample over language
    pairs), sorted by length (little padding), cut into batches, the window's batches shuffled.
    Every batch mixes whatever language pairs fall into its length bucket. A rank computes only the
    window it is in (`batch`), so memory is O(window) and shards may stay memory-mapped.

    `lengths` is (n,) one length per pair, or (n, 2) both sides' lengths (`PairShards.lengths`,
    memory-mapped, or `side_lengths`); lengths above `max_len` count as `max_len` (collate cuts
    there). With both sides, pairs are sorted by the first side's length and, within it, by the
    second's, going up and down in turn ("snake" order), so each batch is tight on both sides: the
    sides of a pair differ in length, and sorting by one number leaves the other side ragged (on the
    demo shards, batch 152: 0.80 real tokens sorting by the longer side, 0.96 in snake order,
    windows of 1000 batches).

    With `pair_sampling_temperature`, an epoch holds len(lengths) pairs drawn per language-pair group (`groups`:
    {name: pair indices}, arrays or `IndexRanges`) in the exact proportions
    `temperature_proportions` (rounded by `apportion`): a group smaller than its share repeats (each
    pass a new permutation), a larger one is subsampled. `pair_sampling_floor` alone samples so at T=1.

    With `content_ids` ((n, 2), `PairShards.content_ids`), each sorted window goes through
    `spread_duplicates`: length bucketing gathers translations of one English sentence (same
    length) into one batch, where each is a false negative for the others; spread, they fall to
    fewer than random batches hold.

    With `one_pair_batches` (needs `groups`), a window's pairs are ordered by language-pair group
    instead of by length (in the epoch's random order within a group) and cut into batches, so every
    batch but those at group boundaries (at most one per boundary) holds one language pair. Duplicates
    are not spread then: translations of one sentence into other languages are in other groups."""

    lengths: np.ndarray
    global_batch_size: int
    seed: int = 0
    bucket_batches: int = 1000
    groups: dict[str, np.ndarray | IndexRanges] | None = None  # needed for temperature sampling
    pair_sampling_temperature: float | None = None
    pair_sampling_floor: int | None = None  # see temperature_proportions
    content_ids: np.ndarray | None = None
    padding_budget: float = 0.005  # see spread_duplicates
    max_len: int | None = None
    one_pair_batches: bool = False

    def __post_init__(self) -> None:
        if self.lengths.ndim not in (1, 2) or (self.lengths.ndim == 2 and self.lengths.shape[1] != 2):
            raise ValueError(f"lengths must have shape (n,) or (n, 2), got {self.lengths.shape}")
        if len(self.lengths) < self.global_batch_size:
            raise ValueError(
                f"{len(self.lengths)} pairs cannot fill one batch of {self.global_batch_size}; lower the batch size"
            )
        if self.sampled and not self.groups:
            raise ValueError("temperature sampling needs the language-pair groups (PairShards.language_pair_ranges)")
        if self.one_pair_batches and not self.groups:
            raise ValueError("one_pair_batches needs the language-pair groups (PairShards.language_pair_ranges)")
        if self.content_ids is not None and len(self.content_ids) != len(self.lengths):
            raise ValueError(f"content_ids has {len(self.content_ids)} rows for {len(self.lengths)} pairs")
        self._window: tuple[tuple[int, int], np.ndarray] | None = None
        self._pairs_block: tuple[tuple[int, int], np.ndarray] | None = None  # ((epoch, block), its pairs)
        self._ranges: np.ndarray | None = None  # (start, end, group) rows sorted by start, built by group_of

    @property
    def sampled(self) -> bool:
        """Whether an epoch's pairs are drawn per language-pair group (a temperature, a floor or both)."""
        return self.pair_sampling_temperature is not None or self.pair_sampling_floor is not None

    def batches_per_epoch(self) -> int:
        return len(self.lengths) // self.global_batch_size

    def group_counts(self) -> dict[str, int]:
        """Pairs drawn from each language-pair group per epoch under temperature sampling."""
        sizes = np.array([len(g) for g in self.groups.values()])
        temperature = 1.0 if self.pair_sampling_temperature is None else self.pair_sampling_temperature
        counts = apportion(len(self.lengths), temperature_proportions(sizes, temperature, self.pair_sampling_floor))
        return dict(zip(self.groups, counts.tolist()))

    def epoch_pairs(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """The pair indices at positions start:stop of the epoch's pair sequence, computed PAIRS_BLOCK
        positions at a time and the last block kept: a window of one batch (bucket_batches 1) would
        otherwise pay the per-call cost (a permutation per language-pair group) at every step."""
        parts = []
        for block in range(start // PAIRS_BLOCK, -(-stop // PAIRS_BLOCK)):
            first = block * PAIRS_BLOCK
            if self._pairs_block is None or self._pairs_block[0] != (epoch, block):
                self._pairs_block = (
                    (epoch, block),
                    self._pairs_at(epoch, first, min(first + PAIRS_BLOCK, len(self.lengths))),
                )
            parts.append(self._pairs_block[1][max(start - first, 0) : stop - first])
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def _pairs_at(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """epoch_pairs, computed (pointwise in the positions, so any split of start:stop gives the same)."""
        slots = KeyedPermutation(len(self.lengths), (self.seed, epoch))(np.arange(start, stop))
        if not self.sampled:
            return slots
        # slot s is draw number s - bounds[g] of group g: pass (draw // size) of the group, each
        # pass its own permutation of the group's members
        groups = list(self.groups.values())
        sizes = np.array([len(members) for members in groups], dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum(list(self.group_counts().values()))])
        group = np.searchsorted(bounds, slots, side="right") - 1
        draw = slots - bounds[group]
        passes, places = draw // sizes[group], draw % sizes[group]
        pairs = np.empty(len(slots), dtype=np.int64)
        by_pass = np.lexsort((passes, group))  # one slice per (group, pass), however many passes a window holds
        starts = np.flatnonzero(np.diff(group[by_pass], prepend=-1) | np.diff(passes[by_pass], prepend=-1))
        for chosen in np.split(by_pass, starts[1:]):
            g, pass_ = int(group[chosen[0]]), int(passes[chosen[0]])
            pairs[chosen] = groups[g][KeyedPermutation(int(sizes[g]), (self.seed, epoch, g, pass_))(places[chosen])]
        return pairs

    def group_of(self, pairs: np.ndarray) -> np.ndarray:
        """The index (in `groups`' order) of the language-pair group of each of `pairs`."""
        if self._ranges is None:
            parts = []  # (start, end, group) of every range of every group; an array's members are ranges of one
            for g, members in enumerate(self.groups.values()):
                if isinstance(members, IndexRanges):
                    ends = members.starts + np.diff(members.offsets)
                    parts.append(np.stack([members.starts, ends, np.full_like(ends, g)], axis=1))
                else:
                    starts = np.asarray(members, dtype=np.int64)
                    parts.append(np.stack([starts, starts + 1, np.full_like(starts, g)], axis=1))
            ranges = np.concatenate(parts)
            self._ranges = ranges[np.argsort(ranges[:, 0], kind="stable")]
        starts, ends, group = self._ranges.T
        at = np.searchsorted(starts, pairs, side="right") - 1
        if (at < 0).any() or (pairs >= ends[np.maximum(at, 0)]).any():
            raise ValueError("a pair belongs to no language-pair group")
        return group[at]

    def _length_order(self, lengths: np.ndarray) -> np.ndarray:
        if lengths.ndim == 1:
            return np.argsort(lengths, kind="stable")
        first, second = lengths[:, 0], lengths[:, 1]
        return np.lexsort((np.where(first % 2 == 0, second, -second), first))

    def window(self, epoch: int, w: int) -> np.ndarray:
        """(batches, global_batch_size) pair indices of window w of the epoch, in training order."""
        if self._window is not None and self._window[0] == (epoch, w):
            return self._window[1]
        first = w * self.bucket_batches
        n_batches = min(self.bucket_batches, self.batches_per_epoch() - first)
        if n_batches <= 0:
            raise IndexError(f"epoch {epoch} has no window {w}")
        pairs = self.epoch_pairs(epoch, first * self.global_batch_size, (first + n_batches) * self.global_batch_size)
        lengths = gather(self.lengths, pairs).astype(np.int64)
        if self.max_len is not None:
            np.minimum(lengths, self.max_len, out=lengths)
        if self.one_pair_batches:
            order = np.argsort(self.group_of(pairs), kind="stable")
        else:
            order = self._length_order(lengths)
        pairs, lengths = pairs[order], lengths[order]
        rows = np.arange(len(pairs)).reshape(n_batches, self.global_batch_size)
        if self.content_ids is not None and not self.one_pair_batches:
            rows = spread_duplicates(rows, gather(self.content_ids, pairs), lengths, padding_budget=self.padding_budget)
        batches = pairs[rows][np.random.default_rng([self.seed, epoch, w]).permutation(n_batches)]
        self._window = ((epoch, w), batches)
        return batches

    def batch(self, epoch: int, b: int) -> np.ndarray:
        """Global batch b of the epoch (pair indices)."""
        return self.window(epoch, b // self.bucket_batches)[b % self.bucket_batches]

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """Every global batch of the epoch, in order (O(corpus): for analysis and tests)."""
        n_windows = -(-self.batches_per_epoch() // self.bucket_batches)
        return [batch for w in range(n_windows) for batch in self.window(epoch, w)]


def gather(array: np.ndarray, rows: np.ndarray, chunk_rows: int = 4096) -> np.ndarray:
    """array[rows] as an in-memory array. A memory-mapped `array` is read in file order, chunk by
    chunk, releasing its pages after each (`release_mapped_pages`): a page fault maps up to 64 KiB
    around the row it reads, so a window's random rows would otherwise map the whole file."""
    by_position = np.argsort(rows, kind="stable")
    out = np.empty((len(rows), *array.shape[1:]), dtype=array.dtype)
    for start in range(0, len(rows), chunk_rows):
        some = by_position[start : start + chunk_rows]
        out[some] = array[rows[some]]
        release_mapped_pages(array)
    return out
