"""Issue 23 in Chromium: "Predict a file" on a succeeded run, the job queued and run by the server's own worker
with a real tiny model, and its output downloaded and read back row by row."""
from __future__ import annotations

import csv
import importlib.util

import pytest

from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.context import open_workbench
from storage.settings import Settings
from tests.browser.conftest import Server, chromium_path, goto_ready, screenshot, tiny_model, wait_run_status
from tests.conftest import ROOT
from workbench.services import datasets
from workbench.services import runs as runs_service

pytestmark = pytest.mark.browser
SMS = ROOT / "workbench" / "examples" / "text-classification" / "sms_spam.csv"
JOB_TIMEOUT_MS = 240_000
TEXTS = ["Free entry to win a prize, text WIN now", "see you at lunch?", "URGENT! call to claim your reward",
         "ok, thanks", "I'll be late, sorry"]
MISSING = [name for name in ("workbench.services.predictions", "jobs.predict.job")
           if importlib.util.find_spec(name) is None]


@pytest.fixture(scope="module")
def predict_server(tmp_path_factory):
    """A home with a queued 4-step run of a tiny real model on the SMS example; the server's worker trains it."""
    if MISSING:
        pytest.skip(f"issue 23's prediction jobs are not in this checkout yet: {', '.join(MISSING)} missing")
    chromium_path()
    home = tmp_path_factory.mktemp("predict-home")
    model = tiny_model(tmp_path_factory.mktemp("models") / "tiny-bert")
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    dataset = datasets.import_dataset(wb, SMS, "text-classification", name="sms")
    spec = RunSpec(task="text-classification", data=DataSpec(dataset_id=dataset.id), model=str(model),
                   train=TrainSpec(preset="quick", max_steps=4, eval_steps=4, method="finetune"), name="tiny sms")
    run_id = runs_service.submit_run(wb, spec)
    wb.close()
    server = Server(home)
    yield server, run_id
    server.stop()


def test_predict_a_file_and_download_its_rows(predict_server, page, tmp_path):
    server, run_id = predict_server
    goto_ready(page, f"{server.url}/?run={run_id}")
    wait_run_status(page, timeout=JOB_TIMEOUT_MS)
    page.get_by_role("tab", name="Predict").click()
    page.locator("#predict-go").wait_for()
    upload = tmp_path / "inbox.csv"
    upload.write_text("text\n" + "".join(f'"{t}"\n' for t in TEXTS))
    page.locator("#predict-upload input[type=file]").set_input_files(str(upload))
    # the file's name shows once it is uploaded (Gradio may set its stem and extension apart)
    page.wait_for_function("() => (document.querySelector('#predict-upload')?.innerText || '').includes('inbox')")
    page.locator("#predict-go").click()
    page.locator("#predict-status").get_by_text("Queued prediction job #").wait_for()
    job_id = int(page.locator("#predict-status").inner_text().split("#")[1].split()[0])
    # The run page's timer refreshes the job table until the server's worker has finished the job.
    page.wait_for_function("() => document.querySelector('#predict-jobs')?.innerText.includes('succeeded')",
                           timeout=JOB_TIMEOUT_MS)
    assert "5 / 5" in page.locator("#predict-jobs").inner_text()
    # The job that has just finished is offered for download at once.
    page.wait_for_function("(id) => document.querySelector('#predict-pick input')?.value.startsWith(id)",
                           arg=f"#{job_id} predict", timeout=30_000)
    link = page.locator("#predict-download a[download$='.csv']").first
    link.wait_for(timeout=30_000)
    screenshot(page, "runs-predict")
    with page.expect_download() as download:
        link.click()
    path = tmp_path / "downloaded.csv"
    download.value.save_as(path)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["text"] for row in rows] == TEXTS  # every row, in the input's order
    assert {row["predicted_label"] for row in rows} <= {"ham", "spam"}, rows[0]
    assert all(0.0 <= float(row["score"]) <= 1.0 for row in rows), rows[0]
    # The job has its own row in the Runs table, with its kind and its rows counted.
    goto_ready(page, f"{server.url}/?run={job_id}")
    page.wait_for_selector("#run-status[data-kind='predict'][data-status='succeeded']", timeout=30_000)
    assert "predict" in page.locator("#runs-table").inner_text()
