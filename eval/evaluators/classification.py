"""Zero-shot cross-lingual document classification on frozen sentence embeddings (LASER/EMS protocol).

In: an encoder (`encode(sentences, lang) -> (n, d)` and `languages`), a ClassificationConfig
(configs/eval/sib200.yaml: the seeds, the MLP, the directions) and a ClassificationTask, the data
(eval.evaluators.classification_data): `score_classification`; `evaluate_classification`, the
evaluator of the task type `classification`, reads the data of a TaskRun first. A document's
embedding is the mean of its sentences' embeddings; the sentences of one split of one language go
to the encoder in a single call (so a cache hits).

The classifier is LASER's (source/sent_classif.py with the settings of tasks/mldoc/mldoc.sh):
dropout 0.2 on the input, hidden layers 10 and 8 each followed by tanh and dropout 0.2, a linear
output; cross-entropy; Adam (lr 0.001, betas 0.9/0.999, eps 1e-8, no weight decay); batches of 12
drawn by a fresh shuffle each epoch; 500 epochs; after every epoch the accuracy on the train
language's dev split is measured and the epoch with the best one is kept (the latest on ties,
LASER's `>=`). Only dev data choose anything: test splits are scored once, with the kept model.
The preset "small_64" (`mlp: {preset: small_64}`) is the previous setting of this project (one
hidden layer of 64, batch 64, 100 epochs).

Directions (EMS Table 10 reports both for MLDoc): "en2xx" trains on the train language (English)
and tests every language; "xx2en" trains, for each other language X, on X's train split, selects
on X's dev split and tests on the train language's test split.
Out: accuracy (%) per test language, mean and std (ddof=0) over the seeds, the average over the
non-train languages, and the in-language score (train language's own test split); with "xx2en",
`directions["xx2en"]` holds one row per X and their average. Given the seeds the result is
deterministic, and each seed's model does not depend on the other seeds: a seed's initial
weights, shuffles and dropout masks come from its own torch.Generator (the global RNG is left
alone). The seeds are trained together as one batched model (independent weights and Adam
states), which is about twice as fast on CPU as one seed after the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Annotated

import numpy as np
import torch
from tqdm import tqdm

from ems.cli import one_line
from ems.configs import FieldsOf
from ems.encoder_kinds import Encoder, encode_checked, encoder_languages
from ems.languages import ENGLISH, covered_language
from eval.evaluators.classification_data import ClassificationTask, Document, read_task
from eval.evaluators.items import NOT_COVERED
from eval.faults import DATA_ERRORS, DATA_FAULTS
from eval.report import classification_table
from eval.task import Headline, Languages, TaskConfig, TaskRun, TaskType, filtered_languages, refuse

DEFAULT_SEEDS = (0, 1, 2, 3, 4)
EN2XX, XX2EN = "en2xx", "xx2en"
DIRECTIONS = (EN2XX, XX2EN)


@dataclass
class MlpSettings:
    """The classifier and its training; the defaults are LASER's MLDoc settings (tasks/mldoc/mldoc.sh)."""

    hidden: tuple[int, ...] | int = (10, 8)  # an int: one hidden layer (a tuple after __init__)
    dropout: float = 0.2
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    epochs: int = 500
    batch_size: int = 12

    def __post_init__(self):
        self.hidden = (self.hidden,) if isinstance(self.hidden, int) else tuple(self.hidden)
        if not self.hidden or min(self.hidden) < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"hidden sizes, epochs and batch_size must be positive, got {self}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


# "laser": tasks/mldoc/mldoc.sh of facebookresearch/LASER (nhid "10 8", drop 0.2, bsize 12, N 500,
# lr 0.001, wd 0.0); "small_64": this project's earlier classifier.
PRESETS = {
    "laser": {
        "hidden": (10, 8),
        "dropout": 0.2,
        "learning_rate": 1e-3,
        "weight_decay": 0.0,
        "epochs": 500,
        "batch_size": 12,
    },
    "small_64": {
        "hidden": (64,),
        "dropout": 0.2,
        "learning_rate": 1e-3,
        "weight_decay": 0.0,
        "epochs": 100,
        "batch_size": 64,
    },
}


def mlp_settings(values: dict | None) -> MlpSettings:
    """MlpSettings from a mapping of an optional `preset` (a key of PRESETS, default "laser") and
    MlpSettings fields that override it (a classification config's `mlp:`, whose keys and types
    the config loader checks); ValueError naming an unknown preset."""
    values = dict(values or {})
    preset = values.pop("preset", "laser")
    if preset not in PRESETS:
        raise ValueError(f"unknown MLP preset {preset!r}; expected one of {', '.join(PRESETS)}")
    return MlpSettings(**{**PRESETS[preset], **values})


@dataclass
class MlpConfig(MlpSettings):
    """The keys of a classification config's `mlp:`: a `preset` (a key of PRESETS) and MlpSettings
    fields overriding it (mlp_settings)."""

    preset: str = "laser"


@dataclass(kw_only=True)
class ClassificationConfig(TaskConfig):
    """configs/eval/{sib200,mldoc,amazon}.yaml. `languages`: "all" (every language in the data) or
    a list (the train language is always read); `format` and `reader`, its format's keyword
    settings (eval.evaluators.classification_data.READERS); `seeds`: a list, or a count n for
    seeds 0..n-1; `mlp`: a `preset` and settings overriding it (mlp_settings); `directions`: en2xx
    (train on the train language, test each language) and/or xx2en (train on each language X,
    select on X's dev, test on the train language)."""

    format: str
    languages: Languages
    train_language: str = ENGLISH
    seeds: int | list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))  # a list after __init__
    mlp: Annotated[dict, FieldsOf(MlpConfig)] = field(default_factory=dict)  # MlpSettings after __init__
    reader: dict = field(default_factory=dict)
    directions: list[str] = field(default_factory=lambda: [EN2XX])

    def __post_init__(self):
        self.seeds = list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)
        self.directions = list(dict.fromkeys(self.directions))
        problems = [] if self.seeds else ["seeds: need at least one seed"]
        if not self.directions or set(self.directions) - set(DIRECTIONS):
            problems.append(f"directions must be some of {', '.join(DIRECTIONS)}, got {self.directions}")
        try:
            self.mlp = mlp_settings(self.mlp)
        except ValueError as error:
            problems.append(str(error))
        refuse(self, problems)

    def language_codes(self) -> list[str]:
        return [*super().language_codes(), self.train_language]


def document_embeddings(encoder: Encoder, documents: list[Document], lang: str) -> np.ndarray:
    """(n documents, d) float32: each row the mean of its document's sentence embeddings, all
    sentences encoded in one call."""
    sentences = [sentence for document in documents for sentence in document.sentences]
    counts = np.array([len(document.sentences) for document in documents])
    if not len(documents) or counts.min() < 1:
        raise ValueError(f"{lang}: every document needs at least one sentence, and there must be documents")
    vectors = encode_checked(encoder, sentences, lang).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.add.reduceat(vectors, starts, axis=0) / counts[:, None].astype(np.float32)


class SeedMlps:
    """One MLP per seed, trained together: layer l's weights are (seeds, in, out) and its biases
    (seeds, 1, out); seed i's initial weights (nn.Linear's uniform(-1/sqrt(in), 1/sqrt(in))),
    shuffles and dropout masks come from torch.Generator(seed i) only."""

    def __init__(self, dim: int, n_labels: int, seeds: list[int], settings: MlpSettings):
        self.settings = settings
        self.generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
        sizes = [dim, *settings.hidden, n_labels]
        self.params = []
        for n_in, n_out in zip(sizes, sizes[1:]):
            bound = 1 / math.sqrt(n_in)
            for shape in ((n_in, n_out), (1, n_out)):
                values = [(torch.rand(shape, generator=g) * 2 - 1) * bound for g in self.generators]
                self.params.append(torch.stack(values).requires_grad_())

    def _dropout(self, h: torch.Tensor) -> torch.Tensor:
        p = self.settings.dropout
        if p == 0:
            return h
        keep = torch.stack([torch.rand(h.shape[1:], generator=g) >= p for g in self.generators])
        return h * keep / (1 - p)

    def logits(self, x: torch.Tensor, train: bool = False) -> torch.Tensor:
        """(seeds, n, labels) from x (seeds, n, dim) or (n, dim); dropout only if `train`."""
        h = self._dropout(x) if train else x
        n_layers = len(self.params) // 2
        for layer in range(n_layers):
            weight, bias = self.params[2 * layer], self.params[2 * layer + 1]
            h = torch.baddbmm(bias, h, weight) if h.dim() == 3 else torch.matmul(h, weight) + bias
            if layer < n_layers - 1:
                h = torch.tanh(h)
                h = self._dropout(h) if train else h
        return h

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(seeds, n) predicted label indices."""
        with torch.no_grad():
            return self.logits(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).argmax(dim=2).numpy()

    def accuracies(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Accuracy (%) of each seed's model."""
        return 100.0 * (self.predict(x) == y[None, :]).mean(axis=1)


def train_mlps(
    train_x: np.ndarray,
    train_y: np.ndarray,
    dev_x: np.ndarray,
    dev_y: np.ndarray,
    n_labels: int,
    seeds: list[int],
    settings: MlpSettings,
) -> tuple[SeedMlps, list[float], list[int]]:
    """One MLP per seed, each at its epoch with the best dev accuracy (the latest on ties); those
    accuracies (%) and epochs (1-based). Nothing but train and dev data enters."""
    seeds = list(seeds)
    model = SeedMlps(train_x.shape[1], n_labels, seeds, settings)
    optimizer = torch.optim.Adam(
        model.params, lr=settings.learning_rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=settings.weight_decay
    )
    x, y = torch.from_numpy(np.ascontiguousarray(train_x, dtype=np.float32)), torch.from_numpy(train_y).long()
    best = [p.detach().clone() for p in model.params]
    best_dev, best_epoch = np.full(len(seeds), -1.0), np.zeros(len(seeds), dtype=int)
    for epoch in range(1, settings.epochs + 1):
        order = torch.stack([torch.randperm(len(x), generator=g) for g in model.generators])
        for batch in order.split(settings.batch_size, dim=1):  # (seeds, b) indices
            logits = model.logits(x[batch], train=True)
            losses = torch.nn.functional.cross_entropy(
                logits.reshape(-1, n_labels), y[batch].reshape(-1), reduction="none"
            )
            optimizer.zero_grad()
            losses.view(len(seeds), -1).mean(dim=1).sum().backward()  # seeds share no weight: independent gradients
            optimizer.step()
        dev = model.accuracies(dev_x, dev_y)
        better = dev >= best_dev
        if better.any():
            keep = torch.from_numpy(better)
            with torch.no_grad():
                for saved, param in zip(best, model.params):
                    saved[keep] = param[keep]
            best_dev[better], best_epoch[better] = dev[better], epoch
    with torch.no_grad():
        for saved, param in zip(best, model.params):
            param.copy_(saved)
    return model, [float(v) for v in best_dev], [int(v) for v in best_epoch]


def _labels(documents: list[Document], labels: list[str]) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    return np.array([index[document.label] for document in documents], dtype=np.int64)


def _mean_std(values) -> dict:
    return {"accuracy": float(np.mean(values)), "std": float(np.std(values)), "per_seed": [float(v) for v in values]}


def _fit(encoder: Encoder, data: ClassificationTask, seeds: list[int], settings: MlpSettings) -> tuple[SeedMlps, dict]:
    """The seeds' MLPs trained on the train split of `data` and selected on its dev split (both in
    the train language), and the dev row {"n", "accuracy", "std", "per_seed", "best_epoch"}."""
    lang = data.train_language
    train_x, dev_x = document_embeddings(encoder, data.train, lang), document_embeddings(encoder, data.dev, lang)
    train_y, dev_y = _labels(data.train, data.labels), _labels(data.dev, data.labels)
    models, dev_scores, epochs = train_mlps(train_x, train_y, dev_x, dev_y, len(data.labels), seeds, settings)
    return models, {"n": len(data.dev), **_mean_std(dev_scores), "best_epoch": epochs}


def score_classification(
    encoder: Encoder,
    config: ClassificationConfig,
    data: ClassificationTask,
    read_train_task: Callable[[str], ClassificationTask] | None = None,
    progress: bool = True,
) -> dict:
    """{"task", "metric": "accuracy", "train_language", "languages": {lang: {"n", "accuracy", "std",
    "per_seed"}} (en2xx: non-train languages), "in_language": that row for the train language or
    None, "average": {"n_languages", "accuracy"} or None, "dev": {"n", "accuracy", "std",
    "best_epoch"}, "directions": {direction: {"languages", "average"}}, "settings", "skipped":
    {reason: [items]}, "data_errors": the data's}; accuracies in percent, mean/std over the seeds,
    the MLP and the directions of `config`.

    "xx2en" needs `read_train_task(X)`: the data whose train language is X (its train and dev splits)
    and whose test splits include this data's train language; its rows are {"n" (test documents
    in the train language), "accuracy", "std", "per_seed", "dev": X's dev row}. A language whose
    training data cannot be read is a data error "X (xx2en training data)"."""
    seeds, settings, directions = config.seeds, config.mlp, config.directions
    if XX2EN in directions and read_train_task is None:
        raise ValueError("the xx2en direction needs read_train_task")
    covered = encoder_languages(encoder)
    skipped = {reason: list(items) for reason, items in data.skipped.items()}
    pivot = data.train_language
    result = {
        "task": data.name,
        "metric": TASK.metric,
        "train_language": pivot,
        "languages": {},
        "in_language": None,
        "average": None,
        "dev": None,
        "directions": {},
        "settings": {"seeds": seeds, "labels": data.labels, "directions": directions, **asdict(settings)},
        "skipped": skipped,
        DATA_ERRORS: dict(data.data_errors),
    }
    result["settings"]["hidden"] = list(settings.hidden)
    if covered_language(pivot, covered) is None:
        skipped.setdefault(NOT_COVERED, []).append(f"{pivot} (the train language: nothing evaluated)")
        return result

    test_languages = [lang for lang in data.test if covered_language(lang, covered) is not None]
    skipped_test = [lang for lang in data.test if lang not in test_languages]
    if skipped_test:
        skipped.setdefault(NOT_COVERED, []).extend(skipped_test)
    embedded = {}

    def test_set(lang: str) -> tuple[np.ndarray, np.ndarray]:
        if lang not in embedded:
            documents = data.test[lang]
            embedded[lang] = document_embeddings(encoder, documents, lang), _labels(documents, data.labels)
        return embedded[lang]

    if EN2XX in directions:
        models, result["dev"] = _fit(encoder, data, seeds, settings)
        for lang in tqdm(test_languages, desc=f"{data.name} test", disable=not progress):
            row = {"n": len(data.test[lang]), **_mean_std(models.accuracies(*test_set(lang)))}
            if lang == pivot:
                result["in_language"] = row
            else:
                result["languages"][lang] = row
        if result["languages"]:
            scores = [row["accuracy"] for row in result["languages"].values()]
            result["average"] = {"n_languages": len(scores), "accuracy": float(np.mean(scores))}
        result["directions"][EN2XX] = {"languages": result["languages"], "average": result["average"]}

    if XX2EN in directions:
        rows = {}
        if pivot not in data.test:
            skipped.setdefault("xx2en: no test split in the train language", []).append(pivot)
        else:
            for lang in tqdm(
                [lang for lang in test_languages if lang != pivot], desc=f"{data.name} xx2en", disable=not progress
            ):
                try:
                    source = read_train_task(lang)
                except DATA_FAULTS as error:
                    result[DATA_ERRORS][f"{lang} (xx2en training data)"] = one_line(error)
                    continue
                if source.labels != data.labels:
                    raise ValueError(f"{data.name}: {lang}'s labels {source.labels} differ from {data.labels}")
                models, dev = _fit(encoder, source, seeds, settings)
                rows[lang] = {"n": len(data.test[pivot]), **_mean_std(models.accuracies(*test_set(pivot))), "dev": dev}
        average = (
            {"n_languages": len(rows), "accuracy": float(np.mean([r["accuracy"] for r in rows.values()]))}
            if rows
            else None
        )
        result["directions"][XX2EN] = {"languages": rows, "average": average}
    return result


def evaluate_classification(encoder: Encoder, task: TaskRun) -> dict:
    """`score_classification` of the data in `task.data_dir` (read by the config's `format`): the
    config's languages that the run's filter keeps ("all": the filter's, or every language of the
    data), at most `max_sentences` documents per split; the train language is always read."""
    config, options, outside = task.config, task.options, {}
    if config.languages == "all":
        languages = options.canonical
    else:
        languages, outside = filtered_languages(config.languages, options)

    def read(train: str, test_languages: list[str] | None) -> ClassificationTask:
        return read_task(
            config.format, task.data_dir, test_languages, train, options.max_sentences, task.name, **config.reader
        )

    data = read(config.train_language, languages)
    result = score_classification(
        encoder, config, data, lambda lang: read(lang, [config.train_language]), options.progress
    )
    result["skipped"].update(outside)
    return result


ACCURACY = Headline("accuracy (%), mean over seeds", lambda row: row["accuracy"])
TASK = TaskType(
    metric="accuracy",
    run=evaluate_classification,
    table=classification_table,
    config=ClassificationConfig,
    headline=ACCURACY,
)
