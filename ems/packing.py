"""Where the real tokens of a batch of padded token-id rows are, computed once on the host.

In: (B, L) token ids, `pad_id` where padded (a numpy array). Out: a `Packing` — the real tokens' ids,
positions and rows in row-major order, each row's token count, `cu_seqlens` (the rows' boundaries in that
order, for variable-length attention), the longest row as a Python int and, with `group_rows`, the rows
sorted by length and cut into groups, each with its own padded layout. The model reads everything it needs
about the batch's shape from these: a forward pass reads nothing back from the device (on a GPU the host
then queues a whole step ahead of the device, and torch.compile captures it as one graph).

`Packer(static_shapes=True)` (a compiled training step) pads the token count up to one of a few bucket
sizes with filler tokens (their own zero-attention segments of at most `max_len` tokens, dropped by the
pooling), pads every row to `max_len`, and gives `max_len` as the longest row, so that a run of thousands
of batches compiles once per bucket.

`BatchVocabulary` is XTR's batch softmax's candidates (EMSConfig.xtr_vocabulary "batch"), found on the host
by the same reader thread.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

# static_shapes: a token count is padded up to the next multiple of 2**(bit_length - BUCKETS_PER_OCTAVE_BITS),
# 8 buckets per doubling (at most 1/8 filler tokens)
BUCKETS_PER_OCTAVE_BITS = 3


def bucket_size(n: int) -> int:
    """The bucket `n` tokens are padded up to: the next multiple of 2**(n.bit_length() - 4), 8 per doubling."""
    step = 1 << max(n.bit_length() - 1 - BUCKETS_PER_OCTAVE_BITS, 0)
    return -(-n // step) * step


def _to(value, device: torch.device, non_blocking: bool):
    if isinstance(value, Tensor):
        return value.to(device, non_blocking=non_blocking)
    if isinstance(value, tuple):
        return tuple(_to(item, device, non_blocking) for item in value)
    if hasattr(value, "to"):
        return value.to(device, non_blocking=non_blocking)
    return value


def _pinned(value):
    if isinstance(value, Tensor):
        return value.pin_memory()
    if isinstance(value, tuple):
        return tuple(_pinned(item) for item in value)
    if hasattr(value, "pin_memory"):
        return value.pin_memory()
    return value


class _HostTensors:
    """`to(device)` and `pin_memory()` over every tensor field of a dataclass (nested ones included)."""

    def to(self, device: torch.device | str, non_blocking: bool = False):
        device = torch.device(device)
        return type(self)(**{f.name: _to(getattr(self, f.name), device, non_blocking) for f in fields(self)})

    def pin_memory(self):
        return type(self)(**{f.name: _pinned(getattr(self, f.name)) for f in fields(self)})


@dataclass(frozen=True)
class Layout(_HostTensors):
    """A padded (rows, width) layout of packed tokens, for attention over padded rows: `index` (n,) the flat
    row * width + position of each of its n real tokens, `bias` (rows, 1, 1, width) float32 0 at real keys
    and -1e9 at padding (finite: a row without tokens gets no NaN), `mask` the same as bool (True: real)."""

    rows: int
    width: int
    index: Tensor
    bias: Tensor
    mask: Tensor

    @staticmethod
    def of(lengths: np.ndarray) -> Layout:
        """The layout of rows with these token counts, each padded to the longest (at least 1)."""
        width = max(int(lengths.max()) if len(lengths) else 0, 1)
        real = np.arange(width) < lengths[:, None]
        mask = torch.from_numpy(real)[:, None, None, :]
        return Layout(
            rows=len(lengths),
            width=width,
            index=torch.from_numpy(np.flatnonzero(real)),
            bias=torch.zeros(mask.shape).masked_fill_(~mask, -1e9),
            mask=mask,
        )

    def unpack(self, packed: Tensor) -> Tensor:
        """(n, k) -> (rows, width, k), zeros at pad positions."""
        flat = packed.new_zeros(self.rows * self.width, packed.shape[-1])
        # index_put, not index_copy: several times faster on CPU (measured: docs/results/throughput.md)
        flat[self.index] = packed
        return flat.view(self.rows, self.width, packed.shape[-1])

    def pack(self, padded: Tensor) -> Tensor:
        """(rows, width, k) -> (n, k)"""
        return padded.reshape(-1, padded.shape[-1]).index_select(0, self.index)


@dataclass(frozen=True)
class Group(_HostTensors):
    """Some rows of a batch, attended to in their own padded layout: their real tokens are the packed tokens
    `start:stop`, `layout` their (rows, longest) layout."""

    start: int
    stop: int
    layout: Layout


@dataclass(frozen=True)
class Packing(_HostTensors):
    """The real tokens of a padded (rows, width) batch, row by row (with `groups`, the rows of each group in
    turn, so that a group's tokens are one slice), and then `fill` filler tokens.

    ids, positions, rows: (T,) int64, T = real tokens + fill; a filler token has the pad id, position 0 and
    row `rows` (one past the last: the pooling drops it). counts: (rows,) float32 real tokens per row.
    cu_seqlens: (S + 1,) int32 boundaries of the S >= rows attention segments (the rows, then the fillers'
    segments, then empty ones up to a fixed count). max_seqlen: the longest segment, or an upper bound of
    it. layout: the whole batch as one padded layout (None with `groups` or a varlen Packer); groups:
    length-sorted groups of rows (Packer's group_rows).
    """

    rows: int
    width: int
    fill: int
    ids: Tensor
    positions: Tensor
    row_of: Tensor
    counts: Tensor
    cu_seqlens: Tensor
    max_seqlen: int
    layout: Layout | None
    groups: tuple[Group, ...]

    @property
    def n_real(self) -> int:
        """Real (non-filler) tokens."""
        return self.ids.shape[0] - self.fill

    def mean(self, packed: Tensor) -> Tensor:
        """(T, k) token states -> (rows, k): each row's mean over its real tokens (0 for a row without any)."""
        sums = packed.new_zeros(self.rows + 1, packed.shape[-1]).index_add(0, self.row_of, packed)[: self.rows]
        return sums / self.counts.clamp(min=1).unsqueeze(1).to(packed.dtype)


@dataclass(frozen=True)
class Packer:
    """Padded token ids -> their `Packing` (see the module docstring).

    group_rows: attention over length-sorted groups of this many rows (EMSConfig.attention_group_rows; 0: the
    whole batch in one padded layout). static_shapes: bucketed token counts, every row's width `max_len`,
    `max_len` as the longest segment (a compiled step; no groups). varlen: attention is one variable-length
    call over `cu_seqlens` (ems.model.attention_path "varlen"), so no padded layout is built."""

    pad_id: int
    max_len: int
    group_rows: int = 0
    static_shapes: bool = False
    varlen: bool = False

    def __post_init__(self) -> None:
        if self.static_shapes and self.group_rows:
            raise ValueError("static shapes (a compiled step) attend over the whole batch: set attention_group_rows 0")
        if self.varlen and self.group_rows:
            raise ValueError("variable-length attention needs no length groups: set attention_group_rows 0")

    def pad_width(self, ids: np.ndarray) -> np.ndarray:
        """(B, L) ids cut at max_len and, with static shapes, padded with the pad id to max_len."""
        ids = ids[:, : self.max_len]
        if self.static_shapes and ids.shape[1] < self.max_len:
            ids = np.pad(ids, ((0, 0), (0, self.max_len - ids.shape[1])), constant_values=self.pad_id)
        return ids

    def __call__(self, ids: np.ndarray) -> Packing:
        """(B, L) int token ids (after `pad_width`) -> their Packing."""
        ids = np.asarray(ids)
        n_rows, width = ids.shape
        real = ids != self.pad_id
        lengths = real.sum(axis=1)
        grouped = bool(self.group_rows) and n_rows > self.group_rows
        # the rows in packed order: length-sorted where they are cut into groups, so that a group is one slice
        order = np.argsort(lengths, kind="stable") if grouped else np.arange(n_rows)
        flat = np.flatnonzero(real[order])
        n = len(flat)
        row_of = order[flat // max(width, 1)]
        positions = flat % max(width, 1)
        bounds = np.concatenate([[0], np.cumsum(lengths[order])])
        fill = segments = 0
        max_seqlen = max(int(lengths.max()) if n_rows else 0, 1)
        if self.static_shapes:
            total = bucket_size(max(n, 1))
            fill = total - n
            step = 1 << max(total.bit_length() - 1 - BUCKETS_PER_OCTAVE_BITS, 0)
            segments = -(-step // self.max_len)  # fill < step: at most this many filler segments of max_len
            filler_bounds = np.minimum(n + self.max_len * np.arange(1, segments + 1), total)
            bounds = np.concatenate([bounds, filler_bounds])
            max_seqlen = self.max_len
        groups: tuple[Group, ...] = ()
        layout = None
        if grouped:
            starts = range(0, n_rows, self.group_rows)
            groups = tuple(
                Group(
                    start=int(bounds[start]),
                    stop=int(bounds[min(start + self.group_rows, n_rows)]),
                    layout=Layout.of(lengths[order[start : start + self.group_rows]]),
                )
                for start in starts
            )
        elif not self.varlen:
            layout = Layout.of(lengths)
        filler = np.zeros(fill, dtype=np.int64)
        return Packing(
            rows=n_rows,
            width=width,
            fill=fill,
            ids=torch.from_numpy(np.concatenate([ids[order].reshape(-1)[flat].astype(np.int64), filler + self.pad_id])),
            positions=torch.from_numpy(np.concatenate([positions, filler])),
            row_of=torch.from_numpy(np.concatenate([row_of, filler + n_rows])),
            counts=torch.from_numpy(lengths.astype(np.float32)),
            cu_seqlens=torch.from_numpy(bounds.astype(np.int32)),
            max_seqlen=max_seqlen,
            layout=layout,
            groups=groups,
        )


@dataclass(frozen=True)
class BatchVocabulary(_HostTensors):
    """The candidates of XTR's batch softmax (EMSConfig.xtr_vocabulary "batch"): `columns` (U,) the distinct
    token ids of the targets, sorted, then (static shapes) the pad id up to a bucket size, with `valid` (U,)
    False there; `targets` (B, L) each target token's index in `columns`, and U where padded, so that
    `xtr_loss(logits over columns, targets, pad_id=U)` is XTR with q a softmax over the batch's tokens."""

    columns: Tensor
    valid: Tensor
    targets: Tensor

    @staticmethod
    def of(targets: np.ndarray, pad_id: int, static_shapes: bool = False) -> BatchVocabulary:
        real = targets != pad_id
        columns = np.unique(targets[real])
        size = bucket_size(max(len(columns), 1)) if static_shapes else len(columns)
        positions = np.where(real, np.searchsorted(columns, targets), size)
        valid = np.arange(size) < len(columns)
        padded = np.concatenate([columns, np.full(size - len(columns), pad_id, dtype=columns.dtype)])
        return BatchVocabulary(
            columns=torch.from_numpy(padded.astype(np.int64)),
            valid=torch.from_numpy(valid),
            targets=torch.from_numpy(positions.astype(np.int64)),
        )
