"""On-disk parallel corpus format: Moses-style aligned plain text, laid out as OPUS does.

A corpus root holds one directory per language pair, named with the two codes in
alphabetical order (``de-en``, ``en-fr``). Inside, ``<name>.<l1>`` and ``<name>.<l2>``
hold one sentence per line in UTF-8; line i of one file translates line i of the other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath


class CorpusError(ValueError):
    """A parallel corpus is malformed or cannot be written; the message names the files."""


# Every character str.splitlines() breaks on: a text holding one would shift the
# alignment for any reader that splits lines more eagerly than on "\n" alone.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def has_line_break(text: str) -> bool:
    """Whether `text` holds a character that str.splitlines() breaks on (a corpus line cannot)."""
    return not _LINE_BREAKS.isdisjoint(text)


@dataclass
class ReadReport:
    """Counts of what ``read_parallel`` did with the line pairs of one file pair."""

    read: int = 0
    kept: int = 0
    skipped_empty: int = 0
    skipped_invalid_utf8: int = 0
    skipped_too_long: int = 0
    path_l1: Path | None = None
    path_l2: Path | None = None

    def to_dict(self) -> dict:
        """The counts and the two paths (as strings), ready for JSON."""
        out = asdict(self)
        out["path_l1"] = None if self.path_l1 is None else str(self.path_l1)
        out["path_l2"] = None if self.path_l2 is None else str(self.path_l2)
        return out


@dataclass(frozen=True)
class ParallelFiles:
    """One aligned file pair of a corpus root: ``<root>/<l1>-<l2>/<name>.<l1|l2>``."""

    l1: str
    l2: str
    name: str
    path_l1: Path
    path_l2: Path


def corpus_of(name: str) -> str:
    """The corpus a corpus file belongs to: its name up to the first '-' (importers name their files
    `<corpus>-<part>`: `nllb_seed-mni_Beng`, `tatoeba_challenge-deu`; `gettext` is its own)."""
    return name.split("-", 1)[0]


def _check_language_code(code: str) -> None:
    if not code or "-" in code or "/" in code or "." in code or code != code.strip():
        raise CorpusError(f"invalid language code {code!r}: expected a code such as 'de' or 'yue'")


def pair_dir_name(l1: str, l2: str) -> str:
    """Name of the directory holding the l1/l2 pair: the two codes sorted and joined by '-'."""
    _check_language_code(l1)
    _check_language_code(l2)
    if l1 == l2:
        raise CorpusError(f"a language pair needs two different languages, got {l1!r} twice")
    return "-".join(sorted((l1, l2)))


class ParallelWriter:
    """Aligned pairs of one corpus and language pair, written as ``root/<pair>/<name>.<lang>``
    through ``.partial`` files that are renamed into place by `commit` (all at once, when every
    pair is written) and removed by `discard`; as a context manager it commits on success and
    discards on any exception (as `commit` does when its last writes fail, on a full disk), so a file in
    place is always whole and no partial file is left.

        with ParallelWriter(root, "TED2020", "de", "en") as writer:
            writer.write("Hallo.", "Hello.")

    `write` raises CorpusError if a text contains a line break (it would break the line
    alignment) or is not a str; `count` is the pairs written so far, `paths` the two final paths
    (lang_a's first).
    """

    def __init__(self, root: str | Path, name: str, lang_a: str, lang_b: str) -> None:
        if not name or "/" in name or name.startswith("."):
            raise CorpusError(f"invalid corpus name {name!r}")
        self.pair_dir = Path(root) / pair_dir_name(lang_a, lang_b)
        self.langs = (lang_a, lang_b)
        self.paths = (self.pair_dir / f"{name}.{lang_a}", self.pair_dir / f"{name}.{lang_b}")
        self._partials = tuple(path.with_name(path.name + ".partial") for path in self.paths)
        self.pair_dir.mkdir(parents=True, exist_ok=True)
        self._files = [open(path, "w", encoding="utf-8", newline="\n") for path in self._partials]
        self.count = 0

    def write(self, text_a: str, text_b: str) -> None:
        where = f"pair {self.count + 1} for {self.paths[0]} / {self.paths[1]}"
        _check_line_text(text_a, where, self.langs[0])
        _check_line_text(text_b, where, self.langs[1])
        self._files[0].write(text_a + "\n")
        self._files[1].write(text_b + "\n")
        self.count += 1

    def commit(self) -> tuple[Path, Path]:
        try:
            for file in self._files:
                file.close()
        except OSError:  # the last writes failed as they were flushed (a full disk): no file was renamed yet
            self.discard()
            raise
        for partial, path in zip(self._partials, self.paths):
            partial.replace(path)
        return self.paths

    def discard(self) -> None:
        """Remove the partial files, and the pair directory when that leaves it empty."""
        for file in self._files:
            file.close()
        for partial in self._partials:
            partial.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: other corpora of the pair are there
            self.pair_dir.rmdir()

    def __enter__(self) -> ParallelWriter:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is None:
            self.commit()
        else:
            self.discard()


def write_parallel(
    root: str | Path,
    name: str,
    lang_a: str,
    lang_b: str,
    pairs: Iterable[tuple[str, str]],
) -> tuple[Path, Path]:
    """Write (text in lang_a, text in lang_b) pairs as ``root/<pair>/<name>.<lang>`` files.

    Returns the paths of the lang_a and lang_b files (in that order). Raises CorpusError
    if a text contains a line break, since it would break the line alignment; the files
    are then left as they were, not half written (`ParallelWriter`).
    """
    with ParallelWriter(root, name, lang_a, lang_b) as writer:
        for text_a, text_b in pairs:
            writer.write(text_a, text_b)
    return writer.paths


def _check_line_text(text: object, where: str, lang: str) -> None:
    if not isinstance(text, str):
        raise CorpusError(f"{where}: the {lang} side is {type(text).__name__}, not str")
    if has_line_break(text):
        raise CorpusError(
            f"{where}: the {lang} text contains a line break, which would break the line alignment: {text!r}"
        )


def _read_line(file, max_bytes: int | None) -> tuple[bytes, bool]:
    """The next line (b"" at the end) and whether it was longer than `max_bytes` (then cut)."""
    if max_bytes is None:
        return file.readline(), False
    line = file.readline(max_bytes + 1)
    if len(line) <= max_bytes or line.endswith(b"\n"):
        return line, False
    while (rest := file.readline(1 << 20)) and not rest.endswith(b"\n"):
        pass  # skip the remainder without holding it in memory
    return line[:max_bytes], True


def read_parallel(
    path_l1: str | Path,
    path_l2: str | Path,
    report: ReadReport | None = None,
    max_line_bytes: int | None = None,
) -> Iterator[tuple[str, str]]:
    """Stream the (l1, l2) sentence pairs of two aligned files, line by line.

    Each side is stripped of its line ending and surrounding whitespace. A pair is skipped,
    and counted in ``report``, when either side is not valid UTF-8, is empty, or has more
    than ``max_line_bytes`` bytes (None: no limit; a longer line is never held whole).
    Raises CorpusError, with both line counts and paths, when the files differ in length.
    """
    path_l1, path_l2 = Path(path_l1), Path(path_l2)
    if report is None:
        report = ReadReport()
    report.path_l1, report.path_l2 = path_l1, path_l2
    for path in (path_l1, path_l2):
        if not path.is_file():
            raise CorpusError(f"parallel file not found: {path}")
    with open(path_l1, "rb") as file_l1, open(path_l2, "rb") as file_l2:
        line_no = 0
        while True:
            (raw_l1, long_l1), (raw_l2, long_l2) = (
                _read_line(file_l1, max_line_bytes),
                _read_line(file_l2, max_line_bytes),
            )
            if not raw_l1 and not raw_l2:
                return
            if not raw_l1 or not raw_l2:
                # The longer file is counted to its end so the message gives both lengths.
                lines_l1 = line_no + (1 + sum(1 for _ in file_l1) if raw_l1 else 0)
                lines_l2 = line_no + (1 + sum(1 for _ in file_l2) if raw_l2 else 0)
                raise CorpusError(
                    f"parallel files differ in length: {path_l1} has {lines_l1} lines, {path_l2} has {lines_l2} lines"
                )
            line_no += 1
            report.read += 1
            if long_l1 or long_l2:
                report.skipped_too_long += 1
                continue
            # utf-8-sig on the first line drops a byte order mark some editors write.
            encoding = "utf-8-sig" if line_no == 1 else "utf-8"
            try:
                text_l1 = raw_l1.decode(encoding).strip()
                text_l2 = raw_l2.decode(encoding).strip()
            except UnicodeDecodeError:
                report.skipped_invalid_utf8 += 1
                continue
            if not text_l1 or not text_l2:
                report.skipped_empty += 1
                continue
            report.kept += 1
            yield text_l1, text_l2


def _names_outside(name: str) -> bool:
    """Whether a relative name, as written, leaves the place it is relative to: absolute (`/x`, `C:x`,
    `\\x`) or with a `..` part (`\\` counts as a separator: the name may come from another system)."""
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or bool(path.parts and path.parts[0].endswith(":"))


def check_member_name(name: str, archive: str | Path) -> None:
    """CorpusError for an archive member whose name is absolute or climbs out ('..'): a hostile or
    broken archive, refused before anything is read from it (on every path that opens a zip or tar)."""
    if _names_outside(name):
        raise CorpusError(f"{archive}: member {name!r} names a path outside the archive; refused, nothing read from it")


class OutsideRootError(ValueError):
    """A path named inside a file (a manifest, an index, an alignment), or a file of a folder a reader
    walks (a symlink), leads out of the directory it belongs to; the message names the path and the
    directory (and the file that names it)."""


def _leads_outside(root: str | Path, name: str, links_within: str | Path | None = None) -> Path | None:
    """Where `root / name` resolves to (symlinks followed), when that is outside `root` (or outside
    `links_within`, when given); None when it stays inside. `root` is resolved first: a root that is a
    symlink is fine."""
    base = Path(root).resolve()
    resolved = (base / name).resolve()
    allowed = base if links_within is None else Path(links_within).resolve()
    return None if resolved.is_relative_to(allowed) else resolved


def inside_folder(folder: str | Path, path: str | Path, home: str = "", links_within: str | Path | None = None) -> Path:
    """`path`, a file or folder a reader found by walking the folder `folder` and is about to open, if it
    resolves inside `folder`, symlinks included; else OutsideRootError naming it and where it leads,
    before anything is opened. Every reader that walks a folder it was given (corpus folders, shards,
    model, vocabulary, evaluation data and run directories) checks each path it opens with this. `home`
    names the folder in the message (default: its path); `links_within`: a directory around `folder`
    that its symlinks may lead into (a Hugging Face cache snapshot's links into the repository's `blobs/`)."""
    path = Path(path)
    try:
        name = str(path.relative_to(folder))
    except ValueError:
        name = None
    outside = _leads_outside(folder, name, links_within) if name is not None else Path(path).resolve()
    if outside is not None:
        raise OutsideRootError(
            f"{path} leads to {outside}, outside {home or folder}: a folder's files must lie inside it; "
            f"refused, nothing read from it"
        )
    return path


def resolve_inside(
    root: str | Path, name: str, where: str | Path, home: str = "", links_within: str | Path | None = None
) -> Path:
    """`root / name` for a `name` read from inside the file `where`, if it stays inside `root`; else
    OutsideRootError, before anything is opened. Refused: an empty or absolute name, a `..` part (even
    one that would come back inside) and a name that resolves, through a symlink inside `root`, to a
    place outside `root` (itself resolved first, so a root that is a symlink is fine). `home` names
    the root in the message (default: its path). `links_within`: a directory around `root` that its
    symlinks may lead into (a Hugging Face cache snapshot's links into the repository's `blobs/`)."""
    home = home or str(root)
    if not isinstance(name, str) or not name or _names_outside(name):
        problem = f"outside {home}"
    else:
        resolved = _leads_outside(root, name, links_within)
        problem = None if resolved is None else f"which a symlink leads to {resolved}, outside {home}"
    if problem is not None:
        raise OutsideRootError(f"{where} names the path {name!r}, {problem}; refused, nothing read or written there")
    return Path(root) / name


class OutputIsInputError(ValueError):
    """A command's output file or folder is one of its inputs (the same path, a symlink leading to
    it, a hard link of it): writing it would overwrite what the command reads."""


def same_place(first: str | Path, second: str | Path) -> bool:
    """Whether the paths `first` and `second` name the same file or folder: the same path, a symlink
    leading to the other (or both to one place), or hard links of one file (the same device and
    inode). A path that does not exist is the same place as another only by its resolved path."""
    if Path(first).resolve() == Path(second).resolve():
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet)
        return False


def check_output_not_input(output: tuple[str, str | Path], inputs: Iterable[tuple[str, str | Path | None]]) -> None:
    """OutputIsInputError when the output `output` (the option that names it, its path) of a command is
    one of its `inputs` (each the option or what names it, and its path; None: not given) by
    `same_place`. Every command that writes a file or folder named on its command line checks this
    before it reads or writes anything."""
    option, path = output
    for name, source in inputs:
        if source is None or not same_place(path, source):
            continue
        if Path(path).absolute() == Path(source).absolute():
            how = ""
        elif Path(path).resolve() == Path(source).resolve():
            how = " (through a symlink)"
        else:
            how = " (a hard link of it: one file under two names)"
        raise OutputIsInputError(
            f"{option} {path} is the input {name} {source}{how}: writing it would overwrite what the command "
            "reads; choose another output"
        )


def check_output_folder(input_folder: str | Path, out: str | Path) -> None:
    """CorpusError when the output folder `out` of a stage is the folder `input_folder` it reads
    (`same_place`), or inside one of its pair folders (`<l1>-<l2>`, which the stage reads): the stage
    would read its own outputs, or overwrite its inputs, as it writes them. A folder beside the pair
    folders is fine."""
    source, target = Path(input_folder).resolve(), Path(out).resolve()
    same = same_place(input_folder, out)
    inside_pair = not same and target.is_relative_to(source) and "-" in target.relative_to(source).parts[0]
    if same or inside_pair:
        where = "the folder" if same else "inside a pair folder of"
        raise CorpusError(
            f"the output folder {out} is {where} {input_folder} that the stage reads: choose another output folder"
        )


def check_no_other_files(
    out: str | Path, inputs: list[ParallelFiles], input_folder: str | Path, pairs: Iterable[str] | None = None
) -> None:
    """CorpusError naming the first corpus file in the output folder `out` (in the pair folders
    `pairs`, when a task writes only those; else in any) that the stage would not write from `inputs`
    (the file pairs it reads from `input_folder`, written under the same names): a later stage would
    take it for this one's output. A file of the same name is written again, so it is no problem."""
    if not Path(out).is_dir():
        return
    names = {(files.l1, files.l2, files.name) for files in inputs}
    for files in list_parallel(out, pairs):
        if (files.l1, files.l2, files.name) not in names:
            raise CorpusError(
                f"{files.path_l1} is in the output folder {out} but is not written from {input_folder}: a later "
                "stage would read it as this one's output; remove it, or choose an empty output folder"
            )


def list_parallel(root: str | Path, pairs: Iterable[str] | None = None) -> list[ParallelFiles]:
    """All aligned file pairs under a corpus root (only those of `pairs`, e.g. ["de-en"], when
    given: other pair directories are not even looked at), sorted by (l1, l2, name).

    Hidden directories, directories whose name has no '-' and files whose suffix is neither
    language of their pair directory are not corpus files and are ignored. Raises
    CorpusError when the root does not exist, a pair directory is not in alphabetical order,
    or a file has no counterpart in the other language, and OutsideRootError when a file (or its
    pair directory) is a symlink leading outside the root (`inside_folder`).
    """
    root = Path(root)
    if not root.is_dir():
        raise CorpusError(f"corpus root {root} does not exist or is not a directory")
    pairs = None if pairs is None else set(pairs)
    found: list[ParallelFiles] = []
    pair_dirs = sorted(
        path
        for path in root.iterdir()
        if path.is_dir()
        and "-" in path.name
        and not path.name.startswith(".")
        and (pairs is None or path.name in pairs)
    )
    for pair_dir in pair_dirs:
        l1, _, l2 = pair_dir.name.partition("-")
        if not l1 or not l2 or "-" in l2:
            raise CorpusError(f"{pair_dir}: a pair directory must be named <l1>-<l2>")
        if l1 >= l2:
            raise CorpusError(
                f"{pair_dir}: pair directories name their languages in alphabetical order; "
                f"expected {pair_dir_name(l1, l2)!r}"
            )
        names_by_lang: dict[str, set[str]] = {l1: set(), l2: set()}
        for path in pair_dir.iterdir():
            name, dot, lang = path.name.rpartition(".")
            if dot and name and lang in names_by_lang and path.is_file():
                names_by_lang[lang].add(name)
        for lang, other in ((l1, l2), (l2, l1)):
            unmatched = sorted(names_by_lang[lang] - names_by_lang[other])
            if unmatched:
                raise CorpusError(
                    f"{pair_dir / f'{unmatched[0]}.{lang}'} has no counterpart {pair_dir / f'{unmatched[0]}.{other}'}"
                )
        for name in sorted(names_by_lang[l1]):
            paths = [inside_folder(root, pair_dir / f"{name}.{lang}", f"the corpus folder {root}") for lang in (l1, l2)]
            found.append(ParallelFiles(l1, l2, name, *paths))
    return found
