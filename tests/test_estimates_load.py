"""Issue 25: estimates a user can plan with on a machine whose load varies — one slow past run does not blow
up the range, a run measured under load counts as a normal one, the estimate says how sure it is, and a
started run's own speed says when it will end outside the estimate."""
from __future__ import annotations

import datetime as dt

import pytest

from jobs.progress import machine_load, mean_load
from storage.models import Run
from workbench.services import audits, estimates
from workbench.ui import format as fmt

from tests.test_estimates import _dataset, _past_run, _spec, idle_machine  # noqa: F401 - a fixture


def _range(est) -> float:
    return est["high"] / est["low"]


def test_one_slow_outlier_does_not_widen_the_range(wb):
    _dataset(wb, "old", 40.0)
    for _ in range(4):
        _past_run(wb, "old")
    steady = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 40.0)))
    _past_run(wb, "old", samples_per_second=40.0 / 7, evaluation_seconds=35.0, final_eval_seconds=35.0)
    with_outlier = estimates.estimate_run(wb, _spec("new"))
    # the largest residual would make this range 7 times wide; from five runs on the second largest counts
    assert _range(with_outlier) == pytest.approx(_range(steady)) == pytest.approx(1.1 ** 2, rel=0.01)
    assert with_outlier["seconds"] == steady["seconds"] == 226.0
    assert with_outlier["sureness"] == "based on 5 past runs; −9 % / +10 %"


def test_runs_that_disagree_widen_the_range_and_one_run_says_little(wb):
    _past_run(wb, _dataset(wb, "old", 40.0))
    one = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 40.0)))
    # one run sets the point, not the spread: half to twice, as the rough guess without a past run
    assert (one["low"], one["high"]) == (pytest.approx(226.0 / 2, abs=0.1), pytest.approx(226.0 * 2, abs=0.1))
    assert one["sureness"] == "based on 1 past run; −50 % / +100 %"
    _past_run(wb, "old", samples_per_second=20.0)  # training half as fast: two runs that disagree
    two = estimates.estimate_run(wb, _spec("new"))
    # the steps at the median of 3.75 s and 7.5 s per 40 examples: both past runs' times in the range
    assert two["parts"]["train"] == pytest.approx(225.0) and two["low"] <= 150 + 76 and two["high"] >= 300 + 76
    assert _range(two) == _range(one) == 4.0  # they disagree by 2×: still inside the half-to-twice of few runs
    _past_run(wb, "old", samples_per_second=5.0)  # eight times slower: three runs that disagree more
    three = estimates.estimate_run(wb, _spec("new"))
    assert _range(three) > _range(two) and three["sureness"].startswith("based on 3 past runs; −")


def test_a_run_measured_under_load_is_brought_to_the_load_now(wb):
    _dataset(wb, "old", 40.0)
    slow = {"samples_per_second": 40.0 / 3, "evaluation_seconds": 15.0, "final_eval_seconds": 15.0,
            "checkpoint_seconds": 6.0, "setup_seconds": 24.0, "finish_seconds": 6.0}
    for _ in range(2):
        # recorded half-way into its own load: 0.5 is the run alone, 2.5 the run beside 2 busy processes per CPU
        _past_run(wb, "old", machine={"load_per_cpu": 0.5})
        _past_run(wb, "old", machine={"load_per_cpu": 2.5}, **slow)  # 3 runnable per CPU: 3 times slower
    est = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 40.0)))
    # on an idle machine every run is the unloaded one, and they all agree
    assert est["parts"]["train"] == 150.0 and est["parts"]["evaluation"] == 50.0
    assert _range(est) == pytest.approx(1.1 ** 2, rel=0.01)  # unscaled, half the runs 3× slower: ±73 %
    busy = estimates.estimate_run(wb, _spec("new"), load={"now": 2.0, "low": 1.0, "high": 3.0})
    assert busy["parts"]["train"] == 450.0 and busy["seconds"] == pytest.approx(3 * est["seconds"], abs=0.2)
    # the range holds the load of the last 15 minutes: 2 to 4 runnable per CPU with the run itself
    assert busy["low"] == pytest.approx(est["seconds"] / 1.1 * 2, abs=0.2)
    assert busy["high"] == pytest.approx(est["seconds"] * 1.1 * 4, abs=0.2)
    assert "machine load 2.0 per CPU now (1.0–3.0 over 15 min): 3.0× an idle machine's time" in busy["sureness"]


def test_without_a_past_run_the_estimate_says_it_is_a_rough_guess(wb):
    est = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 20.0)))
    assert est["sureness"].startswith("rough guess: no past run")


def test_without_a_past_run_the_guess_takes_the_load_now(wb):
    """Issue 39: the first run was estimated at 1m16s – 5m03s and took 25m48s at load 10 on 2 CPUs."""
    idle = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 20.0)))
    busy = estimates.estimate_run(wb, _spec("new"), load={"now": 5.0, "low": 2.0, "high": 5.5})
    assert busy["seconds"] == pytest.approx(6 * idle["seconds"], abs=0.5)  # 5 others per CPU and the run itself
    assert busy["low"] == pytest.approx(idle["seconds"] * 0.5 * 3, abs=0.5)
    assert busy["high"] == pytest.approx(idle["seconds"] * 2.0 * 6.5, abs=0.5)


def test_the_range_holds_how_much_the_load_moved_for_past_runs(wb):
    """Issue 39: on a shared machine the load doubled between a submit and its run; a range from the load
    of the last 15 minutes alone missed it, one from how far it moved for past runs does not."""
    _dataset(wb, "old", 40.0)
    # submitted at 1 per CPU (2 with the run), ran at 4 (recorded half-way into its own load): 2× slower
    _past_run(wb, "old", machine={"load_per_cpu": 3.5}, samples_per_second=40.0 / 4)
    with wb.db.session() as session:
        session.query(Run).update({"estimate": {"seconds": 1.0, "load": {"now": 1.0}}})
    assert estimates.load_changes(wb) == [2.0]
    est = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 40.0)), load={"now": 1.0, "low": 1.0, "high": 1.0})
    # 2 runnable per CPU now with the run, typically 2× that by the time it runs: 4× an idle machine's time
    assert est["parts"]["train"] == pytest.approx(4 * 150.0, abs=0.2)
    # one run is too few to bound how the load moves: it may halve (1× an idle machine) or double (4×, as
    # the median already has it), and one run's spread is half to twice
    assert est["high"] == pytest.approx(est["seconds"] * 2.0, abs=0.2)
    assert est["low"] == pytest.approx(est["seconds"] / 2.0 / 4, abs=0.2)
    assert ("the load moved 2.0–2.0× between submit and run for the last 1 run (too few to bound it: the range "
            "lets it halve or double)") in est["sureness"]


def test_until_five_runs_recorded_it_the_range_lets_the_load_halve_or_double(wb):
    """Issue 39 (bench/estimates.py): a run submitted at 7.7 per CPU ran at 3.4 and took 0.34× its point,
    below a range whose load had moved only 0.8–1.2× for the three runs before it."""
    _dataset(wb, "old", 40.0)

    def steady_runs(count: int) -> None:  # submitted at 1 per CPU and ran at it: the load did not move
        for _ in range(count):
            _past_run(wb, "old", machine={"load_per_cpu": 1.5})
        with wb.db.session() as session:
            session.query(Run).update({"estimate": {"seconds": 1.0, "load": {"now": 1.0}}})

    steady_runs(3)
    assert estimates.load_changes(wb) == [1.0, 1.0, 1.0]
    flat = {"now": 1.0, "low": 1.0, "high": 1.0}
    few = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 40.0)), load=flat)
    # 2 runnable per CPU with the run: 2× an idle machine's time, which may halve or double
    assert few["low"] == pytest.approx(few["seconds"] / 1.1 / 2, abs=0.2)
    assert few["high"] == pytest.approx(few["seconds"] * 1.1 * 2, abs=0.2)
    assert "(too few to bound it: the range lets it halve or double)" in few["sureness"]
    steady_runs(2)
    enough = estimates.estimate_run(wb, _spec("new"), load=flat)
    assert enough["seconds"] == few["seconds"]  # the point does not move, only the range
    assert enough["low"] == pytest.approx(enough["seconds"] / 1.1, abs=0.2)
    assert enough["high"] == pytest.approx(enough["seconds"] * 1.1, abs=0.2)
    assert "too few" not in enough["sureness"]


def test_the_load_now_is_read_from_the_load_averages(monkeypatch):
    monkeypatch.undo()  # the idle machine of the other tests
    monkeypatch.setattr(estimates.os, "getloadavg", lambda: (10.0, 6.0, 3.0))
    monkeypatch.setattr(estimates.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(estimates, "nice_mix", lambda: 1.0)
    assert estimates.current_load() == {"now": 5.0, "low": 1.5, "high": 5.0}
    monkeypatch.setattr(estimates, "nice_mix", lambda: 0.5)  # half of what runs is niced to nothing
    assert estimates.current_load() == {"now": 2.5, "low": 0.75, "high": 2.5}
    assert estimates.slowdown(0.3) == 1.0 and estimates.slowdown(6.0) == 6.0 and estimates.slowdown(None) == 1.0


def test_the_load_a_run_ran_under_is_sampled_cheaply():
    load = machine_load()
    assert load is None or load >= 0.0
    assert mean_load(1.0, None, 2.0) == 1.5 and mean_load(None) is None


def test_niced_work_weighs_less_in_the_load(tmp_path):
    """Issue 39: the load average counted the other engineers' test suites, run at nice 10, like normal
    work: 14 per CPU read as 15× an idle machine's time for a run that took about twice it."""
    from jobs.progress import nice_mix

    def thread(pid: int, state: str, nice: int) -> None:
        folder = tmp_path / str(pid) / "task" / str(pid)
        folder.mkdir(parents=True)
        fields = [state] + ["0"] * 15 + [str(nice)] + ["0"] * 30
        (folder / "stat").write_text(f"{pid} (python (x)) " + " ".join(fields) + "\n")

    assert nice_mix(1, str(tmp_path)) == 1.0  # nothing runs
    thread(1, "R", 0)
    thread(2, "S", 10)  # asleep: not counted
    assert nice_mix(1, str(tmp_path)) == 1.0
    thread(3, "R", 10)
    assert nice_mix(1, str(tmp_path)) == pytest.approx((1 + 1.25 ** -10) / 2)


def _running(minutes_in: float, eta: float | None, phase: str = "training") -> dict:
    started = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(minutes=minutes_in)
    return {"status": "running", "started_at": started.isoformat() + "Z", "eta_seconds": eta, "phase": phase,
            "estimate": {"seconds": 300.0, "low": 240.0, "high": 360.0, "evaluations": 2,
                         "parts": {"train": 250.0, "evaluation": 40.0, "fixed": 10.0}}}


def test_a_running_run_slower_than_estimated_says_so_with_its_own_time_left():
    slow = _running(3, 700.0)  # 3 min in, 700 s of steps and a 20 s final evaluation left: 15 min in all
    assert fmt.time_left(slow) == 720.0
    assert fmt.live_verdict(slow) == "running slower than estimated: about 12 min left"
    line = fmt.live_estimate_line(slow)
    assert line.startswith("estimated 4m 00s – 6m 00s · running for 3m 0") and line.endswith("about 12 min left")
    assert fmt.live_verdict(_running(0.5, 20.0)) == "running faster than estimated: under a minute left"
    assert fmt.live_verdict(_running(2, 150.0)) == ""  # 2 min + 170 s: within 4–6 min
    assert fmt.live_verdict(_running(2, None)) == ""  # no speed measured yet
    assert fmt.live_verdict(_running(9, 0.0, phase="evaluating")) == ""  # the steps' ETA is over


def test_plan_figures_read_as_minutes():
    assert fmt.rough_duration(30) == "under a minute"
    assert fmt.rough_duration(600) == "about 10 min"
    assert fmt.rough_duration(2 * 3600 + 5 * 60) == "about 2 h 05 min"
    assert [fmt.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]


# --- whole jobs: an audit's k folds, a sweep's n trials -------------------------------------------------------


def test_an_audit_is_estimated_as_k_folds_on_their_share_of_the_data(wb):
    from workbench.ui import audit_panel

    _past_run(wb, _dataset(wb, "old", 40.0))
    _dataset(wb, "pool", 40.0, n_train=2000, n_validation=500)  # 2,500 examples in the pool
    est = audits.estimate_audit(wb, "pool", folds=5, preset="standard")
    fold = est["fold"]
    # a fold trains on 4/5 of 2,500 = 2,000 less the 10 % its engine holds out, and predicts its own 500
    assert fold["train_examples"] == 1800 and fold["validation_examples"] == 200
    assert fold["parts"]["prediction"] == pytest.approx(500 * 10.0 / 400, abs=0.1)
    assert est["seconds"] == pytest.approx(5 * fold["seconds"], abs=0.5) and est["workers"] == 1
    assert est["wall_seconds"] == pytest.approx(est["seconds"], abs=0.5)  # one worker: one fold after another
    text = audit_panel.start_estimate(wb, "pool", 5, None, "standard")
    assert text.startswith(f"About **{fmt.rough_duration(est['seconds'])}** for all 5 folds")
    assert "training on 4/5 of the examples; one after another on one worker" in text
    assert text.endswith("Based on 1 past run; −50 % / +100 %.")
    assert audit_panel.start_estimate(wb, "", 5, None, "quick") == ""


def test_a_waiting_audit_says_when_all_its_folds_will_be_done(wb):
    from jobs.queue import table as queue
    from storage.models import Audit, Run
    from workbench.ui import audit_panel

    queue.register_worker(wb.db, "w1", 1, "")
    with wb.db.session() as session:
        audit = Audit(name="audit", task="text-classification", spec={"folds": 2}, folder="")
        session.add(audit)
        session.flush()
        for fold in range(2):
            session.add(Run(name=f"fold {fold}", task="text-classification", model="m", status="queued", spec={},
                            audit_id=audit.id, fold=fold, estimate={"seconds": 300.0, "low": 250.0, "high": 400.0}))
        audit_id = audit.id
    record = audits.get_audit(wb, audit_id)
    assert record["time_left_seconds"] == 600.0  # two 5-minute folds, one after the other
    assert "All folds done in about 10 min" in audit_panel.status_html(record)
    with wb.db.session() as session:
        session.add(Run(name="ahead", task="text-classification", model="m", status="running", spec={},
                        started_at=dt.datetime.utcnow()))  # no estimate, no ETA: the time is unknown
    record = audits.get_audit(wb, audit_id)
    assert record["time_left_seconds"] is None and "Time left unknown" in audit_panel.status_html(record)


def test_a_sweep_is_estimated_with_the_expected_effect_of_pruning(wb):
    import json

    from workbench.ui import sweep_tab

    _past_run(wb, _dataset(wb, "old", 40.0))
    base = _spec(_dataset(wb, "new", 40.0))  # 226 s a trial: train 150, evaluation 50, checkpoints 6, fixed 20
    est = estimates.estimate_sweep(wb, base, 12, 2, "median")
    assert est["seconds"] == 12 * 226.0 and est["prunable"]
    # 3 evaluations before the final one: a pruned trial stops after a third of its training and one evaluation
    assert est["stopped_seconds"] == pytest.approx(20 + 156 / 3 + 50 / 4, abs=0.1)
    # the 2 start-up trials run to the end; half of the other 10 are pruned
    assert est["pruned_seconds"] == pytest.approx(7 * 226 + 5 * (20 + 156 / 3 + 50 / 4), abs=0.1)
    assert estimates.estimate_sweep(wb, base, 12, 2, "none")["pruned_seconds"] == 12 * 226.0
    text = sweep_tab.sweep_estimate(wb, json.dumps(base.to_dict()), 12, 2, "median")
    assert text.startswith("12 trials × about 4 min") and "= about 45 min of runs" in text
    assert "With pruning expect **about 33 min**, assuming that after the first 2 trials about half stop" in text
    assert "1 at a time: done in about 33 min" in text  # one worker slot, whatever the sweep's parallelism
    quick = _spec("new", "quick")  # one epoch: no evaluation before the end
    assert "pruning cannot stop one early" in sweep_tab.sweep_estimate(wb, json.dumps(quick.to_dict()), 12, 2,
                                                                       "median")
    assert sweep_tab.sweep_estimate(wb, "{", 12, 2, "median") == ""


def test_a_trained_run_records_the_machine_load_it_ran_under(tmp_path):
    """A real (tiny) run: its metrics carry the load that ``_at_usual_load`` scales by."""
    from jobs.training.engine import run_training
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from tests.tiny_models import classification_records, tiny_bert, write_jsonl

    model = tiny_bert(tmp_path / "tiny-bert")
    spec = RunSpec(task="text-classification", model=str(model),
                   data=DataSpec(train_path=write_jsonl(tmp_path / "t.jsonl", classification_records(16)).as_posix(),
                                 validation_path=write_jsonl(tmp_path / "v.jsonl",
                                                             classification_records(8, 1)).as_posix()),
                   train=TrainSpec(epochs=1))
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    load = metrics["machine"]["load_per_cpu"]  # the mean of the samples at its start and its end
    assert isinstance(load, float) and load >= 0.0 and estimates._load(metrics) == load


def test_the_built_page_shows_the_sweep_and_audit_estimates_as_their_settings_change(wb):
    """The handlers the page really runs: a changed trial count refreshes the sweep's estimate, a changed
    fold count the audit's."""
    import json

    from tests.test_ui_stale_states import block, by_output, handlers
    from workbench.ui import app

    _past_run(wb, _dataset(wb, "old", 40.0))
    _dataset(wb, "pool", 20.0, n_train=2000, n_validation=500)
    page = app.build_ui(wb)
    sweep_box, audit_box = block(page, "sweep-estimate"), block(page, "audit-estimate")
    (on_trials,) = [f for f in handlers(page, block(page, "sweep-trials"), "change") if sweep_box in f.outputs]
    base = json.dumps(_spec("pool").to_dict())
    assert by_output(on_trials, on_trials.fn(base, 12, 2, "median"))[sweep_box._id].startswith("12 trials × about")
    (on_folds,) = [f for f in handlers(page, block(page, "audit-folds"), "change") if audit_box in f.outputs]
    shown = by_output(on_folds, on_folds.fn("pool", 5, None, "quick"))[audit_box._id]
    assert shown.startswith("About **") and "for all 5 folds" in shown
