"""The training loop's pieces on their own (ems.train): LogWindow, BudgetProbe, periodic and
last_step, with the calls they make recorded instead of run."""

from types import SimpleNamespace

import pytest

import ems.train as train_module
from ems.train import BudgetProbe, LogWindow, MetricSums, RunState, TrainConfig, last_step, periodic


def fake_run(step=0, max_steps=10, **cfg):
    return SimpleNamespace(state=RunState(step=step, max_steps=max_steps), cfg=TrainConfig(**cfg))


@pytest.fixture
def calls(monkeypatch):
    made = []
    def log_training(run, sums, epoch, seconds):
        made.append(("log", run.state.step, sums.steps))
        return {"step": run.state.step, "kind": "train"}

    monkeypatch.setattr(train_module, "log_training", log_training)
    monkeypatch.setattr(train_module, "save", lambda run: made.append(("save", run.state.step)))
    monkeypatch.setattr(train_module, "validate", lambda run: made.append(("validate", run.state.step)) or {"kind": "valid"})
    monkeypatch.setattr(train_module, "probe", lambda run: made.append(("probe", run.state.step)) or None)
    monkeypatch.setattr(train_module, "fit_schedule_to_budget",
                        lambda run, seconds, started: made.append(("fit", run.state.step)) or setattr(run.state, "budget_fitted", True))
    return made


def test_periodic_logs_saves_validates_and_probes_on_their_schedules(calls):
    run, window = fake_run(max_steps=6, log_every=3, save_every=4, valid_every=2, probe_every=5), LogWindow()
    logged_at = []
    for step in range(1, 7):
        run.state.step = step
        window.sums.steps += 1
        logged, records = periodic(run, window, epoch=0)
        logged_at += [step] if logged else []
        assert records == ([logged] if logged else []) + ([{"kind": "valid"}] if ("validate", step) in calls else [])
    assert logged_at == [3, 6]
    # step 6 is the last: it logs, and leaves validation (valid_every=2) to finish
    assert calls == [("validate", 2), ("log", 3, 3), ("save", 4), ("validate", 4), ("probe", 5), ("log", 6, 3)]


def test_log_window_starts_afresh_after_each_record(calls):
    run, window = fake_run(step=7), LogWindow()
    window.sums.steps, window.sums.loss = 4, 2.0
    first = window.sums
    assert window.close(run, epoch=1) == {"step": 7, "kind": "train"}
    assert calls == [("log", 7, 4)] and window.sums == MetricSums() and window.sums is not first


def test_budget_probe_times_its_steps_then_fits_once(calls):
    run = fake_run(step=0, time_budget_minutes=5.0)
    probe = BudgetProbe(first=5, steps=3)
    fitted = []
    for step in range(1, 15):
        run.state.step = step
        fitted.append(probe.after_step(run, run_started=0.0))
    assert [step for step, done in zip(range(1, 15), fitted) if done] == [8] and calls == [("fit", 8)]
    resumed, again = fake_run(step=20, time_budget_minutes=5.0), BudgetProbe(first=25, steps=3)
    resumed.state.budget_fitted = True  # kept from the checkpoint: never fitted again
    for step in range(21, 40):
        resumed.state.step = step
        assert not again.after_step(resumed, run_started=0.0)
    assert calls == [("fit", 8)]


def test_last_step_is_the_schedule_end_or_stop_at_step():
    assert last_step(fake_run(max_steps=10)) == 10
    assert last_step(fake_run(max_steps=10, stop_at_step=4)) == 4
    assert last_step(fake_run(max_steps=3, stop_at_step=4)) == 3
