"""Language neutrality (Libovický et al., 2020): how well a linear language-ID probe recognises
the language of an embedding, on raw embeddings and on each head's meaning and language views.

In: an encoder and a TaskRun: a LanguageIdConfig (configs/eval/language_id.yaml: the languages, head
names, line blocks, the probe's penalty), a FLORES-200 split directory (multi-parallel) and the
run's options (language filter, a cap on the lines of each block, where the plot goes). The FLORES lines
are cut into three disjoint blocks: the first `head_lines` train the heads (English paired with
each language), the next `probe_train_lines` train the probe, the next `probe_test_lines` test
it; so no sentence is shared between head training, probe training and probe testing. Out:
probe accuracy (%) per view, and a PNG of the first two principal components of the raw,
meaning and language embeddings of one language pair on the probe-test sentences (a row per
head: raw | meaning | language).

A meaning view that is language-neutral brings the accuracy down towards chance (100 / number
of languages); a language view should keep it high. `evaluate_language_id` is the evaluator of the
task type `language_id`, which has no per-language rows and so no chart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder
from ems.heads.base import ParallelEmbeddings
from ems.languages import flores_file
from eval.evaluators.items import score_items
from eval.faults import DATA_ERRORS
from eval.parallel_data import PIVOT, flores_pairs
from eval.pca_plot import write_pca_plot
from eval.report import language_id_table
from eval.task import TaskConfig, TaskRun, TaskType, filtered_languages
from eval.train_head import train_head

PCA_FILE = "language_pca.png"
BLOCKS = {"head_lines": 612, "probe_train_lines": 200, "probe_test_lines": 200}  # where a config sets none


@dataclass
class LinearProbe:
    """Multinomial logistic regression on standardized features."""

    weight: np.ndarray  # (d, classes)
    bias: np.ndarray  # (classes,)
    mean: np.ndarray  # (d,)
    scale: np.ndarray  # (d,)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return (((np.asarray(x, dtype=np.float64) - self.mean) / self.scale) @ self.weight + self.bias).argmax(axis=1)


def fit_probe(x: np.ndarray, labels: np.ndarray, n_classes: int, l2: float = 1e-3, max_iter: int = 200) -> LinearProbe:
    """Logistic regression (softmax, L2 penalty `l2` on the weights), full-batch L-BFGS in float64.
    Deterministic: starts from zero weights."""
    mean = x.mean(axis=0)
    scale = np.maximum(x.std(axis=0), 1e-8)
    features = torch.from_numpy((np.asarray(x, dtype=np.float64) - mean) / scale)
    targets = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    weight = torch.zeros(features.shape[1], n_classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(features @ weight + bias, targets) + l2 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return LinearProbe(weight.detach().numpy(), bias.detach().numpy(), mean, scale)


def probe_accuracy(train: dict[str, np.ndarray], test: dict[str, np.ndarray], l2: float = 1e-3) -> float:
    """Accuracy (%) on `test` of a probe fit on `train`; both map language -> (n, d) embeddings."""
    languages = sorted(train)
    if sorted(test) != languages or len(languages) < 2:
        raise ValueError(f"train and test need the same >= 2 languages, got {sorted(train)} and {sorted(test)}")
    x = np.concatenate([train[lang] for lang in languages])
    y = np.concatenate([np.full(len(train[lang]), i) for i, lang in enumerate(languages)])
    probe = fit_probe(x, y, len(languages), l2)
    correct = sum(int((probe.predict(test[lang]) == i).sum()) for i, lang in enumerate(languages))
    return 100.0 * correct / sum(len(test[lang]) for lang in languages)


@dataclass(kw_only=True)
class LanguageIdConfig(TaskConfig):
    """configs/eval/language_id.yaml: the languages probed (English always is), the heads (names
    in ems.heads.HEADS) and their training (`valid_fraction`, `seed`), the three blocks of FLORES
    lines (`blocks`), the probe's L2 penalty and the pair the PCA plot shows (e.g. "de-en")."""

    languages: list[str]
    heads: list[str] = field(default_factory=list)
    head_lines: int | None = None
    probe_train_lines: int | None = None
    probe_test_lines: int | None = None
    l2: float = 1e-3
    pca_pair: str | None = None
    valid_fraction: float = 0.1
    seed: int = 0

    def blocks(self, max_sentences: int | None = None) -> dict[str, int]:
        """The lines of each block in a run: the config's, else BLOCKS's or, with `max_sentences`,
        max_sentences; `max_sentences` caps each."""
        sizes = {key: getattr(self, key) for key in BLOCKS}
        if max_sentences is None:
            return {key: BLOCKS[key] if lines is None else lines for key, lines in sizes.items()}
        return {key: min(max_sentences if lines is None else lines, max_sentences) for key, lines in sizes.items()}


def pivot_embeddings(embeddings: dict[str, np.ndarray], rows: slice, pivot: str = PIVOT) -> ParallelEmbeddings:
    """Pairs (pivot line i, X line i) for the lines `rows` of multi-parallel embeddings {lang: (n, d)}."""
    languages = sorted(embeddings)
    others = [lang for lang in languages if lang != pivot]
    x = np.concatenate([embeddings[pivot][rows] for _ in others])
    y = np.concatenate([embeddings[lang][rows] for lang in others])
    count = len(embeddings[pivot][rows])
    x_lang = np.full(len(x), languages.index(pivot), dtype=np.int64)
    y_lang = np.concatenate([np.full(count, languages.index(lang), dtype=np.int64) for lang in others])
    return ParallelEmbeddings(x, y, x_lang, y_lang, languages)


def evaluate_language_id(encoder: Encoder, task: TaskRun) -> dict:
    """Train the config's heads on the head block, then LID probe accuracy on the raw view and on
    every head's meaning and language views, for the config's languages that the run's filter
    keeps, in the FLORES split directory `task.data_dir`, the blocks `config.blocks(max_sentences)`;
    the PCA plot goes to the run's out_dir/PCA_FILE if it has one. A language without a FLORES file
    is left out as a data error (eval.faults).
    Result: {"task", "metric": "lid_accuracy", "views": {view: accuracy}, "chance", "lines",
    "heads" (training logs), "pca_plot", "skipped", "data_errors": {lang: reason}}."""
    config, options, data_dir = task.config, task.options, Path(task.data_dir)
    probed, outside = filtered_languages(config.languages, options)
    if flores_file(data_dir, PIVOT) is None:
        flores_pairs(data_dir, [PIVOT])  # MissingDataError naming the English file: nothing can run
    found = score_items(sorted(set(probed) - {PIVOT}), lambda lang: flores_pairs(data_dir, [lang])[0])
    errors, pair_sets = found.errors, list(found.rows.values())
    if not pair_sets:
        raise MissingDataError(f"{config.name}: no language besides English to probe in {data_dir} ({dict(errors)})")
    languages = sorted({PIVOT, *(pairs.y_lang for pairs in pair_sets)})
    sentences = {PIVOT: pair_sets[0].x, **{pairs.y_lang: pairs.y for pairs in pair_sets}}
    n_lines = min(len(lines) for lines in sentences.values())
    blocks = _blocks(config.blocks(options.max_sentences), data_dir, n_lines)
    used = blocks["probe_test"].stop  # only the lines of the three blocks are encoded
    embeddings = {}
    for lang in languages:
        if options.progress:
            print(f"{config.name}: encoding {used} {lang} sentences ({flores_file(data_dir, lang).name})")
        embeddings[lang] = np.asarray(encoder.encode(sentences[lang][:used], lang), dtype=np.float32)

    train_block, test_block = blocks["probe_train"], blocks["probe_test"]
    views = {"raw": {lang: (e[train_block], e[test_block]) for lang, e in embeddings.items()}}
    logs, skipped = {}, {}
    head_data = pivot_embeddings(embeddings, blocks["heads"])
    for name in config.heads:
        try:
            head, logs[name] = train_head(name, head_data, config.valid_fraction, config.seed)
        except ValueError as exc:
            skipped.setdefault("head could not be trained", []).append(f"{name}: {exc}")
            continue
        for part in ("meaning", "language"):
            view = getattr(head, part)
            views[f"{name}/{part}"] = {lang: (view(a, lang), view(b, lang)) for lang, (a, b) in views["raw"].items()}

    accuracies = {}
    for view, parts in views.items():
        train, test = {lang: a for lang, (a, _) in parts.items()}, {lang: b for lang, (_, b) in parts.items()}
        accuracies[view] = probe_accuracy(train, test, config.l2)
    plot, pca_pair = None, config.pca_pair
    if pca_pair and set(pca_pair.split("-")) - set(languages):
        skipped.setdefault("PCA plot not drawn (a language of pca_pair was not probed)", []).append(pca_pair)
    elif options.out_dir is not None and pca_pair:
        plot = str(_pca_plot(views, pca_pair, Path(options.out_dir) / PCA_FILE))
    return {
        "task": config.name,
        "metric": TASK.metric,
        "views": accuracies,
        "chance": 100.0 / len(languages),
        "languages_probed": languages,
        "lines": {block: [rows.start, rows.stop] for block, rows in blocks.items()},
        "heads": logs,
        "pca_plot": plot,
        "skipped": {**skipped, **outside},
        DATA_ERRORS: dict(errors),
    }


def _blocks(lines: dict[str, int], data_dir: Path, n_lines: int) -> dict[str, slice]:
    sizes = dict(zip(("heads", "probe_train", "probe_test"), lines.values()))
    if min(sizes.values()) < 1 or sum(sizes.values()) > n_lines:
        raise MissingDataError(
            f"{data_dir}: need {' + '.join(map(str, sizes.values()))} = {sum(sizes.values())} aligned lines "
            f"(head training + probe train + probe test, each >= 1), the files have {n_lines}"
        )
    blocks, start = {}, 0
    for block, size in sizes.items():
        blocks[block] = slice(start, start + size)
        start += size
    return blocks


def _pca_plot(views: dict, pair: str, path: Path) -> Path:
    pair_languages = pair.split("-")
    missing = [lang for lang in pair_languages if lang not in views["raw"]]
    if len(pair_languages) != 2 or missing:
        raise ValueError(f"pca_pair {pair!r} must name two probed languages, e.g. de-en")
    heads = [view.split("/")[0] for view in views if view.endswith("/meaning")]
    rows = [["raw", f"{head}/meaning", f"{head}/language"] for head in heads] or [["raw"]]
    panels = [
        (f"{view} ({pair})", {lang: views[view][lang][1] for lang in pair_languages}) for row in rows for view in row
    ]
    return write_pca_plot(panels, path, columns=len(rows[0]))


TASK = TaskType(metric="lid_accuracy", run=evaluate_language_id, table=language_id_table, config=LanguageIdConfig)
