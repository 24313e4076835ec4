"""Held-out bitext retrieval: the Tatoeba P@1 protocol on any directory of Moses-style aligned files.

Layout: ROOT/<l1>-<l2>/<name>.<l1> + ROOT/<l1>-<l2>/<name>.<l2>, codes in alphabetical order and
one of them `en` (e.g. de-en/gettext.de + de-en/gettext.en). All corpora of a pair directory are
concatenated in name order into one test set for that language. A language whose directory has
a file without its aligned partner, files of unequal length or bad UTF-8 is not scored: it is
listed under "data_errors" with the reason (eval.faults), and the other languages still run.

`evaluate_heldout` is the evaluator of the task type `heldout`: run_all's --heldout runs it, and a
config with `type: heldout` names the directory (it takes only the keys every config has).
"""

from __future__ import annotations

from pathlib import Path

from ems.cli import MissingDataError
from ems.encoder_kinds import Encoder
from ems.languages import ENGLISH, UnknownLanguageError, canonical_language
from eval.evaluators.items import score_items
from eval.evaluators.retrieval import MEAN_P_AT_1, Bitext, check_max_sentences, evaluate_bitexts, read_aligned_files
from eval.faults import DataErrors
from eval.report import markdown_table
from eval.task import TaskRun, TaskType

NOT_A_PAIR_DIRECTORY = "not a <l1>-<l2> directory"
NOT_PAIRED_WITH_ENGLISH = "pair without en"
FILE_WITHOUT_PARTNER = "file without its aligned partner"
NO_ALIGNED_FILES = "no aligned files"
NOT_IN_HELDOUT = "no held-out test set"


def _stems(pair_dir: Path, lang: str) -> set[str]:
    suffix = f".{lang}"
    return {p.name[: -len(suffix)] for p in pair_dir.glob(f"*{suffix}") if p.is_file() and not p.name.startswith(".")}


def find_heldout_bitexts(
    root: Path, max_sentences: int | None = None
) -> tuple[list[Bitext], dict[str, list[str]], DataErrors]:
    """Read every `<l1>-<l2>` pair directory under `root` that has an `en` side.

    Returns (bitexts, skipped, data errors): one Bitext per non-English language (its first
    `max_sentences` pairs if given), {reason: [directory names]} for directories that are not
    test sets, and {lang: reason} for languages whose files could not be used: a file without its
    aligned partner, unequal line counts, bad UTF-8. Raises MissingDataError if `root` is missing.
    """
    root = Path(root)
    check_max_sentences(max_sentences)
    if not root.is_dir():
        raise MissingDataError(
            f"held-out directory {root} does not exist; expected pair directories such as "
            f"{root / 'de-en'} holding aligned files <name>.de and <name>.en"
        )

    def cap(_, bitext: Bitext) -> Bitext:
        if max_sentences is not None:
            bitext.xx, bitext.en = bitext.xx[:max_sentences], bitext.en[:max_sentences]
        return bitext

    pair_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    found = score_items(
        pair_dirs,
        lambda pair_dir: _read_pair_directory(root, pair_dir, _language(pair_dir)),
        cap,
        key=lambda pair_dir: pair_dir.name if _not_a_test_set(pair_dir) else _language(pair_dir),
        skip=_not_a_test_set,
        desc=str(root),
    )
    return list(found.rows.values()), found.skipped, found.errors


def _language(pair_dir: Path) -> str:
    """The language of an English pair directory (`de-en`, `en-de`: de)."""
    l1, l2 = pair_dir.name.split("-")
    return l2 if l1 == ENGLISH else l1


def _not_a_test_set(pair_dir: Path) -> str | None:
    """Why a directory under the held-out root is no test set, None if it is one."""
    codes = pair_dir.name.split("-")
    if len(codes) != 2 or not all(codes) or codes[0] == codes[1]:
        return NOT_A_PAIR_DIRECTORY
    if ENGLISH not in codes:
        return NOT_PAIRED_WITH_ENGLISH
    if not _stems(pair_dir, _language(pair_dir)) | _stems(pair_dir, ENGLISH):
        return NO_ALIGNED_FILES
    return None


def _read_pair_directory(root: Path, pair_dir: Path, lang: str) -> Bitext:
    """The corpora of one pair directory of the held-out root `root`, concatenated in name order;
    MissingDataError naming every file without its aligned partner, ValueError for unequal line
    counts or bad UTF-8, OutsideRootError for a file or pair directory a symlink leads out of `root`."""
    xx_stems, en_stems = _stems(pair_dir, lang), _stems(pair_dir, ENGLISH)
    orphans = [f"{stem}.{lang} (no {stem}.{ENGLISH})" for stem in sorted(xx_stems - en_stems)]
    orphans += [f"{stem}.{ENGLISH} (no {stem}.{lang})" for stem in sorted(en_stems - xx_stems)]
    if orphans:
        raise MissingDataError(f"{FILE_WITHOUT_PARTNER} in {pair_dir}: {', '.join(orphans)}")
    corpora = sorted(xx_stems)
    xx_all: list[str] = []
    en_all: list[str] = []
    for stem in corpora:
        xx, en = read_aligned_files(pair_dir / f"{stem}.{lang}", pair_dir / f"{stem}.{ENGLISH}", folder=root)
        xx_all += xx
        en_all += en
    return Bitext(lang=lang, source=f"{pair_dir.name}/{'+'.join(corpora)}", xx=xx_all, en=en_all)


def _canonical(lang: str) -> str:
    """A directory's language as the language filter spells it (itself if no code system knows it)."""
    try:
        return canonical_language(lang)
    except UnknownLanguageError:
        return lang


def evaluate_heldout(encoder: Encoder, task: TaskRun) -> dict:
    """Bidirectional P@1 (%) on each held-out pair under `task.data_dir` whose language the encoder covers.

    The run's language filter (`task.options.canonical`) restricts the evaluation; its languages
    without a pair directory are listed as skipped, languages whose files cannot be used under
    "data_errors" (see find_heldout_bitexts). Returns the same shape as `evaluate_tatoeba`, with
    "root" instead of "data_dir" and each language's "source" naming its directory and corpora.
    """
    root, languages, max_sentences = task.data_dir, task.options.canonical, task.options.max_sentences
    bitexts, skipped, errors = find_heldout_bitexts(root, max_sentences)
    if languages is not None:
        # a directory's language may name its script (ace_Arab-en), the filter holds canonical codes (ace)
        kept = {lang for lang in [b.lang for b in bitexts] + list(errors) if _canonical(lang) in languages}
        found = {_canonical(lang) for lang in kept}
        skipped[NOT_IN_HELDOUT] = [lang for lang in languages if lang not in found and lang != ENGLISH]
        bitexts = [b for b in bitexts if b.lang in kept]
        errors = {lang: reason for lang, reason in errors.items() if lang in kept}
    result = evaluate_bitexts(encoder, bitexts, task.name, skipped, task.options.progress, errors)
    return {"task": result.pop("task"), "root": str(root), "max_sentences": max_sentences, **result}


TASK = TaskType(metric="p_at_1", run=evaluate_heldout, table=markdown_table, headline=MEAN_P_AT_1)
