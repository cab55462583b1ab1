"""Data tab, "Find suspicious labels", in Chromium: start an audit, review a finished one (filter,
relabel, drop), save the corrected copy and train on it."""
from __future__ import annotations

import re

import pytest

from tests.browser.conftest import Server, screenshot
from tests.browser.test_workbench_ui import wait_text
from tests.tiny_models import classification_records, distinct, write_jsonl
from storage.context import open_workbench
from workbench.services import audits, datasets
from storage.settings import Settings

pytestmark = pytest.mark.browser
PRETRAINED = {"epochs": 3, "batch_size": 8, "learning_rate": 1e-4, "max_length": 16, "select_by": "last"}


@pytest.fixture(scope="module")
def audit_server(tmp_path_factory):
    """A home with a finished audit of a set with 10 flipped labels (run here), then `workbench serve`."""
    from jobs.worker import start_embedded_worker
    from tests.browser.conftest import chromium_path

    chromium_path()
    home = tmp_path_factory.mktemp("audit-home")
    records = distinct(classification_records(150))
    flipped = list(range(3, 150, 15))
    for i in flipped:
        records[i]["label"] = "neg" if records[i]["label"] == "pos" else "pos"
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    try:
        dataset = datasets.import_dataset(wb, write_jsonl(home / "reviews.jsonl", records), "text-classification",
                                          name="reviews", validation_fraction=0.0, tokenizer=False)
        audit_id = audits.create_audit(wb, dataset.id, folds=3, train=PRETRAINED)
        worker = start_embedded_worker(wb, max_jobs=1, gpus=[])
        try:
            assert audits.wait_for_audit(wb, audit_id, timeout=400)["state"] == audits.FINISHED
        finally:
            worker.stop()
        issues = len(audits.audit_issues(wb, audit_id))
    finally:
        wb.close()
    server = Server(home)
    yield server, dataset.id, audit_id, issues
    server.stop()


def _open_panel(page, server, dataset_id: str) -> None:
    page.goto(server.url)
    page.locator(f"#data-datasets >> text={dataset_id} >> visible=true").first.click()
    page.wait_for_function("() => (document.querySelector('#data-selected textarea, #data-selected input')"
                           " || {value: ''}).value.trim() !== ''")
    page.get_by_text("Find suspicious labels").first.click()
    page.locator("#audit-start").wait_for()


def test_review_a_finished_audit_and_save_the_corrected_copy(audit_server, page):
    server, dataset_id, audit_id, issues = audit_server
    _open_panel(page, server, dataset_id)
    page.locator("#audit-state[data-state='finished']").wait_for(timeout=30_000)
    assert f"{issues} suspicious of 150 examples" in page.locator("#audit-status").inner_text()
    assert "held-out accuracy" in page.locator("#audit-status").inner_text()
    wait_text(page, "#audit-caption", f"{issues} of {issues} suspicious examples shown")
    table = page.locator("#audit-issues")
    assert table.inner_text().count("train:") == issues
    screenshot(page, "audit", element="#audit-panel")
    # Drop one labelled "neg" by hand: click its row, then Drop.
    rows = re.findall(r"(train:\d+)\s*\n[^\n]*\n\s*(neg|pos)\s*\n", table.inner_text())  # example, text, given
    assert len(rows) == issues, table.inner_text()
    dropped = next(key for key, given in rows if given == "neg")
    page.locator(f"#audit-issues >> text={dropped} >> visible=true").first.click()
    page.wait_for_function("(key) => (document.querySelector('#audit-example textarea, #audit-example input')"
                           " || {value: ''}).value === key", arg=dropped)
    page.locator("#audit-drop").click()
    wait_text(page, "#audit-decided", "1 example marked drop")
    wait_text(page, "#audit-issues", "drop")
    # Filter to the examples labelled "pos": only those stay, and the bulk button applies to them alone.
    box = page.locator("#audit-given input")
    box.click()
    page.get_by_role("option", name="pos", exact=True).click()
    page.wait_for_function("(all) => { const el = document.querySelector('#audit-caption');"
                           " return el && /\\d+ of/.test(el.innerText) && !el.innerText.includes(all); }",
                           arg=f"{issues} of {issues}")
    shown = int(re.search(r"(\d+) of", page.locator("#audit-caption").inner_text()).group(1))
    assert shown == sum(given == "pos" for _, given in rows)
    page.locator("#audit-all-relabel").click()
    wait_text(page, "#audit-decided", f"{shown} examples marked relabel")
    wait_text(page, "#audit-issues", "relabel → neg")
    assert "drop" not in page.locator("#audit-issues").inner_text()
    page.locator("#audit-save").click()
    wait_text(page, "#audit-saved", "Saved as dataset", timeout=60_000)
    saved = page.locator("#audit-saved").inner_text()
    assert f"{shown} relabelled, 1 dropped" in saved and "149 train" in saved and "unchanged" in saved
    new_id = re.search(r"ds-[0-9a-f]+", saved).group(0)
    page.locator(f"#data-datasets >> text={new_id} >> visible=true").first.wait_for()
    page.locator("#audit-train-corrected").click()
    page.wait_for_function("(id) => { const el = document.querySelector('#train-dataset input');"
                           " return el && el.value.includes('corrected by audit'); }", arg=new_id)


def test_start_an_audit_from_the_data_tab_and_cancel_it(audit_server, page):
    server, dataset_id, audit_id, _ = audit_server
    _open_panel(page, server, dataset_id)
    page.locator("#audit-state").wait_for()
    page.locator("#audit-folds input[type=number]").fill("2")
    page.locator("#audit-folds input[type=number]").press("Enter")
    page.locator("#audit-start").click()
    wait_text(page, "#audit-status", f"Audit {audit_id + 1}")
    status = page.locator("#audit-status").inner_text()
    assert "of 2 folds done" in status and "fold 2:" in status
    page.get_by_role("button", name="Cancel audit").click()
    page.locator("#audit-state[data-state='stopped']").wait_for(timeout=90_000)
    assert "retry the stopped folds" in page.locator("#audit-status").inner_text()
