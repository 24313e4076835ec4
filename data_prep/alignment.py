"""A model-free check for misaligned pairs in a corpus of one-to-one translations (each sentence
translated once, by professionals: NLLB-Seed, a Bible), run by the clean stage on the corpora its
`alignment_check` names (data_prep.clean.CleanSettings).

The signal: in such a corpus a non-English side that comes with two or more different English sides
cannot translate them all, so every pair holding it is flagged (which of them, if any, is right is
unknown). A misaligned block leaves runs of them: NLLB-Seed's `mni_Beng` repeats a few dozen Meitei
lines against different English from line 1,539 to 2,463 (709 lines). Runs are reported as stretches.
The clean stage's length-ratio filter (against the file's median ratio) is the second signal; both
count per file, i.e. per language and corpus, in clean_report.json.

Not for corpora where one sentence has several good English translations ("I'm tired." / "I am
tired."): 4.7% of the Tatoeba Challenge's pairs share their non-English side with a different English
one. On the clean Seed files the check flags 0-0.6% of the lines, on the Bibles 0.03-2.1%.
"""

from __future__ import annotations

import numpy as np

STRETCH_GAP = 10  # flagged lines at most this far apart belong to one stretch
STRETCH_MIN = 20  # flagged lines that make a stretch worth reporting


def repeated_against_different(checked: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Mask of the pairs whose `checked` side (hashes, one per pair) occurs with two or more
    different `other` sides (hashes) in the file."""
    if not len(checked):
        return np.zeros(0, dtype=bool)
    distinct = np.unique(np.stack([checked, other], axis=1), axis=0)
    values, counts = np.unique(distinct[:, 0], return_counts=True)
    return np.isin(checked, values[counts > 1])


def flagged_pairs(hashes_l1: np.ndarray, hashes_l2: np.ndarray, l1: str, l2: str, english: str) -> np.ndarray:
    """Mask of the misaligned pairs of one file: its non-English side repeated against different
    English sides (in a pair without English: either side repeated against different other sides)."""
    if l1 == english:
        return repeated_against_different(hashes_l2, hashes_l1)
    if l2 == english:
        return repeated_against_different(hashes_l1, hashes_l2)
    return repeated_against_different(hashes_l1, hashes_l2) | repeated_against_different(hashes_l2, hashes_l1)


def stretches(lines: np.ndarray, flagged: np.ndarray) -> list[list[int]]:
    """[first line, last line, flagged lines] of every run of flagged lines (line numbers `lines`, one
    per pair) whose neighbours are at most STRETCH_GAP lines apart and that holds at least STRETCH_MIN."""
    found, run = [], []
    for line in lines[flagged]:
        if run and line - run[-1] > STRETCH_GAP:
            found.append(run)
            run = []
        run.append(int(line))
    found.append(run)
    return [[run[0], run[-1], len(run)] for run in found if len(run) >= STRETCH_MIN]
