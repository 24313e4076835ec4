"""Held-out bitext retrieval: the Tatoeba P@1 protocol on any directory of Moses-style aligned files.

Layout: ROOT/<l1>-<l2>/<name>.<l1> + ROOT/<l1>-<l2>/<name>.<l2>, codes in alphabetical order and
one of them `en` (e.g. de-en/gettext.de + de-en/gettext.en). All corpora of a pair directory are
concatenated in name order into one test set for that language.
"""

from __future__ import annotations

from pathlib import Path

from ems.languages import ENGLISH
from eval.retrieval import Bitext, MissingDataError, check_max_sentences, evaluate_bitexts, read_aligned_files

NOT_A_PAIR_DIRECTORY = "not a <l1>-<l2> directory"
NOT_PAIRED_WITH_ENGLISH = "pair without en"
FILE_WITHOUT_PARTNER = "file without its aligned partner"
NO_ALIGNED_FILES = "no aligned files"
NOT_IN_HELDOUT = "no held-out test set"


def _stems(pair_dir: Path, lang: str) -> set[str]:
    suffix = f".{lang}"
    return {p.name[: -len(suffix)] for p in pair_dir.glob(f"*{suffix}") if p.is_file() and not p.name.startswith(".")}


def find_heldout_bitexts(root: Path, max_sentences: int | None = None) -> tuple[list[Bitext], dict[str, list[str]]]:
    """Read every `<l1>-<l2>` pair directory under `root` that has an `en` side.

    Returns (bitexts, skipped): one Bitext per non-English language (its first `max_sentences`
    pairs if given), and {reason: [directory or file names]} for what could not be used.
    Raises MissingDataError if `root` is missing, ValueError if two aligned files differ in length.
    """
    root = Path(root)
    check_max_sentences(max_sentences)
    if not root.is_dir():
        raise MissingDataError(
            f"held-out directory {root} does not exist; expected pair directories such as "
            f"{root / 'de-en'} holding aligned files <name>.de and <name>.en"
        )
    bitexts: list[Bitext] = []
    skipped: dict[str, list[str]] = {}
    for pair_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        codes = pair_dir.name.split("-")
        if len(codes) != 2 or not all(codes) or codes[0] == codes[1]:
            skipped.setdefault(NOT_A_PAIR_DIRECTORY, []).append(pair_dir.name)
            continue
        if ENGLISH not in codes:
            skipped.setdefault(NOT_PAIRED_WITH_ENGLISH, []).append(pair_dir.name)
            continue
        lang = codes[1] if codes[0] == ENGLISH else codes[0]
        xx_stems, en_stems = _stems(pair_dir, lang), _stems(pair_dir, ENGLISH)
        orphans = [f"{stem}.{lang}" for stem in xx_stems - en_stems] + [f"{stem}.en" for stem in en_stems - xx_stems]
        for orphan in sorted(orphans):
            skipped.setdefault(FILE_WITHOUT_PARTNER, []).append(f"{pair_dir.name}/{orphan}")
        corpora = sorted(xx_stems & en_stems)
        if not corpora:
            skipped.setdefault(NO_ALIGNED_FILES, []).append(pair_dir.name)
            continue
        xx_all: list[str] = []
        en_all: list[str] = []
        for stem in corpora:
            xx, en = read_aligned_files(pair_dir / f"{stem}.{lang}", pair_dir / f"{stem}.{ENGLISH}")
            xx_all += xx
            en_all += en
        if max_sentences is not None:
            xx_all, en_all = xx_all[:max_sentences], en_all[:max_sentences]
        bitexts.append(Bitext(lang=lang, source=f"{pair_dir.name}/{'+'.join(corpora)}", xx=xx_all, en=en_all))
    return bitexts, skipped


def evaluate_heldout(
    encoder,
    root: Path,
    languages: list[str] | None = None,
    max_sentences: int | None = None,
    progress: bool = True,
    name: str = "heldout",
) -> dict:
    """Bidirectional P@1 (%) on each held-out pair under `root` whose language the encoder covers.

    `languages` (canonical codes) restricts the evaluation; requested languages without a pair
    directory are listed as skipped. Returns the same shape as `evaluate_tatoeba`, with "root"
    instead of "data_dir" and each language's "source" naming its directory and corpora.
    """
    if isinstance(languages, str):
        raise ValueError(f"languages must be a list of language codes, got the string {languages!r}")
    bitexts, skipped = find_heldout_bitexts(root, max_sentences)
    if languages is not None:
        found = {b.lang for b in bitexts}
        skipped[NOT_IN_HELDOUT] = [lang for lang in languages if lang not in found and lang != ENGLISH]
        bitexts = [b for b in bitexts if b.lang in languages]
    result = evaluate_bitexts(encoder, bitexts, name, skipped, progress)
    return {"task": result.pop("task"), "root": str(root), "max_sentences": max_sentences, **result}
