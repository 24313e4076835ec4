"""`HeadEncoder`: an encoder that returns one view of another encoder's embeddings.

HeadEncoder(encoder, head, "meaning").encode(sentences, lang) = head.meaning(encoder.encode(...), lang)
(likewise "language"; "raw" passes through). It is itself an encoder (encode, languages), so
every evaluation task accepts it. To cache embeddings, cache the wrapped encoder
(ems.encoder_kinds.CachedEncoder): a view has no model id of its own, since a retrained head
changes it.
"""

from __future__ import annotations

import numpy as np

from ems.heads.base import VIEWS


class HeadEncoder:
    def __init__(self, encoder, head, view: str = "meaning"):
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
        self.encoder, self.head, self.view = encoder, head, view
        head_languages = getattr(head, "languages", None)
        inner = getattr(encoder, "languages", None)
        # the languages this view can encode: the head's, within the encoder's (None = any)
        self.languages = head_languages
        if inner is not None:
            self.languages = [lang for lang in inner if head_languages is None or lang in head_languages]

    def encode(self, sentences: list[str], lang: str) -> np.ndarray:
        embeddings = np.asarray(self.encoder.encode(sentences, lang), dtype=np.float32)
        if self.view == "raw":
            return embeddings
        return getattr(self.head, self.view)(embeddings, lang)
