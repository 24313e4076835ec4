"""What a Hugging Face import raises for a source it cannot import as asked.

In: a problem found while importing (a source, a column layout, a path a file names); out: one
HFImportError whose message says which and why (a UserError: one line `error: ...`, exit status 2).
`inside` is ems.corpus.resolve_inside raising it.
"""

from __future__ import annotations

from pathlib import Path

from ems.cli import UserError
from ems.corpus import OutsideRootError, resolve_inside


class HFImportError(UserError):
    """A Hugging Face dataset that cannot be read or imported as asked; the message says which and why."""


def inside(root: Path, name, where: Path, links_within: Path | None = None) -> Path:
    """ems.corpus.resolve_inside as an HFImportError: `name`, read from `where`, stays inside `root`."""
    try:
        return resolve_inside(root, name, where, links_within=links_within)
    except OutsideRootError as error:
        raise HFImportError(str(error)) from None
