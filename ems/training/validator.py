"""Validation losses on a fixed sample of held-out pairs spread over every language pair, at the
start of a run, every valid_every steps and at its end.

The sample is drawn once per run (as equal a number of pairs from each language pair as their
sizes allow, seeded), stored as `OUT/valid_sample.json` and read back on every resume, so the
values are comparable across steps and restarts. Its order is shuffled, so each validation batch
mixes language pairs as training batches do (the contrastive loss depends on the batch).

In: the engine and a ValidationSet (TrainConfig.valid_data); out: records with valid_loss and
valid_<objective> for each of ems.losses.OBJECTIVES, overall and per language pair (valid_pairs),
in metrics.jsonl, and TensorBoard scalars valid/{total,<objective>} and valid_pair/<l1-l2>.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ems.artifacts import write_text
from ems.losses import OBJECTIVES
from ems.shards import PairShards
from ems.training.batch_order import apportion
from ems.training.batches import collate, sub_batch
from ems.training.metrics import MetricsLog

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

    from ems.teacher_store import TeacherTargets

SAMPLE_FILE = "valid_sample.json"


def equal_shares(sizes: np.ndarray, n: int) -> np.ndarray:
    """Counts per group summing to min(n, sizes.sum()), as equal as the sizes allow: a group
    smaller than its share gives all it has, and the rest is shared again among the others."""
    counts = np.zeros(len(sizes), dtype=np.int64)
    open_groups = np.flatnonzero(sizes > 0)
    left = min(n, int(sizes.sum()))
    while left and len(open_groups):
        share = apportion(left, np.full(len(open_groups), 1 / len(open_groups)))
        full = sizes[open_groups] - counts[open_groups] <= share
        if not full.any():
            counts[open_groups] += share
            break
        left -= int((sizes[open_groups[full]] - counts[open_groups[full]]).sum())
        counts[open_groups[full]] = sizes[open_groups[full]]
        open_groups = open_groups[~full]
    return counts


def stratified_sample(groups: dict[str, np.ndarray], n: int, seed: int) -> np.ndarray:
    """Up to `n` pair indices drawn at random from `groups` ({language pair: pair indices}) in
    `equal_shares`, in a shuffled order."""
    rng = np.random.default_rng([seed, 1])
    counts = equal_shares(np.array([len(members) for members in groups.values()]), n)
    drawn = [rng.choice(members, count, replace=False) for members, count in zip(groups.values(), counts)]
    return rng.permutation(np.concatenate(drawn)) if drawn else np.zeros(0, dtype=np.int64)


def validation_sample(out: Path, shards: PairShards, n: int, seed: int, write: bool) -> np.ndarray:
    """The run's stored sample, or a new `stratified_sample` of `shards` (stored when `write`:
    rank 0 writes, the other ranks read it after a barrier). A stored sample that does not fit the
    shards (another held-out set) is an error: delete the file to draw a new one."""
    path = Path(out) / SAMPLE_FILE
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored["n_pairs"] != len(shards) or stored["languages"] != shards.languages:
            raise ValueError(
                f"{path} was drawn from {stored['n_pairs']} validation pairs and this run's validation "
                f"data has {len(shards)} (or other languages); delete it to draw a new sample"
            )
        return np.asarray(stored["indices"], dtype=np.int64)
    groups = shards.language_pair_groups()
    sample = stratified_sample(groups, n, seed)
    if write:
        counts = {name: int(np.isin(sample, members).sum()) for name, members in groups.items()}
        record = {
            "n_pairs": len(shards),
            "languages": shards.languages,
            "seed": seed,
            "pairs_per_language_pair": counts,
            "indices": sample.tolist(),
        }
        write_text(path, json.dumps(record) + "\n", "validation sample")
    return sample


@torch.no_grad()
def validation_losses(
    engine, shards: PairShards, sample: np.ndarray, batch_size: int, max_len: int, autocast, teacher=None
) -> dict:
    """Mean losses over `sample` cut into global batches of batch_size x world_size pairs (each
    rank scores its share of each, as in training), dropout off; each objective over the rows it
    is defined on (the distillation term, the paper's development score: the MSE on held-out pairs,
    over the pairs with a teacher vector; `teacher`: ems.teacher_store.TeacherTargets of these
    shards; None: 0). Returns {"valid_loss", "valid_<objective>" for each of OBJECTIVES,
    "valid_pairs": {language pair: {"loss", <objective>...}}}."""
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    n = len(sample) // world_size * world_size
    if n < 2 * world_size:
        raise ValueError(f"validation needs at least {2 * world_size} pairs, has {len(sample)}")
    cfg = engine.module.cfg
    groups = shards.language_pair_groups()
    names = list(groups)
    group_of = np.zeros(len(shards), dtype=np.int64)
    for g, members in enumerate(groups.values()):
        group_of[members] = g
    # per language pair: pairs, then for each objective its summed loss and the rows it is defined on
    sums = torch.zeros(len(names), 1 + 2 * len(OBJECTIVES), dtype=torch.float64)
    global_batch = batch_size * world_size
    engine.eval()
    for start in range(0, n, global_batch):
        indices = sub_batch(sample[start : min(start + global_batch, n)], 0, rank, world_size)
        batch = {k: v.to(engine.device) for k, v in collate(shards, indices, max_len, teacher).items()}
        with autocast:
            out = engine(**batch, per_example=True)
        columns = [torch.ones_like(out[f"{OBJECTIVES[0]}_per_example"])]
        for name in OBJECTIVES:
            columns += [out[f"{name}_per_example"], out[f"{name}_rows"].to(columns[0].dtype)]
        sums.index_add_(0, torch.from_numpy(group_of[indices]), torch.stack(columns, dim=1).double().cpu())
    engine.train()
    sums = sums.to(engine.device)
    dist.all_reduce(sums)
    sums = sums.cpu()

    def losses(row: torch.Tensor) -> dict:
        means = {
            name: float(row[1 + 2 * i] / row[2 + 2 * i]) if row[2 + 2 * i] > 0 else 0.0
            for i, name in enumerate(OBJECTIVES)
        }
        return {"loss": cfg.weighted_loss(means), **means}

    total = losses(sums.sum(dim=0))
    return {
        **{f"valid_{key}": value for key, value in total.items()},
        "valid_pairs": {name: losses(sums[g]) for g, name in enumerate(names) if sums[g, 0] > 0},
    }


@dataclass(frozen=True)
class ValidationSet:
    """The validation shards, the run's stored sample of them and their teacher vectors (distillation)."""

    shards: PairShards
    sample: np.ndarray
    teacher: TeacherTargets | None


@dataclass
class Validator:
    """Validation every `every` steps (not at an invocation's last step: its end validates), at the
    start and the end of a run; nothing without a ValidationSet."""

    valid: ValidationSet | None
    every: int
    engine: DeepSpeedEngine
    batch_size: int
    autocast: contextlib.AbstractContextManager
    metrics_log: MetricsLog

    def should_run(self, step: int, last: int) -> bool:
        return self.valid is not None and step % self.every == 0 and step != last

    def run(self, step: int) -> dict | None:
        """Validation losses of the model at `step`, logged (None without validation data)."""
        if self.valid is None:
            return None
        record = {
            "step": step,
            **validation_losses(
                self.engine,
                self.valid.shards,
                self.valid.sample,
                self.batch_size,
                self.engine.module.cfg.max_len,
                self.autocast,
                self.valid.teacher,
            ),
        }
        scalars = {
            f"valid/{'total' if key == 'loss' else key}": record[f"valid_{key}"] for key in ("loss", *OBJECTIVES)
        }
        scalars.update({f"valid_pair/{pair}": losses["loss"] for pair, losses in record["valid_pairs"].items()})
        self.metrics_log.write(record, scalars)
        return record
