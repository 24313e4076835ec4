"""The peer benchmark's report tables (benchmarks/peer/sentence_transformers.py): EMS against one peer
run, EMS against the best grid point on each metric (its worst case), the grid's points, and both
models by the language's training pairs. A helper of that benchmark: no command line.
"""

from __future__ import annotations

import statistics

from benchmarks.peer import grid as peer_grid
from benchmarks.peer import scoring as peer_scoring


def report_table(ems: dict, peer: dict) -> str:
    """EMS against one peer run: steps, pairs, speed and every metric both have, with EMS / peer (for
    an error rate, peer / EMS: above 1 EMS is ahead)."""
    rows = [
        ("steps", "steps", "{:,.0f}"),
        ("pairs seen", "pairs", "{:,.0f}"),
        ("training seconds", "seconds", "{:.0f}"),
        ("steps/s", "steps_per_s", "{:.2f}"),
        ("real tokens/s", "tokens_per_s", "{:,.0f}"),
    ]
    lines = ["| | EMS | sentence-transformers | EMS / peer |", "|:--|--:|--:|--:|"]
    for label, key, fmt in rows:
        a, b = ems.get(key), peer.get(key)
        lines.append(f"| {label} | {_cell(a, fmt)} | {_cell(b, fmt)} | {_ratio(a, b)} |")
    peer_scores = peer.get("scores", {})
    for metric, a in ems.get("scores", {}).items():
        if metric in peer_scores:
            b = peer_scores[metric]
            label = f"{metric} (%, ratio peer / EMS)" if peer_scoring.lower_is_better(metric) else f"{metric} P@1"
            lines.append(f"| {label} | {a:.1f} | {b:.1f} | {_cell(advantage(a, b, metric), '{:.2f}')} |")
    return "\n".join(lines) + "\n"


def advantage(ems: float, peer: float, metric: str) -> float | None:
    """How many times better EMS is than the peer on `metric` (> 1: EMS ahead): EMS / peer for a score,
    peer / EMS for an error rate (peer_scoring.lower_is_better); None where the divisor is 0."""
    top, bottom = (peer, ems) if peer_scoring.lower_is_better(metric) else (ems, peer)
    return top / bottom if bottom else None


def worst_case(ems_scores: dict[str, float], choice: peer_grid.GridChoice) -> dict[str, dict]:
    """Per metric EMS has: EMS, the held-out pick's score, and the best grid point on that metric, with
    EMS's advantage over each (`advantage`; over the best: EMS's worst case over every setting the grid
    tried)."""
    pick, rows = choice.pick, {}
    for metric, value in ems_scores.items():
        if metric not in pick.scores:
            continue
        best = choice.best_on(metric)
        rows[metric] = {
            "ems": value,
            "pick": pick.scores[metric],
            "ems_over_pick": advantage(value, pick.scores[metric], metric),
            "best": best.scores[metric],
            "best_at": {"vocab_size": best.vocab_size, "lr": best.lr},
            "ems_over_best": advantage(value, best.scores[metric], metric),
        }
    return rows


def worst_case_table(rows: dict[str, dict], choice: peer_grid.GridChoice) -> str:
    """worst_case's rows as a markdown table; an error rate's row says so, and its ratios are peer / EMS."""
    lines = [
        f"| P@1 (an error: lower is better) | EMS | peer: held-out pick ({choice.vocab_size:,}, lr {choice.lr:g}) | "
        "EMS's advantage over the pick | peer: best on this metric | EMS's advantage over the best (worst case) |",
        "|:--|--:|--:|--:|--:|--:|",
    ]
    for metric, row in rows.items():
        at = f"{row['best_at']['vocab_size']:,}, lr {row['best_at']['lr']:g}"
        label = f"{metric} (%, peer / EMS)" if peer_scoring.lower_is_better(metric) else metric
        lines.append(
            f"| {label} | {row['ems']:.1f} | {row['pick']:.1f} | {_cell(row['ems_over_pick'], '{:.2f}')} | "
            f"{row['best']:.1f} ({at}) | **{_cell(row['ems_over_best'], '{:.2f}')}** |"
        )
    return "\n".join(lines) + "\n"


def _cell(value, fmt: str = "{:.1f}") -> str:
    return fmt.format(value) if value is not None else "–"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "–"


def grid_table(choice: peer_grid.GridChoice) -> str:
    """Every grid point run: vocabulary, lr, steps, then each metric; the held-out pick in bold."""
    metrics = list(choice.points[0].scores)
    lines = [
        "| vocabulary | lr | steps | " + " | ".join(metrics) + " |",
        "|--:|--:|--:|" + "--:|" * len(metrics),
    ]
    for point in sorted(choice.points, key=lambda p: (p.vocab_size, p.lr)):
        bold = "**" if (point.vocab_size, point.lr) == (choice.vocab_size, choice.lr) else ""
        cells = [f"{bold}{_cell(point.scores.get(metric))}{bold}" for metric in metrics]
        lines.append(f"| {point.vocab_size:,} | {point.lr:g} | {point.steps:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


GROUPED_TYPES = {"tatoeba": "Tatoeba", "flores": "FLORES-200"}  # task type -> its label; P@1 (%) rows


def group_comparison(ems_rows: list[dict], peer_rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{task: {group: {"languages", "ems", "peer"}}} of the Tatoeba and FLORES tasks of two models'
    eval.language_groups.grouped_results rows: each model's mean P@1 over the group's languages that
    both scored (None for a group with none), the groups of GROUPS then "all"."""
    from eval.language_groups import ALL, GROUPS

    peer_scores = {(row["task"], row["language"]): row["score"] for row in peer_rows}
    tasks = {row["task"]: None for row in ems_rows if row["type"] in GROUPED_TYPES}
    comparison = {}
    for task in tasks:
        both = [row for row in ems_rows if row["task"] == task and (task, row["language"]) in peer_scores]
        comparison[task] = {}
        for group in (*GROUPS, ALL):
            members = [row for row in both if group in (ALL, row["group"])]
            ems = [row["score"] for row in members]
            peer = [peer_scores[task, row["language"]] for row in members]
            comparison[task][group] = {
                "languages": len(members),
                "ems": statistics.fmean(ems) if ems else None,
                "peer": statistics.fmean(peer) if peer else None,
            }
    return comparison


def group_table(comparison: dict[str, dict[str, dict]], types: dict[str, str]) -> str:
    """One markdown table per task of `group_comparison`: group, languages, EMS, peer, EMS / peer
    (`types`: task -> its type, for the task's label)."""
    from eval.language_groups import ALL

    parts = []
    for task, groups in comparison.items():
        lines = [
            f"### {GROUPED_TYPES[types[task]]} P@1 ({task}) by the language's training pairs",
            "",
            "| group | languages | EMS | peer | EMS / peer |",
            "|:--|--:|--:|--:|--:|",
        ]
        for group, row in groups.items():
            label = f"**{group}**" if group == ALL else group
            lines.append(
                f"| {label} | {row['languages']} | {_cell(row['ems'])} | {_cell(row['peer'])} | "
                f"{_ratio(row['ems'], row['peer'])} |"
            )
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
