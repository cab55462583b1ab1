"""The Sweeps tab in Chromium: a finished sweep's progress, plots and trials; "Compare the top 5"."""
from __future__ import annotations

import json

import pytest

from jobs.fake_runner import InProcessRunner
from jobs.sweep_spec import SweepSpec
from jobs.worker import Worker
from storage.context import open_workbench
from storage.settings import Settings
from tests.browser.conftest import Server, screenshot
from tests.queue_support import wait_until
from tests.tiny_models import classification_records, write_jsonl
from workbench.services import datasets, sweeps

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def sweep_server(tmp_path_factory):
    """A home with a finished 4-trial sweep (run here with the fake runner), then `workbench serve` on it."""
    from tests.browser.conftest import chromium_path

    chromium_path()
    home = tmp_path_factory.mktemp("sweep-home")
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20))]
    dataset = datasets.import_dataset(wb, write_jsonl(home / "d.jsonl", records), "text-classification")
    spec = SweepSpec.from_dict({"base": {"task": "text-classification", "model": "fake:sweep:10:0.002",
                                         "data": {"dataset_id": dataset.id}},
                                "space": {"learning_rate": "1e-6..1e-2:log", "batch_size": [8, 16]},
                                "n_trials": 4, "parallelism": 2, "pruner": "none", "name": "browser"})
    sweep_id = sweeps.create_sweep(wb, spec)
    worker = Worker(wb, InProcessRunner(wb), max_jobs=2, gpus=[])
    assert wait_until(lambda: sweeps.get_sweep(wb, sweep_id)["status"] == "finished", 60, worker.loop_once)
    best = sweeps.get_sweep(wb, sweep_id)["best"]
    wb.close()
    server = Server(home)
    yield server, sweep_id, best
    server.stop()


def test_sweeps_tab_shows_the_sweep_and_compares_its_top_trials(sweep_server, page):
    server, sweep_id, best = sweep_server
    page.goto(server.url)
    page.get_by_role("tab", name="Sweeps").click()
    progress = page.locator("#sweep-progress")
    progress.get_by_text("done 4").wait_for()
    assert f"run #{best['run_id']}" in progress.inner_text() and "finished" in progress.inner_text()
    assert page.locator("#sweep-parallel-plot polyline.wb-trial").count() == 4
    page.locator("#sweep-by-trial polyline[data-curve='best so far']").wait_for(state="attached")
    page.locator("#sweep-importance rect.wb-bar").first.wait_for(state="attached")
    assert page.locator("#sweep-trials-table").inner_text().count("succeeded") == 4
    screenshot(page, "sweeps")
    page.locator("#sweep-compare").click()
    page.locator("#compare-runs").get_by_text(f"#{best['run_id']} sweep").wait_for()
    screenshot(page, "sweeps-compare")
    # Compared at once: the diff message appears, and the best run is in the metrics table.
    page.locator("#compare-message").get_by_text("differ").wait_for()
    metrics = page.locator("#compare-metrics").inner_text()
    assert f"#{best['run_id']} sweep" in metrics
    # The Sweep form under the Train form starts with the task's default space.
    page.get_by_role("tab", name="Train").click()
    page.get_by_text("Sweep: search these settings").click()
    assert "learning_rate" in page.locator("#sweep-space").inner_text()
