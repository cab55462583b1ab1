"""Issue 39, item 5 in Chromium: the rough edges a new user met (the logic behind each is unit-tested in
tests/test_ui_rough_edges.py). Runs here are finished rows added to the server's database: nothing is trained."""
from __future__ import annotations

import pytest

from storage.models import Run, utcnow
from tests.browser.conftest import Server, goto_ready, reload_ready, screenshot
from tests.browser.test_workbench_ui import _service_workbench, choose, open_tab, wait_text

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory):
    """A server without a worker: the rows added here stay as they are."""
    instance = Server(tmp_path_factory.mktemp("rough-edges") / "home", args=("--no-worker",))
    yield instance
    instance.stop()


def _row(wb, name: str, kind: str = "train", **fields) -> int:
    with wb.db.session() as session:
        run = Run(name=name, task="text-classification", model="tiny-bert", status="succeeded", progress=1.0,
                  spec={"task": "text-classification", "data": {"train_path": "train.jsonl", "name": "sms"}},
                  metrics={"accuracy": 0.8}, started_at=utcnow(), finished_at=utcnow(), kind=kind, **fields)
        session.add(run)
        session.flush()
        return run.id


def picked(page) -> list[str]:
    return page.locator("#compare-runs .token").all_inner_texts()


def test_compare_keeps_its_picks_across_tabs_and_lists_training_runs_only(idle_server, page):
    wb = _service_workbench(idle_server)
    try:
        first, second = _row(wb, "edge lr 1e-5"), _row(wb, "edge lr 5e-5")
        job = _row(wb, "edge predictions", kind="predict", parent_run_id=first)
    finally:
        wb.close()
    goto_ready(page, idle_server.url)
    open_tab(page, "Compare")
    for run_id, name in ((first, "edge lr 1e-5"), (second, "edge lr 5e-5")):
        choose(page, "compare-runs", f"#{run_id} {name}")
    page.wait_for_function("() => document.querySelectorAll('#compare-runs .token').length === 2")
    page.locator("#compare-runs input").click()
    options = page.locator("[role=listbox] [role=option]").all_inner_texts()
    assert not any(f"#{job} " in option for option in options), options
    page.keyboard.press("Escape")
    for tab in ("Runs", "Data", "Compare"):
        open_tab(page, tab)
        page.wait_for_timeout(600)
    assert len(picked(page)) == 2, picked(page)
    # the picks are in the address: a reload (or the link, shared) picks them again
    assert f"compare={first}%2C{second}" in page.url or f"compare={first},{second}" in page.url, page.url
    reload_ready(page)
    open_tab(page, "Compare")
    page.wait_for_function("() => document.querySelectorAll('#compare-runs .token').length === 2")
    assert [text.split(" · ")[0] for text in picked(page)] == [f"#{first} edge lr 1e-5", f"#{second} edge lr 5e-5"]
    screenshot(page, "compare-kept-picks")


def test_an_import_then_train_on_this_dataset_opens_train_with_it(idle_server, page):
    from tests.browser.test_workbench_ui import UI_DATA, upload_and_wait, wait_value

    goto_ready(page, idle_server.url)
    # before any file: no table headed "1 2 3" (the preview stays hidden until it has columns)
    assert not page.locator("#data-preview").is_visible()
    upload_and_wait(page, UI_DATA / "sms_sample.csv")
    page.locator("#data-import").click()
    wait_text(page, "#data-import-status", "Imported as", timeout=60_000)
    page.wait_for_function("() => { const el = document.querySelector('#data-selected input, #data-selected textarea');"
                           " return el && el.value.trim().length > 0; }")
    page.get_by_role("button", name="Train on this dataset").click()
    wait_value(page, "#train-dataset input", "sms_sample")
    assert page.locator(".toast-body").count() == 0, page.locator(".toast-body").all_inner_texts()
    assert "dataset=" in page.url


def test_publish_opens_one_share_tab(idle_server, page):
    wb = _service_workbench(idle_server)
    try:
        run_id = _row(wb, "edge share")
    finally:
        wb.close()
    goto_ready(page, f"{idle_server.url}/?run={run_id}")
    page.locator("#run-status[data-status='succeeded']").wait_for()
    page.locator("#runs-publish").click()
    page.locator("#share-publish").wait_for()
    page.wait_for_timeout(500)
    shown = page.eval_on_selector_all("[role=tab]", "els => els.filter(e => e.getClientRects().length)"
                                                    ".map(e => [e.innerText.trim(), e.getAttribute('aria-selected')])")
    assert [tab for tab in shown if tab[0] == "Share"] == [["Share", "true"]], shown  # two underlined before
    screenshot(page, "runs-share-tab", full_page=False)
