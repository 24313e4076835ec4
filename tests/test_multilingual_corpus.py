"""The all-language corpus (configs/data/multilingual.yaml) on a slice of the real data: two Tatoeba
Challenge folders and three TICO-19 folders, the evaluation sets as they are."""

import json
from types import SimpleNamespace

import pytest
import yaml

from data_prep.recipe import LANGUAGES_FILE, RecipeDataConfig, build_corpus
from ems.apps.studies import compute_map_runs as runner
from ems.configs import ConfigError, load_config
from tests.conftest import REPO_ROOT

# The corpus folders of conftest's sliced_data
SLICED_CORPORA = {"tatoeba_challenge": ["eng-msa", "afr-eng"], "tico19": ["en-am", "en-ha", "en-id"]}
TATOEBA_TASK = (
    "type: tatoeba\nname: tatoeba\ndata_subdir: tatoeba\nfile_pattern: 'tatoeba.{{code}}-eng.{{side}}'\n"
    "metric: p_at_1\nlanguages: {languages}\n"
)


@pytest.fixture(scope="module")
def built(sliced_data, tmp_path_factory):
    cfg = load_config(RecipeDataConfig, REPO_ROOT / "configs/data/multilingual.yaml")
    out = tmp_path_factory.mktemp("built")
    return build_corpus(cfg, sliced_data, out), out


def test_every_language_of_both_corpora_with_enough_pairs_is_kept_and_the_rest_counted(built):
    summary, out = built
    # eng-msa's labels, counted by hand (sort | uniq -c): ind 4289, zsm_Latn 536, max_Latn 127, zlm_Latn 24,
    # min 19, tmw_Latn 5; afr-eng: afr 1374; TICO-19: 2100 lines each of am, ha, id
    assert summary["languages"] == ["af", "am", "ha", "id", "max", "ms"]
    assert summary["imported"] == {"af": 1374, "am": 2100, "ha": 2100, "id": 4289 + 2100, "max": 127, "ms": 536}
    assert summary["left_out"] == {"min": 19, "tmw": 5, "zlm": 24}
    table = json.loads((out / "corpus" / LANGUAGES_FILE).read_text())
    assert table["by_corpus"]["tico19"] == {"am": 2100, "ha": 2100, "id": 2100}
    assert set(table["languages"]) == set(summary["languages"])
    for lang, row in table["languages"].items():
        assert row["imported"] >= row["after_clean"] >= row["heldout"] + row["train"], lang
    # 200 held out where a language has >= 400 pairs after cleaning; max (127) keeps all for training
    assert table["languages"]["max"]["heldout"] == 0 and table["languages"]["am"]["heldout"] == 200
    assert sum(row["train"] for row in table["languages"].values()) == summary["train_pairs"]
    markdown = (out / "corpus" / "languages.md").read_text()
    row = table["languages"]["am"]
    assert f"| am | 2100 | {row['after_clean']} | 200 | {row['train']} |" in markdown
    assert "Left out (fewer than 100 pairs): min 19, tmw 5, zlm 24" in markdown


def test_every_evaluation_sentence_is_removed(built):
    summary, _ = built
    assert summary["removed_in_eval_set"] > 0


def test_multi_parallel_languages_hold_out_the_same_english_sentences(built):
    _, out = built
    english = {
        lang: set((out / "corpus" / "heldout" / "-".join(sorted((lang, "en"))) / "heldout.en").read_text().splitlines())
        for lang in ("am", "ha")
    }
    assert len(english["am"]) == 200 and english["am"] == english["ha"]
    table = json.loads((out / "corpus" / LANGUAGES_FILE).read_text())["languages"]
    # only the few pairs whose English also appears in another language's held-out pairs leave training
    assert table["am"]["train"] > 0.85 * table["am"]["after_clean"]


def test_bad_data_configs_are_one_error_naming_the_key(tmp_path):
    for values, message in (
        ({"corpora": ["opus"]}, "unknown corpus 'opus'; known: tatoeba_challenge, tico19, nllb_seed, ebible"),
        ({"corpora": ["tatoeba-challenge"]}, r"'tatoeba-challenge' \(the key is spelled tatoeba_challenge\)"),
        ({"corpus_mix": {"ebible": {"max_pairs": 10}}}, "corpus_mix names 'ebible', not in corpora"),
        ({"alignment_check": ["nllb_seed"]}, "alignment_check names 'nllb_seed', not in corpora"),
        ({"corpora": ["ebible"], "corpus_mix": {"ebible": {"weight": 0}}}, "weight must be above 0"),
        (
            {"corpora": ["ebible"], "corpus_mix": {"ebible": {"weight": 1e12}}},
            "weight must be a finite number from 0 to 100, got 1000000000000.0",
        ),
        ({"heldout_draw": "first"}, "heldout_draw must be one of random, pivot, got 'first'"),
        ({"min_pairs": 0}, "min_pairs must be at least 1, got 0"),
        ({"languages": None, "gettext_packages": ["django"]}, "gettext_packages needs an explicit languages list"),
        ({"pivot_pairs": {"corpora": ["ebible"]}}, "pivot_pairs names 'ebible', not in corpora"),
        ({"pivot_pairs": {"corpora": []}}, "pivot_pairs: corpora must name at least one corpus"),
        ({"pivot_pairs": {"per_sentence": 1}}, r"pivot_pairs: missing required key\(s\) \['corpora'\]"),
        ({"pivot_pairs": {"corpora": ["tico19"] * 2}}, "pivot_pairs: corpora names 'tico19' more than once"),
        (
            {"pivot_pairs": {"corpora": ["tico19"], "per_sentence": 0}},
            "per_sentence must be an integer >= 1, got 0",
        ),
        (
            {"pivot_pairs": {"corpora": ["tico19"], "max_pairs": 0}},
            "max_pairs must be an integer >= 1, got 0",
        ),
    ):
        path = tmp_path / "data.yaml"
        path.write_text(yaml.safe_dump(values))
        with pytest.raises(ConfigError, match=message):
            load_config(RecipeDataConfig, path)


def test_the_multilingual_recipe_trains_resumes_and_reports_by_group(sliced_data, tmp_path, monkeypatch, capsys):
    """ems-demo --recipe multilingual on the slice, a small model for a few steps; the suite cut to
    Tatoeba and FLORES of af, ms and an unseen language (Xhosa), so the test stays short."""
    import ems.apps.demo
    from ems.apps.demo import REPORT_FILE, main

    suite = tmp_path / "suite.yaml"
    (tmp_path / "tatoeba.yaml").write_text(TATOEBA_TASK.format(languages="[afr, zsm, xho]"))
    (tmp_path / "flores.yaml").write_text(
        "type: flores\nname: flores200\ndata_subdir: flores200/devtest\nlanguages: [af, ms, xh]\n"
    )
    suite.write_text("tasks: [tatoeba.yaml, flores.yaml]\n")
    monkeypatch.setattr(ems.apps.demo, "MULTILINGUAL_SUITE", suite)
    data_config = tmp_path / "data.yaml"
    values = yaml.safe_load((REPO_ROOT / "configs/data/multilingual.yaml").read_text())
    data_config.write_text(yaml.safe_dump({**values, "vocab_size": 3000}))
    out = tmp_path / "multilingual"
    args = [
        "--recipe", "multilingual", "--out", str(out), "--data-dir", str(sliced_data),
        "--data-config", str(data_config),
        "--set", "max_steps=4", "warmup_steps=1", "batch_size=16", "valid_every=4", "valid_pairs=32", "save_every=4",
        "model=tiny", "model_overrides.d_model=32", "model_overrides.n_heads=2", "model_overrides.d_ffn=64",
    ]  # fmt: skip
    assert main(args) == 0
    report = (out / REPORT_FILE).read_text()
    assert "in 6 languages" in report and "3 languages under 100 pairs left out" in report
    groups = (out / "eval" / "groups" / "by_group.md").read_text()
    assert "unseen" in groups and (out / "eval" / "groups" / "p_at_1_vs_pairs.png").is_file()
    rows = (out / "eval" / "groups" / "per_language.csv").read_text()
    assert "tatoeba" in rows.split("\n")[0] and "flores200" in rows.split("\n")[0]
    assert rows.count("\nxh,") == 1 and "unseen" in rows.split("\nxh,")[1].split("\n")[0]
    capsys.readouterr()
    # the same command again: the data are kept and the run is finished, so nothing is redone
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "data prepared before with this config" in printed and "== corpus ==" not in printed
    stages = json.loads((out / "demo_stages.json").read_text())  # what the peer benchmark reads
    assert stages["steps"] == 4 and stages["seconds"]["train"] > 0


def test_the_compute_map_runs_train_branch_score_and_map(sliced_data, tmp_path):
    """ems/apps/studies/compute_map_runs.py on the slice: one size, budgets of 4 and 8 steps (the 4-step
    model a decay branch of the 8-step run), each scored and written as a point, then the map; then a
    16-step budget, which goes on from the 8-step run's plateau."""
    from ems.apps.studies.compute_map_points import read_points

    (tmp_path / "tatoeba.yaml").write_text(TATOEBA_TASK.format(languages="[afr, xho]"))
    (tmp_path / "flores.yaml").write_text(
        "type: flores\nname: flores200\ndata_subdir: flores200/devtest\nlanguages: [af, xh]\n"
    )
    (tmp_path / "suite.yaml").write_text("tasks: [tatoeba.yaml, flores.yaml]\n")
    data = yaml.safe_load((REPO_ROOT / "configs/data/multilingual.yaml").read_text())
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({**data, "vocab_size": 3000}))
    small = {"d_model": 32, "n_heads": 2, "d_ffn": 64}
    (tmp_path / "map.yaml").write_text(
        yaml.safe_dump(
            {
                "data_config": str(tmp_path / "data.yaml"),
                "train_config": "configs/train/multilingual.yaml",
                "suite": str(tmp_path / "suite.yaml"),
                "flops_batches": 2,
                "sizes": {
                    "tiny": {
                        "budgets": {"4 steps": 4, "8 steps": 8},
                        "overrides": {
                            "batch_size": 16, "warmup_steps": 1, "valid_every": 8, "valid_pairs": 32,
                            "save_every": 100, "model_overrides": small,
                        },
                    }
                },
            }
        )
    )  # fmt: skip
    out = tmp_path / "map"
    assert runner.main(["--config", str(tmp_path / "map.yaml"), "--out", str(out), "--data-dir", str(sliced_data)]) == 0
    points, missing = read_points(out / "points")
    assert not missing and sorted(p.budget for p in points) == ["4 steps", "8 steps"]
    by_budget = {p.budget: p for p in points}
    assert by_budget["8 steps"].train_flops == pytest.approx(2 * by_budget["4 steps"].train_flops, rel=0.3)
    assert {"tatoeba/all", "tatoeba/unseen", "flores/<1k"} <= set(by_budget["4 steps"].scores)
    # the 4-step model is a branch of the 8-step run: from its kept branch-point checkpoint (step 3)
    history = yaml.safe_load((out / "runs" / "tiny" / "4 steps" / "train_config_history.yaml").read_text())
    assert "step3" in str(history)
    # a larger budget added later goes on from the 8-step run's own decay start (step 6, on its plateau)
    config = yaml.safe_load((tmp_path / "map.yaml").read_text())
    config["sizes"]["tiny"]["budgets"]["16 steps"] = 16
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(config))
    args = ["--config", str(tmp_path / "map.yaml"), "--out", str(out), "--data-dir", str(sliced_data)]
    assert runner.main([*args, "--budgets", "16 steps"]) == 0
    longer = out / "runs" / "tiny" / "16 steps"
    branch_from = yaml.safe_load((longer / "train_config.yaml").read_text())["branch_from"]
    assert branch_from.endswith("8 steps/checkpoints/step6")
    own = json.loads((longer / "train_seconds.json").read_text())["seconds"]
    assert own == pytest.approx(sum(json.loads(r).get("seconds", 0) for r in (longer / "metrics.jsonl").open()))
    eight = json.loads((out / "runs" / "tiny" / "8 steps" / "train_seconds.json").read_text())["seconds"]
    points, _ = read_points(out / "points")
    assert {p.budget: p.train_seconds for p in points}["16 steps"] == pytest.approx(own + eight * 6 / 8)
    assert runner.main(["--config", str(tmp_path / "map.yaml"), "--out", str(out), "--sizes", "--map"]) == 0
    assert (out / "map" / "compute_map.md").is_file() and (out / "map" / "compute_map.png").is_file()


def test_training_seconds_count_each_logged_step_once(tmp_path):
    """A run killed after logging step 100 resumed from its step-50 checkpoint and logged step 100
    again: the newest window counts; validation rows carry no window."""
    rows = [
        {"step": 0, "valid_loss": 9.0},
        {"step": 50, "loss": 3.0, "seconds": 10.0},
        {"step": 100, "loss": 2.0, "seconds": 12.0},
        {"step": 100, "loss": 2.0, "seconds": 11.0},
        {"step": 150, "loss": 1.0, "seconds": 9.5},
        {"step": 150, "valid_loss": 1.5},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert runner.training_seconds(tmp_path / "metrics.jsonl") == 10.0 + 11.0 + 9.5


def test_a_scoring_cut_off_after_its_first_task_is_scored_again(tmp_path, monkeypatch):
    """As when a session ended inside base's scoring: results.json held Tatoeba only, and the point was
    written without FLORES and SIB-200."""
    import ems.encoder_kinds
    import eval.run_all

    calls = []
    monkeypatch.setattr(ems.encoder_kinds, "load_encoder", lambda spec, cache_dir: spec)
    monkeypatch.setattr(eval.run_all, "run_all", lambda encoder, data_dir, out_dir, **kw: calls.append(out_dir))
    cfg = SimpleNamespace(suite="configs/eval/suite_multilingual.yaml")
    (tmp_path / "eval").mkdir()
    results = tmp_path / "eval" / "results.json"
    for tasks, scored in ((["tatoeba"], 1), ([*runner.TASK_METRICS, "xsim_flores200"], 0)):
        calls.clear()
        results.write_text(json.dumps({"tasks": dict.fromkeys(tasks, {})}))
        assert runner.evaluate(cfg, tmp_path / "model", tmp_path, tmp_path) == results
        assert len(calls) == scored


def test_the_map_prepares_its_data_config_with_data_overrides_over_it(tmp_path, monkeypatch):
    """A map config's data_overrides reach the data it prepares (a corpus_mix over a data config that
    caps nothing); a key RecipeDataConfig lacks is one error naming it, before any work."""
    import ems.apps.demo

    prepared = []
    monkeypatch.setattr(ems.apps.demo, "prepare_data", lambda cfg, data_dir, out, stages: prepared.append(cfg))
    map_yaml = {
        "data_config": "configs/data/multilingual.yaml",
        "train_config": "configs/train/multilingual.yaml",
        "suite": "configs/eval/suite_multilingual.yaml",
        "sizes": {"tiny": {"budgets": {"1 step": 1}}},
        "data_overrides": {"corpus_mix": {"tico19": {"max_pairs": 50}}, "vocab_size": 3000},
    }
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(map_yaml))
    cfg = load_config(runner.MapConfig, tmp_path / "map.yaml")
    runner.prepared_data(cfg, tmp_path, tmp_path / "out")
    [data_cfg] = prepared
    assert data_cfg.corpus_mix["tico19"].max_pairs == 50 and data_cfg.vocab_size == 3000
    assert data_cfg.corpora == ["tatoeba_challenge", "tico19"]  # the rest from data_config
    (tmp_path / "map.yaml").write_text(yaml.safe_dump({**map_yaml, "data_overrides": {"vocab": 3000}}))
    with pytest.raises(ConfigError, match=r"data_overrides: unknown key\(s\) \['vocab'\]"):
        load_config(runner.MapConfig, tmp_path / "map.yaml")


def test_the_multilingual_recipe_reads_the_four_corpora_by_default(tmp_path, monkeypatch):
    """ems-demo --recipe multilingual without --data-config trains on the Tatoeba Challenge, TICO-19,
    NLLB-Seed and the Bibles, with the screen's caps."""
    import ems.apps.demo

    called = []
    monkeypatch.setitem(ems.apps.demo.RECIPES, "multilingual", lambda data_cfg, *rest: called.append(data_cfg) or "")
    assert ems.apps.demo.main(["--recipe", "multilingual", "--out", str(tmp_path)]) == 0
    [data_cfg] = called
    assert data_cfg.corpora == ["tatoeba_challenge", "tico19", "nllb_seed", "ebible"]
    assert set(data_cfg.corpus_mix) == {"nllb_seed", "ebible"}
