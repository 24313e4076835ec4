"""How the evaluation meets bad input: it degrades per language, not per task.

A test set that is missing, unreadable (not UTF-8, no permission) or malformed (unequal line
counts, a broken line or header) costs only its own item: a language, a pair or a track.
`DataErrors.read` runs an item's loader and records `{item: one-line reason}` instead of raising;
every task result carries that mapping under DATA_ERRORS ("data_errors"), next to "skipped"
(items left out by design: not covered by the encoder, not a language of the task, ...).
A task that cannot run at all (its data directory, config or shared file missing or broken)
becomes a TaskResult with `error` set (eval.run_all, eval.results). `not_run(results)` lists both kinds: eval.run_all
writes results.json and report.md in any case and exits with NOT_RUN_EXIT_CODE when the list is
not empty, whatever the kind of missing input (data directory, --heldout directory, one file,
an unreadable file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ems.cli import USAGE_EXIT_CODE, one_line

DATA_ERRORS = "data_errors"
# What reading a test set raises for bad input: OSError (ems.cli.MissingDataError, no
# permission, a directory where a file should be) and ValueError (bad UTF-8, unequal line counts,
# a malformed line or header, an unknown language code). Encoding and scoring stay outside.
DATA_FAULTS = (OSError, ValueError)
# The exit status of eval.run_all when a requested task or language could not run: the status of
# every other user error (ems.cli), distinct from 0 and from ems.training.train's 99 (pre-empted).
NOT_RUN_EXIT_CODE = USAGE_EXIT_CODE

T = TypeVar("T")


class DataErrors(dict):
    """{item: reason} of the items whose data could not be read."""

    def read(self, item: str, load: Callable[..., T], *args, **kwargs) -> T | None:
        """`load(*args, **kwargs)`, or None after recording a DATA_FAULTS error under `item`."""
        try:
            return load(*args, **kwargs)
        except DATA_FAULTS as error:
            self[item] = one_line(error)
            return None


def not_run(results: dict) -> list[str]:
    """What could not run in {task name: eval.results.TaskResult}: "task" for a task that did not
    run, "task/item" for an item of a task that did."""
    failed = []
    for name, result in results.items():
        if result.error is not None:
            failed.append(name)
        failed += [f"{name}/{item}" for item in result.data_errors]
    return failed


def not_run_lines(name: str, result) -> list[str]:
    """One "<task>[/<item>]: not run: <reason>" line per task error or data error of a TaskResult."""
    if result.error is not None:
        return [f"{name}: not run: {result.error}"]
    return [f"{name}/{item}: not run: {reason}" for item, reason in result.data_errors.items()]
