"""Bitext retrieval by cosine nearest neighbour (P@1), and running an encoder over aligned test sets.

Shared by the Tatoeba, FLORES, held-out and bitext tasks, which differ in where their sentence pairs
come from. Scores follow the EMS paper's Table 4: P@1 in both directions (xx->en, en->xx) and their
mean, in percent; `MEAN_P_AT_1` is that mean as the chart's headline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.corpus import inside_folder
from ems.encoder_kinds import Encoder, encode_checked, encoder_languages
from ems.languages import ENGLISH
from eval.evaluators.items import NOT_COVERED, score_items
from eval.faults import DATA_ERRORS
from eval.task import Headline

DEFAULT_CHUNK_ROWS = 1024  # 1024 x 10k float32 similarities = 40 MB per chunk
ENGLISH_NOT_COVERED = "encoder does not cover en"
EMPTY_TEST_SET = "empty test set"
EMPTY_PAIRS_DROPPED = "pairs with an empty side dropped"
MEAN_P_AT_1 = Headline("P@1 (%), mean of both directions", lambda row: row["mean"])


@dataclass
class Bitext:
    """One language's aligned test set: `xx[i]` is a translation of `en[i]` (the English side, or
    whichever pivot language `evaluate_bitexts` is given)."""

    lang: str  # the code the xx side is encoded with (canonical, or the encoder's own)
    source: str  # where the pairs came from, shown in the report (e.g. "deu", "de-en/gettext")
    xx: list[str]
    en: list[str]
    name: str | None = None  # the result's key, when it is not `lang` (e.g. fra and fra-CA, both fr)

    @property
    def key(self) -> str:
        return self.name or self.lang


def _as_embeddings(name: str, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n, d) array, got shape {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {x.shape}")
    if x.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real numeric array, got dtype {x.dtype}")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    # An all-zero row stays zero: its cosine with everything is 0, so it retrieves index 0.
    return x / np.maximum(norms, np.finfo(np.float32).tiny)


def _nearest_hits(
    src: np.ndarray, tgt: np.ndarray, chunk_rows: int, tgt_texts: list[str] | None = None
) -> tuple[int, int]:
    """(hits, how many of them only LASER's duplicate rule made hits: 0 without `tgt_texts`)."""
    src = _as_embeddings("src", src)
    tgt = _as_embeddings("tgt", tgt)
    if src.shape != tgt.shape:
        raise ValueError(f"src and tgt must have the same (n, d) shape, got {src.shape} and {tgt.shape}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    src, tgt = _l2_normalise(src), _l2_normalise(tgt)
    hits = rescued = 0
    for start in range(0, len(src), chunk_rows):
        stop = min(start + chunk_rows, len(src))
        nearest = (src[start:stop] @ tgt.T).argmax(axis=1)
        correct = nearest == np.arange(start, stop)
        if tgt_texts is not None:  # LASER: retrieving a sentence identical to the gold one is correct
            same_text = np.array([tgt_texts[j] == tgt_texts[i] for i, j in zip(range(start, stop), nearest)])
            rescued += int((same_text & ~correct).sum())
            correct |= same_text
        hits += int(correct.sum())
    return hits, rescued


def cosine_p_at_1(
    src: np.ndarray, tgt: np.ndarray, chunk_rows: int = DEFAULT_CHUNK_ROWS, tgt_texts: list[str] | None = None
) -> float:
    """Fraction (0..1) of rows i of `src` whose cosine-nearest row of `tgt` is row i.

    `src` and `tgt` are (n, d) arrays, row i of one the translation of row i of the other.
    Similarities are computed `chunk_rows` source rows at a time, so memory stays at
    chunk_rows x n floats. Ties go to the lowest target index (numpy's argmax). Given the target
    sentences `tgt_texts`, a retrieved row whose text equals row i's text also counts as a hit
    (LASER's Tatoeba/xSIM rule for duplicate sentences); without them only row i does.
    """
    return _nearest_hits(src, tgt, chunk_rows, tgt_texts)[0] / len(src)


def bidirectional_p_at_1(
    x: np.ndarray,
    eng: np.ndarray,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    xx_texts: list[str] | None = None,
    en_texts: list[str] | None = None,
) -> dict:
    """P@1 in percent for aligned (n, d) embeddings `x` (language xx) and `eng` (English); with
    the sentences, retrieving a duplicate of the gold sentence counts as correct (see cosine_p_at_1).

    Returns {"xx2en": retrieve English for each xx row, "en2xx": the reverse, "mean": their average,
    "duplicate_hits": retrievals, both directions together, that only the duplicate rule made correct}.
    """
    xx2en, rescued_en = _nearest_hits(x, eng, chunk_rows, en_texts)
    en2xx, rescued_xx = _nearest_hits(eng, x, chunk_rows, xx_texts)
    xx2en, en2xx = 100.0 * xx2en / len(x), 100.0 * en2xx / len(x)
    return {"xx2en": xx2en, "en2xx": en2xx, "mean": (xx2en + en2xx) / 2, "duplicate_hits": rescued_en + rescued_xx}


def read_text(path: Path, encoding: str = "utf-8", folder: Path | None = None) -> str:
    """The whole text of a file, line endings untouched (`encoding` "utf-8-sig" drops a BOM).
    `folder`: the data folder the reader found it in (None: the file's own folder); a file that a
    symlink leads out of it is OutsideRootError (ems.corpus.inside_folder), as every folder reader
    refuses it. MissingDataError if it is not there; ValueError naming the file if it is not valid UTF-8."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"missing test-set file {path}")
    folder = path.parent if folder is None else Path(folder)
    inside_folder(folder, path, f"the data folder {folder}")
    try:
        with open(path, encoding=encoding, newline="") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not valid UTF-8 ({exc})") from exc


def read_lines(path: Path, folder: Path | None = None) -> list[str]:
    """Lines of a UTF-8 text file without their line endings; only "\n" ends a line. A byte order
    mark at the start (Windows editors write one) is not part of the first line. `folder`: as read_text's."""
    lines = read_text(path, "utf-8-sig", folder).split("\n")
    if lines[-1] == "":
        lines.pop()  # the end of the last line, or an empty file
    return [line.rstrip("\r") for line in lines]


def read_aligned_files(
    xx_path: Path, en_path: Path, max_sentences: int | None = None, folder: Path | None = None
) -> tuple[list[str], list[str]]:
    """Line-aligned sentences of two files, the first `max_sentences` pairs if given; `folder`: the
    data folder both lie in (read_text).

    Raises MissingDataError for a missing file and ValueError if the line counts differ.
    """
    xx, en = read_lines(xx_path, folder), read_lines(en_path, folder)
    if len(xx) != len(en):
        raise ValueError(
            f"{xx_path} has {len(xx)} lines but {en_path} has {len(en)}; "
            "line i of one must be the translation of line i of the other"
        )
    if max_sentences is not None:
        xx, en = xx[:max_sentences], en[:max_sentences]
    return xx, en


def check_max_sentences(max_sentences: int | None) -> None:
    """Raise ValueError unless `max_sentences` is None or a positive int."""
    if max_sentences is not None and (not isinstance(max_sentences, int) or max_sentences < 1):
        raise ValueError(f"max_sentences must be a positive integer or None, got {max_sentences!r}")


def _without_empty_pairs(bitext: Bitext, skipped: dict[str, list[str]]) -> Bitext:
    # An empty sentence has nothing to embed (EMS encoders reject it); drop the pair, and say so.
    pairs = [(xx, en) for xx, en in zip(bitext.xx, bitext.en) if xx.strip() and en.strip()]
    dropped = len(bitext.xx) - len(pairs)
    if not dropped:
        return bitext
    skipped.setdefault(EMPTY_PAIRS_DROPPED, []).append(f"{bitext.key} ({dropped} of {len(bitext.xx)})")
    return Bitext(bitext.lang, bitext.source, [xx for xx, _ in pairs], [en for _, en in pairs], bitext.name)


# (xx embeddings, pivot embeddings, xx sentences or None, pivot sentences or None) -> {xx2en, en2xx,
# mean, duplicate_hits}; the sentences are None when LASER's duplicate rule is off.
Scorer = Callable[[np.ndarray, np.ndarray, "list[str] | None", "list[str] | None"], dict]


def _cosine_scorer(x: np.ndarray, pivot: np.ndarray, x_texts: list[str] | None, pivot_texts: list[str] | None) -> dict:
    return bidirectional_p_at_1(x, pivot, xx_texts=x_texts, en_texts=pivot_texts)


def evaluate_bitexts(
    encoder: Encoder,
    bitexts: list[Bitext],
    task: str,
    skipped: dict[str, list[str]] | None = None,
    progress: bool = True,
    data_errors: dict[str, str] | None = None,
    laser_duplicates: bool = True,
    pivot: str = ENGLISH,
    scorer: Scorer = _cosine_scorer,
) -> dict:
    """Bidirectional P@1 for each bitext whose language the encoder covers.

    The `en` sides are encoded with lang=`pivot` (English unless told), the others with their
    `lang`; consecutive bitexts with the same pivot sentences (a multi-parallel corpus) share one
    encoding. `scorer` turns the two embedding matrices into scores (default: cosine P@1);
    with `laser_duplicates` it also gets the sentences, so that retrieving a sentence identical to
    the gold one counts as correct (LASER's rule), and each row counts those retrievals under
    "duplicate_hits". `skipped` maps a reason to codes the caller already left out; languages the
    encoder does not cover, pairs with an empty side (counted per language) and empty test sets
    are added to it. `data_errors` ({lang: reason}, see eval.faults) are the languages whose files
    could not be read. Returns {"task", "laser_duplicates", "languages": {key: {source, n, xx2en,
    en2xx, mean, duplicate_hits}}, "average": {xx2en, en2xx, mean, n_languages, n} or None if
    nothing ran, "skipped", "data_errors"}; a bitext's key is its `name`, else its `lang`.
    """
    seen = [b.key for b in bitexts]
    duplicates = sorted({key for key in seen if seen.count(key) > 1})
    if duplicates:
        raise ValueError(f"{task}: more than one test set for language(s) {', '.join(duplicates)}")
    covered = encoder_languages(encoder)
    skipped = {reason: list(codes) for reason, codes in (skipped or {}).items() if codes}
    pivot_sentences, pivot_embeddings = None, None

    def uncovered(bitext: Bitext) -> str | None:
        if covered is None or (pivot in covered and bitext.lang in covered):
            return None
        return NOT_COVERED if pivot in covered else f"encoder does not cover {pivot}"  # = ENGLISH_NOT_COVERED for en

    def score(_, bitext: Bitext) -> dict | None:
        nonlocal pivot_sentences, pivot_embeddings
        if not bitext.xx:
            skipped.setdefault(EMPTY_TEST_SET, []).append(bitext.key)
            return None
        xx = encode_checked(encoder, bitext.xx, bitext.lang)
        if bitext.en != pivot_sentences:
            pivot_sentences, pivot_embeddings = bitext.en, encode_checked(encoder, bitext.en, pivot)
        texts = (bitext.xx, bitext.en) if laser_duplicates else (None, None)
        return {"source": bitext.source, "n": len(bitext.xx), **scorer(xx, pivot_embeddings, *texts)}

    scored = score_items(
        bitexts,
        lambda bitext: _without_empty_pairs(bitext, skipped),
        score,
        key=lambda bitext: bitext.key,
        skip=uncovered,
        skipped=skipped,
        desc=task,
        progress=progress,
    )
    per_language = scored.rows
    average = None
    if per_language:
        rows = per_language.values()
        average = {key: float(np.mean([row[key] for row in rows])) for key in ("xx2en", "en2xx", "mean")}
        average.update(n_languages=len(per_language), n=sum(row["n"] for row in rows))
    return {
        "task": task,
        "laser_duplicates": laser_duplicates,
        "languages": per_language,
        "average": average,
        "skipped": skipped,
        DATA_ERRORS: dict(data_errors or {}),
    }


def group_averages(per_language: dict, groups: dict[str, list[str]]) -> dict:
    """{group: {xx2en, en2xx, mean, n_languages, missing}}: P@1 averaged over each group's evaluated
    languages (per_language rows as in `evaluate_bitexts`), `missing` the group's languages that
    were not evaluated; a group with none evaluated has None scores."""
    averages = {}
    for group, codes in groups.items():
        rows = [per_language[lang] for lang in codes if lang in per_language]
        scores = {
            key: float(np.mean([row[key] for row in rows])) if rows else None for key in ("xx2en", "en2xx", "mean")
        }
        missing = [lang for lang in codes if lang not in per_language]
        averages[group] = {**scores, "n_languages": len(rows), "missing": missing}
    return averages
