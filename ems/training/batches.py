"""Global batches of pair indices (ems.training.batch_order) -> each rank's padded tensors.

One global batch = `global_batch_size` pairs = world_size ranks x accumulation micro-batches.
Every rank computes the same (cheap, index-only) order and reads only its own rows from the
memory-mapped shards: sub-batch s = micro_step * world_size + rank takes rows s, s + S, s + 2S, ...
of the length-sorted global batch (S = world_size * accumulation), so the sub-batches are
disjoint, their union is the global batch, and all of them have nearly the same lengths.
`Prefetcher` reads the next batches on a thread while the current step runs.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator

import numpy as np
import torch

from ems.packing import BatchVocabulary, Packer
from ems.shards import PairShards
from ems.text import PAD_ID
from ems.training.batch_order import BatchOrder


def sub_batch(batch: np.ndarray, micro_step: int, rank: int, world_size: int, accumulation: int = 1) -> np.ndarray:
    """This rank's rows of one global batch at one accumulation micro-step (see the module docstring)."""
    n_sub = world_size * accumulation
    if len(batch) % n_sub:
        raise ValueError(f"a global batch of {len(batch)} pairs does not split into {n_sub} equal sub-batches")
    return batch[micro_step * world_size + rank :: n_sub]


def collate(
    shards: PairShards,
    indices: np.ndarray,
    max_len: int,
    teacher=None,
    packer: Packer | None = None,
    batch_vocabulary: bool = False,
) -> dict:
    """Pair indices -> padded (B, L) `src`/`tgt` id tensors, (B,) language indices, when the
    shards have them (B, 2) `content_ids`, and with `teacher` (ems.teacher_store.TeacherTargets)
    the (B, d) `teacher` vectors of the pairs' source sentences and their (B,) `teacher_mask`;
    with `packer`, packed (`packed`)."""
    shards.check_whole()  # a shard file truncated under the run: one line, not SIGBUS in the reads below
    indices = np.asarray(indices, dtype=np.int64)
    sides = [torch.from_numpy(shards.padded(2 * indices + side, max_len, PAD_ID)) for side in (0, 1)]
    langs = torch.from_numpy(np.asarray(shards.langs[indices], dtype=np.int64))
    batch = {"src": sides[0], "tgt": sides[1], "src_lang": langs[:, 0], "tgt_lang": langs[:, 1]}
    content_ids = np.ascontiguousarray(shards.content_ids[indices]) if shards.content_ids is not None else None
    if content_ids is not None:  # uint64 hashes, compared for equality only: int64 bits
        batch["content_ids"] = torch.from_numpy(content_ids.view(np.int64))
    if teacher is not None:
        vectors, mask = teacher(content_ids, langs.numpy())
        batch["teacher"], batch["teacher_mask"] = torch.from_numpy(vectors), torch.from_numpy(mask)
    return batch if packer is None else packed(batch, packer, batch_vocabulary)


def packed(batch: dict, packer: Packer, batch_vocabulary: bool = False) -> dict:
    """A collated batch on the host with both sides padded to one width and the `packing` of its (2B, L) rows
    [src; tgt] (the model's Packer, EncoderNetwork.packer) and, with `batch_vocabulary`, XTR's `vocabulary`
    of the targets [tgt; src] (ems.packing): the forward pass then reads nothing back from the device."""
    src, tgt = batch["src"].numpy(), batch["tgt"].numpy()
    width = max(src.shape[1], tgt.shape[1])
    both = packer.pad_width(
        np.concatenate(
            [np.pad(side, ((0, 0), (0, width - side.shape[1])), constant_values=PAD_ID) for side in (src, tgt)]
        )
    )
    src, tgt = np.split(both, 2)
    extra = {"packing": packer(both)}
    if batch_vocabulary:
        extra["vocabulary"] = BatchVocabulary.of(np.concatenate([tgt, src]), PAD_ID, static_shapes=packer.static_shapes)
    return {**batch, "src": torch.from_numpy(src), "tgt": torch.from_numpy(tgt), **extra}


def to_device(batch: dict, device: torch.device, non_blocking: bool = False) -> dict:
    """A collated batch with every tensor (a packing's and vocabulary's included) on `device`."""
    return {key: value.to(device, non_blocking=non_blocking) for key, value in batch.items()}


def pinned(batch: dict) -> dict:
    """A collated batch in pinned host memory (a fast, asynchronous copy to a GPU)."""
    return {key: value.pin_memory() for key, value in batch.items()}


def real_and_padded_tokens(batch: dict) -> tuple[int, int]:
    """(real tokens, token slots the step computes over) of a collated batch; their ratio is the share of
    real tokens (1 = no padding). Unpacked, the slots are the padded `src` and `tgt` tensors'. Packed
    (`packing`), the layers run over the packed tokens and attention over its padded layouts, so the slots
    are those layouts' rows x width (each length group's, or the whole batch's) plus the fillers; without
    a layout (variable-length attention on a GPU), the packed tokens, fillers included."""
    packing = batch.get("packing")
    if packing is None:
        real = int((batch["src"] != PAD_ID).sum() + (batch["tgt"] != PAD_ID).sum())
        return real, batch["src"].numel() + batch["tgt"].numel()
    layouts = [group.layout for group in packing.groups]  # groups and a whole-batch layout exclude each other
    if packing.layout is not None:
        layouts.append(packing.layout)
    if not layouts:
        return packing.n_real, packing.ids.shape[0]
    return packing.n_real, sum(layout.rows * layout.width for layout in layouts) + packing.fill


def iterate_batches(
    shards: PairShards,
    order: BatchOrder,
    max_len: int,
    start: tuple[int, int] = (0, 0),
    rank: int = 0,
    world_size: int = 1,
    accumulation: int = 1,
    teacher=None,
    packer: Packer | None = None,
    batch_vocabulary: bool = False,
) -> Iterator[tuple[tuple[int, int], list[dict]]]:
    """Endless stream of ((epoch, batch index), this rank's `accumulation` micro-batches of the
    global batch), from data position `start`; with the teacher's vectors, the packing and XTR's batch
    vocabulary (see `collate`). The
    shards' mapped pages are released after each batch (`PairShards.release_pages`, < 1 ms)."""
    epoch, batch_idx = start
    while True:
        for b in range(batch_idx, order.batches_per_epoch()):
            shards.check_whole()  # the order reads the mapped lengths and content ids
            batch = order.batch(epoch, b)
            yield (
                (epoch, b),
                [
                    collate(
                        shards,
                        sub_batch(batch, m, rank, world_size, accumulation),
                        max_len,
                        teacher,
                        packer,
                        batch_vocabulary,
                    )
                    for m in range(accumulation)
                ],
            )
            shards.release_pages()
        epoch, batch_idx = epoch + 1, 0


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def prefetch_depth(setting: int | str, device: torch.device) -> int:
    """The Prefetcher depth of TrainConfig.prefetch_batches `setting` for a step on `device`: a number as given;
    "auto" 2, but 0 on a CPU whose every core torch's threads compute on. There a reading thread takes a core
    from the step's threads, which then wait for it at every parallel operator: the step slows by more than
    the few milliseconds the reading takes inside it (docs/results/throughput.md#the-cpu-training-step)."""
    if setting != "auto":
        return int(setting)
    return 0 if device.type == "cpu" and torch.get_num_threads() >= usable_cores() else 2


class Prefetcher:
    """An iterator over `source` read ahead by a background thread: up to `depth` items wait,
    collated (and pinned, `pin_memory`, for a fast copy to a GPU), while the training step runs.
    Items come out in the source's order, so data positions and exact resume are unchanged.
    `wait_seconds` adds up the time `next` spent blocked on the thread (the step waiting for
    data). An error in the thread is raised by the `next` that would have returned the item;
    `close` stops the thread. depth 0 reads synchronously (`wait_seconds` is then the read time)."""

    _END = object()

    def __init__(self, source: Iterator, depth: int = 2, pin_memory: bool = False):
        self.source, self.pin_memory = source, pin_memory
        self.wait_seconds = 0.0
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._thread = None
        if depth > 0:
            self._thread = threading.Thread(target=self._fill, name="ems-prefetch", daemon=True)
            self._thread.start()

    def _prepare(self, item):
        if not self.pin_memory:
            return item
        position, micro_batches = item
        return position, [pinned(batch) for batch in micro_batches]

    def _fill(self) -> None:
        try:
            for item in self.source:
                item = self._prepare(item)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(self._END)
        except BaseException as error:  # handed to the consumer, raised there
            self._queue.put(error)

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self):
        start = time.perf_counter()
        try:
            if self._thread is None:
                return self._prepare(next(self.source))
            item = self._queue.get()
        finally:
            self.wait_seconds += time.perf_counter() - start
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
