"""BUCC 2017/2018 bitext mining: P/R/F1 of margin-mined pairs against the gold alignments.

Official layout, one set per language: DIR/xx-en.{split}.xx and .en hold "<id>\\t<sentence>"
lines, DIR/xx-en.{split}.gold holds "<xx id>\\t<en id>" lines. As in LASER's BUCC script,
identical sentences are embedded and mined once and a mined pair stands for every id pair with
those texts; the score threshold that maximises F1 on the training split is applied to the test
split (whose gold, if present, gives the test P/R/F1).

In: an encoder and a TaskRun: a BuccConfig (configs/eval/bucc2018.yaml: the languages, the splits,
the mining settings), the data directory and the run's options (language filter, sentence cap).
Out: P/R/F1 per language and their averages (`evaluate_bucc`, the evaluator of the task type `bucc`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder, encode_checked, encoder_languages
from ems.languages import ENGLISH
from ems.mining.index_kinds import parse_index_spec
from ems.mining.margin import DEFAULT_K, MARGINS, RETRIEVAL, mine
from eval.evaluators.items import not_covered, score_items, scored_result
from eval.evaluators.retrieval import read_lines
from eval.report import bucc_table
from eval.task import Headline, TaskConfig, TaskRun, TaskType, filtered_languages, one_of, refuse

BUCC_SOURCE = "https://comparable.limsi.fr/bucc2018/bucc2018-task.html (BUCC 2017/2018 shared task)"
NO_TEST_SPLIT = "no test split (threshold and training F1 only)"
NO_TEST_GOLD = "test split without gold (threshold applied, no test F1)"


@dataclass(kw_only=True)
class BuccConfig(TaskConfig):
    """configs/eval/bucc2018.yaml: the languages (each mined against English), the splits (the
    threshold is chosen on `train_split`, applied to `test_split`), the mining settings (ems.mining:
    k, margin, mode and `index`, an index spec such as auto, flat, ivf-sq8:nprobe=64) and `source`,
    where the files come from (BUCC_SOURCE when absent), for missing-data messages."""

    languages: list[str]
    train_split: str = "training"
    test_split: str = "test"
    k: int = DEFAULT_K
    margin: str = "ratio"
    mode: str = "max"
    index: str = "auto"

    def __post_init__(self):
        problems = [] if self.languages else ["languages must list at least one language"]
        problems += one_of("margin", self.margin, MARGINS) + one_of("mode", self.mode, RETRIEVAL)
        try:
            parse_index_spec(self.index)
        except ValueError as error:
            problems.append(str(error))
        refuse(self, problems)


@dataclass
class BuccSplit:
    """One split of one language: ids and sentences of each side, and the gold (xx id, en id) pairs
    (None if the split has no gold file)."""

    xx_ids: list[str]
    xx: list[str]
    en_ids: list[str]
    en: list[str]
    gold: set[tuple[str, str]] | None = field(default=None)


def read_bucc_sentences(path: Path, folder: Path | None = None) -> tuple[list[str], list[str]]:
    """(ids, sentences) of a BUCC "<id>\\t<sentence>" file of the data folder `folder` (read_lines).
    Raises MissingDataError if it is missing and ValueError, naming file and line, for a line
    without a tab or a repeated id."""
    ids, sentences = [], []
    for number, line in enumerate(read_lines(path, folder), start=1):
        if not line:
            continue
        sentence_id, tab, sentence = line.partition("\t")
        if not tab or not sentence_id:
            raise ValueError(f"{path}:{number}: expected '<id>\\t<sentence>', got {line[:60]!r}")
        ids.append(sentence_id)
        sentences.append(sentence)
    repeated = len(ids) - len(set(ids))
    if repeated:
        raise ValueError(f"{path}: {repeated} sentence id(s) occur more than once")
    return ids, sentences


def read_bucc_gold(
    path: Path, xx_ids: list[str], en_ids: list[str], folder: Path | None = None
) -> set[tuple[str, str]]:
    """Gold (xx id, en id) pairs of a BUCC gold file of the data folder `folder` (read_lines);
    ValueError for a malformed line or an id that is not in the split's sentence files."""
    known_xx, known_en = set(xx_ids), set(en_ids)
    gold = set()
    for number, line in enumerate(read_lines(path, folder), start=1):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{path}:{number}: expected '<xx id>\\t<en id>', got {line[:60]!r}")
        if fields[0] not in known_xx or fields[1] not in known_en:
            raise ValueError(f"{path}:{number}: id pair {fields} is not in the split's sentence files")
        gold.add((fields[0], fields[1]))
    return gold


def split_paths(data_dir: Path, lang: str, split: str) -> dict[str, Path]:
    """{"xx", "en", "gold"}: the three files of one BUCC split."""
    prefix = f"{lang}-{ENGLISH}.{split}"
    return {
        side: Path(data_dir) / f"{prefix}.{suffix}"
        for side, suffix in (("xx", lang), ("en", ENGLISH), ("gold", "gold"))
    }


def load_bucc_split(
    data_dir: Path, lang: str, split: str, max_sentences: int | None = None, source: str = BUCC_SOURCE
) -> BuccSplit:
    """Read one split. MissingDataError names the missing sentence file and where BUCC comes from;
    a missing gold file gives gold=None. `max_sentences` keeps the first N lines of each side."""
    paths = split_paths(data_dir, lang, split)
    for side in ("xx", "en"):
        if not paths[side].is_file():
            raise MissingDataError(
                f"missing BUCC file {paths[side]}: expected {lang}-en.{split}.{{{lang},en,gold}} "
                f"in {data_dir}, from {source}"
            )
    xx_ids, xx = read_bucc_sentences(paths["xx"], data_dir)
    en_ids, en = read_bucc_sentences(paths["en"], data_dir)
    gold = read_bucc_gold(paths["gold"], xx_ids, en_ids, data_dir) if paths["gold"].is_file() else None
    if max_sentences is not None:
        xx_ids, xx, en_ids, en = xx_ids[:max_sentences], xx[:max_sentences], en_ids[:max_sentences], en[:max_sentences]
        if gold is not None:
            kept_xx, kept_en = set(xx_ids), set(en_ids)
            gold = {(a, b) for a, b in gold if a in kept_xx and b in kept_en}
    return BuccSplit(xx_ids, xx, en_ids, en, gold)


def unique_texts(ids: list[str], texts: list[str]) -> tuple[list[str], list[list[str]]]:
    """Distinct texts in first-seen order, and for each the ids of the lines that hold it."""
    holders: dict[str, list[str]] = {}
    for sentence_id, text in zip(ids, texts):
        holders.setdefault(text, []).append(sentence_id)
    return list(holders), list(holders.values())


@dataclass
class MinedIdPairs:
    """Candidate id pairs, best score first (an id pair per combination of duplicate lines)."""

    pairs: list[tuple[str, str]]
    scores: np.ndarray


def mine_ids(
    xx_embeddings: np.ndarray,
    en_embeddings: np.ndarray,
    xx_holders: list[list[str]],
    en_holders: list[list[str]],
    k: int = DEFAULT_K,
    margin: str = "ratio",
    mode: str = "max",
    index: str = "auto",
) -> MinedIdPairs:
    """Mine unique-text embeddings and expand each mined text pair to the id pairs it stands for."""
    mined = mine(xx_embeddings, en_embeddings, k, margin, mode, index)
    pairs, scores = [], []
    for s, t, score in zip(mined.src.tolist(), mined.tgt.tolist(), mined.score.tolist()):
        for xx_id in xx_holders[s]:
            for en_id in en_holders[t]:
                pairs.append((xx_id, en_id))
                scores.append(score)
    return MinedIdPairs(pairs, np.asarray(scores, dtype=np.float64))


def mine_split(encoder: Encoder, split: BuccSplit, lang: str, config: BuccConfig) -> MinedIdPairs:
    """Embed a split's distinct sentences with `encoder` and mine them (see `mine_ids`)."""
    xx_texts, xx_holders = unique_texts(split.xx_ids, split.xx)
    en_texts, en_holders = unique_texts(split.en_ids, split.en)
    xx_embeddings = encode_checked(encoder, xx_texts, lang)
    en_embeddings = encode_checked(encoder, en_texts, ENGLISH)
    return mine_ids(
        xx_embeddings, en_embeddings, xx_holders, en_holders, config.k, config.margin, config.mode, config.index
    )


def precision_recall_f1(predicted: set, gold: set) -> dict:
    """P, R, F1 in percent of a predicted set of pairs against a gold set (0 where undefined)."""
    true_positives = len(predicted & gold)
    precision = 100.0 * true_positives / len(predicted) if predicted else 0.0
    recall = 100.0 * true_positives / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_predicted": len(predicted), "n_gold": len(gold)}


def best_threshold(scores: list[float] | np.ndarray, is_gold: list[bool] | np.ndarray, n_gold: int) -> float:
    """The score threshold that maximises F1 when pairs with score >= threshold are kept.

    `scores` are candidate scores sorted best first, `is_gold` whether each candidate is a gold
    pair, `n_gold` the size of the gold set. As in LASER's BUCC script the threshold lies midway
    between the last kept and the first dropped candidate. +inf if no candidate is gold."""
    scores = np.asarray(scores, dtype=np.float64)
    is_gold = np.asarray(is_gold, dtype=bool)
    if len(scores) != len(is_gold):
        raise ValueError(f"scores and is_gold differ in length: {len(scores)} and {len(is_gold)}")
    if np.any(np.diff(scores) > 0):
        raise ValueError("scores must be sorted best first")
    if n_gold < 1 or not is_gold.any():
        return float("inf")
    true_positives = np.cumsum(is_gold)
    kept = np.arange(1, len(scores) + 1)
    f1 = 2 * true_positives / (kept + n_gold)  # = 2PR / (P + R)
    # A threshold cannot split candidates with equal scores: cut only where the score drops.
    f1[np.append(scores[:-1] == scores[1:], False)] = -1.0
    best = int(f1.argmax())
    if best + 1 == len(scores):
        return float(scores[best])
    return float((scores[best] + scores[best + 1]) / 2)


def scores_at_threshold(mined: MinedIdPairs, gold: set, threshold: float) -> dict:
    """P/R/F1 (%) of the mined pairs scoring >= threshold against `gold`."""
    predicted = {pair for pair, score in zip(mined.pairs, mined.scores) if score >= threshold}
    return precision_recall_f1(predicted, gold)


def load_bucc_language(
    config: BuccConfig, data_dir: Path, lang: str, max_sentences: int | None = None
) -> tuple[BuccSplit, BuccSplit | None]:
    """The training split (with a non-empty gold) and the test split (None if it has no
    sentence files) of one language. MissingDataError / ValueError for missing or bad files."""
    source = config.source or BUCC_SOURCE
    train = load_bucc_split(data_dir, lang, config.train_split, max_sentences, source)
    if not train.gold:
        raise ValueError(
            f"{split_paths(data_dir, lang, config.train_split)['gold']}: the training split needs a "
            "non-empty gold file to choose the threshold"
        )
    if not split_paths(data_dir, lang, config.test_split)["xx"].is_file():
        return train, None
    return train, load_bucc_split(data_dir, lang, config.test_split, max_sentences, source)


def score_bucc_language(
    encoder: Encoder, config: BuccConfig, lang: str, train: BuccSplit, test: BuccSplit | None
) -> dict:
    """Threshold from the training split, P/R/F1 on training and (if it has gold) test.

    Returns {"threshold", "train": {precision, recall, f1, n_predicted, n_gold}, "test": same or
    None, "n_test_predicted", "note"?}."""
    mined = mine_split(encoder, train, lang, config)
    threshold = best_threshold(mined.scores, [pair in train.gold for pair in mined.pairs], len(train.gold))
    row = {"threshold": threshold, "train": scores_at_threshold(mined, train.gold, threshold), "test": None}
    if test is None:
        row["note"] = NO_TEST_SPLIT
        return row
    test_mined = mine_split(encoder, test, lang, config)
    row["n_test_predicted"] = int((test_mined.scores >= threshold).sum())
    if test.gold is None:
        row["note"] = NO_TEST_GOLD
    else:
        row["test"] = scores_at_threshold(test_mined, test.gold, threshold)
    return row


def evaluate_bucc(encoder: Encoder, task: TaskRun) -> dict:
    """BUCC F1 for each of the config's languages that the run's filter keeps and the encoder
    covers, in the files of `task.data_dir`; `max_sentences` keeps the first N lines of each side
    and split (quick runs; gold pairs it cuts are dropped).

    Returns {"task", "metric": "mining_f1", "data_dir", "settings", "languages": {lang: row of
    `score_bucc_language`}, "average": {"train_f1", "test_f1" (None without test gold),
    "n_languages"} or None, "skipped": {reason: [codes]}, "data_errors": {lang: reason}}; when the
    filter keeps none of them, only the task, metric, no languages and what the filter left out.
    MissingDataError if the data directory is missing; a language whose files are missing or
    bad is a data error (eval.faults), the other languages still run.
    """
    config, options, max_sentences = task.config, task.options, task.options.max_sentences
    languages, outside = filtered_languages(config.languages, options)
    if not languages:
        return {"task": task.name, "metric": TASK.metric, "languages": {}, "average": None, "skipped": outside}
    data_dir = Path(task.data_dir)
    if not data_dir.is_dir():
        raise MissingDataError(
            f"BUCC data directory {data_dir} does not exist; it should hold "
            f"xx-en.{{training,test}}.{{xx,en,gold}} files (e.g. de-en.training.de) from {config.source or BUCC_SOURCE}"
        )
    covered = encoder_languages(encoder)
    scored = score_items(
        languages,
        lambda lang: load_bucc_language(config, data_dir, lang, max_sentences),
        lambda lang, splits: score_bucc_language(encoder, config, lang, *splits),
        skip=lambda lang: not_covered(covered, lang, ENGLISH),
        desc=config.name,
        progress=options.progress,
    )
    per_language = scored.rows
    average = None
    if per_language:
        rows = per_language.values()
        test_f1 = [row["test"]["f1"] for row in rows if row["test"] is not None]
        average = {
            "train_f1": float(np.mean([row["train"]["f1"] for row in rows])),
            "test_f1": float(np.mean(test_f1)) if len(test_f1) == len(per_language) else None,
            "n_languages": len(per_language),
        }
    settings = {
        "k": config.k,
        "margin": config.margin,
        "mode": config.mode,
        "index": config.index,
        "train_split": config.train_split,
        "test_split": config.test_split,
        "max_sentences": max_sentences,
    }
    scored.skipped.update(outside)
    return scored_result(task, TASK.metric, settings, scored, average)


TEST_F1 = Headline("F1 (%), test split (training if no test gold)", lambda row: (row["test"] or row["train"])["f1"])
TASK = TaskType(metric="mining_f1", run=evaluate_bucc, table=bucc_table, config=BuccConfig, headline=TEST_F1)
