"""Data tab, "Find suspicious labels", in Chromium: start an audit, review a finished one (filter,
relabel, drop), save the corrected copy and train on it."""
from __future__ import annotations

import re

import pytest

from tests.browser.conftest import Server, goto_ready, screenshot
from tests.browser.test_workbench_ui import wait_text

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def audit_server(request, tmp_path_factory):
    """`workbench serve` on a copy of the session's finished audit of 150 reviews with 10 flipped labels
    (tests/audit_support.py: trained once, shared with tests/test_audits.py)."""
    from tests.audit_support import assert_untouched, clone_home
    from tests.browser.conftest import chromium_path

    chromium_path()  # skip before the audit is trained when there is no browser
    template = request.getfixturevalue("review_audit")
    server = Server(clone_home(template, tmp_path_factory.mktemp("audit-home")))
    yield server, template.dataset_id, template.audit_id, template.issues
    server.stop()
    assert_untouched(template)


def _open_panel(page, server, dataset_id: str) -> None:
    """Click the dataset's row: the panel opens by itself on the dataset's latest audit."""
    goto_ready(page, server.url)
    page.locator(f"#data-datasets >> text={dataset_id} >> visible=true").first.click()
    page.wait_for_function("() => (document.querySelector('#data-selected textarea, #data-selected input')"
                           " || {value: ''}).value.trim() !== ''")
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
