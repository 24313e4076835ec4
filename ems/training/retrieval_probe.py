"""A small fixed retrieval probe that a training run scores its model on every N steps (learning
curves): Tatoeba and FLORES-200 devtest bidirectional P@1 on the languages of the model's
vocabulary, the protocol of eval.evaluators.tatoeba and eval.evaluators.flores on the first
`max_sentences` pairs.

The sentences are tokenized once, when the probe is built, so a probe costs only the forward
passes. In: a data root (holding tatoeba/ and flores200/devtest/) and the run's Tokenizer.
Out: `RetrievalProbe.run(encoder)` -> {"tatoeba": {"average", "languages": {lang: P@1}}, "flores": ...}.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ems.cli import MissingDataError
from ems.encoder import embed_token_ids
from ems.languages import ENGLISH, lang_to_tatoeba_code
from ems.model import EncoderNetwork
from ems.text import Tokenizer
from eval.evaluators.flores import load_flores_pair
from eval.evaluators.retrieval import bidirectional_p_at_1
from eval.evaluators.tatoeba import TATOEBA_TEST_CODES, load_tatoeba_pair

PROBE_TASKS = ("tatoeba", "flores")


@dataclass
class ProbeSet:
    """One language's aligned test pairs, as text (for LASER's duplicate rule) and token ids."""

    task: str
    lang: str
    xx: list[str]
    en: list[str]
    xx_ids: list[list[int]]
    en_ids: list[list[int]]


def _pairs(task: str, data_dir: Path, lang: str, max_sentences: int) -> tuple[list[str], list[str]] | None:
    """The first `max_sentences` (xx, English) pairs of `lang` in `task`'s test set, None if it has none."""
    code = lang_to_tatoeba_code(lang)
    try:
        if task == "tatoeba":
            return load_tatoeba_pair(data_dir / "tatoeba", code, max_sentences) if code in TATOEBA_TEST_CODES else None
        return load_flores_pair(data_dir / "flores200" / "devtest", lang, max_sentences=max_sentences)
    except MissingDataError:
        return None


class RetrievalProbe:
    """The probe sets of every non-English vocabulary language that Tatoeba / FLORES have; the
    languages without a set are in `missing` ({task: [langs]}), and pairs that have an empty side
    after tokenization are dropped and counted in `dropped_pairs`."""

    def __init__(self, data_dir: str | Path, tokenizer: Tokenizer, max_sentences: int = 1000):
        data_dir = Path(data_dir)
        self.sets: list[ProbeSet] = []
        self.missing: dict[str, list[str]] = {task: [] for task in PROBE_TASKS}
        self.dropped_pairs = 0
        for task in PROBE_TASKS:
            for lang in tokenizer.languages:
                if lang == ENGLISH:
                    continue
                pairs = _pairs(task, data_dir, lang, max_sentences)
                if pairs is None:
                    self.missing[task].append(lang)
                    continue
                xx, en = pairs
                xx_ids, en_ids = tokenizer.encode(xx, lang), tokenizer.encode(en, ENGLISH)
                keep = [i for i in range(len(xx)) if xx_ids[i] and en_ids[i]]
                self.dropped_pairs += len(xx) - len(keep)
                self.sets.append(
                    ProbeSet(
                        task,
                        lang,
                        [xx[i] for i in keep],
                        [en[i] for i in keep],
                        [xx_ids[i] for i in keep],
                        [en_ids[i] for i in keep],
                    )
                )

    def __bool__(self) -> bool:
        return bool(self.sets)

    def run(self, encoder: EncoderNetwork, batch_size: int = 256) -> dict:
        """Mean bidirectional P@1 (%) per task and language of `encoder` in eval mode (its mode is
        restored after)."""
        training = encoder.training
        encoder.eval()
        device = next(encoder.parameters()).device
        try:
            scores: dict[str, dict[str, float]] = {}
            for probe in self.sets:
                xx = embed_token_ids(encoder, probe.xx_ids, batch_size, device)
                en = embed_token_ids(encoder, probe.en_ids, batch_size, device)
                p_at_1 = bidirectional_p_at_1(xx, en, xx_texts=probe.xx, en_texts=probe.en)["mean"]
                scores.setdefault(probe.task, {})[probe.lang] = p_at_1
        finally:
            encoder.train(training)
        return {
            task: {"average": float(np.mean(list(langs.values()))), "languages": langs}
            for task, langs in scores.items()
        }
