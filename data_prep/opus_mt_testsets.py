"""English-X sentence pairs from two layouts of Helsinki-NLP/OPUS-MT-testsets, with each line's
language taken from its `.labels` file.

In: a root in one of the layouts, optionally the canonical codes to keep and extra folds of one
language into another. Out: aligned pair files `out_root/<en-xx>/<corpus>.{en,xx}` (the
ems.corpus layout) and `out_root/import_report.json`; the builders also return the report.

- Tatoeba Translation Challenge (`build_tatoeba_challenge_corpus`):
  `<a>-<b>/tatoeba-test-v2021-08-07.{<code>,eng}[.labels]`, folders named by two ISO 639-3 codes
  (some with a script: `eng-srp_Latn`) in alphabetical order, one of them `eng`. Macro-language
  folders (`eng-zho`, `ara-eng`, `eng-hbs`, ...) mix varieties line by line, so the label of each
  line, not the folder, decides its language: `eng-zho` gives `zh` pairs from its `cmn_*` lines and
  `yue` pairs from its `yue_*` lines. The `eng-eng` folder is skipped.
- TICO-19 (`build_tico19_corpus`): `en-<xx>/tico19-test.{en,<xx>}[.labels]` (`.en.info` is not
  read), codes ISO 639-1/3 with regional tags (`es_LA`, `pt_BR`, `ti_ER`); multi-parallel: every
  folder translates the same 2100 English sentences (in four slightly different spellings:
  quoting, a leading apostrophe).

Each folder is written as its own corpus file, `tatoeba_challenge-<folder's non-English code>` or
`tico19-<xx>`, with nothing deduplicated, although some folders are subsets of others
(`eng-jpn_Hira` of `eng-jpn`, `eng-cmn_Hans` of `eng-zho`) and `en-ti`, `en-ti_ER`, `en-ti_ET`
all give `en-ti` pairs: the clean stage (data_prep.clean) removes the repeats, per language pair
across all its files. The counts in the report are therefore counts before deduplication.
"""

from __future__ import annotations

import functools
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ems.corpus import CorpusError, ReadReport, inside_folder, read_parallel, write_parallel
from ems.languages import ENGLISH, UnknownLanguageError, canonical_language

REPORT_FILE = "import_report.json"
TATOEBA_CHALLENGE_RELEASE = "tatoeba-test-v2021-08-07"


@dataclass(frozen=True)
class Layout:
    """Where one OPUS-MT-testsets collection keeps its files."""

    name: str  # its key in data_prep.importers and its corpus files' name: <name>-<the folder's non-English code>
    file_stem: str  # <folder>/<file_stem>.<code> and <file_stem>.<code>.labels
    english_code: str  # the English side's code in folder and file names
    licence: str  # the release's, for every pair
    expected: str  # the layout, in words, for error messages


TATOEBA_CHALLENGE = Layout(
    "tatoeba_challenge",
    TATOEBA_CHALLENGE_RELEASE,
    "eng",
    "CC-BY 2.0 FR",
    f"Tatoeba Challenge folders <a>-<b> (one of them eng) holding {TATOEBA_CHALLENGE_RELEASE}.<code> files",
)
TICO19 = Layout("tico19", "tico19-test", "en", "CC0 1.0", "TICO-19 folders en-<xx> holding tico19-test.<code> files")


@dataclass(frozen=True)
class _Folder:
    """One folder's files, checked to have the same number of lines."""

    path: Path
    other_code: str
    english_text: Path
    other_text: Path
    english_labels: Path | None  # None: missing, every English line takes the layout's English code
    other_labels: Path | None  # None: missing, every line takes the folder's code
    line_count: int


def build_tatoeba_challenge_corpus(
    root: str | Path, out_root: str | Path, languages: list[str] | None = None, merge: dict[str, str] | None = None
) -> dict:
    """Import a Tatoeba Challenge test release (see the module docstring) into `out_root`.

    `languages`: codes to keep (None: all); `merge`: {code: code} folds applied after
    canonicalisation, e.g. {"prs": "fa"}; both accept any tag canonical_language understands.
    Returns the report (see `import_corpus`), also written to `out_root/import_report.json`.
    """
    return import_corpus(TATOEBA_CHALLENGE, root, out_root, languages, merge)


def build_tico19_corpus(
    root: str | Path, out_root: str | Path, languages: list[str] | None = None, merge: dict[str, str] | None = None
) -> dict:
    """Import the TICO-19 test split (see the module docstring) into `out_root`; arguments and
    report as for `build_tatoeba_challenge_corpus`."""
    return import_corpus(TICO19, root, out_root, languages, merge)


def import_corpus(
    layout: Layout,
    root: str | Path,
    out_root: str | Path,
    languages: Iterable[str] | None = None,
    merge: dict[str, str] | None = None,
) -> dict:
    """Write the English-X pairs of every folder of `root` to `out_root`, one corpus file per
    folder and language, and return the report written to `out_root/import_report.json`:

    - `folders`: per folder, `corpus` (its file name), `lines_read`, `kept` {code: pairs} and
      `skipped`: {label: lines} under `not_selected`, `unknown_tag`, `same_language` (the
      non-English side is labelled English) and `english_side_not_english`; lines under `empty`,
      `invalid_utf8` and `line_break` (a line-break character inside a text); reasons without
      lines are left out. `labels_missing` lists absent labels files, whose side then takes the
      folder's code (the English side: English) for every line.
    - `skipped_folders`: {folder: reason}, e.g. eng-eng.
    - `merged`: {code: [[source label, pairs], ...] sorted}, the labels folded into each code.
    - `languages`: {code: pairs written}, summed over folders.
    - `corpora`: {corpus file name: {"licence": the release's, "pairs": {code: pairs}}}.

    Lines are read with ems.corpus.read_parallel: empty and invalid UTF-8 lines are counted
    and skipped. Raises FileNotFoundError when `root` holds no folder of the layout, CorpusError
    when a folder lacks a text file or a text or labels file differs in line count from the
    others (both checked for every folder before anything is written), UnknownLanguageError for
    a code in `languages` or `merge` that is not a language.
    """
    root, out_root = Path(root), Path(out_root)
    selected = None if languages is None else {canonical_language(code) for code in languages}
    folds = {canonical_language(source): canonical_language(target) for source, target in (merge or {}).items()}

    @functools.cache
    def language_of(tag: str) -> str | None:
        try:
            code = canonical_language(tag)
        except UnknownLanguageError:
            return None
        return folds.get(code, code)

    folders, skipped_folders = _find_folders(layout, root)
    report: dict = {
        "format": layout.name,
        "root": str(root),
        "languages_selected": None if selected is None else sorted(selected),
        "merge": folds,
        "folders": {},
        "skipped_folders": skipped_folders,
    }
    tags_by_language: defaultdict[str, Counter] = defaultdict(Counter)
    written: Counter = Counter()
    for folder in folders:
        folder_report = _import_folder(layout, folder, out_root, language_of, selected, tags_by_language)
        report["folders"][folder.path.name] = folder_report
        written.update(folder_report["kept"])
    report["merged"] = {code: sorted(map(list, tags.items())) for code, tags in sorted(tags_by_language.items())}
    report["languages"] = dict(sorted(written.items()))
    report["corpora"] = {
        entry["corpus"]: {"licence": layout.licence, "pairs": entry["kept"]}
        for entry in report["folders"].values()
        if entry["kept"]
    }
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / REPORT_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def _find_folders(layout: Layout, root: Path) -> tuple[list[_Folder], dict[str, str]]:
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory: expected {layout.expected}")
    folders, skipped = [], {}
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        codes = path.name.split("-")
        if len(codes) != 2 or layout.english_code not in codes:
            skipped[path.name] = f"not a folder named {layout.english_code}-<code> or <code>-{layout.english_code}"
        elif codes[0] == codes[1]:
            skipped[path.name] = "both sides are English"
        else:
            other_code = codes[1] if codes[0] == layout.english_code else codes[0]
            folders.append(_checked_folder(layout, root, path, other_code))
    if not folders:
        raise FileNotFoundError(f"{root} holds no folder of the layout: expected {layout.expected}")
    return folders, skipped


def _checked_folder(layout: Layout, root: Path, path: Path, other_code: str) -> _Folder:
    """The files of one folder of `root`; each must lie inside `root` (OutsideRootError for a symlink out)."""
    english_text = path / f"{layout.file_stem}.{layout.english_code}"
    other_text = path / f"{layout.file_stem}.{other_code}"
    for text in (english_text, other_text):
        if not text.is_file():
            raise CorpusError(f"{text} not found: expected {layout.expected}")
    english_labels, other_labels = (_labels_path(text) for text in (english_text, other_text))
    present = [p for p in (english_text, other_text, english_labels, other_labels) if p is not None]
    for file in present:
        inside_folder(root, file)
    line_counts = {p: count_lines(p) for p in present}
    if len(set(line_counts.values())) > 1:
        raise CorpusError(
            "files of one folder differ in line count: " + ", ".join(f"{p} has {n}" for p, n in line_counts.items())
        )
    return _Folder(path, other_code, english_text, other_text, english_labels, other_labels, line_counts[english_text])


def _labels_path(text: Path) -> Path | None:
    path = text.with_name(text.name + ".labels")
    return path if path.is_file() else None


def count_lines(path: Path) -> int:
    """Lines as readline() counts them: a last line without a newline counts too."""
    count, last_byte = 0, b"\n"
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            count += chunk.count(b"\n")
            last_byte = chunk[-1:]
    return count + (last_byte != b"\n")


def _read_labels(path: Path | None, fallback: str, line_count: int) -> list[str]:
    if path is None:
        return [fallback] * line_count
    return [line.strip() for line in path.read_text(encoding="utf-8-sig", errors="replace").split("\n")[:line_count]]


def _import_folder(
    layout: Layout,
    folder: _Folder,
    out_root: Path,
    language_of: Callable[[str], str | None],
    selected: set[str] | None,
    tags_by_language: defaultdict[str, Counter],
) -> dict:
    """Write one folder's kept pairs, adding their labels to `tags_by_language`; returns its report."""
    english_labels = _read_labels(folder.english_labels, layout.english_code, folder.line_count)
    other_labels = _read_labels(folder.other_labels, folder.other_code, folder.line_count)
    read = ReadReport()
    pairs_by_language: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
    kept_tags: defaultdict[str, Counter] = defaultdict(Counter)
    skipped: defaultdict[str, Counter] = defaultdict(Counter)
    line_breaks = 0
    for english, other in read_parallel(folder.english_text, folder.other_text, read):
        # read_parallel counts a line in read.read before yielding it: this pair's line number.
        english_tag, tag = english_labels[read.read - 1], other_labels[read.read - 1]
        language = language_of(tag)
        # Mojibake can hold U+0085 (a line break to str.splitlines) inside a line; read_parallel
        # strips both ends, so any line-break character left splits the text.
        if len(english.splitlines()) > 1 or len(other.splitlines()) > 1:
            line_breaks += 1
        elif language_of(english_tag) != ENGLISH:
            skipped["english_side_not_english"][english_tag] += 1
        elif language is None:
            skipped["unknown_tag"][tag] += 1
        elif language == ENGLISH:
            skipped["same_language"][tag] += 1
        elif selected is not None and language not in selected:
            skipped["not_selected"][tag] += 1
        else:
            pairs_by_language[language].append((english, other))
            kept_tags[language][tag] += 1
    corpus = f"{layout.name}-{folder.other_code}"
    for language, pairs in sorted(pairs_by_language.items()):
        write_parallel(out_root, corpus, ENGLISH, language, pairs)
        tags_by_language[language].update(kept_tags[language])
    read_skips = {"empty": read.skipped_empty, "invalid_utf8": read.skipped_invalid_utf8, "line_break": line_breaks}
    folder_report = {
        "corpus": corpus,
        "lines_read": read.read,
        "kept": {language: len(pairs) for language, pairs in sorted(pairs_by_language.items())},
        "skipped": {reason: dict(sorted(tags.items())) for reason, tags in sorted(skipped.items())}
        | {reason: count for reason, count in read_skips.items() if count},
    }
    missing = [
        f"{text}.labels"
        for text, labels in ((folder.english_text, folder.english_labels), (folder.other_text, folder.other_labels))
        if labels is None
    ]
    if missing:
        folder_report["labels_missing"] = missing
    return folder_report


def summary(report: dict) -> str:
    """The import's last line for `ems-prep import`: labels merged, lines and folders skipped."""
    merged = "; ".join(
        f"{code} <- " + ", ".join(f"{tag} {count}" for tag, count in tags)
        for code, tags in report["merged"].items()
        if len(tags) > 1
    )
    skipped: dict[str, int] = {}
    for folder in report["folders"].values():
        for reason, counts in folder["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + (sum(counts.values()) if isinstance(counts, dict) else counts)
    skipped_lines = ", ".join(f"{reason} {count}" for reason, count in sorted(skipped.items()))
    skipped_folders = ", ".join(f"{name} ({why})" for name, why in report["skipped_folders"].items())
    parts = [
        f"merged: {merged or 'nothing'}",
        f"skipped lines: {skipped_lines or 'none'}",
        f"skipped folders: {skipped_folders or 'none'}",
    ]
    labels_missing = sum(len(folder.get("labels_missing", [])) for folder in report["folders"].values())
    if labels_missing:
        parts.append(f"labels files missing: {labels_missing}")
    return " | ".join(parts)
