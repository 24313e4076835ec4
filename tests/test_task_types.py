"""Task types (eval.task) and typed results (eval.results): every shipped config names a type that
takes its keys; a task defined in a module outside the package runs through run_all with its own
table and chart score; results.json round-trips with its schema version and old files still read."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from eval.results import SCHEMA_VERSION, TaskResult, read_results, write_results_json
from eval.run_all import run_all
from eval.task import TaskConfig, builtin_task_types, read_task_config, task_type
from tests.fakes import SignEncoder

ROOT = Path(__file__).resolve().parents[1]

TOY_TASK = '''
"""Toy task: for each configured language, the share of its lines whose embedding has a positive first coordinate."""
from dataclasses import dataclass

import numpy as np
from eval.task import Headline, TaskConfig, TaskType, filtered_languages

@dataclass(kw_only=True)
class ToyConfig(TaskConfig):
    languages: list[str]
    threshold: float = 0.0

def run(encoder, task):
    languages, skipped = filtered_languages(task.config["languages"], task.options)
    rows = {}
    for lang in languages:
        lines = (task.data_dir / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        vectors = encoder.encode(lines, lang)
        rows[lang] = {"n": len(lines), "positive": 100.0 * float(np.mean(vectors[:, 0] > 0))}
    average = {"positive": float(np.mean([row["positive"] for row in rows.values()]))} if rows else None
    return {"task": task.name, "metric": TASK.metric, "languages": rows, "average": average, "skipped": skipped,
            "threshold": task.config.get("threshold", 0.0)}

def table(result, title):
    lines = [f"### {title}", "", "| lang | positive |", "|:--|--:|"]
    rows = [f"| {lang} | {row['positive']:.1f} |" for lang, row in result["languages"].items()]
    return "\\n".join(lines + rows) + "\\n"

TASK = TaskType(metric="toy_share", run=run, table=table, config=ToyConfig,
                headline=Headline("positive (%)", lambda row: row["positive"]))
'''


def test_every_shipped_config_names_a_type_that_takes_its_keys():
    types = set()
    for path in sorted((ROOT / "configs/eval").glob("*.yaml")):
        if path.name.startswith("suite"):
            continue
        config, kind = read_task_config(path)
        assert kind is task_type(config["type"]) and set(yaml.safe_load(path.read_text())) <= set(
            kind.config.__dataclass_fields__
        )
        types.add(config["type"])
    assert types <= set(builtin_task_types())
    assert {"tatoeba", "qe", "sts", "xsim", "bitext", "classification", "language_id", "bucc"} <= types


def test_the_builtin_types_are_the_evaluator_modules_that_define_a_task():
    # one module per type: its config, its evaluator and its TASK; the shared modules define none
    assert builtin_task_types() == [
        "bitext", "bucc", "classification", "flores", "heldout", "language_id", "large_retrieval", "qe", "sts",
        "tatoeba", "xsim",
    ]  # fmt: skip
    for name in builtin_task_types():
        module = sys.modules[f"eval.evaluators.{name}"]
        assert task_type(name) is module.TASK and module.TASK.run is getattr(module, f"evaluate_{name}")
        assert module.TASK.config is TaskConfig or module.TASK.config.__module__ == module.__name__
    for shared in ("items", "retrieval", "correlation", "classification_data"):
        with pytest.raises(ValueError, match=f"unknown task type '{shared}'; expected one of bitext, bucc, "):
            task_type(shared)


def test_an_unknown_type_or_a_module_without_task_is_one_clear_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown task type 'qee'; expected one of .*qe"):
        task_type("qee")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="unknown task type 'not_a_task'"):
        task_type("not_a_task")  # an undotted name is a built-in type only
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "empty.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="pkg.empty defines no TASK"):
        task_type("pkg.empty")
    with pytest.raises(ValueError, match="cannot import"):
        task_type("no_such_package.task")


def _toy_setup(tmp_path, monkeypatch, extra=""):
    package = tmp_path / "mytasks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "toy.py").write_text(TOY_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in [m for m in sys.modules if m.startswith("mytasks")]:
        monkeypatch.delitem(sys.modules, module)
    data = tmp_path / "data" / "toy"
    data.mkdir(parents=True)
    (data / "de.txt").write_text("+a\n-b\n+c\n+d\n", encoding="utf-8")
    (data / "fr.txt").write_text("-a\n-b\n", encoding="utf-8")
    (tmp_path / "toy.yaml").write_text(
        textwrap.dedent(f"""\
        type: mytasks.toy
        name: toy
        data_subdir: toy
        languages: [de, fr]
        threshold: 0.5
        {extra}""")
    )
    (tmp_path / "suite.yaml").write_text("tasks: [toy.yaml]\n")
    return tmp_path / "data"


def test_a_task_from_one_new_module_runs_through_run_all(tmp_path, monkeypatch, capsys):
    data = _toy_setup(tmp_path, monkeypatch)
    out = tmp_path / "out"
    results = run_all(SignEncoder(), data, out_dir=out, suite_path=tmp_path / "suite.yaml", progress=False)
    toy = results["toy"]
    assert isinstance(toy, TaskResult) and toy.type == "mytasks.toy" and toy.metric == "toy_share"
    assert toy.languages == {"de": {"n": 4, "positive": 75.0}, "fr": {"n": 2, "positive": 0.0}}
    assert toy.average == {"positive": 37.5} and toy.details == {"threshold": 0.5}
    assert "| de | 75.0 |" in (out / "report.md").read_text() and "| de | 75.0 |" in capsys.readouterr().out
    assert (out / "results.png").is_file()
    stored = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert stored["schema_version"] == SCHEMA_VERSION and stored["tasks"]["toy"]["type"] == "mytasks.toy"
    assert read_results(out) == results


def test_a_key_the_type_does_not_take_is_an_error_before_it_runs(tmp_path, monkeypatch):
    data = _toy_setup(tmp_path, monkeypatch, extra="thresold: 0.4\n")
    results = run_all(SignEncoder(), data, suite_path=tmp_path / "suite.yaml", progress=False, print_tables=False)
    assert not results["toy"].ran and results["toy"].error == (
        f"{tmp_path / 'toy.yaml'}: unknown key(s) ['thresold']; known: ['data_subdir', 'languages', 'name', 'source', "
        "'threshold', 'type']"
    )


def test_results_round_trip_and_old_or_newer_files(tmp_path):
    results = {
        "tatoeba": TaskResult(
            "tatoeba",
            "tatoeba",
            "p_at_1",
            {"de": {"n": 3, "mean": 50.0}},
            {"mean": 50.0},
            {"not covered": ["xx"]},
            {"fr": "missing file"},
            truncated_sentences=2,
            details={"groups": {}},
        ),
        "gone": TaskResult.not_run("gone", "qe", "missing directory"),
    }
    path = write_results_json(results, tmp_path / "results.json")
    assert read_results(path) == results
    old = {
        "tatoeba": {"task": "tatoeba", "metric": "p_at_1", "languages": {}, "average": None, "skipped": {}},
        "mlqe": {"task": "mlqe", "metric": "qe_pearson", "languages": {}, "average": None, "skipped": {}, "heads": {}},
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"old\.json: not a results file of this code \(no schema_version\)"):
        read_results(tmp_path / "old.json")
    (tmp_path / "new.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "tasks": {}}))
    with pytest.raises(ValueError, match="newer than this code"):
        read_results(tmp_path / "new.json")
