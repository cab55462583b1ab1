"""Accounts in real Chromium: Gradio's login screen signs a viewer in through the web app's POST /login, the page
says who is signed in, greys out what a viewer may not do, shows the Account tab (not the Admin tab), and the
sign-out link ends the session. An admin sees the Admin tab with the users."""
from __future__ import annotations

import re

from tests.browser.conftest import Server, goto_ready, wait_ready

VIEWER, ADMIN = ("vic", "vic-viewer-pass-4"), ("ada", "ada-correct-horse-1")


def _accounts(server) -> None:
    from storage.context import open_workbench
    from storage.settings import Settings
    from tests.access_support import OPERATOR
    from workbench.services import accounts

    wb = open_workbench(Settings.from_env(server.env))
    accounts.add_user(wb, ADMIN[0], ADMIN[1], "admin", by=OPERATOR)
    accounts.add_user(wb, VIEWER[0], VIEWER[1], "viewer", by=OPERATOR)
    wb.close()


def _sign_in(page, url: str, who: tuple[str, str]) -> None:
    goto_ready(page, url)
    password = page.locator("input[type=password]")
    password.wait_for(timeout=30_000)
    page.locator("input[type=text]").first.fill(who[0])
    password.fill(who[1])
    page.get_by_role("button", name=re.compile("login", re.I)).click()
    page.get_by_role("tab", name="Data").wait_for(timeout=30_000)
    wait_ready(page)


def test_a_viewer_and_an_admin_in_the_browser(tmp_path, browser):
    server = Server(tmp_path / "home", args=("--no-worker",))  # no account at start: every visitor is LOCAL
    try:
        _accounts(server)  # the first admin, added while the server runs: sign-in from the next page on
        context = browser.new_context(viewport={"width": 1360, "height": 1000})
        page = context.new_page()
        _sign_in(page, server.url, VIEWER)
        page.locator("#wb-signed-in").get_by_text("Signed in as vic (viewer)").wait_for(timeout=30_000)
        assert page.get_by_role("tab", name="Account").count() == 1
        assert page.get_by_role("tab", name="Admin").count() == 0
        # greyed out (the button's own transition eases the opacity in)
        page.wait_for_function("() => parseFloat(getComputedStyle(document.querySelector('#data-import')).opacity)"
                               " < 0.5 && getComputedStyle(document.querySelector('#data-import')).pointerEvents"
                               " === 'none'", timeout=10_000)
        page.locator("#wb-sign-out").click()
        page.locator("input[type=password]").wait_for(timeout=30_000)
        context.close()

        context = browser.new_context(viewport={"width": 1360, "height": 1000})
        page = context.new_page()
        _sign_in(page, server.url, ADMIN)
        page.get_by_role("tab", name="Admin").click()
        page.locator("#admin-users").get_by_text("vic").first.wait_for(timeout=30_000)
        opacity = page.evaluate("() => getComputedStyle(document.querySelector('#data-import')).opacity")
        assert float(opacity) == 1.0
        context.close()
    finally:
        server.stop()
