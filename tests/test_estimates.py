"""Time estimates: training plus every evaluation, calibrated on past runs of the same model, task and device."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from jobs.specs.run import DEFAULT_MODEL, DataSpec, RunSpec, TrainSpec
from storage.datasets.stats import length_summary
from storage.models import Dataset, Run
from workbench.services import estimates
from workbench.services import runs as runs_service
from workbench.ui import format as fmt

# A past run on a dataset with twice as many tokens per example as the new one.
PAST = {"samples_per_second": 40.0, "train_examples": 1000, "train_records": 1000, "validation_records": 200,
        "validation_examples": 200, "evaluations": 1, "evaluation_seconds": 5.0, "final_eval_seconds": 5.0,
        "checkpoints": 1, "checkpoint_seconds": 2.0, "setup_seconds": 8.0, "finish_seconds": 2.0,
        "wall_seconds": 47.0, "device": "cpu", "accuracy": 0.9}


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """Estimates scale by the machine's load now; these tests fix it at idle (the load tests set their own)."""
    monkeypatch.setattr(estimates, "current_load", lambda: {"now": 0.0, "low": 0.0, "high": 0.0})


def _dataset(wb, dataset_id: str, mean_tokens: float, n_train: int = 2000, n_validation: int = 500) -> str:
    with wb.db.session() as session:
        session.add(Dataset(id=dataset_id, name=dataset_id, task="text-classification", format="csv",
                            content_hash=dataset_id, path="/nowhere", num_train=n_train, num_validation=n_validation,
                            labels={}, stats={"token_stats": {"mean": mean_tokens}}, warnings=[]))
    return dataset_id


def _past_run(wb, dataset_id: str, model: str = DEFAULT_MODEL, **changes) -> None:
    started = dt.datetime(2026, 12, 1, 12, 0, 0)
    with wb.db.session() as session:
        session.add(Run(name="past", task="text-classification", model=model, status="succeeded", spec={},
                        dataset_id=dataset_id, metrics={**PAST, **changes}, started_at=started,
                        finished_at=started + dt.timedelta(seconds=57)))  # 10 s outside the engine's clock


def _spec(dataset_id: str, preset: str = "standard", chunking: str = "auto") -> RunSpec:
    return RunSpec(task="text-classification", data=DataSpec(dataset_id=dataset_id),
                   train=TrainSpec(preset=preset, chunking=chunking))


def test_without_history_the_heuristic_includes_evaluation_and_says_it_is_rough(wb):
    _dataset(wb, "new", 20.0)
    est = estimates.estimate_run(wb, _spec("new"))
    assert not est["calibrated"] and "rough guess" in est["basis"]
    assert est["parts"]["evaluation"] > 0 and est["evaluations"] == 4  # 3 epochs + the final evaluation
    assert est["low"] == pytest.approx(est["seconds"] * 0.5, abs=0.2)
    assert est["high"] == pytest.approx(est["seconds"] * 2.0, abs=0.2)


def test_past_runs_calibrate_train_evaluation_checkpoints_and_start_up(wb):
    _past_run(wb, _dataset(wb, "old", 40.0))
    _past_run(wb, "old", device="cuda:0", samples_per_second=4000.0)  # another kind of device: not used
    _past_run(wb, "old", model="bert-base-uncased", samples_per_second=4.0)  # another model: not used
    _past_run(wb, "old", final_eval_seconds=None)  # from before runs recorded their parts: not used
    est = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 40.0)))
    # standard on 2,000 examples: 3 epochs at batch 8 = 6,000 examples seen, as long as the past run's texts
    assert est["calibrated"] and est["runs"] == 1 and est["examples_seen"] == 6000
    assert est["parts"] == {"train": 150.0,  # 6,000 × 1/40 s
                            "evaluation": 50.0,  # 500 examples × 4 evaluations × (10 s / 400)
                            "checkpoints": 6.0,  # 3 × 2 s
                            "fixed": 20.0}  # start-up 8 + saving 2 + process start 10
    # one past run: half to twice, as without one (tests/test_estimates_load.py has the range of several)
    assert est["seconds"] == 226.0 and est["low"] == pytest.approx(113.0) and est["high"] == pytest.approx(452.0)


def test_resume_only_checkpoints_are_estimated_as_the_engine_paces_them(wb):
    """A run that selects no checkpoint writes one only once the training since the last took 10 times as long as
    writing it (jobs.specs.hyperparameters.CHECKPOINT_PACE): with 20 s a checkpoint and 150 s of training, one."""
    _past_run(wb, _dataset(wb, "old", 40.0), checkpoint_seconds=20.0)
    new = _dataset(wb, "new", 40.0)
    selected = estimates.estimate_run(wb, _spec(new))
    assert selected["parts"]["train"] == 150.0 and selected["parts"]["checkpoints"] == 60.0  # 3 epochs, each kept
    last = RunSpec(task="text-classification", data=DataSpec(dataset_id=new),
                   train=TrainSpec(preset="standard", select_by="last"))
    assert estimates.estimate_run(wb, last)["parts"]["checkpoints"] == 20.0


def _stepped_run(wb, dataset_id: str, step_seconds: float, batch: int = 8, steps: int = 100, **changes) -> None:
    """A past run that recorded its steps: ``steps`` of ``batch`` examples, ``step_seconds`` each."""
    _past_run(wb, dataset_id, steps=steps, train_seconds=steps * step_seconds + 7.0,
              eval_and_checkpoint_seconds=7.0, samples_per_second=batch / step_seconds, **changes)


def test_the_step_time_is_fitted_as_a_fixed_part_plus_a_part_per_token(wb):
    """Issue 39: on a small model on a CPU the fixed part of a step dominates (3.7 s for 30-token sentences,
    3.8 s for 128-token e-mails): scaling by tokens alone made long texts 4× too dear."""
    _stepped_run(wb, _dataset(wb, "sentences", 30.0), 3.7)
    _stepped_run(wb, _dataset(wb, "emails", 128.0), 3.8)
    _stepped_run(wb, _dataset(wb, "middle", 79.0), 3.75)
    fit = estimates.fit_step_seconds([(8 * 30.0, 3.7), (8 * 128.0, 3.8), (8 * 79.0, 3.75)])
    assert fit["fixed"] == pytest.approx(3.6694, abs=1e-3) and fit["per_token"] == pytest.approx(0.1 / 784, rel=1e-3)
    assert fit["spread"] == estimates.MIN_SPREAD  # three runs on the line: only the floor
    est = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 100.0)))
    assert est["parts"]["train"] == pytest.approx(750 * (3.6694 + 800 * 0.1 / 784), abs=0.5)  # 750 steps of 8
    assert est["high"] / est["seconds"] == pytest.approx(1.1, abs=0.01)


def test_one_past_run_takes_the_cost_per_token_from_the_model_size(wb):
    """One past run cannot tell a step's fixed part from its part per token: the part per token comes from
    the model's size (the heuristic, off by up to 2× either way: the range holds both ends), the fixed part
    is what is left of the measured step. The geometric middle of "all fixed" and "all per token" made a
    run on 128-token reviews 3× dearer than the 24-token messages it took as long as (bench/estimates.py)."""
    from jobs.training import catalogue

    _stepped_run(wb, _dataset(wb, "old", 40.0), 4.0)  # 320 tokens a step of 8
    est = estimates.estimate_run(wb, _spec(_dataset(wb, "new", 80.0)))
    per_token = catalogue.resolve_model(DEFAULT_MODEL).parameters / catalogue.CPU_PARAM_TOKENS_PER_SECOND
    steps = est["steps"]  # 750 steps of 8 examples, 640 tokens each
    assert est["parts"]["train"] == pytest.approx(steps * (4.0 + per_token * 320), rel=1e-3)
    other = est["seconds"] - est["parts"]["train"]
    assert est["low"] == pytest.approx((steps * (4.0 + per_token * 160) + other) / 2.0, rel=1e-3)
    assert est["high"] == pytest.approx((steps * (4.0 + per_token * 640) + other) * 2.0, rel=1e-3)


def test_the_fit_stays_sane_on_odd_points():
    assert estimates.fit_step_seconds([])["runs"] == 0
    flat = estimates.fit_step_seconds([(100.0, 4.0), (400.0, 3.0)])  # more tokens, less time: all fixed
    assert flat["per_token"] == 0.0 and flat["fixed"] == 3.5
    steep = estimates.fit_step_seconds([(100.0, 1.0), (200.0, 3.0)])  # a negative fixed part: through 0
    assert steep["fixed"] == 0.0 and steep["per_token"] == pytest.approx(7 / 500)
    one = estimates.fit_step_seconds([(100.0, 2.0)], 0.005)  # 0.5 s of its 2 s for its tokens by the model size
    assert estimates.predict_step(one, 400.0) == pytest.approx((3.5, 2.75, 5.0))  # that cost per token ×0.5 … ×2
    dear = estimates.fit_step_seconds([(100.0, 2.0)], 0.1)  # the model size says dearer than the whole step
    assert estimates.predict_step(dear, 400.0) == pytest.approx((8.0, 8.0, 8.0))  # at most all per token


def test_long_texts_cost_what_training_reads_of_them(wb):
    """Issue 39: 560-token e-mails cut at 128 tokens were estimated as 560-token texts, 10–30× too high."""
    lengths = {"mean": 560.0, "max_length": 128, "truncated_mean": 127.0,
               "histogram": {"counts": [5, 20, 75], "edges": [100, 200, 500, 1000]}}
    assert estimates.tokens_per_example(lengths, 128) == 127.0
    # measured at import: what training reads of each text, as well as the whole mean
    summary = length_summary(np.array([10, 200, 600]), 128, tokenizer="t", sampled=False, population=3)
    assert summary["mean"] == 270.0 and summary["truncated_mean"] == pytest.approx(88.7)
    # at another max_length: the histogram, each bin spread evenly and cut there
    assert estimates.tokens_per_example(lengths, 256) == pytest.approx(
        (5 * 150 + 20 * (56 / 300 * 228 + 244 / 300 * 256) + 75 * 256) / 100, rel=1e-6)
    assert estimates.tokens_per_example({"mean": 560.0}, 128) == 128.0  # no histogram: the mean, cut
    assert estimates.tokens_per_example({"mean": 20.0}, 128) == 20.0
    _past_run(wb, _dataset(wb, "sentences", 128.0))
    with wb.db.session() as session:
        session.add(Dataset(id="emails", name="emails", task="text-classification", format="csv",
                            content_hash="emails", path="/nowhere", num_train=2000, num_validation=500, labels={},
                            stats={"token_stats": lengths}, warnings=[]))
    est = estimates.estimate_run(wb, _spec("emails", chunking="off"))
    assert est["tokens_per_example"] == 127.0 and est["parts"]["train"] == pytest.approx(150.0, rel=0.01)
    # read whole in windows (chunking auto: most e-mails are longer than 128 tokens): every token, overlap included
    chunked = estimates.estimate_run(wb, _spec("emails"))
    assert chunked["tokens_per_example"] == pytest.approx(560.0 * 4 / 3, abs=0.1)
    assert "read in overlapping windows of 128 tokens" in chunked["why"]


def test_a_run_read_in_windows_is_calibrated_on_past_runs_read_in_windows(wb):
    """Windows are padded to a whole window, and a batch to its longest document: a windowed run's steps are
    priced on windowed runs, not from short texts' cost per token."""
    lengths = {"mean": 560.0, "max_length": 128, "truncated_mean": 127.0,
               "histogram": {"counts": [5, 20, 75], "edges": [100, 200, 500, 1000]}}
    with wb.db.session() as session:
        session.add(Dataset(id="emails", name="emails", task="text-classification", format="csv",
                            content_hash="emails", path="/nowhere", num_train=2000, num_validation=500, labels={},
                            stats={"token_stats": lengths}, warnings=[]))
    _past_run(wb, "emails")  # read cut at 128 tokens: 40 examples a second
    cut = estimates.estimate_run(wb, _spec("emails"))
    _past_run(wb, "emails", chunking="mean", samples_per_second=2.0)  # read in windows: 2 a second
    windows = estimates.estimate_run(wb, _spec("emails"))
    # 6,000 examples seen at the windowed run's 2 a second, not priced from the cut run's tokens
    assert windows["runs"] == 1 and windows["parts"]["train"] == pytest.approx(3000.0, rel=0.01)
    assert cut["parts"]["train"] != pytest.approx(3000.0, rel=0.2)
    # and a run cut at 128 tokens is still priced on the cut one alone
    assert estimates.estimate_run(wb, _spec("emails", chunking="off"))["parts"]["train"] == pytest.approx(150.0, rel=0.01)


def test_quick_is_estimated_on_the_examples_it_trains_on(wb):
    _past_run(wb, _dataset(wb, "old", 20.0))
    quick = estimates.estimate_run(wb, _spec(_dataset(wb, "big", 20.0, n_train=40_000), "quick"))
    standard = estimates.estimate_run(wb, _spec("big"))
    # one epoch: only the final evaluation (an evaluation at the epoch's end would repeat it)
    assert quick["train_examples"] == 2000 and quick["examples_seen"] == 2000 and quick["evaluations"] == 1
    assert standard["examples_seen"] == 120_000 and quick["seconds"] < standard["seconds"] / 10


def test_submit_stores_the_estimate_and_the_run_page_compares_it(wb):
    _past_run(wb, _dataset(wb, "old", 40.0))
    run_id = runs_service.submit_run(wb, _spec(_dataset(wb, "new", 40.0)))
    stored = runs_service.get_run(wb, run_id)["estimate"]
    assert stored["seconds"] == 226.0 and stored["calibrated"]
    assert fmt.estimate_vs_actual(stored, 230.0, "succeeded") == \
        "estimated 1m 53s – 7m 32s · took 3m 50s (within the estimate)"
    assert fmt.estimate_vs_actual(stored, 1200.0, "succeeded").endswith("took 20m 00s (5.3× the estimate)")
    assert fmt.estimate_vs_actual(stored, 30.0, "running") == "estimated 1m 53s – 7m 32s · running for 30s"
    assert fmt.estimate_vs_actual(None, 30.0, "succeeded") == ""


def test_a_run_slower_than_its_estimate_says_when_the_load_rose_after_the_submit():
    """300 tweets took 5.8x their estimate: submitted on an idle machine, three other jobs started a minute
    later. The run page says so; a run that met the load it was estimated at does not blame it."""
    import datetime as dt

    started = dt.datetime(2026, 12, 7, 10, 55)
    run = {"status": "succeeded", "started_at": started, "finished_at": started + dt.timedelta(seconds=1155),
           "estimate": {"seconds": 200.0, "low": 77.0, "high": 395.0, "load": {"now": 0.05, "low": 0.0, "high": 0.1}},
           "metrics": {"machine": {"load_per_cpu": 3.4}}}
    assert estimates.load_rise(run) == (0.05, 3.4)
    assert fmt.estimate_line(run).endswith("took 19m 15s (5.8× the estimate; the machine's load rose from 0.1 per "
                                           "CPU at the submit to 3.4 while it ran)")
    level = {**run, "metrics": {"machine": {"load_per_cpu": 0.3}}}  # the load it was estimated at: no excuse
    assert estimates.load_rise(level) is None and fmt.estimate_line(level).endswith("(5.8× the estimate)")
    unknown = {**run, "metrics": {}}  # a run that recorded no load
    assert estimates.load_rise(unknown) is None


def test_no_estimate_without_data_size_never_blocks_a_submit(wb):
    spec = RunSpec(task="text-classification", data=DataSpec(train_path="t.jsonl"), model="fake:succeed")
    assert estimates.estimate_run(wb, spec) is None
    run_id = runs_service.submit_run(wb, spec)
    assert runs_service.get_run(wb, run_id)["estimate"] is None


def test_without_a_validation_split_the_plan_splits_as_the_engine_does(wb):
    # 297 records, no validation split: the engine holds out 30 (a tenth: the floor of 100 would be over a
    # quarter) and trains on 267. The "why" line and the evaluation count used to disagree (33 from the records' ninth against 29 from
    # their tenth), and the plan must follow the engine's rule wherever it goes.
    from jobs.training.data import split_validation

    _dataset(wb, "whole", 20.0, n_train=297, n_validation=0)
    est = estimates.estimate_run(wb, _spec("whole"))
    train, validation = split_validation([{"text": str(i)} for i in range(297)], seed=13)
    assert est["validation_examples"] == len(validation) == 30
    assert est["train_examples"] == len(train) == 267
    assert est["why"].startswith("267 examples: ")
    assert "30 validation examples are too few" in est["why"] and "33" not in est["why"]


def test_max_steps_says_the_steps_and_the_epochs_they_make(wb):
    _dataset(wb, "steps", 20.0, n_train=544, n_validation=60)
    spec = RunSpec(task="text-classification", data=DataSpec(dataset_id="steps"),
                   train=TrainSpec(max_steps=30, batch_size=8))
    est = estimates.estimate_run(wb, spec)
    # 544 examples at batch 8: 68 steps an epoch, so 30 steps are 0.44 of one
    assert est["steps"] == 30 and est["epochs"] == pytest.approx(30 / 68)
    assert est["why"].startswith("544 examples: 30 steps (0.44 epoch), lr ")
    assert "epoch(s)" not in est["why"]
