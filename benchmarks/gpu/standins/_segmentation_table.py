"""The table behind the stand-ins in this directory (jieba, fugashi, opencc): the answers the real
packages gave to every evaluation sentence that can reach them, recorded by `python -m
benchmarks.gpu.acceptance prepare` (benchmarks/gpu/prepared.py: segmentation.json.xz) and named by
$EMS_SEGMENTATION_TABLE.

The GPU run loads these modules in place of those packages (and names this directory in the PYTHONPATH
of spawned tokenizer workers) where those packages are not installed: ems.text then segments Chinese and Japanese
exactly as the real packages would, for those sentences. Any other text is a LookupError naming it.
"""

from __future__ import annotations

import json
import lzma
import os
from functools import cache

ENV = "EMS_SEGMENTATION_TABLE"


@cache
def table() -> dict:
    path = os.environ.get(ENV)
    if not path:
        raise LookupError(
            f"${ENV} is not set: the segmenter stand-ins need the table of `benchmarks.gpu.acceptance prepare`"
        )
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def lookup(kind: str, text: str):
    """The recorded answer of `kind` ("jieba", "mecab", "opencc") for `text`; LookupError if none."""
    try:
        return table()[kind][text]
    except KeyError:
        raise LookupError(
            f"{kind}: {text[:60]!r} is not in the segmentation table {os.environ.get(ENV)} "
            "(it holds the evaluation sentences only)"
        ) from None
