"""Gettext catalogs: finding them in installed packages and ``.whl`` files, and reading their entries.

A catalog is ``locale/<locale>/LC_MESSAGES/<domain>.mo`` (compiled) or its ``.po`` source; a ``.po``
with its ``.mo`` beside it is left for the ``.mo``. ``parse_mo`` reads the compiled format itself,
``parse_po`` reads a source through babel. data_prep.gettext_corpus builds its corpus from them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from babel.messages.pofile import PoFileError, read_po

from ems.corpus import check_member_name, inside_folder

DEFAULT_PACKAGES = ("django", "wagtail", "sphinx")

_MO_MAGIC = 0x950412DE
_CONTEXT_SEPARATOR = "\x04"
_PLURAL_SEPARATOR = "\x00"


class CatalogParseError(ValueError):
    """A catalog (.mo or .po) is corrupt, truncated or undecodable; the message names the file."""


class MoParseError(CatalogParseError):
    """A .mo catalog is corrupt, truncated or undecodable; the message names the file."""


class PoParseError(CatalogParseError):
    """A .po catalog cannot be read; the message names the file."""


class GettextCorpusError(ValueError):
    """The gettext corpus cannot be built as asked (missing package, bad wheel, no data)."""


@dataclass(frozen=True)
class CatalogEntry:
    """One translated message of a catalog: the singular msgid and msgstr[0] for plurals."""

    context: str | None
    msgid: str
    msgstr: str
    msgid_plural: str | None = None


def _parse_charset(header: bytes) -> str:
    match = re.search(rb"charset=\s*([A-Za-z0-9_.:-]+)", header)
    return match.group(1).decode("ascii") if match else "utf-8"


def parse_mo(data: bytes, source: str) -> list[CatalogEntry]:
    """Parse the bytes of a compiled gettext catalog into its entries (header excluded).

    ``source`` names the file in error messages. Raises MoParseError when the data is not a
    .mo catalog, is truncated, or cannot be decoded with the charset its header declares.
    """
    if len(data) < 20:
        raise MoParseError(f"{source}: {len(data)} bytes is too short for a .mo catalog")
    for byte_order in ("<", ">"):
        if struct.unpack(byte_order + "I", data[:4])[0] == _MO_MAGIC:
            break
    else:
        raise MoParseError(f"{source}: not a .mo catalog (bad magic number {data[:4].hex()})")
    revision, count, originals_at, translations_at = struct.unpack(byte_order + "4I", data[4:20])
    if revision >> 16 not in (0, 1):
        raise MoParseError(f"{source}: unsupported .mo major revision {revision >> 16}")
    table_bytes = 8 * count
    for table_at in (originals_at, translations_at):
        if table_at + table_bytes > len(data):
            raise MoParseError(
                f"{source}: truncated .mo catalog: its string table for {count} messages "
                f"ends at byte {table_at + table_bytes}, past the end of the file ({len(data)})"
            )

    def string_at(table_at: int, index: int) -> bytes:
        length, offset = struct.unpack_from(byte_order + "2I", data, table_at + 8 * index)
        if offset + length > len(data):
            raise MoParseError(
                f"{source}: truncated .mo catalog: message {index} ends at byte "
                f"{offset + length}, past the end of the file ({len(data)})"
            )
        return data[offset : offset + length]

    raw_pairs = [(string_at(originals_at, i), string_at(translations_at, i)) for i in range(count)]
    charset = "utf-8"
    for raw_msgid, raw_msgstr in raw_pairs:
        if raw_msgid == b"":
            charset = _parse_charset(raw_msgstr)
    try:
        decoded = [(m.decode(charset), t.decode(charset)) for m, t in raw_pairs]
    except LookupError:
        raise MoParseError(f"{source}: unknown charset {charset!r} in the header") from None
    except UnicodeDecodeError as error:
        raise MoParseError(f"{source}: text is not valid {charset}: {error}") from None

    entries = []
    for msgid, msgstr in decoded:
        if msgid == "":
            continue
        context = None
        if _CONTEXT_SEPARATOR in msgid:
            context, msgid = msgid.split(_CONTEXT_SEPARATOR, 1)
        msgid, _, msgid_plural = msgid.partition(_PLURAL_SEPARATOR)
        entries.append(
            CatalogEntry(
                context=context,
                msgid=msgid,
                msgstr=msgstr.split(_PLURAL_SEPARATOR)[0],
                msgid_plural=msgid_plural or None,
            )
        )
    return entries


def parse_po(data: bytes, source: str) -> tuple[list[CatalogEntry], list[str]]:
    """Parse the bytes of a gettext source catalog (babel's reader) into its entries and the
    warnings of the reader (lines it could not make sense of, which it skips).

    Kept as msgfmt compiles a .mo: no header, no fuzzy or obsolete entry, no untranslated one.
    Raises PoParseError when the file cannot be read at all (undecodable, unknown charset).
    """
    warnings = io.StringIO()
    try:
        with contextlib.redirect_stdout(warnings):  # babel prints what it skips
            catalog = read_po(io.BytesIO(data), ignore_obsolete=True)
    except (PoFileError, ValueError, LookupError) as error:  # ValueError: UnicodeDecodeError
        raise PoParseError(f"{source}: not a readable .po catalog: {error}") from None
    except (AttributeError, TypeError, IndexError, KeyError) as error:  # babel's own failures on broken input
        # e.g. a header line folded onto the next ("POT-Creation-Date: 2026-11-27\n" " 02:55\n"): its date
        # parser's regex does not match and it calls .group() on None
        raise PoParseError(
            f"{source}: not a readable .po catalog: babel failed on it ({type(error).__name__}: {error})"
        ) from None
    entries = []
    for message in catalog:
        if not message.id or message.fuzzy:
            continue
        msgid, msgid_plural = (message.id[0], message.id[1]) if isinstance(message.id, tuple) else (message.id, None)
        msgstr = message.string[0] if isinstance(message.string, tuple) else message.string
        if msgstr:
            entries.append(CatalogEntry(message.context, msgid, msgstr, msgid_plural))
    return entries, [line.removeprefix("WARNING: ") for line in warnings.getvalue().splitlines()]


@dataclass(frozen=True)
class CatalogFile:
    """A .mo or .po catalog found in a package or wheel: a printable source, its locale, its bytes.

    `compiled_beside`: a .po whose .mo sits beside it; that .mo is read instead (`data` is empty).
    """

    source: str
    locale: str
    data: bytes
    compiled_beside: bool = False

    @property
    def is_po(self) -> bool:
        return self.source.endswith(".po")


def _catalog_locale(parts: tuple[str, ...]) -> str | None:
    """The locale of a path ending in ``locale/<locale>/LC_MESSAGES/<domain>.mo`` (or ``.po``), else None."""
    if len(parts) >= 4 and parts[-1].endswith((".mo", ".po")) and parts[-2] == "LC_MESSAGES" and parts[-4] == "locale":
        return parts[-3]
    return None


def _catalog_files(source: str, names: list[str], read) -> Iterator[CatalogFile]:
    """CatalogFile of each catalog path of `names` (sorted; `read(name)` gives its bytes), a .po
    beside its .mo marked `compiled_beside` and not read."""
    present = set(names)
    for name in sorted(names):
        locale = _catalog_locale(PurePosixPath(name).parts)
        if name.endswith(".po") and name[:-3] + ".mo" in present:
            yield CatalogFile(f"{source}:{name}", locale, b"", compiled_beside=True)
        else:
            yield CatalogFile(f"{source}:{name}", locale, read(name))


def _package_catalogs(package: str) -> Iterator[CatalogFile]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as error:
        raise GettextCorpusError(f"cannot look up package {package!r}: {error}") from None
    if spec is None or not spec.submodule_search_locations:
        raise GettextCorpusError(
            f"package {package!r} is not installed (or is not a package); install it, "
            f"e.g. `pip install ems[demo]`, or pass its wheel file instead"
        )
    for location in sorted(spec.submodule_search_locations):
        package_dir = Path(location)
        found = [
            path.relative_to(package_dir).as_posix()
            for pattern in ("*.mo", "*.po")
            for path in package_dir.rglob(pattern)
            if _catalog_locale(path.parts) is not None
        ]
        yield from _catalog_files(
            package, found, lambda relative: inside_folder(package_dir, package_dir / relative).read_bytes()
        )


def _wheel_catalogs(wheel: Path) -> Iterator[CatalogFile]:
    if not wheel.is_file():
        raise GettextCorpusError(f"wheel file not found: {wheel}")
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                check_member_name(name, wheel)
            members = [name for name in archive.namelist() if _catalog_locale(PurePosixPath(name).parts) is not None]
            yield from _catalog_files(wheel.name, members, archive.read)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError) as error:
        raise GettextCorpusError(f"{wheel} is not a readable wheel (zip) file: {error}") from None


def check_collection(value: object, what: str) -> None:
    """TypeError when `value`, the argument `what`, is one string or path: iterated, it would give
    characters where a collection of names was meant."""
    if isinstance(value, (str, Path)):
        raise TypeError(f"{what} must be a collection such as [{str(value)!r}], not one value")


def find_catalogs(
    packages: Iterable[str] = DEFAULT_PACKAGES, wheels: Iterable[str | Path] = ()
) -> Iterator[CatalogFile]:
    """Every ``locale/<locale>/LC_MESSAGES/*.{mo,po}`` catalog of the packages, then the wheels.

    Packages are looked up among the installed ones; wheels are ``.whl`` (zip) files.
    Catalogs come in a fixed order: sources as given, paths sorted within each source. A .po
    with its .mo beside it comes with `compiled_beside` set and no data.
    """
    check_collection(packages, "packages")
    check_collection(wheels, "wheels")
    for package in packages:
        yield from _package_catalogs(package)
    for wheel in wheels:
        yield from _wheel_catalogs(Path(wheel))
