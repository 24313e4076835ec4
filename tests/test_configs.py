"""Typed configs (ems.configs): YAML + values + `--set key=value` come out as the dataclass's types,
or one error that lists every problem."""

import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

import pytest
import yaml

from data_prep.config import PrepConfig
from data_prep.recipe import RecipeDataConfig
from ems.apps.studies.ablation import AblationConfig, base_data_config, variant_data_config, variant_data_dirs
from ems.apps.studies.compute_map_runs import MapConfig
from ems.configs import ConfigError, FieldsOf, load_config, merge
from ems.model_config import EMSConfig
from ems.training.config import TrainConfig
from eval.run_all import SuiteConfig, suite_task_configs
from eval.task import read_task_config
from tests.conftest import REPO_ROOT

# The dataclass of each YAML under configs/ (a task config under configs/eval/ names its own: read_task_config)
CONFIG_CLASSES = {
    "scaling": lambda name: MapConfig,
    "ablation": lambda name: AblationConfig,
    "train": lambda name: TrainConfig,
    "data": lambda name: RecipeDataConfig,  # the recipes' (ems-demo, ems-prep recipe, ablations)
    "prep": lambda name: PrepConfig,  # the OPUS / Hugging Face plans of ems-prep all
    "eval": lambda name: SuiteConfig if name.startswith("suite") else None,
}


def test_numbers_yaml_reads_as_strings_get_the_field_type(tmp_path):
    # YAML 1.1 reads 3e-4 (no dot) as a string: a float field must still get a float
    (tmp_path / "run.yaml").write_text("lr: 3e-4\nwarmup_steps: 1e3\nmax_epochs: 3\n")
    cfg = load_config(
        TrainConfig,
        tmp_path / "run.yaml",
        ["pair_sampling_temperature=5", "out=123", "max_minutes=null", "model_overrides.d_model=64"],
    )
    assert (cfg.lr, cfg.warmup_steps, cfg.max_epochs, cfg.pair_sampling_temperature) == (3e-4, 1000, 3.0, 5.0)
    assert [type(v) for v in (cfg.lr, cfg.warmup_steps, cfg.max_epochs, cfg.pair_sampling_temperature)] == [
        float,
        int,
        float,
        float,
    ]
    assert cfg.out == "123" and cfg.max_minutes is None and cfg.model_overrides == {"d_model": 64}


@pytest.mark.parametrize(
    "override, message",
    [
        ("max_steps=abc", "TrainConfig: max_steps must be an integer, got 'abc'"),
        ("max_steps=1.5", "TrainConfig: max_steps must be an integer, got 1.5"),
        ("lr=fast", "TrainConfig: lr must be a number, got 'fast'"),
        ("export_init=3", "TrainConfig: export_init must be true or false, got 3"),
        ("lr=null", "TrainConfig: lr must be a number, got null"),
        ("max_minutes=soon", "TrainConfig: max_minutes must be a number or null, got 'soon'"),
        (
            "learning_rate=1",
            "TrainConfig: --set 'learning_rate=1': unknown key(s) ['learning_rate']; known: ['adam_beta2', ",
        ),
        ("max_step=5", "TrainConfig: --set 'max_step=5': unknown key(s) ['max_step']; did you mean 'max_steps'?"),
        ("max_steps", "TrainConfig: --set 'max_steps' is not of the form key=value"),
        (
            "lr=[1, 2",
            "TrainConfig: --set 'lr=[1, 2': not a YAML value: line 1, column 6: expected ',' or ']', "
            "but got '<stream end>' (while parsing a flow sequence at line 1, column 1)",
        ),
    ],
)
def test_a_value_of_the_wrong_type_names_the_field(override, message):
    with pytest.raises(ConfigError) as error:
        load_config(TrainConfig, None, [override])
    assert str(error.value).startswith(message)


def test_every_problem_is_in_one_error_before_the_range_checks(tmp_path):
    (tmp_path / "run.yaml").write_text("lr: fast\nbatch_size: 0\nlearning_rate: 1\nmodel_overrides: {dropout: high}\n")
    with pytest.raises(ConfigError) as error:
        load_config(TrainConfig, tmp_path / "run.yaml", ["max_steps=many", "seed=1"])
    assert error.value.where == str(tmp_path / "run.yaml")
    assert [problem.split(";")[0] for problem in error.value.problems] == [
        "unknown key(s) ['learning_rate']",
        "lr must be a number, got 'fast'",
        "model_overrides: dropout must be a number, got 'high'",
        "max_steps must be an integer, got 'many'",
    ]
    # the types right, every range problem at once (TrainConfig's own checks)
    with pytest.raises(
        ConfigError, match=r"^TrainConfig: batch_size must be at least 1, got 0; save_every must be at least 1"
    ):
        load_config(TrainConfig, None, ["batch_size=0", "save_every=0"])


def test_model_overrides_are_emsconfig_fields_checked_at_load():
    with pytest.raises(ConfigError) as error:
        load_config(TrainConfig, None, ["model_overrides.d_modle=64", "model_overrides.n_heads=four"])
    known = sorted(f for f in EMSConfig.__dataclass_fields__ if f not in ("vocab_size", "n_languages"))
    assert str(error.value) == (
        "TrainConfig: --set 'model_overrides.d_modle=64': model_overrides: unknown key(s) ['d_modle']; did you "
        "mean 'd_model'?; model_overrides: n_heads must be an integer, got 'four'"
    )
    with pytest.raises(ConfigError) as error:
        load_config(TrainConfig, None, ["model_overrides.size=64"])
    assert str(error.value) == (
        f"TrainConfig: --set 'model_overrides.size=64': model_overrides: unknown key(s) ['size']; known (EMSConfig "
        f"fields, not vocab_size, not n_languages): {known}"
    )
    # typed as EMSConfig types them: a string stays verbatim (YAML would read `no` as false), a number is one
    cfg = load_config(
        TrainConfig,
        None,
        ["model_overrides.duplicate_negatives=keep", "model_overrides.dropout=0", "model_overrides.d_output=null"],
    )
    assert cfg.model_overrides == {"duplicate_negatives": "keep", "dropout": 0.0, "d_output": None}
    assert type(cfg.model_overrides["dropout"]) is float


def test_global_negatives_is_a_training_setting_and_no_model_overrides_key(tmp_path):
    # a run's train_config.yaml: global_negatives beside the other TrainConfig keys
    (tmp_path / "train_config.yaml").write_text("global_negatives: true\nmodel_overrides: {dropout: 0.0}\n")
    cfg = load_config(TrainConfig, tmp_path / "train_config.yaml")
    assert cfg.global_negatives is True and cfg.model_overrides == {"dropout": 0.0}
    assert "global_negatives" not in EMSConfig.__dataclass_fields__  # not saved with the model
    # as a model_overrides key it is an unknown EMSConfig field
    with pytest.raises(ConfigError, match=r"^TrainConfig: model_overrides: unknown key\(s\) \['global_negatives'\]"):
        load_config(TrainConfig, None, values={"model_overrides": {"global_negatives": True}})
    with pytest.raises(ConfigError, match=r"^TrainConfig: --set 'model_overrides.global_negatives=true': model_overr"):
        load_config(TrainConfig, None, ["model_overrides.global_negatives=true"])


def test_set_reads_a_value_as_the_type_of_the_key_it_names(tmp_path):
    (tmp_path / "data.yaml").write_text("languages: [de, en]\npivot: en\nclean: {max_chars: 300}\n")
    cfg = load_config(
        PrepConfig,
        tmp_path / "data.yaml",
        ["clean.eval_sets=[tatoeba]", "vocab.sampling_alpha=1e-1", "corpora=[{name: A, release: '1.10'}]"],
    )
    assert cfg.clean.max_chars == 300 and cfg.clean.eval_sets == ("tatoeba",) and cfg.vocab.sampling_alpha == 0.1
    assert cfg.corpora[0].release == "1.10"
    train = load_config(
        TrainConfig,
        None,
        [
            "teacher=null",
            "valid_data=",
            "out=1.10",
            "deepspeed_overrides.gradient_clipping=0.5",
            "init_from=st:a: b, [c",
            'data="/x y/shards"',
            "vocab='no'",
        ],
    )
    assert (train.teacher, train.valid_data, train.out, train.init_from) == (None, None, "1.10", "st:a: b, [c")
    assert (train.data, train.vocab) == ("/x y/shards", "no")  # YAML-quoted: unquoted
    assert train.deepspeed_overrides == {"gradient_clipping": 0.5}
    # in a YAML file, YAML's own types count: a number for a string field would lose "1.10"
    (tmp_path / "data.yaml").write_text("languages: [de, en]\npivot: en\ncorpora: [{name: A, release: 1.10}]\n")
    with pytest.raises(ConfigError, match=r"corpora\[0\]: release must be a string, got 1.1 \(quote it in YAML\)"):
        load_config(PrepConfig, tmp_path / "data.yaml")


def test_values_set_and_file_merge_in_order_without_changing_their_inputs(tmp_path):
    (tmp_path / "run.yaml").write_text("model_overrides: {dropout: 0.0, max_len: 64}\nlr: 0.1\n")
    values = {"lr": 0.2, "model_overrides": {"max_len": 32}}
    cfg = load_config(TrainConfig, tmp_path / "run.yaml", ["lr=0.3", "model_overrides.d_model=64"], values=values)
    assert cfg.lr == 0.3 and cfg.model_overrides == {"dropout": 0.0, "max_len": 32, "d_model": 64}
    assert values == {"lr": 0.2, "model_overrides": {"max_len": 32}}
    base = {"a": {"b": 1}}
    assert merge(base, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}} and base == {"a": {"b": 1}}


def test_a_malformed_yaml_file_is_one_line_naming_file_and_position(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lr: 0.1\nmax_steps 100\nseed: 1\n")
    with pytest.raises(ConfigError) as error:
        load_config(TrainConfig, path)
    assert str(error.value) == (
        f"{path}: not a readable YAML file: line 3, column 1: could not find expected ':' "
        "(while scanning a simple key at line 2, column 1)"
    )
    path.write_text("- lr\n")
    with pytest.raises(ConfigError, match=r"run.yaml: expected a mapping of config keys, got \['lr'\]"):
        load_config(TrainConfig, path)
    path.write_bytes(b"lr: \xff\n")
    with pytest.raises(ConfigError, match=r"run.yaml: not UTF-8 text \(invalid start byte at byte 4\)"):
        load_config(TrainConfig, path)
    with pytest.raises(FileNotFoundError, match="nope.yaml does not exist"):
        load_config(TrainConfig, tmp_path / "nope.yaml")


def test_nested_sections_lists_and_partial_sections():
    @dataclass
    class Inner:
        size: int
        name: str = "x"

    @dataclass
    class Outer:
        inner: Inner = field(default_factory=lambda: Inner(1))
        items: list[Inner] = field(default_factory=list)
        pair: tuple[int, int] = (0, 0)
        by_name: dict[str, float] = field(default_factory=dict)
        some: Annotated[dict, FieldsOf(Inner)] = field(default_factory=dict)

    cfg = load_config(
        Outer,
        values={
            "inner": {"size": 2},
            "items": [{"size": 3, "name": "y"}],
            "pair": [1, 2],
            "by_name": {"a": 1},
            "some": {"name": "z"},
        },
    )
    assert cfg == Outer(Inner(2), [Inner(3, "y")], (1, 2), {"a": 1.0}, {"name": "z"})
    assert load_config(Outer, values={"items": None, "by_name": None, "some": None}) == Outer()  # an empty YAML key
    with pytest.raises(ConfigError) as error:
        load_config(
            Outer,
            values={
                "inner": {"name": "n"},
                "items": [{"size": "big"}],
                "pair": [1],
                "by_name": {1: "a"},
                "some": {"size": "s", "other": 1},
            },
        )
    assert error.value.problems == [
        "inner: missing required key(s) ['size']",
        "items[0]: size must be an integer, got 'big'",
        "pair must be a list of 2 values, got [1]",
        "by_name has key(s) [1] that are not strings (quote them in YAML)",
        "by_name.1 must be a number, got 'a'",
        "some: unknown key(s) ['other']; known (Inner fields): ['name', 'size']",
        "some: size must be an integer, got 's'",
    ]


def test_unions_and_literals_take_the_first_member_a_value_fits():
    @dataclass
    class Task:
        languages: list[str] | Literal["all"] = "all"
        seeds: int | list[int] = 5
        mode: Literal["max", "ratio"] = "ratio"
        pool: int | Literal["all"] | None = None

    assert load_config(Task, values={"languages": ["de", "en"], "seeds": [0, 2], "mode": "max", "pool": "all"}) == Task(
        ["de", "en"], [0, 2], "max", "all"
    )
    assert load_config(Task, values={"seeds": "3", "pool": 7}) == Task("all", 3, "ratio", 7)  # YAML 1.1's strings
    assert load_config(Task, None, ["languages=[de, fr]", "seeds=[1]", "mode=max", "pool=null"]) == Task(
        ["de", "fr"], [1], "max", None
    )
    assert load_config(Task, None, ["languages=all", "seeds=2"]) == Task("all", 2)
    with pytest.raises(ConfigError) as error:
        load_config(Task, values={"languages": "some", "seeds": [0, "one"], "mode": "min", "pool": True})
    assert error.value.problems == [  # inside a list: that member's own problem; else every member named
        "languages must be a list of strings or 'all', got 'some'",
        "seeds[1] must be an integer, got 'one'",
        "mode must be 'max' or 'ratio', got 'min'",
        "pool must be an integer or 'all' or null, got True",
    ]
    with pytest.raises(
        ConfigError,
        match=r"^Task: languages\[1\] must be a string, got 1 \(quote it in YAML\); "
        r"seeds must be an integer or a list of integers, got 'x'$",
    ):
        load_config(Task, values={"languages": ["de", 1], "seeds": "x"})


def test_a_bad_eval_task_config_is_one_line_naming_the_file_once(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text(
        "type: classification\nname: c\nlanguages: [de, 5]\nseeds: [0, x]\nmlp: {preset: laser, layers: 3}\n"
    )
    with pytest.raises(ConfigError) as error:
        read_task_config(path)
    assert str(error.value) == (
        f"{path}: missing required key(s) ['data_subdir', 'format']; languages[1] must be a string, got 5 (quote it "
        "in YAML); seeds[1] must be an integer, got 'x'; mlp: unknown key(s) ['layers']; known (MlpConfig fields): "
        "['batch_size', 'dropout', 'epochs', 'hidden', 'learning_rate', 'preset', 'weight_decay']"
    )
    path.write_text(
        "type: classification\nname: c\ndata_subdir: c\nformat: mldoc\nlanguages: [de, deuu]\n"
        "train_language: xx\nmlp: {preset: big}\n"
    )
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(path))}: unknown MLP preset 'big'; expected one of laser, small_64$"
    ):
        read_task_config(path)
    path.write_text(
        "type: classification\nname: c\ndata_subdir: c\nformat: mldoc\nlanguages: [de, deuu]\n"
        "train_language: xx\nseeds: 2\n"
    )
    with pytest.raises(ConfigError) as error:  # the codes are checked once the types are right, every one at once
        read_task_config(path)
    assert error.value.where == str(path) and [problem.split(" does not")[0] for problem in error.value.problems] == [
        "'deuu'",
        "'xx'",
    ]
    path.write_text("type: qee\nname: c\n")
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(path))}: unknown task type 'qee'; expected one of bitext, bucc, "
    ):
        read_task_config(path)
    path.write_text("name: [c\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: not a readable YAML file: line 2, column 1: "):
        read_task_config(path)


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "configs").rglob("*.yaml")), ids=lambda p: str(p.relative_to(REPO_ROOT / "configs"))
)
def test_every_config_under_configs_loads_with_its_dataclass(path):
    cls = CONFIG_CLASSES[path.parent.name](path.name)
    if cls is None:  # an evaluation task config: its `type` names its dataclass
        cls = read_task_config(path)[1].config
    else:
        cfg = load_config(cls, path)
    assert set(yaml.safe_load(path.read_text())) <= set(cls.__dataclass_fields__)
    if cls is SuiteConfig:  # every task config it lists is there
        assert all(task.is_file() for task in suite_task_configs(path))
    if path.parent.name == "scaling":  # every size's runs: the base config with its overrides, and its data config
        load_config(RecipeDataConfig, REPO_ROOT / cfg.data_config)
        for name in cfg.sizes:
            load_config(TrainConfig, REPO_ROOT / cfg.train_config, values={"model": name, **cfg.size(name).overrides})
    if cls is AblationConfig:  # every run it trains: its data configs, the base config with each variant's overrides
        base_data_config(cfg)
        for variant in cfg.data_variants:
            variant_data_config(cfg, variant)
        for overrides in cfg.variants.values():
            load_config(TrainConfig, REPO_ROOT / cfg.train_config, values=merge(cfg.train_overrides, overrides))


def test_an_ablations_data_overrides_reach_its_base_data_and_its_data_variants(tmp_path):
    """A study keeps the data settings it ran with: data_overrides over data_config, under each variant's keys."""
    config = tmp_path / "ablation.yaml"
    config.write_text(
        "data_config: configs/data/multilingual_lowres.yaml\n"
        "data_overrides: {vocab_size: 64000, heldout_per_pair: 100}\n"
        "variants: {a: {}, b: {}}\n"
        "data_variants: {b: {vocab_size: 32000}}\n"
    )
    cfg = load_config(AblationConfig, config)
    base, variant = base_data_config(cfg), variant_data_config(cfg, "b")
    assert (base.vocab_size, base.heldout_per_pair) == (64000, 100)
    assert (variant.vocab_size, variant.heldout_per_pair) == (32000, 100)
    config.write_text("data_config: configs/data/multilingual_lowres.yaml\ndata_overrides: {vocab_sise: 1}\n")
    with pytest.raises(ConfigError, match="vocab_sise"):
        load_config(AblationConfig, config)


def test_data_variants_with_equal_settings_share_one_prepared_directory(tmp_path):
    """Preparing a corpus takes minutes: variants whose data settings are equal prepare them once, and one
    equal to the base data trains on OUT/data."""
    config = tmp_path / "ablation.yaml"
    config.write_text(
        "data_config: configs/data/multilingual_lowres.yaml\n"
        "data_overrides: {vocab_size: 64000}\n"
        "variants: {a: {}, b b: {}, c: {}, d: {}, e: {}}\n"
        "data_variants: {b b: {vocab_size: 32000}, c: {vocab_size: 32000}, d: {vocab_size: 64000},\n"
        "                e: {vocab_size: 16000}}\n"
    )
    cfg = load_config(AblationConfig, config)
    configs, dirs = variant_data_dirs(cfg, base_data_config(cfg), tmp_path)
    assert dirs == {
        "b b": tmp_path / "data-b_b",
        "c": tmp_path / "data-b_b",
        "d": tmp_path / "data",
        "e": tmp_path / "data-e",
    }
    assert configs["c"].vocab_size == 32000 and configs["e"].vocab_size == 16000
    cfg.variants.pop("b b")  # left out by --variants: c prepares its own
    assert variant_data_dirs(cfg, base_data_config(cfg), tmp_path)[1]["c"] == tmp_path / "data-c"


@pytest.mark.parametrize(
    "argv",
    [
        ["ems-train", "--set", "model_overrides=" + "{a: " * 3000 + "1" + "}" * 3000],
        ["data_prep", "pairs", "--config", "CONFIG", "--set", "languages=" + "[" * 600 + "]" * 600],
        ["data_prep", "pairs", "--config", "CONFIG", "--set", "languages=" + "[" * 101 + "]" * 101],
    ],
)
def test_a_set_value_is_held_to_the_depth_limit_of_a_config_file(tmp_path, capsys, argv):
    """`--set` values go through the same limits as config files: too deep is one line naming the item,
    status 2 (it was a RecursionError of thousands of lines)."""
    from data_prep.__main__ import main as prep_main
    from ems.cli import run_main
    from ems.training.train import main as train_main

    config = tmp_path / "data.yaml"
    config.write_text("languages: [de, en]\n")
    command, *args = [str(config) if arg == "CONFIG" else arg for arg in argv]
    status = run_main(train_main if command == "ems-train" else prep_main, args)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "not a YAML value: nested more than 100 levels deep" in err


def test_yaml_within_the_limits_reads_and_over_them_is_refused(tmp_path):
    from ems.configs import MAX_YAML_CHARS, MAX_YAML_DEPTH, yaml_value

    assert yaml_value("[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH) is not None
    deep_block = tmp_path / "deep.yaml"
    deep_block.write_text("".join("  " * i + "a:\n" for i in range(MAX_YAML_DEPTH + 5)))
    with pytest.raises(ConfigError, match="nested more than 100 levels deep"):
        load_config(TrainConfig, deep_block)
    with pytest.raises(yaml.YAMLError, match=f"more than the {MAX_YAML_CHARS} a config may hold"):
        yaml_value("a" * (MAX_YAML_CHARS + 1))
