"""A colleague opens a playground link in Chromium and gets a prediction and an attention heat-map.

The real `workbench serve` runs with WORKBENCH_AUTH set; the playground is
published after the server started, with a token carried in the link.
"""
from __future__ import annotations

import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests import playground_support as ps
from tests.browser.conftest import Server, chromium_path, goto_ready, screenshot, wait_ready
from tests.conftest import ROOT
from workbench.playground import service

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
TOKEN = "open-sesame-42"


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory):
    chromium_path()
    instance = Server(tmp_path_factory.mktemp("pg-home"), extra_env={"WORKBENCH_AUTH": "admin:secret-pw"})
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def ner_playground(guarded_server, tmp_path_factory):
    from storage.context import open_workbench
    from storage.settings import Settings

    model = ps.train_tiny("token-classification", tmp_path_factory.mktemp("pg-ner") / "model")
    wb = open_workbench(Settings.from_env({}, home=str(guarded_server.home)))
    try:
        run_id = ps.add_run(wb, "token-classification", model, name="Named entities (demo)")
        return service.publish(wb, run_id, token=TOKEN)
    finally:
        wb.close()


def test_colleague_opens_link_and_gets_a_prediction(guarded_server, ner_playground, page):
    goto_ready(page, f"{guarded_server.url}/play/{ner_playground.slug}/?token={TOKEN}")
    page.get_by_text("Token classification (NER / POS)").first.wait_for()
    # Nothing of the workbench: no tabs, no login form, no dataset or run controls.
    body = page.inner_text("body")
    for word in ("Datasets", "Train", "Compare", "Publish playground", "Username"):
        assert word not in body

    text_box = page.locator("#pg-input-text textarea")
    page.get_by_text("John Smithers lives in New York .").last.click()  # an example from the validation set
    expect(text_box).to_have_value(re.compile("John Smithers"))
    text_box.fill("Anna Smithers lives in New York .")
    page.locator("#pg-predict").click()
    page.locator(".textfield, [data-testid='highlighted-text']").first.wait_for(timeout=60_000)
    page.wait_for_function("document.body.innerText.includes('PER') || document.body.innerText.includes('LOC')",
                           timeout=60_000)
    link = page.locator("#pg-link input, #pg-link textarea").first
    assert link.input_value().endswith(f"/play/{ner_playground.slug}/?token={TOKEN}")

    page.get_by_text("Attention heat-map").click()
    page.get_by_role("button", name="Show attention").click()
    page.locator("img[src*='gradio_api/file'], img[src^='data:'], img[src*='/file=']").nth(1).wait_for(
        timeout=60_000)
    path = screenshot(page, "playground")
    if os.environ.get("WORKBENCH_TEST_UPDATE_SCREENSHOTS") == "1":  # refresh the README's picture on purpose only
        shutil.copyfile(path, ROOT / "docs" / "screenshots" / "playground.png")


def test_link_without_token_asks_for_it(guarded_server, ner_playground, page):
    page.goto(f"{guarded_server.url}/play/{ner_playground.slug}/")  # a plain page: the token form
    assert "Access token needed" in page.inner_text("body")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.get_by_text("Token classification (NER / POS)").first.wait_for()
    wait_ready(page)


def test_an_open_page_says_when_the_playground_is_unpublished(guarded_server, ner_playground, page):
    """Issue 25: Predict on a page left open after unpublishing read "Could not parse server response"."""
    from storage.context import open_workbench
    from storage.settings import Settings

    wb = open_workbench(Settings.from_env({}, home=str(guarded_server.home)))
    try:
        slug = service.publish(wb, ner_playground.run_id).slug  # a link of its own: the others stay published
        goto_ready(page, f"{guarded_server.url}/play/{slug}/")
        page.get_by_text("Token classification (NER / POS)").first.wait_for()
        page.locator("#pg-input-text textarea").fill("Anna lives in Paris .")
        # Unpublished once the page is ready: a page still starting when its link goes answers with Gradio's own
        # "Connection errored out" cover instead (what CI once saw under load).
        expect(page.locator("#pg-link input, #pg-link textarea").first).to_have_value(re.compile("/play/"))
        service.unpublish(wb, slug)
    finally:
        wb.close()
    page.locator("#pg-predict").click()
    expect(page.get_by_text("This playground is no longer published.").first).to_be_visible(timeout=30_000)
    assert "Could not parse" not in page.inner_text("body")
