"""Seed groups: runs that differ only in their seed, queued together and summarised as mean ± std.

"Repeat with N seeds" on a run, `workbench train --seeds N`, `workbench sweep confirm`, the migration
that adds the group columns, and the Runs and Sweeps views. Real SQLite (and PostgreSQL with
``-m postgres``), the fake runner, nothing trained.
"""
from __future__ import annotations

import json
import statistics

import gradio as gr
import pytest
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobs.process.fake_runner import InProcessRunner
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from jobs.specs.run import RunSpec
from jobs.specs.sweep import SweepSpec
from storage.db import make_engine, upgrade
from storage.models import FAILED, KIND_PREDICT, QUEUED, SUCCEEDED, Run
from tests.queue_support import backend_url, fake_spec, qwb, wait_until  # noqa: F401
from tests.test_sweep_budget_migration import _downgrade
from tests.tiny_models import classification_records, write_jsonl
from workbench.errors import ConfigError, InvalidState
from workbench.services import runs, sweeps
from workbench.ui import format as fmt
from workbench.ui import runs_tab, sweep_tab


def _without_seed(spec: dict) -> dict:
    out = json.loads(json.dumps(spec))
    out["train"].pop("seed")
    out.pop("name")
    return out


def _specs(wb, ids):
    return {run_id: runs.get_run(wb, run_id)["spec"] for run_id in ids}


def _finish(wb, run_id: int, status: str = SUCCEEDED, **metrics) -> None:
    with wb.db.session() as session:
        session.execute(update(Run).where(Run.id == run_id).values(status=status, metrics=metrics))


# -- the service ---------------------------------------------------------------------------------------------

def test_repeat_with_seeds_queues_the_same_spec_with_other_seeds_in_one_group(qwb):
    original = runs.submit_run(qwb, fake_spec(qwb, name="base"))
    queued = runs.repeat_with_seeds(qwb, original, 3)
    assert queued["group"] == original and queued["seeds"] == [43, 44] and len(queued["ids"]) == 2
    specs = _specs(qwb, [original, *queued["ids"]])
    assert all(_without_seed(s) == _without_seed(specs[original]) for s in specs.values())
    assert [specs[i]["train"]["seed"] for i in queued["ids"]] == [43, 44]
    shown = {i: runs.get_run(qwb, i) for i in [original, *queued["ids"]]}
    assert [shown[i]["name"] for i in queued["ids"]] == ["base (seed 43)", "base (seed 44)"]
    assert {i: (r["seed_group"], r["group_seed"], r["status"]) for i, r in shown.items()} == {
        original: (original, 42, QUEUED), queued["ids"][0]: (original, 43, QUEUED),
        queued["ids"][1]: (original, 44, QUEUED)}
    # The group has 3 seeds: asking for 3 again queues nothing; 5, asked from a member, adds the next two free seeds.
    with pytest.raises(InvalidState, match="already has 3 or more seeds"):
        runs.repeat_with_seeds(qwb, queued["ids"][0], 3)
    more = runs.repeat_with_seeds(qwb, queued["ids"][1], 5)
    assert more["group"] == original and more["seeds"] == [45, 46]
    assert runs.get_run(qwb, more["ids"][0])["name"] == "base (seed 45)"  # not "base (seed 44) (seed 45)"
    assert runs.group_summary(qwb, original)["ids"] == [original, *queued["ids"], *more["ids"]]


def test_repeat_with_seeds_refuses_other_counts_and_jobs(qwb):
    original = runs.submit_run(qwb, fake_spec(qwb))
    for n in (1, 11):
        with pytest.raises(ConfigError, match="number of seeds must be 2 to 10"):
            runs.repeat_with_seeds(qwb, original, n)
    job = queue.submit_job(qwb.db, KIND_PREDICT, {"run_id": original}, qwb.settings.runs_dir,
                           parent_run_id=original, task="text-classification", model="m")
    with pytest.raises(InvalidState, match="not a training run"):
        runs.repeat_with_seeds(qwb, job, 3)
    with qwb.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Run).where(Run.seed_group.is_not(None))) == 0


def test_the_database_refuses_a_seed_twice_in_a_group_and_a_half_grouped_run(qwb):
    original = runs.submit_run(qwb, fake_spec(qwb))
    group = runs.repeat_with_seeds(qwb, original, 2)["group"]
    row = {"name": "", "task": "text-classification", "model": "m", "spec": {}}
    with pytest.raises(IntegrityError), qwb.db.session() as session:
        session.execute(insert(Run).values(**row, seed_group=group, group_seed=43))
    with pytest.raises(IntegrityError), qwb.db.session() as session:
        session.execute(insert(Run).values(**row, seed_group=group, group_seed=None))
    # Two requests that read the group at once: the second one's insert fails, and none of its runs stays.
    specs = [RunSpec.from_dict({**fake_spec(qwb).to_dict(), "train": {"seed": seed}}) for seed in (50, 43)]
    with pytest.raises(InvalidState, match="already has one of the seeds 50, 43"):
        runs._queue_group(qwb, specs, group=group, parent_run_id=original)
    assert [m["seed"] for m in runs.group_summary(qwb, group)["members"]] == [42, 43]


def test_group_summary_is_the_mean_and_sample_std_over_the_succeeded_members(qwb):
    queued = runs.submit_seed_group(qwb, fake_spec(qwb, name="g"), 4)
    a, b, c, d = queued["ids"]
    assert queued["group"] == a and queued["seeds"] == [42, 43, 44, 45]
    _finish(qwb, a, accuracy=0.90, f1_macro=0.80)
    _finish(qwb, b, accuracy=0.92, f1_macro=0.84)
    _finish(qwb, c, accuracy=0.93)
    _finish(qwb, d, FAILED, accuracy=0.10)  # a failed seed is not averaged in
    summary = runs.group_summary(qwb, a)
    assert summary["n"] == 3 and summary["ids"] == [a, b, c, d]
    assert summary["mean"]["accuracy"] == pytest.approx(0.9166667, abs=1e-6)
    # sqrt(((0.90-m)^2 + (0.92-m)^2 + (0.93-m)^2) / 2) = sqrt(0.00046667 / 2)
    assert summary["std"]["accuracy"] == pytest.approx(0.0152753, abs=1e-6)
    assert summary["mean"]["f1_macro"] == pytest.approx(0.82) and summary["std"]["f1_macro"] == pytest.approx(
        statistics.stdev([0.80, 0.84]))
    assert [(m["seed"], m["status"]) for m in summary["members"]] == [
        (42, SUCCEEDED), (43, SUCCEEDED), (44, SUCCEEDED), (45, FAILED)]
    assert fmt.seed_group_text(summary) == "seed group: accuracy mean 0.917 ± 0.015 over 3 seeds"
    _finish(qwb, d, QUEUED)
    assert fmt.seed_group_text(runs.group_summary(qwb, a)).endswith("over 3 seeds (1 still to finish)")


# -- the CLI -------------------------------------------------------------------------------------------------

def _data_file(tmp_path) -> str:
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(30))]
    return str(write_jsonl(tmp_path / "train.jsonl", records))


def test_train_with_seeds_queues_a_group_and_runs_show_summarises_it(cli, wb, tmp_path):
    code, out, err = cli("train", "--task", "text-classification", "--data", _data_file(tmp_path), "--seeds", "3",
                         "--json")
    assert code == 0, err
    queued = json.loads(out)
    assert len(queued["ids"]) == 3 and queued["group"] == queued["ids"][0] and queued["seeds"] == [42, 43, 44]
    specs = _specs(wb, queued["ids"])
    assert len({json.dumps(_without_seed(s), sort_keys=True) for s in specs.values()}) == 1
    assert all(r["status"] == QUEUED for r in runs.list_runs(wb))  # queued only: nothing trained
    _finish(wb, queued["ids"][0], accuracy=0.5)
    code, out, err = cli("runs", "show", str(queued["ids"][1]), "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["seed_group"] == queued["group"] and shown["group_seed"] == 43
    assert shown["group"]["ids"] == queued["ids"] and shown["group"]["n"] == 1
    assert shown["group"]["mean"]["accuracy"] == 0.5 and shown["group"]["std"]["accuracy"] is None
    code, out, _ = cli("runs", "show", str(queued["ids"][1]))
    assert "seed group: accuracy mean 0.500 over 1 seed (2 still to finish)" in out
    code, _, err = cli("train", "--task", "text-classification", "--data", _data_file(tmp_path), "--seeds", "11")
    assert code == 2 and "number of seeds must be 2 to 10" in err
    code, _, err = cli("train", "--task", "text-classification", "--data", _data_file(tmp_path), "--seeds", "2",
                       "--wait")
    assert code == 2 and "--wait follows one run" in err


def _finished_sweep(wb, n_trials=3) -> int:
    base = fake_spec(wb, model="fake:sweep:10:0.001").to_dict()
    spec = SweepSpec.from_dict({"base": base, "space": {"learning_rate": "1e-6..1e-2:log"}, "n_trials": n_trials,
                                "parallelism": n_trials, "pruner": "none", "name": "s"})
    sweep_id = sweeps.create_sweep(wb, spec)
    worker = Worker(wb, InProcessRunner(wb), max_jobs=n_trials, gpus=[])
    assert wait_until(lambda: sweeps.get_sweep(wb, sweep_id)["status"] == "finished", 60, worker.loop_once)
    return sweep_id


def test_sweep_confirm_queues_seeds_of_the_top_trials_and_show_ranks_by_their_mean(cli, wb):
    sweep_id = _finished_sweep(wb)
    top = sweeps.top_runs(wb, sweep_id, 2)
    code, out, err = cli("sweep", "confirm", str(sweep_id), "--top", "2", "--seeds", "3", "--json")
    assert code == 0, err
    confirmed = json.loads(out)
    assert [c["run_id"] for c in confirmed] == [c["group"] for c in confirmed] == top
    for c in confirmed:
        trial_spec = runs.get_run(wb, c["run_id"])["spec"]
        assert len(c["ids"]) == 2 and c["seeds"] == [trial_spec["train"]["seed"] + 1, trial_spec["train"]["seed"] + 2]
        assert all(_without_seed(s) == _without_seed(trial_spec) for s in _specs(wb, c["ids"]).values())
        assert all(runs.get_run(wb, i)["sweep_id"] is None for i in c["ids"])  # not trials: the budget is untouched
    # Asked again, nothing more is queued.
    code, out, _ = cli("sweep", "confirm", str(sweep_id), "--top", "2", "--seeds", "3")
    assert code == 0 and out.count("already has 3 seeds") == 2
    # Before the seeds finish, the ranking is by single values; once they finished, confirmed trials come first.
    assert not any(r["confirmed"] for r in sweeps.get_sweep(wb, sweep_id)["ranking"])
    worker = Worker(wb, InProcessRunner(wb), max_jobs=4, gpus=[])
    assert wait_until(lambda: all(r["status"] == SUCCEEDED for r in runs.list_runs(wb)), 60, worker.loop_once)
    code, out, _ = cli("sweep", "show", str(sweep_id), "--json")
    shown = json.loads(out)
    ranking = shown["ranking"]
    assert [r["run_id"] for r in ranking[:2]] == top and all(r["confirmed"] and r["n"] == 3 for r in ranking[:2])
    assert ranking[0]["std"] == pytest.approx(0.0) and not ranking[2]["confirmed"]  # the fake ignores the seed
    assert shown["trials"][0]["group"] is None or shown["trials"][0]["group"]["n"] in (1, 3)
    code, out, _ = cli("sweep", "show", str(sweep_id))
    assert "ranked by the mean over seeds" in out and "over 3 seeds" in out
    code, _, err = cli("sweep", "confirm", str(_finished_sweep(wb, 1)), "--seeds", "1")
    assert code == 2 and "number of seeds must be 2 to 10" in err


# -- the migration -------------------------------------------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_at_0007(request, tmp_path):
    with backend_url(request.param, tmp_path) as url:
        engine = make_engine(url)
        upgrade(engine, "0007_run_kind")
        yield engine
        engine.dispose()


def test_the_migration_adds_the_group_to_an_existing_database(engine_at_0007):
    engine = engine_at_0007
    columns = {"name": "old", "task": "text-classification", "model": "m", "spec": {"train": {"seed": 42}}}
    with engine.begin() as c:
        old = c.execute(insert(Run.__table__).values(**columns).returning(Run.id)).scalar_one()
    upgrade(engine)
    with engine.begin() as c:
        assert c.execute(select(Run.name, Run.seed_group, Run.group_seed).where(Run.id == old)).one() == (
            "old", None, None)
        c.execute(update(Run).where(Run.id == old).values(seed_group=old, group_seed=42))
        c.execute(insert(Run.__table__).values(**columns, seed_group=old, group_seed=43))
    with pytest.raises(IntegrityError), engine.begin() as c:
        c.execute(insert(Run.__table__).values(**columns, seed_group=old, group_seed=43))
    _downgrade(engine, "0007_run_kind")  # and back, the runs kept
    upgrade(engine)
    with engine.begin() as c:
        assert c.execute(select(func.count()).select_from(Run)).scalar() == 2


# -- the views -----------------------------------------------------------------------------------------------

def test_the_runs_tab_repeats_a_run_and_its_header_shows_the_group(wb):
    original = runs.submit_run(wb, fake_spec(wb, name="r"))
    message = runs_tab._act(lambda r: runs_tab.repeat_text(wb, r, 3), original)
    first, second = sorted(r["id"] for r in runs.list_runs(wb) if r["id"] != original)
    assert message == f"Queued runs {first}, {second} with seeds 43, 44 (group of run {original})."
    with pytest.raises(gr.Error, match="already has 3 or more seeds"):
        runs_tab._act(lambda r: runs_tab.repeat_text(wb, r, 3), original)
    with pytest.raises(gr.Error, match="must be 2 to 10"):
        runs_tab._act(lambda r: runs_tab.repeat_text(wb, r, 12), original)
    for run_id, value in ((original, 0.9), (first, 0.92), (second, 0.94)):
        _finish(wb, run_id, accuracy=value)
    header = runs_tab.run_view(wb, first).header
    assert "seed group: accuracy mean 0.920 ± 0.020 over 3 seeds" in header
    assert "seed group" not in runs_tab.run_view(wb, runs.submit_run(wb, fake_spec(wb))).header


def _trial(number, value, group=None):
    return {"trial": number, "run_id": 10 + number, "state": "succeeded", "optuna_state": "complete",
            "value": value, "last_reported": value, "params": {"learning_rate": 1e-5 * (number + 1)}, "group": group}


def test_the_sweep_view_ranks_confirmed_trials_by_their_mean_then_the_rest_by_value():
    rows = [_trial(0, 0.95), _trial(1, 0.93, {"ids": [11, 20, 21], "mean": 0.90, "std": 0.01, "n": 3}),
            _trial(2, 0.94, {"ids": [12, 22, 23], "mean": 0.92, "std": 0.02, "n": 3}),
            _trial(3, 0.99, {"ids": [13, 24], "mean": 0.99, "std": None, "n": 1}),  # its second seed not done
            {**_trial(4, None), "state": "running", "optuna_state": "running"}]
    ranking = sweeps.ranking(rows, "maximize")
    assert [(r["trial"], r["confirmed"]) for r in ranking] == [(2, True), (1, True), (3, False), (0, False)]
    assert [r["trial"] for r in sweeps.ranking(rows, "minimize")] == [1, 2, 0, 3]
    sweep = {"trials": rows, "ranking": ranking, "spec": {"space": {"learning_rate": {}}}}
    table = sweep_tab.trials_frame(sweep)
    assert list(table["Trial"]) == [2, 1, 3, 0, 4]
    assert list(table["Mean ± std over seeds"]) == ["0.920 ± 0.020 (3 seeds)", "0.900 ± 0.010 (3 seeds)",
                                                    "0.990 (1 seed)", "–", "–"]
    # Nothing confirmed yet: trial order, as before.
    plain = [_trial(0, 0.5), _trial(1, 0.9)]
    assert list(sweep_tab.trials_frame({"trials": plain, "ranking": sweeps.ranking(plain, "maximize"),
                                        "spec": {}})["Trial"]) == [0, 1]


def test_the_sweep_view_confirm_button_queues_the_seeds(wb):
    sweep_id = _finished_sweep(wb, 2)
    message = sweep_tab.confirm_top_text(wb, sweep_id)
    assert message.count("queued runs") == 2 and "with seeds" in message
    assert "already has 3 seeds" in sweep_tab.confirm_top_text(wb, sweep_id)
    with pytest.raises(gr.Error, match="Pick a sweep"):
        sweep_tab.confirm_top_text(wb, None)
