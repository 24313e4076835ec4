"""benchmarks/peer/sentence_transformers.py and its helpers (training, grid, scoring,
report): the budget it reads from a demo directory, the refusal of anything else, the peer's shape
and training settings read from the EMS run, the (vocab, lr) coordinate search on held-out at the full
budget (a fake trainer whose scores are known functions of both), its extensions past an edge and its
edge flags, EMS's worst case over the grid on each metric, the faster precision, the comparison tables'
ratios (the by-group one from hand-written results files), and the schedule re-fitted to the budget (the
training itself is the benchmark's run)."""

import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from benchmarks.peer import grid as peer_grid
from benchmarks.peer import report as peer_report
from benchmarks.peer import scoring as peer_scoring
from benchmarks.peer import sentence_transformers as peer
from benchmarks.peer import training as peer_training
from ems.cli import UserError
from tests.conftest import REPO_ROOT


def test_budget_is_the_demo_training_stage(tmp_path):
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "demo_stages.json").write_text(
        json.dumps({"seconds": {"corpus": 17.0, "train": 600.5, "eval": 40.0}, "steps": 1800})
    )
    (tmp_path / "run" / "metrics.jsonl").write_text(
        '{"step": 20, "tokens_per_s": 1000.0}\n{"step": 40, "tokens_per_s": 3000.0}\n{"step": 40, "valid_loss": 1.0}\n'
    )
    assert peer.ems_budget(tmp_path) == {"seconds": 600.5, "steps": 1800, "tokens_per_s": 2000.0}


def test_budget_of_another_run_is_its_given_seconds_and_last_logged_step(tmp_path):
    run = tmp_path / "map" / "tiny"
    (run / "model").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        '{"step": 0, "valid_loss": 2.0}\n{"step": 50, "loss": 3.0, "tokens_per_s": 1000.0}\n'
        '{"step": 90, "loss": 2.0, "tokens_per_s": 2000.0}\n{"step": 90, "valid_loss": 1.0}\n'
    )
    assert peer.ems_budget(tmp_path, run, 123.0) == {"seconds": 123.0, "steps": 90, "tokens_per_s": 1500.0}
    with pytest.raises(UserError, match="give its training time with --seconds"):
        peer.ems_budget(tmp_path, run)
    with pytest.raises(UserError, match="metrics.jsonl not found: --run must be a finished training run"):
        peer.ems_budget(tmp_path, tmp_path / "elsewhere", 1.0)


def test_a_directory_that_is_not_a_finished_demo_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="demo_stages.json not found"):
        peer.ems_budget(tmp_path)


def test_peer_shape_follows_the_ems_model_config(tmp_path):
    from ems.model_config import config_from_preset

    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    with pytest.raises(UserError, match="config.json not found"):
        peer.ems_config(tmp_path / "run")
    # the all-language recipe's model (the small preset, max_len 288), with 6 heads: no two numbers equal
    cfg = config_from_preset("small", vocab_size=1000, n_languages=3, max_len=288, n_heads=6, dropout=0.1)
    (model / "config.json").write_text(json.dumps(asdict(cfg)))
    shape = peer_training.peer_shape(peer.ems_config(tmp_path / "run"))
    assert shape == peer_training.PeerShape(
        hidden_size=192, num_hidden_layers=4, num_attention_heads=6, intermediate_size=768, max_len=288, dropout=0.1
    )
    assert shape.describe() == "d 192, 4 layers, 6 heads, ffn 768, dropout 0.1, 288 tokens"
    # the demo's: tiny at 64 tokens without dropout
    demo = peer_training.peer_shape(config_from_preset("tiny", vocab_size=1000, n_languages=3, max_len=64, dropout=0.0))
    assert demo == replace(peer_training.TINY, dropout=0.0)

    pairs = [("ein kleiner hund", "a small dog"), ("die katze schläft", "the cat sleeps")] * 20
    tokenizer = peer_training.train_tokenizer(pairs, 40, tmp_path / "tokenizer", shape.max_len)
    built = peer_training.initial_model(tokenizer, tmp_path / "init", seed=0, shape=shape)
    bert = built[0].auto_model.config
    assert (bert.hidden_size, bert.num_hidden_layers, bert.num_attention_heads, bert.intermediate_size) == (
        192,
        4,
        6,
        768,
    )
    assert bert.hidden_dropout_prob == bert.attention_probs_dropout_prob == 0.1
    assert bert.max_position_embeddings == 288 and built[0].max_seq_length == 288
    assert tokenizer.model_max_length == 288 and built.encode(["ein hund"]).shape == (1, 192)


class FakeTokenizer:
    def __init__(self, size):
        self.size = size

    def __len__(self):
        return self.size


def heldout_of(vocab, lr):
    """Held-out P@1 of a (vocab, lr) run: best vocabulary 16k at every lr, best lr 3e-3 at 16k (an lr
    off the grid 5 points down); the point (8000, 3e-3) would be best of all, but the coordinate search
    never runs it."""
    if (vocab, lr) == (8000, 3e-3):
        return 99.0
    return 70.0 - 5.0 * abs(math.log2(vocab / 16000)) + {3e-4: -10.0, 1e-3: 0.0, 3e-3: 2.0}.get(lr, -5.0)


def scores_of(vocab, lr):
    """Every metric of a (vocab, lr) run: held-out as above; Tatoeba best at 32k (a point the held-out
    pick is not), FLORES-200 best at (16000, 3e-4)."""
    return {
        "held-out": heldout_of(vocab, lr),
        "Tatoeba": 50.0 + vocab / 1000,
        "FLORES-200": 40.0 - 10.0 * abs(math.log2(vocab / 16000)) - 1000 * lr,
    }


@pytest.fixture
def fake_training(monkeypatch):
    """Tokenizers, training and scoring replaced: each call is logged in order; a vocabulary of size V
    trains at 32000 / V steps/s in fp32 and twice that in bf16, after 4 s of start-up; a run's scores
    are scores_of(V, lr)."""
    calls, runs = [], {}

    def train_tokenizer(pairs, size, out, max_len):
        calls.append(("tokenizer", size, max_len))
        return FakeTokenizer(size)

    def train_peer(pairs, tokenizer, out, lr, max_steps, seconds, training=peer_training.PeerTraining(), **_):
        calls.append(("train", tokenizer.size, lr, max_steps, seconds, training.precision))
        runs[out / "model"] = (tokenizer.size, lr)
        rate = 32000 / tokenizer.size * (2 if training.precision == "bf16" else 1)
        return max_steps, 4.0 + max_steps / rate, rate

    def score(spec, scoring, out):
        return scores_of(*runs[Path(spec.split(":", 1)[1])])

    monkeypatch.setattr(peer_training, "train_tokenizer", train_tokenizer)
    monkeypatch.setattr(peer_training, "train_peer", train_peer)
    monkeypatch.setattr(peer_training, "count_tokens", lambda tokenizer, pairs, max_len: 30.0)
    monkeypatch.setattr(peer_scoring, "score", score)
    return calls


def test_coordinate_search_at_the_full_budget(tmp_path, fake_training):
    # every vocabulary at the middle lr, then every other lr at the best vocabulary; each point the
    # whole budget, scored on every metric; the pick is the held-out best
    choice, vocabularies = peer_grid.search_peer(
        pairs=[("a", "b")],
        vocab_grid=[32000, 8000, 16000],  # unsorted on purpose: the search goes smallest first
        lr_grid=[3e-3, 3e-4, 1e-3],
        seconds=1000.0,
        out=tmp_path,
        scoring=peer_scoring.Scoring(tmp_path, tmp_path, ["de"], tmp_path / "suite.yaml"),
        training=peer_training.PeerTraining(),
        extend=0,
    )
    # each run: 1000 s, and the steps its vocabulary's probe rate gives in them, 4 s of start-up
    # off: 8000 -> 4 steps/s x 996 s = 3984, 16000 -> 2 x 996 = 1992, 32000 -> 1 x 996 = 996
    probe = peer_training.PROBE_STEPS
    assert fake_training == [
        ("tokenizer", 8000, 64),
        ("train", 8000, 1e-3, probe, None, "fp32"),
        ("train", 8000, 1e-3, 3984, 1000.0, "fp32"),
        ("tokenizer", 16000, 64),
        ("train", 16000, 1e-3, probe, None, "fp32"),
        ("train", 16000, 1e-3, 1992, 1000.0, "fp32"),
        ("tokenizer", 32000, 64),
        ("train", 32000, 1e-3, probe, None, "fp32"),
        ("train", 32000, 1e-3, 996, 1000.0, "fp32"),
        ("train", 16000, 3e-4, 1992, 1000.0, "fp32"),  # the best vocabulary's other lrs; its 1e-3 run is reused
        ("train", 16000, 3e-3, 1992, 1000.0, "fp32"),
    ]
    assert [(p.vocab_size, p.lr, p.heldout) for p in choice.points] == [
        (8000, 1e-3, 65.0),
        (16000, 1e-3, 70.0),
        (32000, 1e-3, 65.0),
        (16000, 3e-4, 60.0),
        (16000, 3e-3, 72.0),
    ]
    assert choice.points[2].scores == scores_of(32000, 1e-3)
    assert (choice.vocab_size, choice.lr, choice.pick) == (16000, 3e-3, choice.points[4])
    assert (choice.vocab_at_grid_edge, choice.lr_at_grid_edge) == (False, True)
    assert choice.best_on("Tatoeba") == choice.points[2] and choice.best_on("FLORES-200") == choice.points[3]
    (tmp_path / "grid-v16000-lr0.003" / "model").mkdir()  # the fake trainer writes no model: this point's only

    # the same search again: each point trained before is reused, not trained (its model must exist)
    fake_training.clear()
    search = dict(pairs=[("a", "b")], vocab_grid=[8000, 16000, 32000], lr_grid=[3e-4, 1e-3, 3e-3], out=tmp_path)
    scoring = peer_scoring.Scoring(tmp_path, tmp_path, ["de"], tmp_path / "suite.yaml")
    again, _ = peer_grid.search_peer(
        **search, seconds=1000.0, scoring=scoring, training=peer_training.PeerTraining(), extend=0
    )
    trained = [call[1:3] for call in fake_training if call[0] == "train"]
    assert [p.scores for p in again.points] == [p.scores for p in choice.points]
    assert (16000, 3e-3) not in trained and len(trained) == 3 + 4  # the other 4 points had no model: 3 probes, 4 runs
    # another budget trains every point again
    fake_training.clear()
    peer_grid.search_peer(**search, seconds=900.0, scoring=scoring, training=peer_training.PeerTraining(), extend=0)
    assert (16000, 3e-3) in [call[1:3] for call in fake_training if call[0] == "train"]


@pytest.mark.parametrize(
    "best, edges",
    [
        ((16000, 1e-3), (False, False)),  # inside both grids
        ((8000, 1e-3), (True, False)),  # the smallest vocabulary
        ((32000, 1e-3), (True, False)),  # the largest
        ((16000, 3e-4), (False, True)),  # the smallest lr
        ((32000, 3e-3), (True, True)),  # the largest of both
    ],
)
def test_edge_flags_on_both_axes(best, edges):
    def run_point(vocab, lr):  # held-out falls off with the distance (in grid steps) from `best`
        distance = abs(math.log2(vocab / best[0])) + abs(math.log(lr / best[1], 3))
        return peer_grid.GridPoint(vocab, lr, steps=1, seconds=1.0, scores={"held-out": 80.0 - distance})

    choice = peer_grid.coordinate_search([8000, 16000, 32000], [3e-4, 1e-3, 3e-3], run_point, extend=0)
    assert (choice.vocab_size, choice.lr) == best
    assert (choice.vocab_at_grid_edge, choice.lr_at_grid_edge) == edges


def test_an_edge_pick_extends_its_axis_by_the_edge_s_own_step():
    # the held-out peak is at (128k, 1e-2): the vocabulary axis grows 32k -> 64k -> 128k (two extensions,
    # still at the edge: flagged); the lr axis at 128k grows 3e-3 -> 9e-3 -> 2.7e-2, and 9e-3 wins inside
    visited = []

    def run_point(vocab, lr):
        visited.append((vocab, lr))
        distance = abs(math.log2(vocab / 128000)) + abs(math.log(lr / 1e-2, 3))
        return peer_grid.GridPoint(vocab, lr, steps=1, seconds=1.0, scores={"held-out": 80.0 - distance})

    choice = peer_grid.coordinate_search([8000, 16000, 32000], [3e-4, 1e-3, 3e-3], run_point, extend=2)
    assert visited == [
        (8000, 1e-3),
        (16000, 1e-3),
        (32000, 1e-3),
        (64000, 1e-3),
        (128000, 1e-3),
        (128000, 3e-4),
        (128000, 3e-3),
        (128000, 9e-3),
        (128000, 2.7e-2),
    ]
    assert (choice.vocab_size, choice.lr, choice.vocab_at_grid_edge, choice.lr_at_grid_edge) == (
        128000,
        9e-3,
        True,
        False,
    )
    # an edge at the small end halves the vocabulary, but not below MIN_VOCAB; one value is no axis
    assert peer_grid.beyond([2000, 4000], 2000) == 1000 and peer_grid.beyond([2000, 4000], 4000) == 8000
    assert peer_grid.beyond([8000, 16000, 32000], 16000) is None and peer_grid.beyond([32000], 32000) is None
    assert peer_grid.beyond([1e-3, 3e-3], 1e-3) == pytest.approx(3.33e-4)


def test_one_vocabulary_size_is_no_vocabulary_grid():
    # --vocab-size N: the lr grid alone, never an edge of one value
    choice = peer_grid.coordinate_search(
        [32000],
        [3e-4, 1e-3, 3e-3],
        lambda vocab, lr: peer_grid.GridPoint(vocab, lr, steps=1, seconds=1.0, scores={"held-out": 1.0 / lr}),
        extend=0,
    )
    assert [(p.vocab_size, p.lr) for p in choice.points] == [(32000, 1e-3), (32000, 3e-4), (32000, 3e-3)]
    assert (choice.lr, choice.vocab_at_grid_edge, choice.lr_at_grid_edge) == (3e-4, False, True)


def test_worst_case_is_ems_over_the_best_grid_point_of_each_metric():
    # EMS against the held-out pick and against the best point on each metric, by hand: Tatoeba's best is
    # the 32k point (62.0), FLORES-200's the 8k one (45.0); held-out's best is the pick itself
    points = [
        peer_grid.GridPoint(8000, 1e-3, 1, 1.0, {"held-out": 70.0, "Tatoeba": 55.0, "FLORES-200": 45.0}),
        peer_grid.GridPoint(16000, 1e-3, 1, 1.0, {"held-out": 75.0, "Tatoeba": 60.0, "FLORES-200": 40.0}),
        peer_grid.GridPoint(32000, 1e-3, 1, 1.0, {"held-out": 72.0, "Tatoeba": 62.0, "FLORES-200": 30.0}),
    ]
    choice = peer_grid.GridChoice(points, 16000, 1e-3, False, False)
    rows = peer_report.worst_case({"held-out": 80.0, "Tatoeba": 62.0, "FLORES-200": 36.0, "sts": 1.0}, choice)
    assert list(rows) == ["held-out", "Tatoeba", "FLORES-200"]  # a metric the peer lacks is left out
    assert rows["Tatoeba"] == {
        "ems": 62.0,
        "pick": 60.0,
        "ems_over_pick": pytest.approx(62 / 60),
        "best": 62.0,
        "best_at": {"vocab_size": 32000, "lr": 1e-3},
        "ems_over_best": 1.0,
    }
    assert rows["FLORES-200"]["ems_over_best"] == pytest.approx(0.8) and rows["FLORES-200"]["ems_over_pick"] == 0.9
    assert rows["held-out"]["best_at"] == {"vocab_size": 16000, "lr": 1e-3}
    table = peer_report.worst_case_table(rows, choice).splitlines()
    assert table[4] == "| FLORES-200 | 36.0 | 40.0 | 0.90 | 45.0 (8,000, lr 0.001) | **0.80** |"


def test_an_error_rate_s_best_point_is_its_lowest_and_its_ratio_is_peer_over_ems():
    # xSIM error (%): the 32k point's 60.0 is the best (lowest), not the 8k point's 80.0; EMS's 50.0 is
    # better than both: peer / EMS = 60 / 50 = 1.2 against the best, 70 / 50 = 1.4 against the pick
    error = "xsim_flores200" + peer_scoring.ERROR_SUFFIX
    points = [
        peer_grid.GridPoint(8000, 1e-3, 1, 1.0, {"held-out": 70.0, error: 80.0}),
        peer_grid.GridPoint(16000, 1e-3, 1, 1.0, {"held-out": 75.0, error: 70.0}),
        peer_grid.GridPoint(32000, 1e-3, 1, 1.0, {"held-out": 72.0, error: 60.0}),
    ]
    choice = peer_grid.GridChoice(points, 16000, 1e-3, False, False)
    assert choice.best_on(error) == points[2] and choice.best_on("held-out") == points[1]
    rows = peer_report.worst_case({"held-out": 80.0, error: 50.0}, choice)
    assert rows[error]["best"] == 60.0 and rows[error]["best_at"] == {"vocab_size": 32000, "lr": 1e-3}
    assert rows[error]["ems_over_best"] == pytest.approx(1.2) and rows[error]["ems_over_pick"] == pytest.approx(1.4)
    table = peer_report.worst_case_table(rows, choice).splitlines()
    assert (
        table[3] == "| xsim_flores200 error (%, peer / EMS) | 50.0 | 70.0 | 1.40 | 60.0 (32,000, lr 0.001) | **1.20** |"
    )


def test_the_faster_precision_is_chosen_by_its_probe(tmp_path, fake_training):
    precision, rates = peer_training.faster_precision(
        [("a", "b")], FakeTokenizer(16000), tmp_path, peer_training.PeerTraining()
    )
    assert (precision, rates) == ("bf16", {"fp32": 2.0, "bf16": 4.0})
    assert [call[-1] for call in fake_training] == ["fp32", "bf16"]


def test_table_gives_ems_over_peer_ratios():
    table = peer_report.report_table(
        {
            "steps": 1800,
            "pairs": 460_800,
            "seconds": 600.0,
            "steps_per_s": 3.0,
            "tokens_per_s": 20000.0,
            "scores": {"Tatoeba": 75.0, "FLORES-200": 30.0, "held-out": 80.0, "tico19_dev": 50.0, "xsim error": 60.0},
        },
        {
            "steps": 600,
            "pairs": 153_600,
            "seconds": 600.0,
            "steps_per_s": 1.0,
            "tokens_per_s": 10000.0,
            "scores": {"Tatoeba": 60.0, "FLORES-200": 40.0, "held-out": 80.0, "xsim error": 75.0},
        },
    )
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]] for line in table.splitlines()[2:]}
    assert rows["steps/s"] == ["3.00", "1.00", "3.00"]
    assert rows["pairs seen"] == ["460,800", "153,600", "3.00"]
    assert rows["Tatoeba P@1"] == ["75.0", "60.0", "1.25"]
    assert rows["FLORES-200 P@1"] == ["30.0", "40.0", "0.75"]
    assert rows["held-out P@1"][2] == "1.00"
    assert "tico19_dev P@1" not in rows  # the peer has no such score
    assert rows["xsim error (%, ratio peer / EMS)"] == ["60.0", "75.0", "1.25"]  # an error rate: lower is better


def test_the_peer_schedule_is_transformers_linear_one_with_a_movable_end():
    import torch
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    reference = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=150, num_training_steps=900).lr_lambdas[0]
    schedule = peer_training.LinearDecay(warmup=150, end=900)
    assert [schedule(step) for step in range(1000)] == pytest.approx([reference(step) for step in range(1000)])
    schedule.end = 600  # re-fitted: the decay now reaches 0 at step 600
    assert schedule(375) == pytest.approx(0.5) and schedule(600) == 0.0 and schedule(700) == 0.0


def test_a_grid_run_s_schedule_is_the_final_run_s_shrunk():
    # a grid run a quarter of the final one: the same lr at the same share of the run, decayed to 0 at its end
    # (a warm-up of a fixed 150 steps never ended in a 140-step grid run)
    final, grid = peer_training.LinearDecay.for_run(560), peer_training.LinearDecay.for_run(140)
    assert (final.warmup, grid.warmup) == (56, 14)
    assert [grid(step) for step in range(141)] == pytest.approx([final(4 * step) for step in range(141)])
    assert grid(100) < grid(14) == 1.0 and grid(140) == 0.0


def test_refit_end_fills_the_budget_at_the_run_s_own_rate():
    # 100 steps in 100 s, 1.1 steps/s: 400 s left are 440 more steps
    assert peer_training.refit_end(step=100, elapsed=100.0, steady_rate=1.1, seconds=500.0, cap=1000) == 540
    # the loop's bound
    assert peer_training.refit_end(step=100, elapsed=100.0, steady_rate=1.1, seconds=500.0, cap=500) == 500
    # over budget
    assert peer_training.refit_end(step=100, elapsed=600.0, steady_rate=1.1, seconds=500.0, cap=1000) == 101


def _results(tatoeba, flores):
    def task(name, type_name, rows):
        return {
            "task": name,
            "type": type_name,
            "metric": "p_at_1",
            "languages": {lang: {"mean": p} for lang, p in rows.items()},
            "average": {"mean": sum(rows.values()) / len(rows)},
            "skipped": {},
        }

    return {
        "schema_version": 2,
        "tasks": {
            "tatoeba": task("tatoeba", "tatoeba", tatoeba),
            "flores200": task("flores200", "flores", flores),
            "heldout": task("heldout", "heldout", {"de": 50.0}),  # not split by group
        },
    }


def test_grouped_table_from_hand_written_results(tmp_path):
    from eval.language_groups import grouped_results

    ems_file, peer_file = tmp_path / "ems.json", tmp_path / "peer.json"
    ems_file.write_text(
        json.dumps(
            _results(
                {"de": 90.0, "fr": 80.0, "zh": 70.0, "wuu": 20.0},
                {"de": 85.0, "zh": 60.0, "zh-Hant": 50.0, "ace-Arab": 15.0, "fr": 70.0},  # fr: EMS only
            )
        )
    )
    peer_file.write_text(
        json.dumps(
            _results(
                {"de": 60.0, "fr": 40.0, "zh": 70.0, "wuu": 40.0},
                {"de": 85.0, "zh": 30.0, "zh-Hant": 20.0, "ace-Arab": 25.0, "ace-Latn": 30.0},  # ace-Latn: peer only
            )
        )
    )
    # de 12,000 pairs (≥10k), zh 1,000 as cmn (1k–10k, zh-Hant counts zh's), fr 999 (<1k); wuu, ace none (unseen)
    pairs = {"de": 12_000, "cmn": 1_000, "fr": 999, "en": 14_000}
    ems_rows, peer_rows = grouped_results(ems_file, pairs), grouped_results(peer_file, pairs)
    comparison = peer_report.group_comparison(ems_rows, peer_rows)
    assert list(comparison) == ["tatoeba", "flores200"]  # the heldout task is not grouped
    # FLORES 1k–10k: zh, zh-Hant -> EMS (60 + 50) / 2 = 55, peer (30 + 20) / 2 = 25
    assert comparison["flores200"]["1k–10k"] == {"languages": 2, "ems": 55.0, "peer": 25.0}
    assert comparison["flores200"]["<1k"] == {"languages": 0, "ems": None, "peer": None}
    lines = peer_report.group_table(comparison, {"tatoeba": "tatoeba", "flores200": "flores"}).splitlines()
    assert "### Tatoeba P@1 (tatoeba) by the language's training pairs" in lines
    assert "### FLORES-200 P@1 (flores200) by the language's training pairs" in lines
    tatoeba, flores = lines[4:9], lines[14:19]
    assert tatoeba == [
        "| ≥10k pairs | 1 | 90.0 | 60.0 | 1.50 |",  # de
        "| 1k–10k | 1 | 70.0 | 70.0 | 1.00 |",  # zh
        "| <1k | 1 | 80.0 | 40.0 | 2.00 |",  # fr
        "| unseen | 1 | 20.0 | 40.0 | 0.50 |",  # wuu
        "| **all** | 4 | 65.0 | 52.5 | 1.24 |",  # (90 + 80 + 70 + 20) / 4 = 65, (60 + 40 + 70 + 40) / 4 = 52.5
    ]
    assert flores == [
        "| ≥10k pairs | 1 | 85.0 | 85.0 | 1.00 |",  # de
        "| 1k–10k | 2 | 55.0 | 25.0 | 2.20 |",  # zh, zh-Hant
        "| <1k | 0 | – | – | – |",  # fr, scored by EMS alone, is left out
        "| unseen | 1 | 15.0 | 25.0 | 0.60 |",  # ace-Arab; ace-Latn scored by the peer alone is left out
        "| **all** | 4 | 52.5 | 40.0 | 1.31 |",  # (85 + 60 + 50 + 15) / 4 = 52.5, (85 + 30 + 20 + 25) / 4 = 40
    ]


def test_grid_table_shows_the_points_run_and_the_choice():
    points = [
        peer_grid.GridPoint(8000, 1e-3, 120, 1.0, {"held-out": 65.0, "Tatoeba": 50.0}),
        peer_grid.GridPoint(16000, 3e-3, 100, 1.0, {"held-out": 72.0, "Tatoeba": 55.0}),
        peer_grid.GridPoint(16000, 1e-3, 100, 1.0, {"held-out": 70.0, "Tatoeba": 56.0}),
    ]
    table = peer_report.grid_table(peer_grid.GridChoice(points, 16000, 3e-3, False, True))
    assert table.splitlines() == [
        "| vocabulary | lr | steps | held-out | Tatoeba |",
        "|--:|--:|--:|--:|--:|",
        "| 8,000 | 0.001 | 120 | 65.0 | 50.0 |",
        "| 16,000 | 0.001 | 100 | 70.0 | 56.0 |",
        "| 16,000 | 0.003 | 100 | **72.0** | **55.0** |",
    ]


def test_main_chooses_on_heldout_and_reports_the_worst_case_grid_edges_and_groups(tmp_path, fake_training, monkeypatch):
    """The whole command on a hand-made all-language layout, training and scoring faked."""
    from ems.model_config import config_from_preset

    demo, data = tmp_path / "demo", tmp_path / "data"
    (demo / "run" / "model").mkdir(parents=True)
    (data / "tatoeba").mkdir(parents=True)
    (demo / "demo_stages.json").write_text(json.dumps({"seconds": {"train": 1000.0}, "steps": 1800}))
    (demo / "run" / "metrics.jsonl").write_text('{"step": 50, "tokens_per_s": 5000.0}\n')
    (demo / "run" / "train_config.yaml").write_text("batch_size: 128\nweight_decay: 0.001\n")
    cfg = config_from_preset("small", vocab_size=32000, n_languages=3, max_len=288, dropout=0.0)
    (demo / "run" / "model" / "config.json").write_text(json.dumps(asdict(cfg)))
    for l1, l2 in (("de", "en"), ("en", "fr")):
        (demo / "corpus" / "train" / f"{l1}-{l2}").mkdir(parents=True)
        (demo / "corpus" / "train" / f"{l1}-{l2}" / f"c.{l1}").write_text("eins\nzwei\n")
        (demo / "corpus" / "train" / f"{l1}-{l2}" / f"c.{l2}").write_text("one\ntwo\n")
    (demo / "shards" / "train").mkdir(parents=True)
    (demo / "shards" / "train" / "index.json").write_text(
        json.dumps(
            {
                "languages": ["de", "en", "fr"],
                "files": [
                    {"name": "c", "l1": "de", "l2": "en", "start": 0, "end": 12_000, "n_pairs": 12_000},
                    {"name": "c", "l1": "en", "l2": "fr", "start": 12_000, "end": 12_999, "n_pairs": 999},
                ],
                "n_pairs": 12_999,
            }
        )
    )
    fake_score, scored = peer_scoring.score, []

    def score(spec, scoring, out):
        scored.append((spec.split(":")[0], scoring.languages, scoring.suite.name))
        ems = spec.startswith("ems:")
        tatoeba = {"de": 90.0, "fr": 80.0, "wuu": 20.0} if ems else {"de": 60.0, "fr": 40.0, "wuu": 40.0}
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(_results(tatoeba, {"de": 85.0 if ems else 80.0})))
        return {"held-out": 80.0, "Tatoeba": 75.0, "FLORES-200": 36.0} if ems else fake_score(spec, scoring, out)

    monkeypatch.setattr(peer_scoring, "score", score)
    out = tmp_path / "out"
    suite = REPO_ROOT / "configs" / "eval" / "suite_multilingual.yaml"
    argv = ["--demo", str(demo), "--out", str(out), "--data-dir", str(data), "--suite", str(suite)]
    argv += ["--vocab-grid", "8000", "16000", "32000", "--lr-grid", "3e-4", "1e-3", "3e-3"]
    assert peer.main(argv + ["--equal-pairs"]) == 0
    # precision probes at the smallest vocabulary (bf16 is faster here), then every run in bf16
    assert fake_training[:3] == [
        ("tokenizer", 8000, 288),
        ("train", 8000, 1e-3, peer_training.PROBE_STEPS, None, "fp32"),
        ("train", 8000, 1e-3, peer_training.PROBE_STEPS, None, "bf16"),
    ]
    assert {call[-1] for call in fake_training[3:] if call[0] == "train"} == {"bf16"}
    # the grid: 3 + 3 - 1 points, then the 3e-3 edge extended once (9e-3: held-out falls, so 3e-3 is no
    # longer an edge); each point the whole 1000 s (16000 in bf16: 4 steps/s x 996 s)
    timed = [call[1:5] for call in fake_training if call[0] == "train" and call[4] is not None]
    assert timed[3:] == [(16000, 3e-4, 3984, 1000.0), (16000, 3e-3, 3984, 1000.0), (16000, 9e-3, 3984, 1000.0)]
    # equal pairs: EMS's 1800 steps of 128 pairs are 900 peer steps of 256, untimed, at the pick
    assert fake_training[-1] == ("train", 16000, 3e-3, 900, None, "bf16")
    # every language of the suite (None); the EMS model zero-shot where it never trained
    assert scored[-2:] == [("ems", None, "suite_multilingual.yaml"), ("st", None, "suite_multilingual.yaml")]
    report = json.loads((out / "peer_report.json").read_text())
    assert report["peer_shape"] == {
        "hidden_size": 192,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 768,
        "max_len": 288,
        "dropout": 0.0,
    }
    assert report["peer_training"]["weight_decay"] == 0.001 and report["peer_training"]["precision"] == "bf16"
    assert [(p["vocab_size"], p["lr"], p["scores"]["held-out"]) for p in report["grid"]][:5] == [
        (8000, 1e-3, 65.0),
        (16000, 1e-3, 70.0),
        (32000, 1e-3, 65.0),
        (16000, 3e-4, 60.0),
        (16000, 3e-3, 72.0),
    ]
    assert (report["vocab_size"], report["lr"], report["vocab_at_grid_edge"], report["lr_at_grid_edge"]) == (
        16000,
        3e-3,
        False,
        False,
    )
    # the worst case: Tatoeba's best peer is the 32k point (82.0), FLORES-200's (16000, 3e-4): 39.7
    assert report["worst_case"]["Tatoeba"]["best_at"] == {"vocab_size": 32000, "lr": 1e-3}
    assert report["worst_case"]["Tatoeba"]["ems_over_best"] == pytest.approx(75.0 / 82.0)
    assert report["worst_case"]["FLORES-200"]["best"] == pytest.approx(39.7)
    assert report["ems"]["pairs"] == 1800 * 128 and report["equal_pairs"]["pairs"] == 900 * 256
    # de 12,000 pairs (≥10k), fr 999 (<1k), wuu unseen
    assert report["groups"]["tatoeba"]["<1k"] == {"languages": 1, "ems": 80.0, "peer": 40.0}
    markdown = (out / "peer_report.md").read_text(encoding="utf-8").splitlines()
    assert "| unseen | 1 | 20.0 | 40.0 | 0.50 |" in markdown
    assert any("BertModel d 192, 4 layers, 4 heads, ffn 768, dropout 0, 288 tokens" in line for line in markdown)
    assert any(line.startswith("CPU: ") for line in markdown)
    assert "## EMS against the held-out pick, equal pairs seen (untimed)" in markdown

    # the demo's suite scores the training languages; --vocab-size N runs the lr grid alone; a fixed precision
    fake_training.clear()
    scored.clear()
    argv = ["--demo", str(demo), "--out", str(tmp_path / "out2"), "--data-dir", str(data), "--vocab-size", "8000"]
    assert peer.main(argv + ["--precision", "fp32", "--extend", "0"]) == 0
    assert scored[0] == ("st", ["de", "fr"], "suite_demo.yaml")
    report = json.loads((tmp_path / "out2" / "peer_report.json").read_text())
    assert [(p["vocab_size"], p["lr"]) for p in report["grid"]] == [(8000, 3e-3), (8000, 1e-3), (8000, 1e-2)]
    assert report["vocab_at_grid_edge"] is False and report["peer_training"]["precision_probes"] is None
