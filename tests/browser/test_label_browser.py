"""Label tab in Chromium: a person creates a project from a file of 40 texts, labels 30 of them with the keyboard
only, sees the suggestions once the first refit is done, exports the labels and hands them to a training run
that succeeds.

The server runs without its worker; this test runs the queue itself, in a thread, with the real labelling jobs
on a hashed bag-of-words embedder (no model to load) and the fake trainer: the page and the jobs are real, the
encoder and the training are stand-ins."""
from __future__ import annotations

import hashlib
import threading
from typing import Sequence

import numpy as np
import pytest

from tests.browser.conftest import Server, goto_ready, screenshot, wait_run_status

pytestmark = pytest.mark.browser

SPAM = "cheap pills offer win money now"
HAM = "meeting notes about the project plan"
LABELLED = 30


def hashed_embedder(texts: Sequence[str]) -> np.ndarray:
    """Texts as hashed bags of words (64 dimensions): two topics that share no word land far apart."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in str(text).lower().split():
            out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
    return out


class LabelJobsRunner:
    """The fake runner's threads, with the real labelling jobs on ``hashed_embedder``."""

    def __init__(self, wb):
        self.wb = wb

    def launch(self, job, env):
        from jobs.labelling.job import run_label_job
        from jobs.process import run_job
        from jobs.process.fake_runner import ThreadHandle, fake_predict, fake_train

        def label_fn(*args, **kwargs):
            return run_label_job(*args, embedder=hashed_embedder, **kwargs)

        result: list[int] = []

        def target() -> None:
            result.append(run_job.execute(self.wb, job.run_id, job.attempt, fake_train, predict_fn=fake_predict,
                                          label_fn=label_fn))

        thread = threading.Thread(target=target, name=f"label-job-{job.run_id}", daemon=True)
        thread.start()
        return ThreadHandle(thread, result)


@pytest.fixture(scope="module")
def label_server(tmp_path_factory):
    """`workbench serve --no-worker`, and the queue run here (``LabelJobsRunner``) on the same home."""
    from jobs.queue.worker import EmbeddedWorker, Worker
    from storage.context import open_workbench
    from storage.settings import Settings
    from tests.browser.conftest import chromium_path

    chromium_path()
    home = tmp_path_factory.mktemp("label-home")
    server = Server(home, args=("--no-worker",))
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    worker = EmbeddedWorker(Worker(wb, LabelJobsRunner(wb), max_jobs=2, gpus=[])).start()
    yield server
    worker.stop()
    wb.close()
    server.stop()


def _pool(folder) -> tuple:
    """40 texts, half on each topic, interleaved; returns (the file, text -> its true label)."""
    truth = {}
    for i in range(40):
        truth[f"{SPAM if i % 2 else HAM} {i}"] = "spam" if i % 2 else "ham"
    path = folder / "messages.txt"
    path.write_text("".join(f"{text}\n" for text in truth), encoding="utf-8")
    return path, truth


def _shown(page) -> tuple[str, str, str]:
    """(the item's id, its text, its suggestion line) on screen."""
    return page.evaluate("""() => {
      const item = document.querySelector('#label-item');
      const text = item && item.querySelector('.wb-label-text');
      const hint = item && item.querySelector('#label-suggestion');
      return [item ? item.dataset.item : '', text ? text.innerText : '', hint ? hint.innerText : ''];
    }""")


def _wait_next(page, item: str, server) -> None:
    """Wait for the next item after ``item``; past the timeout, fail with what the page and the server showed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("(prev) => { const el = document.querySelector('#label-item');"
                               " return el && el.dataset.item !== prev; }", arg=item, timeout=20_000)
        # Gradio closes the event a moment after it drew the answer; a key pressed before that is dropped (each
        # key's event runs once at a time), as a person's never is.
        page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    except PlaywrightTimeout:
        raise AssertionError(f"item {item} stayed on screen: toasts {page.locator('.toast-body').all_inner_texts()}, "
                             f"progress {page.locator('#label-progress').inner_text()!r}, server log "
                             f"{server.log_path.read_text(errors='replace')[-2500:]}") from None


def test_label_thirty_texts_with_the_keyboard_then_train(label_server, page, tmp_path):
    path, truth = _pool(tmp_path)
    goto_ready(page, label_server.url)
    page.get_by_role("tab", name="Label").click()
    page.locator("#label-new").get_by_text("New project").click()
    page.locator("#label-file input[type=file]").set_input_files(str(path))
    page.locator("#label-classes").locator("textarea").first.fill("spam\nham")
    page.locator("#label-name").locator("input, textarea").first.fill("Support inbox")
    page.locator("#label-file [aria-label='messages.txt']").wait_for()
    screenshot(page, "labelling-create", element="#label-new")
    page.locator("#label-create").click()
    page.locator("#label-created").get_by_text("40 texts").wait_for()
    page.wait_for_function("() => /^\\d+$/.test((document.querySelector('#label-item') || {dataset: {}})"
                           ".dataset.item || '')")
    # The pool is embedded (and ranked for coverage) before the first label, as it is within seconds for a
    # person: a test's keys are faster, and a pool ranked after n labels refits first at n + 10.
    page.locator("#label-jobs").get_by_text("Embedding the pool: succeeded").wait_for()
    page.evaluate("() => document.activeElement && document.activeElement.blur()")

    first = _shown(page)[0]
    page.keyboard.press("Enter")  # no suggestion yet: the text stays, and the page says why
    page.locator("#label-notice").get_by_text("No suggestion for this text yet").wait_for()
    assert _shown(page)[0] == first
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    seen, suggested = [], []
    for n in range(LABELLED):
        item, text, hint = _shown(page)
        assert item not in seen, f"item {item} shown twice"
        seen.append(item)
        label = truth[text.strip()]
        suggested.append(hint.startswith("Suggested"))
        if suggested[-1] and sum(suggested) == 1:  # the suggested label's key is lit, the other is not
            lit, other = ("label-key-1", "label-key-2") if hint.startswith("Suggested: spam") else (
                "label-key-2", "label-key-1")
            colours = page.evaluate("(ids) => ids.map((id) => getComputedStyle(document.getElementById(id))"
                                    ".backgroundColor)", [lit, other])
            assert colours[0] != colours[1], (colours, page.locator("#label-item").evaluate("e => e.outerHTML"))
        if hint.startswith(f"Suggested: {label}"):
            page.keyboard.press("Enter")
        else:
            page.keyboard.press("1" if label == "spam" else "2")
        _wait_next(page, item, label_server)
        if n == 19 and not any(suggested):  # a fast hand: let the first refit (queued at 10 labels) finish
            page.locator("#label-jobs").get_by_text("Last refit: succeeded").wait_for()
    assert not any(suggested[:10]), "a suggestion before the first refit (no label has a description)"
    assert any(suggested[10:]), "no suggestion once the first refit was done"
    page.locator("#label-progress").get_by_text(f"{LABELLED} / 40 labelled").wait_for()
    page.locator("#label-curve .wb-curve").wait_for(state="attached")
    page.locator("#label-new").get_by_text("New project").click()  # folded, for the picture
    page.locator("#label-file").wait_for(state="hidden")
    screenshot(page, "labelling")

    page.locator("#label-export").click()
    page.locator("#label-export-file [aria-label='project-1-labels.csv']").wait_for()

    page.locator("#label-train").click()
    wait_run_status(page, "succeeded", timeout=60_000)
    assert f"trained from {LABELLED} labels" in page.locator("#run-title").first.inner_text()
