"""How every command line of the project (data_prep, ems.*, eval.*) reports a user's mistake.

    sys.exit(run_main(main))        # in `if __name__ == "__main__":`, with main(argv) -> int | None

`run_main` calls `main(argv)`. An exception that is the user's to fix becomes one line
`error: <message>` on stderr and exit status USAGE_EXIT_CODE (2, as argparse's own usage errors;
distinct from ems.training.train's 99 = pre-empted). User errors are UserError and the exception families
that reading configs, arguments and files raise: ValueError (bad values, unknown keys, bad
UTF-8, malformed JSON), OSError (missing or unreadable files) and yaml.YAMLError. Anything else
is a bug and keeps its traceback. `--debug` anywhere on the command line (taken out before main
parses it; add_debug_option lists it in --help) or EMS_DEBUG=1 in the environment shows the
traceback of user errors too.

`MissingDataError` (a FileNotFoundError) is what a reader raises for an input file or directory
that is not there, and `check_choice` the one check of a setting against its allowed values.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import yaml

USAGE_EXIT_CODE = 2
DEBUG_FLAG = "--debug"
DEBUG_ENV = "EMS_DEBUG"


class UserError(Exception):
    """A problem with the user's input or files that the user can fix; `exit_code` is the status
    run_main exits with."""

    exit_code = USAGE_EXIT_CODE


USER_ERRORS = (UserError, ValueError, OSError, yaml.YAMLError)


class MissingDataError(FileNotFoundError):
    """A test-set file or directory that is not there; the message names it and what was expected."""


def check_choice(name: str, value: str, choices) -> None:
    """Raise ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def add_debug_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(DEBUG_FLAG, action="store_true", help=f"show the traceback of an error (also: {DEBUG_ENV}=1)")


def debug_requested(argv: Sequence[str]) -> bool:
    return DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def one_line(error: BaseException) -> str:
    """The error's message on one line (OSError without a message: its strerror and file name)."""
    text = str(error)
    if not text and isinstance(error, OSError):
        text = f"{error.strerror or type(error).__name__}: {error.filename}"
    return " ".join((text or type(error).__name__).split())


def run_main(main: Callable[[list[str]], int | None], argv: Sequence[str] | None = None) -> int:
    """main(argv)'s status (None: 0); a user error -> `error: ...` on stderr and its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(argv)
    try:
        return main([arg for arg in argv if arg != DEBUG_FLAG]) or 0
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr, flush=True)
        return getattr(error, "exit_code", USAGE_EXIT_CODE)
