"""A dataset's rows to the pairs kept, written per language pair, with the counts of what was skipped.

In: an opened split (data_prep.hf.source), the CorpusSpec (`min_score`, the caps, `sample`, `seed`), the
language pairs asked for, the corpus name and the output root; out: `OUT/<l1>-<l2>/<name>.<l1|l2>` per
language pair (ems.corpus.ParallelWriter: written under `.partial` names and renamed when the whole
source is read, so a killed import leaves no file that looks finished) and the report entry's counts.

Skips: a pair whose side is null (`null`), not a str (`not_text`), empty once stripped (`empty`) or
holds a line break (`line_break`), whose score is missing or below min_score (`no_score`,
`below_min_score`), or that the cap leaves out (`over_cap`) is counted under its language pair;
a row whose language tag is no language (`unknown_language`, by tag), whose two sides are one
language (`same_language`), whose pair was not asked for (`pair_not_selected`) or whose translation
dict holds not exactly two texts (`not_two_texts`) is counted for the source. A source with no rows,
or none kept, is an HFImportError and writes nothing.

Caps (`max_pairs`, `max_pairs_for`; per language pair): `sample: reservoir` keeps a uniform sample
of exactly min(cap, eligible pairs) in one pass (Algorithm R, seeded by `seed` and the pair; the
sample, at most cap pairs, is held in memory), written in the source's order; `sample: first` keeps
the first cap eligible pairs, and stops reading a source of one known language pair once it is full.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
from collections import Counter, defaultdict
from pathlib import Path

from data_prep.config import CorpusSpec
from data_prep.hf.errors import HFImportError
from data_prep.hf.layout import NOT_TWO_TEXTS, detect_layout, language_or_none
from data_prep.hf.source import read_batches
from ems.corpus import ParallelWriter, has_line_break, pair_dir_name


def _text(value) -> tuple[str | None, str | None]:
    """(the skip reason, None) or (None, the stripped text)."""
    if value is None:
        return "null", None
    if not isinstance(value, str):
        return "not_text", None
    text = value.strip()
    if not text:
        return "empty", None
    if has_line_break(text):
        return "line_break", None
    return None, text


class Pair:
    """One language pair's counts and its output: a writer, or the reservoir of a sample. Its texts
    come in the pair folder's order (l1 < l2)."""

    def __init__(self, l1: str, l2: str, cap: int | None, sample: str, seed: int) -> None:
        self.langs = l1, l2
        self.read, self.eligible = 0, 0
        self.skipped: Counter = Counter()
        self.cap, self.sample = cap, sample
        self.writer: ParallelWriter | None = None
        self.reservoir: list[tuple[int, str, str]] = []
        self.rng = random.Random(f"{seed}:{l1}-{l2}")

    @property
    def full(self) -> bool:
        return self.cap is not None and self.sample == "first" and self.eligible >= self.cap

    def keep(self, row: int, text_1: str, text_2: str, open_writer) -> None:
        """A pair that passed every check: written, sampled (Algorithm R) or over the cap."""
        index = self.eligible
        self.eligible += 1
        if self.cap is not None and self.sample == "reservoir":
            if index < self.cap:
                self.reservoir.append((row, text_1, text_2))
            elif (slot := self.rng.randrange(index + 1)) < self.cap:
                self.reservoir[slot] = (row, text_1, text_2)
            return
        if self.cap is not None and index >= self.cap:
            return
        if self.writer is None:
            self.writer = open_writer(*self.langs)
        self.writer.write(text_1, text_2)

    def write_sample(self, open_writer) -> None:
        if self.reservoir:
            self.writer = open_writer(*self.langs)
            for _, text_1, text_2 in sorted(self.reservoir):  # the source's order
                self.writer.write(text_1, text_2)


def import_rows(
    dataset,
    spec: CorpusSpec,
    config: str | None,
    name: str,
    selected: list[str] | None,
    out_root: Path,
    total: int | None,
    progress: bool,
    where: str,
) -> dict:
    """Read every row (or until a `first` sample is full), write the kept pairs; the report entry's counts."""
    from tqdm import tqdm

    batches = read_batches(dataset, where)
    first = next(batches, None)
    if first is None or not any(len(column) for column in first.values()):
        raise HFImportError(f"{where} has no rows: nothing to import")
    layout = detect_layout(first, getattr(dataset, "features", None), spec, config, where)
    wanted = None if selected is None else set(selected)
    pairs: dict[str, Pair] = {}
    source_skips: defaultdict[str, Counter] = defaultdict(Counter)

    def route(tag_a, tag_b) -> tuple[Pair | None, bool, str | None, str | None]:
        """Where the rows of two language tags go: (their pair, whether its sides come swapped) or
        (None, _, the source-level skip reason, what to count it under)."""
        if tag_a == NOT_TWO_TEXTS:
            return None, False, "not_two_texts", layout.columns["translation"]
        lang_a, lang_b = language_or_none(tag_a), language_or_none(tag_b)
        if lang_a is None or lang_b is None:
            return None, False, "unknown_language", str(tag_a if lang_a is None else tag_b)
        if lang_a == lang_b:
            return None, False, "same_language", lang_a
        l1, l2 = sorted((lang_a, lang_b))
        name_ = pair_dir_name(l1, l2)
        if wanted is not None and name_ not in wanted:
            return None, False, "pair_not_selected", name_
        if name_ not in pairs:
            pairs[name_] = Pair(l1, l2, spec.cap(name_), spec.sample, spec.seed)
        return pairs[name_], lang_a != l1, None, None

    routes: dict[tuple, tuple] = {}
    rows, stopped_early = 0, False
    with (
        contextlib.ExitStack() as writers,
        tqdm(total=total, desc=f"hf {name}", unit=" rows", disable=not progress, mininterval=1.0) as bar,
    ):

        def open_writer(l1: str, l2: str) -> ParallelWriter:
            return writers.enter_context(ParallelWriter(out_root, name, l1, l2))

        for batch in itertools.chain([first], batches):
            for tag_a, tag_b, text_a, text_b, score in layout.rows(batch):
                row = rows
                rows += 1
                pair, swap, reason, counted = routes.get((tag_a, tag_b)) or routes.setdefault(
                    (tag_a, tag_b), route(tag_a, tag_b)
                )
                if pair is None:
                    source_skips[reason][counted] += 1
                    continue
                pair.read += 1
                reason, text_a = _text(text_a)
                if reason is None:
                    reason, text_b = _text(text_b)
                if reason is None and spec.min_score is not None:
                    if not isinstance(score, (int, float)) or math.isnan(score):
                        reason = "no_score"
                    elif score < spec.min_score:
                        reason = "below_min_score"
                if reason is not None:
                    pair.skipped[reason] += 1
                    continue
                pair.keep(row, *((text_b, text_a) if swap else (text_a, text_b)), open_writer)
            bar.update(len(next(iter(batch.values()))))
            bar.set_postfix(kept=sum(min(p.eligible, p.cap or p.eligible) for p in pairs.values()), refresh=False)
            if layout.pair is not None and layout.pair in pairs and pairs[layout.pair].full:
                stopped_early = True
                break
        for pair in pairs.values():
            pair.write_sample(open_writer)
        if not any(pair.writer is not None for pair in pairs.values()):
            counts = [f"{reason} {sum(tags.values())}" for reason, tags in sorted(source_skips.items())]
            counts += [f"{name_}: {dict(pair.skipped)}" for name_, pair in sorted(pairs.items())]
            raise HFImportError(f"{where}: no pair kept of the {rows} rows read ({'; '.join(counts)}); nothing written")
    return {
        "layout": layout.name,
        "columns": layout.columns,
        "rows_read": rows,
        "stopped_early": stopped_early,
        "skipped": {reason: dict(sorted(tags.items())) for reason, tags in sorted(source_skips.items())},
        "pairs": {name_: _pair_report(pair) for name_, pair in sorted(pairs.items())},
    }


def _pair_report(pair: Pair) -> dict:
    written = 0 if pair.writer is None else pair.writer.count
    skipped = dict(pair.skipped)
    if pair.eligible > written:
        skipped["over_cap"] = pair.eligible - written
    return {
        "read": pair.read,
        "kept": written,
        "skipped": dict(sorted(skipped.items())),
        "cap": pair.cap,
        "sample": pair.sample if pair.cap is not None else None,
        "files": [] if pair.writer is None else [f"{path.parent.name}/{path.name}" for path in pair.writer.paths],
    }
