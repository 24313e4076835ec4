"""The console scripts of pyproject.toml: each runs a module's `main` through ems.cli.run_main,
exactly as `python -m <module>` does, and imports that module only when called, so `ems-train`
holds its stop signals before the seconds of torch and DeepSpeed imports (ems.stop_signals)."""

from __future__ import annotations

import importlib

from ems.cli import run_main


def _run(module: str) -> int:
    return run_main(importlib.import_module(module).main)


def prep() -> int:
    """`ems-prep`: python -m data_prep."""
    return _run("data_prep.__main__")


def data() -> int:
    """`ems-data`: python -m data_prep.manifest_fetch."""
    return _run("data_prep.manifest_fetch")


def train() -> int:
    """`ems-train`: python -m ems.training.train, stop signals held from this first line."""
    from ems.stop_signals import hold_stop_signals

    hold_stop_signals()
    return _run("ems.training.train")


def evaluate() -> int:
    """`ems-eval`: python -m eval.run_all."""
    return _run("eval.run_all")


def mine() -> int:
    """`ems-mine`: python -m ems.apps.mine."""
    return _run("ems.apps.mine")


def export() -> int:
    """`ems-export`: python -m ems.apps.export."""
    return _run("ems.apps.export")


def demo() -> int:
    """`ems-demo`: python -m ems.apps.demo."""
    return _run("ems.apps.demo")
