"""The training loop (ems.training.train.train_loop) and its components' cadences on their own: the real
loop and components over fake steps, with what they write, save, validate and probe recorded
instead of run."""

import contextlib
from types import SimpleNamespace

import pytest
import torch

import ems.training.schedule as schedule_module
import ems.training.train as train_module
from ems.model_config import EMSConfig
from ems.training.batches import Prefetcher
from ems.training.config import TrainConfig
from ems.training.metrics import MetricSums, StepValues, TrainingMetrics, show_losses
from ems.training.probe import Probe
from ems.training.runtime import BatchLayout
from ems.training.saving import Checkpointer, RunState
from ems.training.schedule import LinearSchedule, TimeBudget
from ems.training.setup import Run
from ems.training.stopping import STOP_FILE, Stopping
from ems.training.validator import Validator

CPU = torch.device("cpu")


class FakeEngine:
    device = CPU
    module = SimpleNamespace(cfg=EMSConfig(vocab_size=10, n_languages=2))  # the model: its objectives' weights

    def fp16_enabled(self) -> bool:
        return False

    def get_lr(self) -> list[float]:
        return [1e-3]


class RecordedLog:
    """A MetricsLog that keeps what it is given."""

    def __init__(self, calls: list):
        self.calls = calls

    def write(self, record: dict, scalars: dict) -> None:
        self.calls.append(("log", record["step"], record))

    def close(self) -> None:
        pass


def step_values(loss: float = 1.0) -> StepValues:
    return StepValues(
        dict(loss=loss, xtr=0.5, contrastive=0.5, distill=0.0), grad_norm=2.0, lr=1e-3, real_tokens=9, token_slots=10
    )


def pending_step(loss: float = 1.0) -> train_module.PendingStep:
    """The values of `step_values` as train_step hands them over (on CPU: no copy to wait for)."""
    # STEP_KEYS: loss, xtr, contrastive, distill, duplicate_rows; then the gradient norm
    return train_module.PendingStep(
        torch.tensor([loss, 0.5, 0.5, 0.0, 0.0, 2.0], dtype=torch.float64), None, 1e-3, 9, 10
    )


def test_a_pending_step_reads_back_as_its_values():
    assert pending_step(3.0).values() == step_values(3.0)


@pytest.fixture
def calls(monkeypatch):
    """What the loop does, in order: ("log", step, record), ("save", step), ("validate", step),
    ("probe", step), ("finish", step, preempted)."""
    made = []
    monkeypatch.setattr(MetricSums, "summed_over_ranks", lambda sums, device: sums)  # a world of one
    monkeypatch.setattr(Checkpointer, "save", lambda self, state: made.append(("save", state.step)))
    monkeypatch.setattr(
        Validator, "run", lambda self, step: made.append(("validate", step)) or {"valid_loss": 1.0, "step": step}
    )
    monkeypatch.setattr(Probe, "run", lambda self, step: made.append(("probe", step)) or None if self.every else None)
    monkeypatch.setattr(train_module, "train_step", lambda run, micro_batches: pending_step())
    monkeypatch.setattr(
        train_module,
        "finish",
        lambda run, history, preempted: made.append(("finish", run.state.step, preempted)) or history,
    )
    return made


def fake_run(tmp_path, calls, step=0, max_steps=6, **settings) -> Run:
    cfg = TrainConfig(max_steps=max_steps, **settings)
    engine, log = FakeEngine(), RecordedLog(calls)
    batches = Prefetcher((((0, b), []) for b in range(step, 1000)), depth=0)
    return Run(
        cfg=cfg,
        out=tmp_path,
        rank=0,
        layout=BatchLayout(1, 1, cfg.batch_size),
        engine=engine,
        autocast=contextlib.nullcontext(),
        forward=engine,
        clip_norm=None,
        schedule=LinearSchedule(cfg.warmup_steps, max_steps),
        tokenizer=None,
        batches=batches,
        state=RunState(step=step, position=(0, step), max_steps=max_steps),
        checkpointer=Checkpointer(
            tmp_path / "checkpoints", engine, 0, BatchLayout(1, 1, cfg.batch_size), cfg, {}, last_saved=step
        ),
        metrics=TrainingMetrics(log, cfg.log_every, engine, world_size=1),
        validator=Validator(SimpleNamespace(), cfg.valid_every, engine, cfg.batch_size, contextlib.nullcontext(), log),
        probe=Probe(None, cfg.probe_every, engine, 0, log),
        budget=TimeBudget(cfg.time_budget_minutes, step + 5, cfg.budget_probe_steps, 0, 1, CPU),
        stopping=Stopping(SimpleNamespace(signal=None), tmp_path, 0, 1, CPU, cfg.stop_at_step, cfg.max_minutes),
    )


def test_the_loop_logs_saves_validates_and_probes_on_their_schedules(tmp_path, calls):
    run = fake_run(tmp_path, calls, log_every=3, save_every=4, valid_every=2, probe_every=5)
    history = train_module.train_loop(run)
    done = [call[:2] for call in calls]
    # step 0: a new run validates and probes; step 6 is the last: it logs, and leaves validation
    # (valid_every=2) to finish
    assert done == [
        ("validate", 0),
        ("probe", 0),
        ("validate", 2),
        ("log", 3),
        ("save", 4),
        ("validate", 4),
        ("probe", 5),
        ("log", 6),
        ("finish", 6),
    ]
    assert calls[-1] == ("finish", 6, False) and run.state.position == (0, 6)
    logged = [call[2] for call in calls if call[0] == "log"]
    assert [record["step"] for record in history] == [0, 2, 3, 4, 6] and logged == [history[2], history[4]]
    assert logged[0]["loss"] == 1.0 and logged[0]["real_token_ratio"] == 0.9 and logged[0]["xtr"] == 0.5


def test_a_steps_values_are_read_after_the_next_step_is_queued_or_where_the_loop_needs_them(
    tmp_path, calls, monkeypatch
):
    # On a GPU, reading a step's losses right after it would make the host wait for the device; the loop
    # reads them after queueing the next step, and at once before a log, checkpoint or evaluation (which
    # must see every step's values, and never a diverged model).
    events = []

    class Pending:
        def __init__(self, step: int):
            self.step = step

        def values(self) -> StepValues:
            events.append(("read", self.step))
            return step_values()

    steps = iter(range(1, 100))
    monkeypatch.setattr(
        train_module, "train_step", lambda run, mb: events.append(("step", s := next(steps))) or Pending(s)
    )
    train_module.train_loop(fake_run(tmp_path, calls, max_steps=6, log_every=3, save_every=100, valid_every=100))
    assert events == [
        ("step", 1),
        ("step", 2),
        ("read", 1),
        ("step", 3),
        ("read", 2),
        ("read", 3),  # logged at 3: read at once
        ("step", 4),
        ("step", 5),
        ("read", 4),
        ("step", 6),
        ("read", 5),
        ("read", 6),
    ]


def test_a_diverged_step_read_late_is_reported_at_its_own_step(tmp_path, calls, monkeypatch):
    losses = iter([1.0, float("nan"), 1.0, 1.0])
    monkeypatch.setattr(train_module, "train_step", lambda run, mb: pending_step(next(losses)))
    reported = []
    monkeypatch.setattr(
        Checkpointer,
        "stop_diverged",
        lambda self, step, values, micro_batches, position, languages: reported.append((step, position)) or exit(3),
    )
    run = fake_run(tmp_path, calls, max_steps=6, log_every=100, save_every=100, valid_every=100)
    run.tokenizer = SimpleNamespace(languages=["de", "en"])
    with pytest.raises(SystemExit):
        train_module.train_loop(run)
    assert reported == [(2, (0, 1))]


def test_the_loop_ends_at_stop_at_step_and_on_a_stop_file(tmp_path, calls):
    run = fake_run(tmp_path, calls, step=2, max_steps=10, stop_at_step=5, log_every=2, save_every=100, valid_every=5)
    train_module.train_loop(run)
    # resumed at 2: no validation at the start; 5 is this invocation's last step: logged, validated by finish
    assert [call[:2] for call in calls] == [("log", 4), ("log", 5), ("finish", 5)] and calls[-1][2] is False
    calls.clear()
    (tmp_path / STOP_FILE).touch()
    train_module.train_loop(fake_run(tmp_path, calls, step=5, max_steps=10, log_every=2))
    assert calls == [("finish", 5, True)]


def test_the_progress_bar_shows_the_total_and_the_objectives_trained(tmp_path, calls, monkeypatch):
    class Bar:
        def set_postfix(self, **shown):
            self.shown = shown

    record = {"loss": 1.0, "xtr": 0.5, "contrastive": 0.5, "distill": 0.0, "duplicate_rows": 0.25}
    bar = Bar()
    show_losses(bar, record, EMSConfig(vocab_size=10, n_languages=2))  # distill_weight 0: no "distill=0.000"
    assert bar.shown == {"loss": "1.000", "xtr": "0.500", "contrastive": "0.500", "dup": "25.0%"}
    show_losses(bar, record, EMSConfig(vocab_size=10, n_languages=2, xtr_weight=0.0, distill_weight=1.0))
    assert list(bar.shown) == ["loss", "contrastive", "distill", "dup"]
    # the loop shows each log record with the config of the model it trains
    shown = []
    monkeypatch.setattr(train_module, "show_losses", lambda bar, record, cfg: shown.append((record["step"], cfg)))
    run = fake_run(tmp_path, calls, log_every=3)
    train_module.train_loop(run)
    assert shown == [(3, run.engine.module.cfg), (6, run.engine.module.cfg)]


def test_a_log_window_starts_afresh_after_each_record(calls):
    metrics = TrainingMetrics(RecordedLog(calls), every=4, engine=FakeEngine(), world_size=1)
    for total_wait in (0.5, 0.75):
        metrics.add(step_values(loss=2.0), total_wait_seconds=total_wait)
    first = metrics.sums
    assert first.steps == 2 and first.losses["loss"] == 4.0 and first.data_wait_seconds == 0.75
    record = metrics.log(step=7, epoch=1)
    assert (record["step"], record["epoch"], record["loss"]) == (7, 1, 2.0) and calls == [("log", 7, record)]
    assert metrics.sums == MetricSums() and metrics.sums is not first
    assert [metrics.should_log(step, last=10) for step in (3, 4, 8, 9, 10)] == [False, True, True, False, True]


def test_the_time_budget_times_its_steps_then_fits_once(monkeypatch):
    ticks = iter([60.0, 63.0, 63.0])  # step 5 ends 1 min into the run, step 8 3 s later: 1 s a step
    monkeypatch.setattr(schedule_module, "time", SimpleNamespace(time=lambda: next(ticks)))
    budget = TimeBudget(minutes=5.0, first=5, steps=3, rank=0, world_size=1, device=CPU)
    fitted = {step: budget.fitted_end(step, max_steps=100_000, fitted=False, run_started=0.0) for step in range(1, 15)}
    # 3.95 min left at 1.05 s a step (5% for validation and checkpoints): 225 more steps
    assert {step: end for step, end in fitted.items() if end is not None} == {8: 8 + 225}
    again = TimeBudget(minutes=5.0, first=25, steps=3, rank=0, world_size=1, device=CPU)
    # fitted before (kept from the checkpoint): never timed or fitted again
    assert all(again.fitted_end(step, 100, fitted=True, run_started=0.0) is None for step in range(21, 40))
    off = TimeBudget(minutes=None, first=5, steps=3, rank=0, world_size=1, device=CPU)
    assert all(off.fitted_end(step, 100, fitted=False, run_started=0.0) is None for step in range(1, 15))


def test_a_fitted_end_that_leaves_the_warm_up_most_of_the_run_is_warned_about(monkeypatch, capsys):
    """As on the first GPU run: warm-up set for 4,499 predicted steps (450), 617 fitted."""
    for warmup, warned in ((117, True), (116, False)):  # over half of the 8 + 225 = 233 fitted steps, or not
        ticks = iter([60.0, 63.0, 63.0])
        monkeypatch.setattr(schedule_module, "time", SimpleNamespace(time=lambda ticks=ticks: next(ticks)))
        budget = TimeBudget(minutes=5.0, first=5, steps=3, rank=0, world_size=1, device=CPU, warmup_steps=warmup)
        assert [budget.fitted_end(step, 100_000, fitted=False, run_started=0.0) for step in (5, 8)] == [None, 233]
        out = capsys.readouterr().out
        assert ("warning: the warm-up (117 steps) is over half of the 233 steps" in out) is warned


def test_last_step_is_the_schedule_end_or_stop_at_step(tmp_path):
    def stopping(stop_at_step):
        return Stopping(SimpleNamespace(signal=None), tmp_path, 0, 1, CPU, stop_at_step, None)

    assert stopping(None).last_step(10) == 10
    assert stopping(4).last_step(10) == 4
    assert stopping(4).last_step(3) == 3


def test_cadences_follow_the_config(tmp_path, calls):
    run = fake_run(tmp_path, calls, log_every=3, save_every=4, valid_every=2, probe_every=0)
    assert [step for step in range(1, 13) if run.checkpointer.should_save(step, 12)] == [4, 8, 12]
    assert [step for step in range(1, 13) if run.validator.should_run(step, last=12)] == [2, 4, 6, 8, 10]
    assert not any(run.probe.should_run(step, last=12) for step in range(1, 13))


def test_without_validation_data_nothing_is_validated():
    validator = Validator(None, 2, FakeEngine(), 32, contextlib.nullcontext(), RecordedLog([]))
    assert not validator.should_run(2, last=12) and validator.run(2) is None
