"""The embedded default training corpus: English/X pairs from gettext catalogs in wheels.

django, wagtail and sphinx ship human translations of their UI and log messages as
gettext catalogs (``locale/<locale>/LC_MESSAGES/*.mo``, compiled, and their ``*.po`` sources),
all BSD-licensed. This module reads those catalogs (data_prep.gettext_catalogs) from installed
packages or from ``.whl`` files (a ``.po`` only where no ``.mo`` of the same catalog sits beside
it: the report counts both kinds and the ``.po`` files left for their ``.mo``), cleans
the (English msgid, translated msgstr) pairs, and writes one en-X parallel corpus per
language with a fixed held-out split, using the layout of ``ems.corpus``.

Run ``python -m data_prep.gettext_corpus OUT_DIR`` to build it from the installed wheels.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import importlib.metadata
import json
import re
import shutil
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from data_prep.gettext_catalogs import (
    DEFAULT_PACKAGES,
    CatalogParseError,
    GettextCorpusError,
    check_collection,
    find_catalogs,
    parse_mo,
    parse_po,
)
from ems.cli import add_debug_option, run_main
from ems.corpus import write_parallel

SOURCE_LANGUAGE = "en"
CORPUS_NAME = "gettext"
REPORT_FILE = "corpus_report.json"


# Deprecated or macrolanguage codes that gettext locales still use, mapped to the code
# the corpus uses for that language.
_LANGUAGE_ALIASES = {"no": "nb", "iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro"}
_LOCALE_LANGUAGE = re.compile(r"[a-z]{2,3}")


def locale_to_language(locale: str) -> str:
    """Language code of a gettext locale name: ``pt_BR`` -> ``pt``, ``sr@latin`` -> ``sr``.

    Territory, script, encoding and modifier parts are dropped, so variants of a language
    (including traditional and simplified Chinese) merge into one code. Codes are ISO 639-1
    where the locale uses one, else ISO 639-3 (``yue``, ``kab``). Raises ValueError when the
    name does not start with a 2- or 3-letter language code.
    """
    base = locale.partition("@")[0].partition(".")[0]
    language = re.split(r"[_-]", base, maxsplit=1)[0].lower()
    if not _LOCALE_LANGUAGE.fullmatch(language):
        raise ValueError(f"unrecognised locale name {locale!r}: expected e.g. 'de' or 'pt_BR'")
    return _LANGUAGE_ALIASES.get(language, language)


_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z!][^<>]*>", re.DOTALL)
# printf-style conversions (%s, %(name)s, %1$d, %.2f), strftime directives (%Y, %b),
# %%, Django/Jinja {{ }} and {% %}, and str.format fields ({}, {0}, {name!r}).
_PLACEHOLDER = re.compile(
    r"%%"
    r"|%(?:\([^()\s]*\)|\d+\$)?[-+#0]*(?:\d+|\*)?(?:\.(?:\d+|\*)?)?"
    r"[sdifrauxXoeEgGcbABHIjmMpSUwWyYzZ]"
    r"|\{\{.*?\}\}|\{%.*?%\}"
    r"|\{[^{}\s]*\}",
    re.DOTALL,
)
# Tags and placeholders are first replaced by marks no catalog message can hold (NUL
# separates plural forms in .mo files), so that what their removal leaves behind can be
# tidied: quotes around a placeholder ("Page '%(title)s' deleted.") and a space before
# punctuation ("Delete <b>%s</b>?"). A tag mark left in the text then becomes a space,
# since tags often separate words; a placeholder mark becomes nothing, which keeps
# languages written without spaces free of spurious ones.
_PLACEHOLDER_MARK = "\x00"
_TAG_MARK = "\x01"
_QUOTED_MARKS = re.compile(r"[\"'`‚„“”‘’«»‹›「『(\[<][\s\x00\x01]*[\"'`“”‘’«»‹›」』)\]>]")
_MARKS_BEFORE_PUNCTUATION = re.compile(r"(?:\s*[\x00\x01])+\s*(?=[^\w\s\x00\x01]|$)")
_SPACE_AFTER_OPENING = re.compile(r"(?<=[(\[])\s+")
_WHITESPACE = re.compile(r"\s+")


def clean_message(text: str) -> str:
    """A UI message reduced to plain text: entities decoded, tags and placeholders removed."""
    text = html.unescape(text)
    text = _TAG.sub(_TAG_MARK, text)
    text = _PLACEHOLDER.sub(_PLACEHOLDER_MARK, text)
    text = _QUOTED_MARKS.sub(_PLACEHOLDER_MARK, text)
    text = _MARKS_BEFORE_PUNCTUATION.sub("", text)
    text = text.replace(_PLACEHOLDER_MARK, "").replace(_TAG_MARK, " ")
    text = _SPACE_AFTER_OPENING.sub("", text)
    return _WHITESPACE.sub(" ", text).strip()


def has_letter(text: str) -> bool:
    """Whether any character of ``text`` is a letter (Unicode category L*)."""
    return any(unicodedata.category(char).startswith("L") for char in text)


@dataclass
class LanguageStats:
    """What happened to the catalog entries of one language on their way into the corpus."""

    locales: set[str] = field(default_factory=set)
    catalogs: int = 0
    entries_read: int = 0
    dropped: Counter = field(default_factory=Counter)
    duplicates: int = 0
    kept: int = 0
    removed_overlapping_heldout: int = 0
    train_pairs: int = 0
    heldout_pairs: int = 0

    def to_dict(self) -> dict:
        """The counts as plain JSON-ready values (dropped reasons sorted by name)."""
        return {
            "locales": sorted(self.locales),
            "catalogs": self.catalogs,
            "entries_read": self.entries_read,
            "dropped": dict(sorted(self.dropped.items())),
            "duplicates": self.duplicates,
            "kept": self.kept,
            "removed_overlapping_heldout": self.removed_overlapping_heldout,
            "train_pairs": self.train_pairs,
            "heldout_pairs": self.heldout_pairs,
        }


def clean_pair(msgid: str, msgstr: str, max_chars: int) -> tuple[tuple[str, str] | None, str]:
    """Clean one (English, translation) entry: the cleaned pair, or None and the drop reason."""
    if not msgstr.strip():
        return None, "untranslated_empty"
    if msgstr == msgid:
        return None, "untranslated_identical"
    english, foreign = clean_message(msgid), clean_message(msgstr)
    if not has_letter(english) or not has_letter(foreign):
        return None, "no_letter"
    if len(english) > max_chars or len(foreign) > max_chars:
        return None, "too_long"
    # Identical once placeholders are gone ("%s URL" / "URL %s"): nothing to learn from it.
    if english.casefold() == foreign.casefold():
        return None, "identical_after_cleaning"
    return (english, foreign), ""


def split_catalog_pairs(
    pairs: list[tuple[str, str]], heldout_size: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
    """Split (en, x) pairs into (train, heldout, number removed from train for overlap).

    Held-out pairs are taken from English-text groups ordered by the sha1 of the casefolded
    English text, one pair per group and never repeating a foreign text, so both sides of the
    held-out set are unique. Train loses every pair sharing either side with held-out.
    """
    groups: dict[str, list[tuple[str, str]]] = {}
    for english, foreign in pairs:
        groups.setdefault(english.casefold(), []).append((english, foreign))
    heldout: list[tuple[str, str]] = []
    heldout_english: set[str] = set()
    heldout_foreign: set[str] = set()
    for key in sorted(groups, key=lambda k: hashlib.sha1(k.encode("utf-8")).hexdigest()):
        if len(heldout) >= heldout_size:
            break
        for english, foreign in groups[key]:
            if foreign.casefold() not in heldout_foreign:
                heldout.append((english, foreign))
                heldout_english.add(key)
                heldout_foreign.add(foreign.casefold())
                break
    train = [
        (english, foreign)
        for english, foreign in pairs
        if english.casefold() not in heldout_english and foreign.casefold() not in heldout_foreign
    ]
    return train, heldout, len(pairs) - len(train) - len(heldout)


def _check_settings(min_pairs: int, heldout_size: int, max_chars: int) -> None:
    if heldout_size < 1:
        raise ValueError(f"heldout_size must be at least 1, got {heldout_size}")
    if min_pairs <= heldout_size:
        raise ValueError(
            f"min_pairs ({min_pairs}) must exceed heldout_size ({heldout_size}), "
            f"or a language could end up with no training pairs"
        )
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")


def _requested_languages(languages: Iterable[str] | None) -> set[str] | None:
    if languages is None:
        return None
    check_collection(languages, "languages")
    requested = {locale_to_language(code) for code in languages}
    if SOURCE_LANGUAGE in requested:
        raise ValueError(f"'{SOURCE_LANGUAGE}' is the source side of every pair; leave it out")
    if not requested:
        raise ValueError("languages is empty; pass None for all languages")
    return requested


@dataclass
class _Harvest:
    """The cleaned, deduplicated pairs of every language read, and what was skipped."""

    stats: dict[str, LanguageStats] = field(default_factory=dict)
    pairs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    skipped_catalogs: list[dict] = field(default_factory=list)
    english_catalogs: int = 0
    catalog_files: Counter = field(default_factory=Counter)  # mo_read, po_read, po_left_for_mo
    po_warnings: dict[str, list[str]] = field(default_factory=dict)  # .po source -> what babel skipped in it


def _harvest_catalogs(packages: list[str], wheels: list[Path], requested: set[str] | None, max_chars: int) -> _Harvest:
    harvest = _Harvest()
    seen_by_language: dict[str, set[tuple[str, str]]] = {}
    for catalog in find_catalogs(packages, wheels):
        if catalog.compiled_beside:
            harvest.catalog_files["po_left_for_mo"] += 1
            continue
        try:
            language = locale_to_language(catalog.locale)
        except ValueError as error:
            harvest.skipped_catalogs.append({"catalog": catalog.source, "error": str(error)})
            continue
        if language == SOURCE_LANGUAGE:
            harvest.english_catalogs += 1
            continue
        if requested is not None and language not in requested:
            continue
        try:
            if catalog.is_po:
                entries, warnings = parse_po(catalog.data, catalog.source)
                if warnings:
                    harvest.po_warnings[catalog.source] = warnings
            else:
                entries = parse_mo(catalog.data, catalog.source)
        except CatalogParseError as error:
            harvest.skipped_catalogs.append({"catalog": catalog.source, "error": str(error)})
            continue
        harvest.catalog_files["po_read" if catalog.is_po else "mo_read"] += 1
        stats = harvest.stats.setdefault(language, LanguageStats())
        pairs = harvest.pairs.setdefault(language, [])
        seen = seen_by_language.setdefault(language, set())
        stats.locales.add(catalog.locale)
        stats.catalogs += 1
        stats.entries_read += len(entries)
        for entry in entries:
            pair, drop_reason = clean_pair(entry.msgid, entry.msgstr, max_chars)
            if pair is None:
                stats.dropped[drop_reason] += 1
                continue
            key = (pair[0].casefold(), pair[1].casefold())
            if key in seen:
                stats.duplicates += 1
                continue
            seen.add(key)
            pairs.append(pair)
    return harvest


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_gettext_corpus(
    out_dir: str | Path,
    packages: Iterable[str] = DEFAULT_PACKAGES,
    wheels: Iterable[str | Path] = (),
    min_pairs: int = 500,
    heldout_size: int = 200,
    languages: Iterable[str] | None = None,
    max_chars: int = 300,
    overwrite: bool = False,
) -> dict:
    """Build the en-X gettext corpus under ``out_dir`` and return its report.

    Writes ``out_dir/train/<pair>/gettext.{en,X}``, ``out_dir/heldout/<pair>/gettext.{en,X}``
    and ``out_dir/corpus_report.json`` (the returned dict). Languages with fewer than
    ``min_pairs`` distinct pairs (which must exceed ``heldout_size``) are left out and
    listed in the report, as are corrupt catalogs. ``languages`` restricts the build to
    those codes (None: all). An existing corpus in ``out_dir`` is replaced only with
    ``overwrite=True``.
    """
    _check_settings(min_pairs, heldout_size, max_chars)
    requested = _requested_languages(languages)
    check_collection(packages, "packages")
    check_collection(wheels, "wheels")
    packages, wheels = list(packages), [Path(wheel) for wheel in wheels]
    if not packages and not wheels:
        raise ValueError("no packages and no wheels given: nothing to read catalogs from")
    out_dir = Path(out_dir)
    outputs = [out_dir / "train", out_dir / "heldout", out_dir / REPORT_FILE]
    existing = [path for path in outputs if path.exists()]
    if existing and not overwrite:
        raise GettextCorpusError(
            f"{out_dir} already holds a corpus ({', '.join(p.name for p in existing)}); "
            f"pass overwrite=True (--overwrite) to replace it"
        )

    harvest = _harvest_catalogs(packages, wheels, requested, max_chars)
    stats = harvest.stats
    not_found = sorted(requested - stats.keys()) if requested is not None else []
    if requested is not None and not stats:
        raise GettextCorpusError(
            f"none of the requested languages {sorted(requested)} has a readable catalog in "
            f"packages {packages} or wheels {[str(w) for w in wheels]}"
        )

    for path in existing:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    written: dict[str, dict] = {}
    too_few_pairs: dict[str, dict] = {}
    for language in sorted(stats):
        language_stats, pairs = stats[language], harvest.pairs[language]
        language_stats.kept = len(pairs)
        if len(pairs) < min_pairs:
            too_few_pairs[language] = language_stats.to_dict()
            continue
        train, heldout, removed = split_catalog_pairs(pairs, heldout_size)
        language_stats.train_pairs = len(train)
        language_stats.heldout_pairs = len(heldout)
        language_stats.removed_overlapping_heldout = removed
        write_parallel(out_dir / "train", CORPUS_NAME, SOURCE_LANGUAGE, language, train)
        write_parallel(out_dir / "heldout", CORPUS_NAME, SOURCE_LANGUAGE, language, heldout)
        written[language] = language_stats.to_dict()

    report = {
        "sources": {
            "packages": {package: _installed_version(package) for package in packages},
            "wheels": [wheel.name for wheel in wheels],
        },
        "settings": {"min_pairs": min_pairs, "heldout_size": heldout_size, "max_chars": max_chars},
        "languages_requested": None if requested is None else sorted(requested),
        "languages_not_found": not_found,
        "totals": {
            "languages": len(written),
            "train_pairs": sum(s["train_pairs"] for s in written.values()),
            "heldout_pairs": sum(s["heldout_pairs"] for s in written.values()),
        },
        "languages": written,
        "dropped_too_few_pairs": too_few_pairs,
        "english_catalogs_skipped": harvest.english_catalogs,
        "skipped_catalogs": harvest.skipped_catalogs,
        "catalog_files": {key: harvest.catalog_files[key] for key in ("mo_read", "po_read", "po_left_for_mo")},
        "po_warnings": harvest.po_warnings,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / REPORT_FILE, "w", encoding="utf-8") as report_file:
        json.dump(report, report_file, ensure_ascii=False, indent=2)
        report_file.write("\n")
    if not written:
        raise GettextCorpusError(f"no language has at least {min_pairs} pairs; see {out_dir / REPORT_FILE}")
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line: build the corpus and print one line per language plus the totals."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--packages", nargs="*", default=list(DEFAULT_PACKAGES))
    parser.add_argument("--wheels", nargs="*", default=[], type=Path)
    parser.add_argument("--languages", nargs="*", default=None)
    parser.add_argument("--min-pairs", type=int, default=500)
    parser.add_argument("--heldout-size", type=int, default=200)
    parser.add_argument("--max-chars", type=int, default=300)
    parser.add_argument("--overwrite", action="store_true")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    report = build_gettext_corpus(
        args.out_dir,
        packages=args.packages,
        wheels=args.wheels,
        min_pairs=args.min_pairs,
        heldout_size=args.heldout_size,
        languages=args.languages,
        max_chars=args.max_chars,
        overwrite=args.overwrite,
    )
    for language, language_stats in report["languages"].items():
        print(f"{language}\ttrain {language_stats['train_pairs']}\theldout {language_stats['heldout_pairs']}")
    totals = report["totals"]
    print(
        f"{totals['languages']} languages, {totals['train_pairs']} train pairs, "
        f"{totals['heldout_pairs']} held-out pairs; "
        f"{len(report['dropped_too_few_pairs'])} languages below {args.min_pairs} pairs, "
        f"{len(report['skipped_catalogs'])} catalogs skipped (see {args.out_dir / REPORT_FILE})"
    )
    files = report["catalog_files"]
    print(
        f"catalog files: {files['mo_read']} .mo and {files['po_read']} .po read, {files['po_left_for_mo']} .po "
        f"left for the .mo beside them, {len(report['po_warnings'])} .po with lines babel skipped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
