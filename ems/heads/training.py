"""Shared training for the trained disentanglement heads (DREAM, MEAT, reversible).

`train_module` is one readable loop: shuffled minibatches, Adam, a fixed seed, early stopping on
the validation loss with a patience, and the best epoch's weights restored at the end. A loss
function gets a `PairBatch` (the two sides of translation pairs, their languages, and for every
sentence a random OTHER sentence of the same language, drawn afresh each training epoch and
once for validation) and returns named scalar losses including "total" (what is minimised).

`TrainedHead` is the part the three heads share: numpy in/out around a torch module, the
language check, and save/load as safetensors + head.json.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from ems.configs import ConfigError, load_config
from ems.heads.base import HEAD_JSON, ParallelEmbeddings, check_language
from ems.model import load_weights

WEIGHTS_FILE = "head.safetensors"


@dataclass
class HeadHyperparameters:
    """Training settings of a trained head (each head class has its own defaults,
    `default_hyperparameters`; see its docstring). The reversible head's are its paper's; DREAM's
    and MEAT's learning rates were chosen on MLQE-PE dev with ems/apps/studies/heads_study.py.

    The papers' extractors are single d x d linear layers (hidden_dim=0 here; >0 inserts one
    ReLU hidden layer of that width) trained with Adam at batch size 512 with early stopping on
    about a million pairs (DREAM lr 1e-4, MEAT lr 1e-5). With 1k-30k pairs an epoch is only a few
    to 60 steps, so the heads cap the epochs (`max_epochs`) to keep training to a few minutes on
    one CPU thread; early stopping on the held-out pairs picks the epoch within the cap.
    """

    hidden_dim: int = 0
    learning_rate: float = 1e-3
    batch_size: int = 512
    max_epochs: int = 100
    patience: int = 10


@dataclass
class PairBatch:
    """Rows i of x and y are translations; x_other[i] is another sentence in x_lang[i]'s
    language (y_other likewise), used as a same-language, different-meaning partner."""

    x: Tensor
    y: Tensor
    x_lang: Tensor
    y_lang: Tensor
    x_other: Tensor
    y_other: Tensor

    def __len__(self) -> int:
        return len(self.x)

    def rows(self, index: Tensor) -> PairBatch:
        return PairBatch(*(getattr(self, f.name)[index] for f in fields(self)))


@dataclass
class Decomposition:
    """A batch of sentence embeddings and their meaning and language parts (all (B, d))."""

    embedding: Tensor
    meaning: Tensor
    language: Tensor


LossFunction = Callable[[PairBatch], dict[str, Tensor]]


def cosine_embedding_loss(a: Tensor, b: Tensor, similar: bool) -> Tensor:
    """Mean over rows of 1 - cos(a_i, b_i) (similar=True) or max(0, cos(a_i, b_i)) (False):
    torch's CosineEmbeddingLoss with margin 0, the form the DREAM and MEAT code uses."""
    target = torch.full((len(a),), 1.0 if similar else -1.0, dtype=a.dtype, device=a.device)
    return nn.functional.cosine_embedding_loss(a, b, target)


def linear_extractor(dim: int, hidden_dim: int) -> nn.Module:
    """d -> d map: one linear layer (the papers' extractor) or, with hidden_dim > 0, Linear-ReLU-Linear."""
    if hidden_dim <= 0:
        return nn.Linear(dim, dim)
    return nn.Sequential(nn.Linear(dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, dim))


def classified_pair_losses(module: nn.Module, batch: PairBatch, losses_of) -> dict[str, Tensor]:
    """`losses_of(x, y, x_other, y_other, x_language_logits, y_language_logits, x_lang, y_lang)`
    (DREAM's or the reversible method's losses) on one batch: both sides and their same-language
    partners decomposed by `module`, both language parts scored by `module.language_classifier`."""
    x, y = module(batch.x), module(batch.y)
    return losses_of(
        x,
        y,
        module(batch.x_other),
        module(batch.y_other),
        module.language_classifier(x.language),
        module.language_classifier(y.language),
        batch.x_lang,
        batch.y_lang,
    )


def same_language_partners(languages: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each position r, a random position != r with the same language value (r itself only
    when r is the only one of its language). Returns (n,) int64 indices into `languages`."""
    partners = np.arange(len(languages))
    for value in np.unique(languages):
        positions = np.flatnonzero(languages == value)
        if len(positions) < 2:
            continue
        draw = rng.integers(0, len(positions) - 1, size=len(positions))
        draw += draw >= np.arange(len(positions))  # skip the row itself
        partners[positions] = positions[draw]
    return partners


def pair_batch(pairs: ParallelEmbeddings, rng: np.random.Generator) -> PairBatch:
    """All pairs as tensors, each sentence given a random same-language partner from the pool of
    both sides of `pairs`."""
    pool = np.concatenate([pairs.x, pairs.y]).astype(np.float32)
    pool_lang = np.concatenate([pairs.x_lang, pairs.y_lang])
    partners = same_language_partners(pool_lang, rng)
    n = len(pairs)
    return PairBatch(
        x=torch.from_numpy(np.ascontiguousarray(pairs.x, dtype=np.float32)),
        y=torch.from_numpy(np.ascontiguousarray(pairs.y, dtype=np.float32)),
        x_lang=torch.from_numpy(pairs.x_lang.astype(np.int64)),
        y_lang=torch.from_numpy(pairs.y_lang.astype(np.int64)),
        x_other=torch.from_numpy(pool[partners[:n]]),
        y_other=torch.from_numpy(pool[partners[n:]]),
    )


def mean_losses(loss_fn: LossFunction, batch: PairBatch, batch_size: int) -> dict[str, float]:
    """Every named loss averaged over `batch` in minibatches (weighted by minibatch size), no gradients."""
    totals: dict[str, float] = {}
    with torch.no_grad():
        for start in range(0, len(batch), batch_size):
            part = batch.rows(torch.arange(start, min(start + batch_size, len(batch))))
            for name, value in loss_fn(part).items():
                totals[name] = totals.get(name, 0.0) + float(value) * len(part)
    return {name: value / len(batch) for name, value in totals.items()}


def train_module(
    module: nn.Module,
    loss_fn: LossFunction,
    train: ParallelEmbeddings,
    valid: ParallelEmbeddings,
    hyperparameters: HeadHyperparameters,
    seed: int,
    select_on: str = "total",
) -> dict:
    """Minimise loss_fn(batch)["total"] over `train` with Adam; after every epoch compute the
    validation losses, keep the weights of the epoch with the lowest validation `select_on`,
    stop after `patience` epochs without improvement, and load those best weights back.

    Returns {"best_epoch", "best_valid_loss", "epochs", "stopped_early", "history"} where history
    has one entry per epoch: {"epoch", "train": {name: mean}, "valid": {name: mean}}.
    """
    if len(train) == 0 or len(valid) == 0:
        raise ValueError(f"training needs pairs in both splits; got {len(train)} train and {len(valid)} valid pairs")
    rng = np.random.default_rng(seed)
    order_generator = torch.Generator().manual_seed(seed)
    valid_batch = pair_batch(valid, np.random.default_rng(seed + 1))
    optimizer = torch.optim.Adam(module.parameters(), lr=hyperparameters.learning_rate)
    best_loss, best_epoch, best_state = math.inf, 0, copy.deepcopy(module.state_dict())
    history, epochs_without_improvement = [], 0
    for epoch in range(1, hyperparameters.max_epochs + 1):
        module.train()
        train_batch = pair_batch(train, rng)
        train_sums: dict[str, float] = {}
        for index in torch.randperm(len(train_batch), generator=order_generator).split(hyperparameters.batch_size):
            losses = loss_fn(train_batch.rows(index))
            optimizer.zero_grad()
            losses["total"].backward()
            optimizer.step()
            for name, value in losses.items():
                train_sums[name] = train_sums.get(name, 0.0) + float(value.detach()) * len(index)
        module.eval()
        valid_losses = mean_losses(loss_fn, valid_batch, hyperparameters.batch_size)
        history.append(
            {"epoch": epoch, "train": {k: v / len(train_batch) for k, v in train_sums.items()}, "valid": valid_losses}
        )
        if valid_losses[select_on] < best_loss:
            best_loss, best_epoch, best_state = valid_losses[select_on], epoch, copy.deepcopy(module.state_dict())
            epochs_without_improvement = 0
        else:
            epochs_without_improvement += 1
            if epochs_without_improvement >= hyperparameters.patience:
                break
    module.load_state_dict(best_state)
    module.eval()
    return {
        "best_epoch": best_epoch,
        "best_valid_loss": best_loss,
        "epochs": len(history),
        "stopped_early": epochs_without_improvement >= hyperparameters.patience,
        "history": history,
    }


class TrainedHead:
    """Common body of the trained heads. A subclass sets `name` and implements
    `build_module(dim, n_languages)` (a module whose forward maps a float32 (B, d) batch to its
    `Decomposition`) and `loss_function(module)`."""

    name: str
    select_on = "total"
    default_hyperparameters = HeadHyperparameters()

    def __init__(self, hyperparameters: HeadHyperparameters | None = None):
        self.hyperparameters = replace(hyperparameters or self.default_hyperparameters)
        self.module: nn.Module | None = None
        self.dim = 0
        self.classifier_languages: list[str] = []  # index order of the training language labels
        self.languages: list[str] = []  # languages seen in training; others are refused

    def build_module(self, dim: int, n_languages: int) -> nn.Module:
        raise NotImplementedError

    def loss_function(self, module: nn.Module) -> LossFunction:
        raise NotImplementedError

    def fit(self, train: ParallelEmbeddings, valid: ParallelEmbeddings, seed: int = 0) -> dict:
        if train.languages != valid.languages:
            raise ValueError(
                f"train and valid must share one language list; got {train.languages} and {valid.languages}"
            )
        self.classifier_languages = list(train.languages)
        seen = set(train.x_lang.tolist()) | set(train.y_lang.tolist())
        self.languages = [lang for index, lang in enumerate(train.languages) if index in seen]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.dim = int(train.x.shape[1])
            self.module = self.build_module(self.dim, len(self.classifier_languages))
            log = train_module(
                self.module, self.loss_function(self.module), train, valid, self.hyperparameters, seed, self.select_on
            )
        return {"head": self.name, "train_pairs": len(train), "valid_pairs": len(valid), **log}

    def _parts(self, embeddings: np.ndarray, lang: str) -> Decomposition:
        if self.module is None:
            raise RuntimeError(f"the {self.name} head is not trained: call fit or load first")
        check_language(lang, self.languages, self.name)
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[1] != self.dim:
            raise ValueError(f"the {self.name} head takes (n, {self.dim}) embeddings, got shape {embeddings.shape}")
        with torch.no_grad():
            return self.module(torch.from_numpy(np.ascontiguousarray(embeddings)))

    def meaning(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        return self._parts(embeddings, lang).meaning.numpy().astype(np.float32)

    def language(self, embeddings: np.ndarray, lang: str) -> np.ndarray:
        return self._parts(embeddings, lang).language.numpy().astype(np.float32)

    def save(self, directory: Path) -> None:
        if self.module is None:
            raise RuntimeError(f"the {self.name} head is not trained: nothing to save")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.module.state_dict().items()}, str(directory / WEIGHTS_FILE))
        meta = {
            "name": self.name,
            "dim": self.dim,
            "languages": self.languages,
            "classifier_languages": self.classifier_languages,
            "hyperparameters": asdict(self.hyperparameters),
        }
        (directory / HEAD_JSON).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> TrainedHead:
        directory = Path(directory)
        meta = json.loads((directory / HEAD_JSON).read_text(encoding="utf-8"))
        if meta.get("name") != cls.name:
            raise ValueError(f"{directory} holds a {meta.get('name')!r} head, not {cls.name!r}")
        try:
            hyperparameters = load_config(HeadHyperparameters, values=meta["hyperparameters"])
        except ConfigError as error:  # named by the file, each problem under its section
            raise ConfigError(str(directory / HEAD_JSON), [f"hyperparameters: {p}" for p in error.problems]) from None
        head = cls(hyperparameters)
        head.languages, head.classifier_languages, head.dim = (
            meta["languages"],
            meta["classifier_languages"],
            meta["dim"],
        )
        head.module = head.build_module(head.dim, len(head.classifier_languages))
        load_weights(head.module, directory / WEIGHTS_FILE, f"the {cls.name} head of {directory / HEAD_JSON}")
        head.module.eval()
        return head
