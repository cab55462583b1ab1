"""Sweep trials as people read them (issue 25): short names, one column per searched parameter, hyper-parameters
at 3 significant digits in the Sweeps view and in Compare."""
from __future__ import annotations

import re

import pytest
from sqlalchemy import update

from jobs.specs.sweep import SweepSpec
from storage.models import Run
from tests.queue_support import fake_spec
from tests.tiny_models import classification_records, write_jsonl
from workbench.services import datasets, sweeps
from workbench.ui import compare_tab, sweep_plots, sweep_tab
from workbench.ui.format import param_value, short_run_name

# At most 3 significant digits: 3.16e-05, 1e-04, 0.0316, 16.
THREE_DIGITS = re.compile(r"^(?:[1-9](?:\.\d{1,2})?e[-+]\d\d|0\.0*[1-9]\d{0,2}|\d{1,3})$")


@pytest.mark.parametrize("value, shown", [
    (1e-4, "1e-04"), (3.1622776601683795e-05, "3.16e-05"), (0.1, "0.1"), (0.01, "0.01"), (0.123456, "0.123"),
    (16, "16"), (3.0, "3"), (999.7, "1000"), (12345.6, "1.23e+04"), (0.0, "0"), (True, "true"), (None, "—"),
    ("bert-base-uncased", "bert-base-uncased"), (float("nan"), "nan")])
def test_param_value_shows_three_significant_digits(value, shown):
    assert param_value(value) == shown


def _sweep(wb, tmp_path, n_trials=4, parallelism=2) -> int:
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20))]
    dataset = datasets.import_dataset(wb, write_jsonl(tmp_path / "d.jsonl", records), "text-classification")
    base = fake_spec(wb, model="fake:sweep:10:0.002").to_dict()
    base["data"] = {"dataset_id": dataset.id}
    spec = SweepSpec.from_dict({"base": base, "space": {"learning_rate": "1e-6..1e-2:log",
                                                        "weight_decay": "0.0..0.3", "batch_size": [8, 16]},
                                "n_trials": n_trials, "parallelism": parallelism, "pruner": "none",
                                "name": "a sweep with a long name"})
    return sweeps.create_sweep(wb, spec)


def test_the_sweep_view_has_a_column_per_parameter_at_three_digits(wb, tmp_path):
    sweep_id = _sweep(wb, tmp_path)
    table = sweep_tab.view_values(wb, sweep_id)[-1]
    assert list(table.columns) == [*sweep_tab.TRIAL_COLUMNS, "learning_rate", "weight_decay", "batch_size"]
    trials = sweeps.get_sweep(wb, sweep_id)["trials"]
    assert len(table) == len(trials) == 2
    for (_, row), trial in zip(table.iterrows(), trials):
        for name in ("learning_rate", "weight_decay"):
            assert row[name] == param_value(trial["params"][name])
            assert THREE_DIGITS.match(row[name]), row[name]
            assert float(row[name]) == pytest.approx(trial["params"][name], rel=5e-3, abs=5e-4)
        assert row["batch_size"] == str(trial["params"]["batch_size"])
    # The parallel coordinates label their parameter axes the same way, and name each trial's parameters.
    svg = sweep_plots.parallel_coordinates_svg(sweeps.get_sweep(wb, sweep_id))
    low = min(t["params"]["learning_rate"] for t in trials)
    assert f">{param_value(low)}</text>" in svg and "learning_rate=" in svg
    assert not re.search(r"\d{6,}", svg.split("<polyline")[0])  # no long digit runs on the axes


def test_compare_of_two_trials_shows_short_names_and_parameter_columns(wb, tmp_path):
    sweep_id = _sweep(wb, tmp_path)
    trials = sweeps.get_sweep(wb, sweep_id)["trials"]
    first, second = (t["run_id"] for t in trials)
    # A trial queued by an older version, its name carrying every parameter: shown short all the same.
    with wb.db.session() as session:
        session.execute(update(Run).where(Run.id == second).values(
            name=f"sweep {sweep_id} #1 old: learning_rate=3.1622776601683795e-05, batch_size=16"))
    result = compare_tab.compare(wb, [first, second])
    labels = [f"#{first} sweep {sweep_id} #0", f"#{second} sweep {sweep_id} #1"]
    assert list(result.metrics["Run"]) == labels
    assert list(result.diff.columns) == ["Setting", *labels]
    differing = [n for n in ("learning_rate", "weight_decay", "batch_size")
                 if trials[0]["params"][n] != trials[1]["params"][n]]
    assert "learning_rate" in differing
    # The parameters that differ come right after the names, before the status and the metrics.
    assert list(result.metrics.columns[1:1 + len(differing)]) == differing
    assert list(result.metrics.columns[1 + len(differing):4 + len(differing)]) == ["Status", "Model", "Dataset"]
    for name in differing:
        assert list(result.metrics[name]) == [param_value(t["params"][name]) for t in trials]
    row = result.diff[result.diff["Setting"] == "train.learning_rate"].iloc[0].tolist()
    assert row[1:] == [param_value(t["params"]["learning_rate"]) for t in trials]
    assert all(THREE_DIGITS.match(v) for v in row[1:])
    # The picker names them short too.
    choices = dict((run_id, label) for label, run_id in compare_tab.run_choices(wb))
    assert choices[second] == f"#{second} sweep {sweep_id} #1 · queued"


def test_runs_of_no_sweep_keep_their_names_and_get_no_parameter_columns(wb):
    from workbench.services import runs as runs_service

    ids = [runs_service.submit_run(wb, fake_spec(wb, name=f"plain {i}")) for i in range(2)]
    result = compare_tab.compare(wb, ids)
    assert list(result.metrics["Run"]) == [f"#{ids[0]} plain 0", f"#{ids[1]} plain 1"]
    assert list(result.metrics.columns[:2]) == ["Run", "Status"]
    assert short_run_name({"id": 3, "name": "mine", "sweep_id": None}) == "mine"
    assert short_run_name({"id": 3, "name": "long: learning_rate=…", "sweep_id": 2, "trial_number": 5}) == "sweep 2 #5"
