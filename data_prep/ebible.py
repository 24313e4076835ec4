"""English-X verse pairs from the eBible corpus (BibleNLP's layout, davidbaines/ebible_data):
`root/corpus/<id>.txt` holds one line per verse reference of `root/metadata/vref.txt` (`GEN 1:1`, ...,
41,899 with the deuterocanon); English is `corpus/engwebp.txt` (the World English Bible), and
`metadata/ebible_status.csv` gives each translation's language (`languageCode`, ISO 639-3), licence
(`licence_Licence_Type`, `licence_Licence_Version`) and `Copyright` line.

Every other `corpus/<id>.txt` becomes the corpus file `ebible-<id>`, keyed by its language and the
script of most of its letters (data_prep.multiparallel.text_script, ems.languages.corpus_language):
Latin-script Meitei (`mni.txt`) is `mni_Latn`, apart from FLORES-200's Bengali-script `mni`. Its
licence: `CC-BY-SA 4.0, Copyright © 2020 Biblica, Inc.`, `Public Domain`, ...

Verses (MERGED and the skip reasons are counted per file, in verses):
- an empty line is a verse the translation (or English) lacks: skipped, `missing_verse`;
- `<range>` says the verse was merged into the line above (verses 2-4 translated as one sentence:
  their text on verse 2's line, `<range>` on 3 and 4). The merged text is paired with the English
  verses it covers, joined by a space, so the pair stays a translation (`merged_verses`: the
  `<range>` lines so joined); a group with a missing verse on either side is skipped whole
  (`missing_verse`), and `<range>` with no verse above it is `range_without_verse`. `<range>` on
  the English side is read the same way;
- a line that holds a marker that is not `<range>` as the release writes it (`<Range>`, `<range`,
  `<range> and words`: a marker its maker got wrong) is neither verse text nor a merge: its group
  is skipped (`malformed_range`), on either side;
- a line that is not valid UTF-8 or holds a line-break character skips its group (`invalid_utf8`,
  `line_break`);
- C1 control characters (U+0080-U+009F) are Windows-1252 punctuation decoded as Latin-1 (`mni.txt`
  has 2,671 curly quotes as U+0092-U+0094, which the clean stage would drop a quarter of its verses
  for): they are mapped back (`\x94` -> `”`), counted per file in lines (`c1_repaired`).
Verses repeat within a Bible, and some engwebp verses are Tatoeba test sentences: the clean stage
removes repeated pairs and evaluation sentences, as for every corpus.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from data_prep.multiparallel import LanguageChoice, finish_report, text_script, write_pairs
from data_prep.opus_mt_testsets import count_lines
from ems.corpus import CorpusError, has_line_break, inside_folder
from ems.languages import UnknownLanguageError, corpus_language

CORPUS = "ebible"
ENGLISH_ID = "engwebp"
RANGE = "<range>"
RANGE_LIKE = re.compile(r"<\s*/?\s*range\b", re.IGNORECASE)  # `<range>`, and the markers meant as it
STATUS_FILE = "metadata/ebible_status.csv"
VREF_FILE = "metadata/vref.txt"
STATUS_COLUMNS = ("translationId", "languageCode", "licence_Licence_Type", "licence_Licence_Version", "Copyright")
EXPECTED = (
    f"the eBible layout: corpus/{ENGLISH_ID}.txt and corpus/<id>.txt, one line per verse of {VREF_FILE}, "
    f"and {STATUS_FILE}"
)


def build_ebible_corpus(
    root: str | Path, out_root: str | Path, languages: list[str] | None = None, merge: dict[str, str] | None = None
) -> dict:
    """Import the eBible translations at `root` (see the module docstring) into `out_root`;
    `languages` (None: all) and `merge` as data_prep.multiparallel.LanguageChoice reads them. Returns
    the report (data_prep.multiparallel; each file's entry also has `id`, `merged_verses` and
    `c1_repaired`, and `english` has English's), also written to `out_root/import_report.json`.

    Raises FileNotFoundError for a missing vref.txt, status csv or English file; CorpusError when the
    csv lacks a column, no translation is there, or a file's line count differs from vref.txt's
    (every file checked before anything is written); OutsideRootError for a file that a symlink
    leads out of `root`. A translation without a row in the csv, of English, or of a code that names
    no language is skipped and reported (`skipped_files`)."""
    root, out_root = Path(root), Path(out_root)
    choice = LanguageChoice(languages, merge)
    english = root / "corpus" / f"{ENGLISH_ID}.txt"
    for path in (root / VREF_FILE, root / STATUS_FILE, english):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: expected {EXPECTED}")
        inside_folder(root, path)
    verses = count_lines(root / VREF_FILE)
    status = _read_status(root / STATUS_FILE)
    paths = sorted(p for p in english.parent.glob("*.txt") if p != english)
    if not paths:
        raise CorpusError(f"{english.parent} holds no translation besides {english.name}: expected {EXPECTED}")
    report: dict = {"format": CORPUS, "root": str(root), **choice.report(), "files": {}, "skipped_files": {}}
    chosen: list[tuple[Path, dict]] = []
    for path in [english, *paths]:
        inside_folder(root, path)
        if (lines := count_lines(path)) != verses:
            raise CorpusError(f"{path} has {lines} lines, {root / VREF_FILE} {verses}: one line per verse reference")
    for path in paths:
        row = status.get(path.stem)
        if row is None:
            report["skipped_files"][path.stem] = f"no row in {STATUS_FILE}: its language and licence are unknown"
        elif row["languageCode"] == "eng":
            report["skipped_files"][path.stem] = "English (the English side is corpus/engwebp.txt)"
        else:
            chosen.append((path, row))
    english_lines, repaired = _read_verses(english)
    report["english"] = {"id": ENGLISH_ID, "c1_repaired": repaired}
    for path, row in chosen:
        lines, repaired = _read_verses(path)
        script = text_script(line for line in lines if line and not RANGE_LIKE.search(line))
        try:
            language = choice.key(corpus_language(row["languageCode"], script))
        except UnknownLanguageError:
            report["skipped_files"][path.stem] = f"its languageCode {row['languageCode']!r} names no language"
            continue
        if choice.keeps(language):
            entry = _import_translation(english_lines, lines, out_root, path.stem, language, script)
            report["files"][path.stem] = {**entry, "c1_repaired": repaired, "licence": licence(row)}
    return finish_report(report, out_root)


def _read_status(path: Path) -> dict[str, dict]:
    """{translationId: its row} of the status table; CorpusError for a table without the columns read."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as file:
        reader = csv.DictReader(file)
        try:
            missing = [column for column in STATUS_COLUMNS if column not in (reader.fieldnames or [])]
            if missing:
                raise CorpusError(f"{path} lacks the column(s) {missing}: expected the eBible status table")
            return {row["translationId"]: row for row in reader}
        except csv.Error as error:
            raise CorpusError(f"{path}: not a CSV table ({error})") from None


def licence(row: dict) -> str:
    """A translation's licence from its status row: `CC-BY-SA 4.0, Copyright © 2020 Biblica, Inc.`,
    `Public Domain`; the type as written for any other (`Unknown`)."""
    kind, version = row["licence_Licence_Type"].strip(), row["licence_Licence_Version"].strip()
    if kind.lower() == "public domain":
        text = "Public Domain"
    elif kind.lower().startswith("by"):
        text = f"CC-{kind.upper()} {version}".strip()
    else:
        text = kind or "unknown"
    holder = row["Copyright"].strip()
    return text if not holder or holder.lower() == "public domain" else f"{text}, {holder}"


# C1 control character -> the Windows-1252 character of that byte (where Windows-1252 has one)
_CP1252 = {code: char for code in range(0x80, 0xA0) if (char := bytes([code]).decode("cp1252", "ignore"))}


def _read_verses(path: Path) -> tuple[list[str | None], int]:
    """A file's lines, stripped, C1 controls mapped back to Windows-1252 (None for a line that is
    not valid UTF-8), and how many lines that mapping changed."""
    lines: list[str | None] = []
    repaired = 0
    with open(path, "rb") as file:
        for number, raw in enumerate(file):
            try:
                line = raw.decode("utf-8-sig" if number == 0 else "utf-8").strip()
            except UnicodeDecodeError:
                lines.append(None)
                continue
            lines.append(line.translate(_CP1252))
            repaired += lines[-1] != line
    return lines, repaired


def _verse_groups(english: list[str | None], other: list[str | None]) -> Iterator[tuple[int, int]]:
    """(first, end) line ranges of the verse groups: a line and the `<range>` lines after it, on
    either side; a `<range>` at the very start is a group of its own (nothing to merge into)."""
    start = 0
    for line in range(1, len(english) + 1):
        if line == len(english) or (english[line] != RANGE and other[line] != RANGE):
            yield start, line
            start = line


def _import_translation(
    english: list[str | None], other: list[str | None], out_root: Path, name: str, language: str, script: str | None
) -> dict:
    skipped: Counter = Counter()
    merged = 0

    def pairs() -> Iterator[tuple[str, str]]:
        nonlocal merged
        for first, end in _verse_groups(english, other):
            sides = (english[first:end], other[first:end])
            if RANGE in (sides[0][0], sides[1][0]):
                skipped["range_without_verse"] += end - first
            elif any(line is None for side in sides for line in side):
                skipped["invalid_utf8"] += end - first
            elif any(line != RANGE and RANGE_LIKE.search(line) for side in sides for line in side):
                skipped["malformed_range"] += end - first
            elif any(not line for side in sides for line in side):
                skipped["missing_verse"] += end - first
            else:
                texts = [" ".join(line for line in side if line != RANGE) for side in sides]
                if has_line_break(texts[0]) or has_line_break(texts[1]):
                    skipped["line_break"] += end - first
                else:
                    merged += end - first - 1
                    yield texts[0], texts[1]

    corpus = f"{CORPUS}-{name}"
    kept = write_pairs(out_root, corpus, language, pairs())
    return {
        "corpus": corpus,
        "id": name,
        "language": language,
        "script": script,
        "lines_read": len(other),
        "kept": kept,
        "merged_verses": merged,
        "skipped": dict(sorted(skipped.items())),
    }
