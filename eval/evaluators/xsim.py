"""xSIM and xSIM++: LASER's multilingual similarity-search error rate on FLORES-200.

Definition (facebookresearch/LASER, source/xsim.py and source/eval.py): the source sentences x
(language xx) and the target sentences y (English) are embedded; for each x row the k = 4 nearest
y rows by cosine are scored with a margin, margin(cos(x, y), (avg_x + avg_y) / 2), where avg_x is
x's mean cosine to its k nearest y rows and avg_y is y's mean cosine to its k nearest x rows
(ratio: cos / that, distance: cos - that, absolute: cos alone, i.e. the nearest neighbour). The
best-scoring candidate is x's pick; it is an error unless it is x's own translation, or (LASER's
textual comparison, eval.py's default) a sentence identical to it. xSIM = 100 * errors / n. LASER
reports xx->eng (source = the language, target = English); this task also reports eng->xx
(the same rule with the roles swapped) and their mean.

xSIM++ (LASER tasks/xsimplusplus) adds synthetic hard negatives to the English side:
`<dir>/eng_Latn_augmented.<split>` holds one transformed English sentence per line, appended to
the candidates after the n original ones, and `<dir>/eng_Latn_errtype.<split>.json` maps each
augmented sentence to {"src": the original English sentence, "errtype": the transformation}. The
error rate is xx->eng only, with each error attributed to the transformation of the retrieved
sentence when it was made from the gold one, else "Misaligned".

Files: `<data_dir>/<stem>.<split>` for FLORES stems (`deu`, `cmn_Hans`, ...) and `eng.<split>`.
Rows are keyed by stem; each row's `language` is the stem's language key, the one the FLORES bitext
task (eval.evaluators.flores) keys its rows by (ems.languages.flores_language: `de`, `zh`, `zh-Hant`,
`ace-Arab`). Each file is embedded whole (`encoder.encode(read_lines(path), lang)`, lang that key, or
the encoder's own code for encoders with a language list) so that a cache of these embeddings is
reused, by the FLORES bitext task too; `max_sentences` keeps the first N rows after encoding.

In: an encoder and a TaskRun: an XsimConfig (configs/eval/xsim_flores.yaml: the stems, the split,
the margin search, the textual comparison, xSIM++'s directory under the data root), the split
directory and the run's options (language filter, sentence cap). Out: error rates per stem and
their average (`evaluate_xsim`, the evaluator of the task type `xsim`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder, encode_checked, encoder_languages
from ems.languages import (
    UnknownLanguageError,
    canonical_language,
    covered_language,
    duplicate_flores_files,
    flores_language,
)
from ems.mining.margin import DEFAULT_K, MARGINS, margin_neighbours
from eval.evaluators.flores import FLORES_SOURCE
from eval.evaluators.items import NOT_COVERED, score_items, scored_result
from eval.evaluators.retrieval import check_max_sentences, read_lines, read_text
from eval.faults import DataErrors
from eval.report import xsim_table
from eval.task import Headline, Languages, RunOptions, TaskConfig, TaskRun, TaskType, one_of, refuse

XSIMPP_SOURCE = "https://dl.fbaipublicfiles.com/nllb/laser/xsimplusplus (LASER tasks/xsimplusplus)"
MISALIGNED = "Misaligned"
SCORE_KEYS = ("xx2en", "en2xx", "mean")


def margin_picks(
    x: np.ndarray, y: np.ndarray, margin: str = "ratio", k: int = DEFAULT_K
) -> tuple[np.ndarray, np.ndarray]:
    """(best y row for each x row, best x row for each y row) by LASER's k-NN margin score
    (see the module docstring; ems.mining.margin.margin_neighbours computes the scores)."""
    nb = margin_neighbours(x, y, k, margin, index_type="flat")
    forward = nb.fwd_ids[np.arange(len(x)), nb.fwd_scores.argmax(axis=1)]
    backward = nb.bwd_ids[np.arange(len(y)), nb.bwd_scores.argmax(axis=1)]
    return forward, backward


def correct_picks(picks: np.ndarray, gold_texts: list[str] | None = None) -> np.ndarray:
    """Boolean per query row i: `picks[i]` is i, or (with the candidates' sentences `gold_texts`)
    a candidate whose sentence equals candidate i's, LASER's textual comparison."""
    correct = picks == np.arange(len(picks))
    if gold_texts is not None:
        correct |= np.array([gold_texts[j] == gold_texts[i] for i, j in enumerate(picks.tolist())], dtype=bool)
    return correct


def xsim_errors(
    x: np.ndarray,
    y: np.ndarray,
    margin: str = "ratio",
    k: int = DEFAULT_K,
    x_texts: list[str] | None = None,
    y_texts: list[str] | None = None,
) -> tuple[int, int]:
    """(x->y errors, y->x errors) of aligned (n, d) embeddings, row i of x translating row i of y;
    with the sentences, a pick identical to the gold sentence is no error (LASER's default)."""
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same (n, d) shape, got {x.shape} and {y.shape}")
    forward, backward = margin_picks(x, y, margin, k)
    return int((~correct_picks(forward, y_texts)).sum()), int((~correct_picks(backward, x_texts)).sum())


@dataclass
class AugmentedEnglish:
    """xSIM++'s extra English candidates: `sentences` in file order (candidates n, n+1, ... after
    the n original sentences) and `origin` {augmented sentence: (original sentence, errtype)}."""

    sentences: list[str]
    origin: dict[str, tuple[str, str]]


def read_augmented_english(directory: Path, split: str = "devtest", lang: str = "eng_Latn") -> AugmentedEnglish:
    """The xSIM++ files `<lang>_augmented.<split>` and `<lang>_errtype.<split>.json` in `directory`
    (LASER's `<corpus>/<split>_augmented/`). MissingDataError naming a missing file; ValueError for
    a JSON entry without "src" and "errtype"."""
    directory = Path(directory)
    text_path, json_path = directory / f"{lang}_augmented.{split}", directory / f"{lang}_errtype.{split}.json"
    for path in (text_path, json_path):
        if not path.is_file():
            raise MissingDataError(
                f"missing xSIM++ file {path}; get {text_path.name} and {json_path.name} from {XSIMPP_SOURCE}"
            )
    try:
        entries = json.loads(read_text(json_path, folder=directory))
        origin = {sentence: (entry["src"], entry["errtype"]) for sentence, entry in entries.items()}
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
        raise ValueError(
            f'{json_path}: expected {{augmented sentence: {{"src": ..., "errtype": ...}}}} ({exc!r})'
        ) from exc
    return AugmentedEnglish(read_lines(text_path, directory), origin)


def xsimpp_errors(
    x: np.ndarray,
    english: np.ndarray,
    augmented: np.ndarray,
    english_texts: list[str],
    extra: AugmentedEnglish,
    margin: str = "ratio",
    k: int = DEFAULT_K,
) -> tuple[int, dict[str, int]]:
    """xx->eng errors among the n English sentences plus the augmented ones (embeddings
    `augmented`, sentences `extra.sentences`), and their count per transformation of the picked
    sentence (MISALIGNED when it was not made from the gold sentence). Textual comparison, as LASER."""
    candidates = np.concatenate([english, augmented])
    texts = english_texts + extra.sentences
    picks, _ = margin_picks(x, candidates, margin, k)
    by_type: dict[str, int] = {}
    wrong = np.flatnonzero(~correct_picks(picks, texts))
    for i in wrong.tolist():
        src, errtype = extra.origin.get(texts[picks[i]].strip(), (None, MISALIGNED))
        errtype = errtype if src == texts[i].strip() else MISALIGNED
        by_type[errtype] = by_type.get(errtype, 0) + 1
    return len(wrong), by_type


@dataclass(kw_only=True)
class XsimConfig(TaskConfig):
    """configs/eval/xsim_flores.yaml: FLORES stems (`deu`, `cmn_Hans`; "all": every `*.<split>` file
    of the directory but English), the split, the English stem, the margin search (`margin`, `k`
    neighbours), LASER's textual comparison (a pick identical to the gold sentence is right) and
    `augmented_subdir`, xSIM++'s files under the data root (None: no xSIM++)."""

    languages: Languages
    split: str = "devtest"
    english: str = "eng"
    margin: str = "ratio"
    k: int = DEFAULT_K
    textual: bool = True
    augmented_subdir: str | None = None

    def __post_init__(self):
        problems = one_of("margin", self.margin, MARGINS)
        refuse(self, problems + ([f"k must be a positive integer, got {self.k!r}"] if self.k < 1 else []))

    def language_codes(self) -> list[str]:
        return [self.english, *super().language_codes()]


def encoder_lang(code: str, covered: list[str] | None) -> str | None:
    """The lang to encode a language code (`deu`, `cmn_Hans`, `fra-CA`) with: its canonical code
    for an encoder without a language list (`covered` None; the embedding cache's key), else the
    entry of that list it names, None if the list lacks it (ems.languages.covered_language)."""
    return covered_language(canonical_language(code), covered)


def flores_stems(data_dir: Path, split: str = "devtest", english: str = "eng") -> list[str]:
    """Stems of every `<stem>.<split>` file in a FLORES split directory but English, sorted."""
    return sorted(
        p.name[: -len(split) - 1] for p in Path(data_dir).glob(f"*.{split}") if p.name != f"{english}.{split}"
    )


def stems_in_filter(stems: list[str], options: RunOptions) -> list[str]:
    """The FLORES file stems whose language key (ems.languages.flores_language: `quy` -> `qu`,
    `cmn_Hant` -> `zh-Hant`) is of a language the run's filter keeps; a stem that names no
    language stays, for evaluate_xsim to report."""
    kept = []
    for stem in stems:
        try:
            language = canonical_language(flores_language(stem))
        except UnknownLanguageError:
            kept.append(stem)
            continue
        if language in options.canonical:
            kept.append(stem)
    return kept


def _embed(
    encoder: Encoder, path: Path, split: str, lang: str, max_sentences: int | None
) -> tuple[list[str], np.ndarray]:
    if not path.is_file():
        raise MissingDataError(f"missing FLORES-200 file {path}; get the {split} split from {FLORES_SOURCE}")
    sentences = read_lines(path)
    embeddings = encode_checked(encoder, sentences, lang)  # the whole file: the cache key of ems.encoder_kinds
    n = len(sentences) if max_sentences is None else min(max_sentences, len(sentences))
    return sentences[:n], embeddings[:n]


def evaluate_xsim(encoder: Encoder, task: TaskRun) -> dict:
    """xSIM error (%) per language the encoder covers, both directions, and xSIM++ when the config
    names its `augmented_subdir` (under the run's data root), on the split directory
    `task.data_dir`: the config's stems whose language the run's filter keeps, the first
    `max_sentences` rows of each (None: all).

    Returns {"task", "metric": "xsim_error", "data_dir", "settings", "languages": {stem: {language, lang, n,
    xx2en, en2xx, mean[, xsimpp, xsimpp_errors: {errtype: count}]}}, "average": {xx2en, en2xx, mean[,
    xsimpp], n_languages, n} (errors over all sentences, as LASER's average) or None, "skipped",
    "data_errors"}. A missing or unreadable language file is a data error; a missing English file
    or data directory raises MissingDataError."""
    config, options, max_sentences = task.config, task.options, task.options.max_sentences
    check_max_sentences(max_sentences)
    data_dir, split, english_stem = Path(task.data_dir), config.split, config.english
    augmented_dir = options.data_root / config.augmented_subdir if config.augmented_subdir else None

    def file(stem: str) -> Path:
        return data_dir / f"{stem}.{split}"

    english_path = file(english_stem)
    if not english_path.is_file():
        raise MissingDataError(
            f"no FLORES-200 {split} split in {data_dir} (missing {english_path.name}); get it from {FLORES_SOURCE}"
        )
    stems, copies = _stems(config, options, data_dir)
    covered = encoder_languages(encoder)
    english_lang = encoder_lang(english_stem, covered)
    keys = {stem: flores_language(stem) for stem in stems}
    langs = {stem: covered_language(keys[stem], covered) for stem in stems}
    errors = DataErrors()
    english_texts = english = extra = augmented = None
    if english_lang is not None and any(lang is not None for lang in langs.values()):
        english_texts, english = _embed(encoder, english_path, split, english_lang, max_sentences)
        if augmented_dir is not None:
            extra = errors.read("xSIM++", read_augmented_english, augmented_dir, split)
            augmented = None if extra is None else encode_checked(encoder, extra.sentences, english_lang)

    def uncovered(stem: str) -> str | None:
        if keys[stem] in copies:  # counted once, under the file it repeats
            return f"same text as {copies[keys[stem]].name}"
        if english_lang is None:
            return f"encoder does not cover {english_stem}"
        return NOT_COVERED if langs[stem] is None else None

    def score(stem: str, loaded: tuple[list[str], np.ndarray]) -> dict | None:
        texts, x = loaded
        if len(texts) != len(english_texts):
            errors[stem] = f"{file(stem)} has {len(texts)} lines but {english_path} has {len(english_texts)}"
            return None
        text_args = (texts, english_texts) if config.textual else (None, None)
        xx2en, en2xx = xsim_errors(x, english, config.margin, config.k, *text_args)
        row = _error_row(keys[stem], langs[stem], len(texts), xx2en, en2xx)
        if extra is not None:
            wrong, by_type = xsimpp_errors(x, english, augmented, english_texts, extra, config.margin, config.k)
            row.update(xsimpp=100.0 * wrong / len(texts), xsimpp_errors=by_type)
        return row

    scored = score_items(
        stems,
        lambda stem: _embed(encoder, file(stem), split, langs[stem], max_sentences),
        score,
        skip=uncovered,
        errors=errors,
        desc=config.name,
        progress=options.progress,
    )
    settings = _settings(config, max_sentences, augmented_dir)
    return scored_result(task, TASK.metric, settings, scored, _average(list(scored.rows.values())))


def _stems(config: XsimConfig, options: RunOptions, data_dir: Path) -> tuple[list[str], dict[str, Path]]:
    """The FLORES-200 stems the run scores: the config's languages (`all`: every file of the split)
    that the run's language filter keeps; and, for `all` without a filter, the files that repeat
    another's text ({language: the file it repeats}, duplicate_flores_files)."""
    stems = config.languages
    if options.canonical is not None:
        everything = flores_stems(data_dir, config.split, config.english) if stems == "all" else stems
        return stems_in_filter(everything, options), {}
    if stems == "all":
        return flores_stems(data_dir, config.split, config.english), duplicate_flores_files(data_dir, config.split)
    return stems, {}


def _error_row(language: str, lang: str, n: int, xx2en: int, en2xx: int) -> dict:
    """One language's row: the errors of both directions as % of its `n` sentences, and their mean."""
    row = {"language": language, "lang": lang, "n": n, "xx2en": 100.0 * xx2en / n, "en2xx": 100.0 * en2xx / n}
    row["mean"] = (row["xx2en"] + row["en2xx"]) / 2
    return row


def _average(rows: list[dict]) -> dict | None:
    """The errors over all sentences of `rows` (LASER's average: each language weighted by its n),
    xSIM++ too when every row has it; None without rows."""
    if not rows:
        return None
    total = sum(row["n"] for row in rows)
    keys = SCORE_KEYS + (("xsimpp",) if all("xsimpp" in row for row in rows) else ())
    average = {key: sum(row[key] * row["n"] for row in rows) / total for key in keys}
    average.update(n_languages=len(rows), n=total)
    return average


def _settings(config: XsimConfig, max_sentences: int | None, augmented_dir: Path | None) -> dict:
    """The settings a result records."""
    return {
        "margin": config.margin,
        "k": config.k,
        "textual": config.textual,
        "split": config.split,
        "english": config.english,
        "max_sentences": max_sentences,
        "augmented_dir": None if augmented_dir is None else str(augmented_dir),
    }


XX2EN_ERROR = Headline("xSIM error (%), xx→en, lower is better", lambda row: row["xx2en"])
TASK = TaskType(metric="xsim_error", run=evaluate_xsim, table=xsim_table, config=XsimConfig, headline=XX2EN_ERROR)
