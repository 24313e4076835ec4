"""How a benchmark gives its result: the markdown table on standard output and, with an output folder,
OUT/STEM.md (the table) and OUT/STEM.json (the figures), each written whole or not at all
(ems.artifacts). A helper of the benchmarks: no command line.
"""

from __future__ import annotations

from pathlib import Path

from ems.artifacts import write_json, write_text


def give_result(table: str, figures, out: Path | None, stem: str) -> list[Path]:
    """Print `table` (markdown); with `out`, also write it to out/STEM.md and `figures`
    (JSON-serialisable) to out/STEM.json. Returns the paths written."""
    print(table)
    if out is None:
        return []
    paths = [Path(out) / f"{stem}.md", Path(out) / f"{stem}.json"]
    write_text(paths[0], table, f"the {stem} table")
    write_json(paths[1], figures, f"the {stem} figures")
    return paths
