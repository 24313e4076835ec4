"""The readers' fuzz tests (tests/test_fuzz_readers.py) in the long profile, one reader at a time:
a table of reader x examples x seconds x failures found.

    python -m benchmarks.fuzz_readers --out runs/fuzz_readers.md [--readers moses shards ...]
        [--examples N] [--profile long|ci] [--seed S]

Each reader's test runs in its own pytest process (EMS_FUZZ_PROFILE=long: LONG_FACTOR times the CI
profile's examples, random, as fixtures/fuzz_profiles.py sets them; --examples N sets every reader's
count; --seed fixes hypothesis's seed), with OMP_NUM_THREADS=1. Per reader: the examples hypothesis
ran (its statistics: the generate phase's passing and failing test cases; shrinking a failure runs
more), the seconds the process took, the distinct failures it reported (a crash of the process, such
as a segmentation fault, counts as one) and the first line of each.
--out: a .md file gets the markdown table, a .json file the same rows as JSON (any other suffix:
both, OUT.md and OUT.json). Exit status 0 whatever the tests found; the table says it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from fixtures.fuzz_profiles import EXAMPLES_VARIABLE, PROFILE_VARIABLE, PROFILES, READER_TESTS, examples

REPO = Path(__file__).resolve().parents[1]

STATISTICS = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid test cases")
FAILURE_LINE = re.compile(r"^\s*(?:\| )?(?:E\s+)?([A-Za-z_.]*(?:Error|Exception|Group|Warning)[A-Za-z_.]*: .*)$")


def run_reader(reader: str, profile: str, every: int | None, seed: int | None) -> dict:
    """One reader's fuzz test in its own process (`every`: the examples, default the profile's): its row
    of the table."""
    env = {**os.environ, PROFILE_VARIABLE: profile, "OMP_NUM_THREADS": "1"}
    if every is not None:
        env[EXAMPLES_VARIABLE] = str(every)
    command = [
        sys.executable,
        "-m",
        "pytest",
        f"tests/test_fuzz_readers.py::{READER_TESTS[reader]}",
        "-q",
        "-p",
        "no:cacheprovider",
        "--hypothesis-show-statistics",
        *([f"--hypothesis-seed={seed}"] if seed is not None else []),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    output = done.stdout + done.stderr
    counts = [int(passing) + int(failing) for passing, failing, _ in STATISTICS.findall(output)]
    crashed = done.returncode < 0 or "Fatal Python error" in output
    distinct = re.search(r"Hypothesis found (\d+) distinct failures", output)
    failed = done.returncode != 0
    failures = 1 if crashed else int(distinct.group(1)) if distinct else int(failed)
    lines = []
    for line in output.splitlines():
        found = FAILURE_LINE.match(line)
        if found and "ExceptionGroup" not in found.group(1) and found.group(1) not in lines:
            lines.append(found.group(1)[:300])
    return {
        "reader": reader,
        "test": READER_TESTS[reader],
        "examples": counts[0] if counts else None,
        "examples_asked": examples(reader, profile, every),
        "seconds": round(seconds, 1),
        "failures": failures,
        "crashed": crashed,
        "status": done.returncode,
        "failure_lines": lines[: max(failures, 1) * 2] if failed else [],
    }


def markdown(rows: list[dict], profile: str) -> str:
    table = [
        f"Fuzzing the readers of user files (tests/test_fuzz_readers.py, profile {profile}).",
        "",
        "| reader | examples | seconds | failures found | first failure |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        first = row["failure_lines"][0].replace("|", "\\|") if row["failure_lines"] else ""
        crashed = " (crashed)" if row["crashed"] else ""
        table.append(
            f"| {row['reader']} | {row['examples'] if row['examples'] is not None else '?'} | {row['seconds']} "
            f"| {row['failures']}{crashed} | {first} |"
        )
    total = sum(row["seconds"] for row in rows)
    table += ["", f"{sum(row['failures'] for row in rows)} failures in {total:.0f} s."]
    return "\n".join(table) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the table: .md, .json, or both for another suffix")
    parser.add_argument("--readers", nargs="+", choices=sorted(READER_TESTS), help="default: all")
    parser.add_argument("--examples", type=int, help="examples per reader (default: the profile's)")
    parser.add_argument("--profile", choices=PROFILES, default="long")
    parser.add_argument("--seed", type=int, help="hypothesis's seed (default: random)")
    args = parser.parse_args(argv)
    rows = []
    for reader in args.readers or list(READER_TESTS):
        row = run_reader(reader, args.profile, args.examples, args.seed)
        print(
            f"{reader}\t{row['examples']} examples\t{row['seconds']} s\t{row['failures']} failures"
            + (f"\t{row['failure_lines'][0]}" if row["failure_lines"] else ""),
            flush=True,
        )
        rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    suffix = args.out.suffix
    if suffix in (".md", ""):
        args.out.with_suffix(".md").write_text(markdown(rows, args.profile), encoding="utf-8")
    if suffix in (".json", ""):
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    if suffix not in (".md", ".json", ""):
        Path(f"{args.out}.md").write_text(markdown(rows, args.profile), encoding="utf-8")
        Path(f"{args.out}.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
