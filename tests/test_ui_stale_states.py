"""Issue 25, states that stay current: the handlers of the built page on real SQLite, without a browser.

Each test finds the handler an event of the page really runs (``build_ui``, wrapped as served) and calls
it as Gradio would; the browser walks of the same states are in tests/browser/test_sweeps_browser.py.
"""
from __future__ import annotations

import datetime as dt
import json
import types

import gradio as gr
import pytest

from jobs.process.fake_runner import InProcessRunner
from jobs.queue.worker import Worker
from jobs.specs.run import DEFAULT_MODEL, DataSpec, RunSpec, TrainSpec
from storage.models import Dataset, Run
from tests.queue_support import wait_until
from tests.tiny_models import classification_records, distinct, write_jsonl
from workbench.services import audits, datasets, sweeps
from workbench.services import runs as runs_service
from workbench.ui import app, sweep_tab

SKIPPED = gr.skip()
# What a finished run of the default model records about its time: enough to calibrate an estimate.
PAST_METRICS = {"samples_per_second": 40.0, "train_examples": 1000, "train_records": 1000,
                "validation_records": 200, "validation_examples": 200, "evaluations": 1, "evaluation_seconds": 5.0,
                "final_eval_seconds": 5.0, "checkpoints": 1, "checkpoint_seconds": 2.0, "setup_seconds": 8.0,
                "finish_seconds": 2.0, "wall_seconds": 47.0, "device": "cpu", "accuracy": 0.9}


@pytest.fixture
def page(wb):
    return app.build_ui(wb)


def block(demo, elem_id: str):
    (found,) = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id]
    return found


def button(demo, label: str):
    (found,) = [b for b in demo.blocks.values() if isinstance(b, gr.Button) and b.value == label]
    return found


def handlers(demo, component, event: str) -> list:
    """The handlers (``BlockFunction``) that ``event`` of ``component`` sets off."""
    return [f for f in demo.fns.values() if (component._id, event) in f.targets and f.fn is not None]


def by_output(fn, values) -> dict:
    """A handler's return values keyed by the component they go to."""
    values = values if isinstance(values, (list, tuple)) else [values]
    assert len(values) == len(fn.outputs)
    return {out._id: value for out, value in zip(fn.outputs, values)}


def followers(demo, fn) -> list:
    """The events chained after ``fn`` (``.then``/``.success``)."""
    return [f for f in demo.fns.values() if f.trigger_after == fn._id]


def _dataset(wb, tmp_path, name: str = "reviews", examples: int = 20) -> str:
    path = write_jsonl(tmp_path / f"{name}.jsonl", distinct(classification_records(examples)))
    return datasets.import_dataset(wb, path, "text-classification", name=name, tokenizer=False).id


# -- 1. the Sweeps tab's picker ----------------------------------------------------------------------------

def test_the_sweep_pickers_labels_follow_the_sweep_to_its_end(wb, tmp_path, page):
    dataset_id = _dataset(wb, tmp_path)
    spec = sweep_tab.spec_from_form(
        json.dumps({"task": "text-classification", "model": "fake:sweep:10:0.002", "data": {"dataset_id": dataset_id}}),
        "learning_rate: {low: 1.0e-6, high: 1.0e-2, log: true}\n", 4, 2, "none", "", "", "picked")
    sweep_id = sweeps.create_sweep(wb, spec)
    picker = block(page, "sweep-picker")
    (tick,) = [f for f in page.fns.values() if f.targets and f.targets[0][1] == "tick" and picker in f.outputs]
    values = tick.fn(sweep_id, None, "", sweep_tab.TICK_SECONDS)
    assert by_output(tick, values)[picker._id]["choices"][0] == (f"#{sweep_id} picked · running · 2/4", sweep_id)
    shown, view_key = values[-3], values[-2]  # the choices and the view's fingerprint the tick keeps (gr.States)
    again = tick.fn(sweep_id, shown, view_key, sweep_tab.TICK_SECONDS)
    assert by_output(tick, again)[picker._id] == SKIPPED  # unchanged: not sent again
    worker = Worker(wb, InProcessRunner(wb), max_jobs=2, gpus=[])
    assert wait_until(lambda: sweeps.get_sweep(wb, sweep_id)["status"] == "finished", 30, worker.loop_once)
    worker.shutdown()
    after = by_output(tick, tick.fn(sweep_id, shown, view_key, sweep_tab.TICK_SECONDS))[picker._id]
    assert after["choices"][0] == (f"#{sweep_id} picked · finished · 4/4", sweep_id)
    assert "value" not in after  # the picked sweep stays picked


# -- 2. clone and edit ---------------------------------------------------------------------------------------

def test_clone_and_edit_clears_the_last_submit_and_estimates_the_cloned_spec(wb, page):
    with wb.db.session() as session:
        session.add(Dataset(id="ds-clone", name="clone-me", task="text-classification", format="csv",
                            content_hash="ds-clone", path="/nowhere", num_train=2000, num_validation=500, labels={},
                            stats={"token_stats": {"mean": 20.0}}, warnings=[]))
    spec = RunSpec(task="text-classification", model=DEFAULT_MODEL, data=DataSpec(dataset_id="ds-clone"),
                   train=TrainSpec(learning_rate=3e-5), name="first try")
    source = runs_service.submit_run(wb, spec)
    started = dt.datetime(2026, 12, 1, 12, 0, 0)
    with wb.db.session() as session:  # it has finished since the page was loaded
        run = session.get(Run, source)
        run.status, run.metrics, run.started_at = "succeeded", PAST_METRICS, started
        run.finished_at = started + dt.timedelta(seconds=57)
    (clone,) = handlers(page, button(page, "Clone and edit"), "click")
    shown = by_output(clone, clone.fn(source))
    assert shown[block(page, "train-submit-status")._id] == ""  # no "✔ Run #N is on the queue." left over
    facts = shown[block(page, "train-facts")._id]
    assert "1 past run(s) of this model and task" in facts and "no finished run" not in facts
    cloned = json.loads(shown[block(page, "train-spec")._id])
    assert cloned["name"] == "first try (edited)" and cloned["train"]["learning_rate"] == 3e-5


# -- 3. the address follows the run the details show ---------------------------------------------------------

def test_every_event_that_opens_a_run_writes_it_into_the_address(page):
    run_id = block(page, "runs-selected")
    openers = [f for f in page.fns.values() if f.fn is not None and run_id in f.outputs
               and f.targets and f.targets[0][1] != "load"]
    # a row click, Start training, Continue, a deleted run (none), Open the best run of a sweep
    assert len(openers) >= 5
    for fn in openers:
        writes = [f for f in followers(page, fn) if f.js == app.KEEP_RUN_IN_URL and f.inputs == [run_id]]
        assert writes, f"{fn.name} ({fn.targets}) opens a run but leaves the address as it was"


def test_a_timer_tick_reads_no_server_state_that_a_queued_event_writes(page):
    """A tick is sent straight (``queue=False``) and its answer can land in the page after a later queued event's:
    a fingerprint of what a panel shows kept in a ``gr.State`` (on the server) would then name the queued event's
    view while the page shows the tick's, and later ticks would send nothing (a reload under load left the run
    header empty this way). Such keys live in the page (``polling.page_key``), written with what they describe."""
    written = {o._id for f in page.fns.values() if f.queue for o in f.outputs if isinstance(o, gr.State)}
    ticks = [f for f in page.fns.values() if not f.queue and f.targets and f.targets[0][1] == "tick"]
    assert len(ticks) >= 3  # the runs table and details, a run's prediction jobs, its exports
    for tick in ticks:
        shared = [i for i in tick.inputs if isinstance(i, gr.State) and i._id in written]
        assert not shared, f"{tick.name} reads server-side state that queued events write"


def test_a_panel_recomputed_from_several_fields_is_one_listener(page):
    """Clone-and-edit sets twenty fields at once, and each field's change used to send its own request to
    recompute the spec panel from all the fields: the answers came back in any order under load, and the last
    one could be computed before the name had arrived (the browser suite saw a cloned spec without its name).
    One listener (``gr.on``) keeps one request in flight and sends its last trigger last."""
    import inspect

    changed_by: dict = {}
    for f in page.fns.values():
        if f.fn is None or not f.inputs or not any(event == "change" for _, event in f.targets):
            continue
        for out in f.outputs:
            changed_by.setdefault((out._id, inspect.unwrap(f.fn).__code__), []).append(f)
    spec = block(page, "train-spec")
    (preview,) = [fns for (out, _), fns in changed_by.items() if out == spec._id]
    assert len(preview[0].targets) >= 20 and preview[0].trigger_mode == "always_last"
    for (out, code), fns in changed_by.items():
        assert len(fns) == 1, (f"{code.co_name} recomputes {getattr(page.blocks[out], 'elem_id', out)} in "
                               f"{len(fns)} listeners whose answers can land in any order")


def test_the_page_load_of_a_run_link_sends_that_run_s_details(wb, page):
    """``?run=N``: the runs tab's own load event sends run N's header, not "no run" (see the tick test above)."""
    run_id = runs_service.submit_run(wb, RunSpec(task="text-classification", model=DEFAULT_MODEL,
                                                 data=DataSpec(train_path="train.jsonl")))
    header = block(page, "run-header")
    (load,) = [f for f in page.fns.values() if f.targets and f.targets[0][1] == "load" and header in f.outputs]
    request = types.SimpleNamespace(query_params={"run": str(run_id)}, username=None)
    values = load.fn(*[getattr(i, "value", None) for i in load.inputs], request=request)
    assert f"#{run_id} " in values[load.outputs.index(header)]


# -- 4. a reload reopens the dataset and its latest audit -----------------------------------------------------

def test_a_reload_restores_the_dataset_and_opens_its_latest_audit(wb, tmp_path, page):
    dataset_id = _dataset(wb, tmp_path)
    audits.create_audit(wb, dataset_id, folds=2, model="fake:succeed")
    latest = audits.create_audit(wb, dataset_id, folds=2, model="fake:succeed")
    selected = block(page, "data-selected")
    (load,) = [f for f in page.fns.values() if f.targets and f.targets[0][1] == "load" and selected in f.outputs]
    request = types.SimpleNamespace(query_params={"run": "3", "dataset": dataset_id})
    assert by_output(load, load.fn(request))[selected._id] == dataset_id
    (follow,) = [f for f in followers(page, load) if f.inputs == [selected]]
    picker, panel = by_output(follow, follow.fn(dataset_id)).values()
    assert picker["value"] == latest and [value for _, value in picker["choices"]] == [latest, latest - 1]
    assert panel["open"] is True
    # A link to a dataset deleted since restores nothing; a dataset without audits leaves the panel as it is.
    gone = types.SimpleNamespace(query_params={"dataset": "ds-0000"})
    assert by_output(load, load.fn(gone))[selected._id] == gr.update()
    other = _dataset(wb, tmp_path, "other", examples=12)
    picker, panel = by_output(follow, follow.fn(other)).values()
    assert picker["choices"] == [] and picker["value"] is None and panel == SKIPPED
    # A row click writes the dataset into the address, as a run's does.
    (row_click,) = handlers(page, block(page, "data-datasets"), "select")
    assert any(f.js == app.KEEP_DATASET_IN_URL for f in followers(page, row_click))


# -- 5. a refused dataset delete --------------------------------------------------------------------------------

def test_a_refused_dataset_delete_says_why_and_leaves_everything_else_as_it_was(wb, tmp_path, page):
    dataset_id = _dataset(wb, tmp_path)
    waiting = runs_service.submit_run(wb, RunSpec(task="text-classification", model="fake:succeed",
                                                  data=DataSpec(dataset_id=dataset_id)))
    (delete,) = handlers(page, button(page, "Yes, delete the dataset"), "click")
    status, selected, table = (block(page, "data-delete-status"), block(page, "data-selected"),
                               block(page, "data-datasets"))
    refused = by_output(delete, delete.fn(dataset_id))  # no gr.Error: its outputs would show "Error" badges
    assert f"still needed by queued or running run(s) {waiting}" in refused[status._id]
    assert refused[status._id].startswith(f"✘ Dataset **{dataset_id}** was not deleted")
    assert refused[selected._id] == SKIPPED and refused[table._id] == SKIPPED
    assert datasets.get_dataset(wb, dataset_id).id == dataset_id
    runs_service.cancel_run(wb, waiting)
    done = by_output(delete, delete.fn(dataset_id))
    assert done[status._id].startswith(f"✔ Dataset **{dataset_id}** deleted")
    assert done[selected._id] == "" and all(row[0] != dataset_id for row in done[table._id])
