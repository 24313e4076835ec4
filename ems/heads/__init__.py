"""Meaning/language disentanglement heads on top of a frozen encoder (see ems.heads.base).

`HEADS` maps a head name to its class; `load_head(directory)` reads a saved head of any kind.
"""

from __future__ import annotations

import json
from pathlib import Path

from ems.heads.base import HEAD_JSON, VIEWS, Head, ParallelEmbeddings, UnknownLanguageError
from ems.heads.centering import CenteringHead
from ems.heads.dream import DreamHead
from ems.heads.meat import MeatHead
from ems.heads.projection import ProjectionHead
from ems.heads.reversible import ReversibleHead

HEADS = {
    "centering": CenteringHead,
    "projection": ProjectionHead,
    "dream": DreamHead,
    "meat": MeatHead,
    "reversible": ReversibleHead,
}


def load_head(directory: Path) -> Head:
    """The head saved in `directory`, of the kind named in its HEAD_JSON."""
    path = Path(directory) / HEAD_JSON
    if not path.is_file():
        raise FileNotFoundError(f"no saved head in {directory} (missing {HEAD_JSON})")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested too deep for the parser
        raise ValueError(f"{path}: not a head file ({' '.join(str(error).split())})") from None
    name = meta.get("name") if isinstance(meta, dict) else None
    if name not in HEADS:
        raise ValueError(f"{path}: unknown head {name!r}; known heads: {', '.join(HEADS)}")
    return HEADS[name].load(directory)


__all__ = ["HEADS", "HEAD_JSON", "VIEWS", "Head", "ParallelEmbeddings", "UnknownLanguageError", "load_head"]
