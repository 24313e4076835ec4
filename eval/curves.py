"""Learning curves of training runs, from their `metrics.jsonl`:

    python -m eval.curves RUN [RUN ...] [--out curves.png]

Panels, against steps: training loss (total, and XTR / contrastive dashed), validation loss
(`valid_data`), the retrieval probe's average P@1 on Tatoeba and FLORES-200 (`probe_every`), and
the share of training rows with an in-batch duplicate. Several runs overlay, labelled by the
paths given. Writes RUN/curves.png for one run, else --out (required). A missing or unreadable
metrics.jsonl is one `error: ...` line and exit status 2 (--debug or EMS_DEBUG=1: the traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from ems.cli import add_debug_option, run_main  # noqa: E402
from eval.chart import save_figure  # noqa: E402

CURVES_FILE = "curves.png"


def read_metrics(run_dir: str | Path) -> dict[str, list[dict]]:
    """RUN/metrics.jsonl split into {"train": [...], "valid": [...], "probe": [...]} records, in
    step order. FileNotFoundError / ValueError with the path for a missing or unreadable file."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: RUN must be a training output directory (ems.training.train's `out`)"
        )
    kinds: dict[str, list[dict]] = {"train": [], "valid": [], "probe": []}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{number} is not a JSON record") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(f"{path}:{number} is not a metrics record (a JSON object with an integer step)")
        kind = (
            "valid" if "valid_loss" in record else "probe" if any(k.startswith("probe_") for k in record) else "train"
        )
        kinds[kind].append(record)
    return {kind: sorted(records, key=lambda r: r["step"]) for kind, records in kinds.items()}


def _plot(ax, records: list[dict], key: str, label: str, **style) -> bool:
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if points:
        ax.plot(*zip(*points), label=label, **style)
    return bool(points)


def plot_curves(runs: dict[str, dict[str, list[dict]]], path: str | Path) -> Path:
    """Plot {label: read_metrics(...)} to `path` (PNG); returns the path."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    (train_ax, valid_ax), (probe_ax, duplicate_ax) = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (label, metrics), color in zip(runs.items(), colors * (1 + len(runs) // len(colors))):
        _plot(train_ax, metrics["train"], "loss", f"{label} total", color=color)
        for key, dash in (("xtr", "--"), ("contrastive", ":")):
            _plot(train_ax, metrics["train"], key, f"{label} {key}", color=color, linestyle=dash, alpha=0.7)
        _plot(valid_ax, metrics["valid"], "valid_loss", f"{label} total", color=color, marker="o")
        for key, dash in (("valid_xtr", "--"), ("valid_contrastive", ":")):
            _plot(
                valid_ax,
                metrics["valid"],
                key,
                f"{label} {key.removeprefix('valid_')}",
                color=color,
                linestyle=dash,
                alpha=0.7,
            )
        _plot(probe_ax, metrics["probe"], "probe_tatoeba", f"{label} Tatoeba", color=color, marker="o")
        _plot(
            probe_ax, metrics["probe"], "probe_flores", f"{label} FLORES-200", color=color, marker="s", linestyle="--"
        )
        _plot(duplicate_ax, metrics["train"], "duplicate_rows", label, color=color)
    for ax, title, ylabel in (
        (train_ax, "training loss", "loss"),
        (valid_ax, "validation loss (stratified held-out sample)", "loss"),
        (probe_ax, "probe: average P@1 (%), both directions", "P@1 (%)"),
        (duplicate_ax, "rows with an in-batch duplicate", "share of rows"),
    ):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        if ax.lines:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.curves", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="training output directories (holding metrics.jsonl)")
    parser.add_argument("--out", type=Path, help=f"PNG to write (default for one run: RUN/{CURVES_FILE})")
    add_debug_option(parser)
    args = parser.parse_args(argv)
    if args.out is None and len(args.runs) > 1:
        parser.error("--out is required with more than one run")
    runs = {str(run): read_metrics(run) for run in args.runs}
    path = plot_curves(runs, args.out or args.runs[0] / CURVES_FILE)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
