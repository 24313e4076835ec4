"""ems/apps/studies/heads_study.py chooses on MLQE dev only: poisoning every test figure changes no
choice, changing a dev figure does; capped_rows is the sample `capped` keeps."""

import copy

import numpy as np

from ems.apps.studies import heads_study
from eval.parallel_data import SentencePairs, capped, capped_rows


def _row(source, head, rate, dev, test):
    return {
        "source": source,
        "task": "qe",
        "head": head,
        "setting": f"{head} lr={rate:g}",
        "learning_rate": rate,
        "dev_avg": {"raw": 0.1, head: dev},
        "test_avg": {"raw": 0.1, head: test},
        "test": {"en-de": {"raw": 0.1, head: test}},
        **({"test_avg6": {"raw": 0.1, head: test}} if source == "flores" else {}),
    }


def _rows():
    return [
        _row(source, head, rate, dev, test)
        for source, head, rate, dev, test in [
            ("flores", "dream", 1e-3, 0.30, 0.10),
            ("flores", "dream", 3e-3, 0.20, 0.50),
            ("flores", "meat", 1e-4, 0.25, 0.40),
            ("flores", "meat", 3e-4, 0.35, 0.05),
            ("corpus@1000", "dream", 1e-3, 0.10, 0.90),
            ("corpus@1000", "meat", 1e-4, 0.40, 0.0),
        ]
    ]


def test_choices_read_dev_only():
    rows = _rows()
    assert heads_study.chosen_on_dev(rows, "flores") == {"dream": 1e-3, "meat": 3e-4}
    poisoned = copy.deepcopy(rows)
    for row in poisoned:
        row["test_avg"] = {view: -value for view, value in row["test_avg"].items()}
        row["test"]["en-de"] = {view: -value for view, value in row["test"]["en-de"].items()}
    assert heads_study.chosen_on_dev(poisoned, "flores") == {"dream": 1e-3, "meat": 3e-4}

    def chosen_in_summary(rows):  # the view, the chosen setting and source, its dev average
        lines = heads_study.summary(rows).splitlines()
        return [line.split(" | ")[:3] for line in lines if line.startswith(("| dream |", "| meat |"))]

    assert (
        chosen_in_summary(rows)
        == chosen_in_summary(poisoned)
        == [["| dream", "dream lr=0.001, flores", "0.300"], ["| meat", "meat lr=0.0001, corpus@1000", "0.400"]]
    )
    rows[1]["dev_avg"]["dream"] = 0.31
    assert heads_study.chosen_on_dev(rows, "flores")["dream"] == 3e-3


def test_capped_rows_are_the_rows_capped_keeps():
    pairs = SentencePairs("en", "de", [f"e{i}" for i in range(50)], [f"d{i}" for i in range(50)], "test")
    rows = capped_rows(50, 7, seed=3)
    assert [pairs.x[i] for i in rows] == capped([pairs], 7, seed=3)[0].x and np.all(np.diff(rows) > 0)
    assert capped_rows(50, 50, 0) is None and capped_rows(50, None, 0) is None
