"""Issue 26 in Chromium: "Export to ONNX" on a succeeded run, the job queued and run by the server's own worker
(a real export of a tiny trained model), and its parity and speed table shown in the run's Export tab,
PyTorch first."""
from __future__ import annotations

import shutil

import pytest

from jobs.queue import table as queue
from jobs.specs.run import DataSpec, RunSpec
from storage.context import open_workbench
from storage.models import SUCCEEDED
from storage.settings import Settings
from tests.browser.conftest import Server, chromium_path, goto_ready, screenshot, wait_run_status
from workbench.services import runs as runs_service

pytestmark = pytest.mark.browser
JOB_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def export_server(tmp_path_factory):
    """A home with one succeeded text-classification run of a tiny trained model (12 validation rows); the
    server's worker runs whatever the test queues."""
    from tests.export_support import tiny_run

    chromium_path()
    home = tmp_path_factory.mktemp("export-home")
    tiny = tiny_run(tmp_path_factory.mktemp("built"), "text-classification")
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    spec = RunSpec(task="text-classification", model=tiny.model.model_dir, name="tiny to export",
                   data=DataSpec(train_path=tiny.run_spec.data.train_path,
                                 validation_path=tiny.run_spec.data.validation_path))
    run_id = runs_service.submit_run(wb, spec)
    claimed = queue.claim(wb.db, "trainer", only=[run_id])
    shutil.copytree(tiny.run_dir, claimed.output_dir, dirs_exist_ok=True)
    assert queue.finish(wb.db, run_id, claimed.attempt, SUCCEEDED)
    wb.close()
    server = Server(home)
    yield server, run_id
    server.stop()


def test_export_a_run_and_read_its_parity_and_speed_table(export_server, page):
    server, run_id = export_server
    goto_ready(page, f"{server.url}/?run={run_id}")
    wait_run_status(page)
    page.get_by_role("tab", name="Export").click()
    button = page.locator("#run-export")
    page.wait_for_function("() => !document.querySelector('#run-export')?.disabled")
    assert page.locator("#run-export-int8 input").is_checked()  # int8 on by default
    button.click()
    page.locator("#run-export-status").get_by_text("Queued export job #").wait_for()
    job_id = int(page.locator("#run-export-status").inner_text().split("#")[1].split()[0])
    # The run page's timer shows the job's state, then its report once the server's worker has finished it.
    page.wait_for_function("() => (document.querySelector('#run-export-table')?.innerText || '').includes('onnx-int8')",
                           timeout=JOB_TIMEOUT_MS)
    assert f"Export job #{job_id}" in page.locator("#run-export-state").inner_text()
    assert "succeeded" in page.locator("#run-export-state").inner_text()
    table = page.locator("#run-export-table").inner_text()
    positions = [table.find(name) for name in ("pytorch", "onnx-fp32", "onnx-int8")]
    assert -1 < positions[0] < positions[1] < positions[2], table  # PyTorch first, then the variants
    assert "reference" in table and "100.00%" in table  # fp32 decides as PyTorch does on every validation row
    screenshot(page, "runs-export")
    # The export job is a row of its own in the Runs table, and opening it shows its report.
    goto_ready(page, f"{server.url}/?run={job_id}")
    page.wait_for_function("(id) => (document.querySelector('#runs-table')?.innerText || '').includes('export')",
                           arg=job_id)
    page.get_by_role("tab", name="Export").click()
    page.wait_for_function("() => (document.querySelector('#run-export-table')?.innerText || '').includes('onnx-fp32')")
    assert page.locator("#run-export").is_disabled()
