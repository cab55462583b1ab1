"""Label tab speed in Chromium: the time from a key press to the next text on screen, over 50 labels, while the
queue is idle and while the fast model is refitted again and again in the background.

    python bench/labelling_browser.py [--labels 50] [--pool 4460] [--dim 384]

A project of ``--pool`` SMS texts (../shared/data/sms_spam_collection/train.csv, labels left out) is made through
the service; its pool is embedded by the real label-embed job on a hashed bag-of-words embedder of ``--dim``
dimensions (the size of the default model's vectors: a refit costs what it costs with real embeddings, without
minutes of embedding first). ``workbench serve --no-worker`` serves the page in its own process; this script
runs the queue (the real labelling jobs, in threads of its own process) only in the refit phase.

Each label is one key press in headless Chromium (the tab's own key script clicks the button). The page records
``performance.now()`` at the key (``window.wbLabelPressed``, set by the key script) and when ``#label-item``'s
``data-item`` changes (a MutationObserver): the difference is what a person waits. The answer is the gold label
(1 = ham, 2 = spam), as a person who knows would press.

- idle: no job runs (the refits queued every 10 labels wait).
- refit: a refit is queued again as soon as the previous one ends, so every key lands during one, on the
  same two cores as the server.
Also timed, for where the time goes: the service calls alone (``give_label``, which returns the next item), in
this process, on the same database. Results: bench/results/labelling_browser.json.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SMS = ROOT.parent.parent / "shared" / "data" / "sms_spam_collection" / "train.csv"
if not SMS.exists():
    SMS = Path("/work/shared/data/sms_spam_collection/train.csv")
RESULTS = ROOT / "bench" / "results" / "labelling_browser.json"
GOAL_MS = 200.0

OBSERVER_JS = """() => {
  window.wbShown = [];
  const observe = () => {
    const item = document.getElementById('label-item');
    if (!item) return setTimeout(observe, 50);
    // #label-item is replaced on each answer: watch its parent for the new one
    new MutationObserver(() => {
      const now = document.getElementById('label-item');
      if (now && now.dataset.item !== window.wbLastItem) {
        window.wbLastItem = now.dataset.item;
        window.wbShown.push([performance.now(), window.wbLabelPressed || null, now.dataset.item]);
      }
    }).observe(item.parentElement, {childList: true, subtree: true, attributes: true});
    window.wbLastItem = item.dataset.item;
  };
  observe();
}"""


def embedder(dim: int):
    def embed(texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in str(text).lower().split():
                out[row, int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % dim] += 1.0
            out[row, row % dim] += 1e-3  # no empty row
        return out
    return embed


class Runner:
    """Label jobs in threads of this process, with ``embed`` in place of the model's encoder (``--in-process``)."""

    def __init__(self, wb, embed):
        self.wb, self.embed = wb, embed

    def launch(self, job, env):
        from jobs.labelling.job import run_label_job
        from jobs.process import run_job
        from jobs.process.fake_runner import ThreadHandle, fake_predict, fake_train

        result: list[int] = []

        def label_fn(*args, **kwargs):
            return run_label_job(*args, embedder=self.embed, **kwargs)

        def target() -> None:
            result.append(run_job.execute(self.wb, job.run_id, job.attempt, fake_train, predict_fn=fake_predict,
                                          label_fn=label_fn))

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return ThreadHandle(thread, result)


def serve(home: Path) -> tuple[subprocess.Popen, str]:
    import socket

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env.update(WORKBENCH_HOME=str(home), WORKBENCH_PORT=str(port), WORKBENCH_HOST="127.0.0.1",
               PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
    log = (home / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", "from workbench.cli import entry; entry()", "serve",
                                "--no-worker"], env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError((home / "server.log").read_text(errors="replace")[-2000:])


REQUEST_JS = """(pressed) => {
  const calls = performance.getEntriesByType('resource').filter(
    (e) => e.startTime >= pressed && /gradio_api/.test(e.name));
  performance.clearResourceTimings();
  return calls.map((e) => [e.name.replace(/^https?:[/][/][^/]+/, ''), e.startTime - pressed, e.responseEnd - pressed]);
}"""


def label_keys(page, truth: dict[str, str], labels: int, requests: list | None = None) -> list[float]:
    """Press ``labels`` keys; the milliseconds from each key to the next item on screen (with ``requests``: the
    page's calls to the server after each key, as (path, start, end) in ms after the key)."""
    times = []
    for _ in range(labels):
        before = page.evaluate("() => window.wbShown.length")
        text = page.locator("#label-item .wb-label-text").inner_text().strip()
        page.keyboard.press("2" if truth.get(text) == "spam" else "1")
        page.wait_for_function("(n) => window.wbShown.length > n", arg=before, timeout=30_000)
        shown, pressed, _ = page.evaluate("() => window.wbShown[window.wbShown.length - 1]")
        times.append(shown - pressed)
        if requests is not None:
            requests.append((shown - pressed, page.evaluate(REQUEST_JS, pressed)))
        # Gradio closes the event a moment after drawing its answer; a key before that would be dropped.
        page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return times


def summary(times: list[float]) -> dict:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"n": len(times), "p50_ms": round(statistics.median(times), 1), "p95_ms": round(p95, 1),
            "max_ms": round(max(times), 1), "mean_ms": round(statistics.fmean(times), 1)}


def make_runner(wb, args):
    """How jobs run: as the real worker runs them, one process each (``python -m bench.labelling_browser
    RUN_ID --attempt N --as-job``: ``run_job.main`` with the hashed embedder, at ``--job-nice``), or in threads
    of this process (``--in-process``)."""
    if args.in_process:
        return Runner(wb, embedder(args.dim))
    from jobs.queue.runner import SubprocessRunner

    return SubprocessRunner(module="bench.labelling_browser",
                            extra_args=("--as-job", f"--dim={args.dim}", f"--job-nice={args.job_nice}"))


def job_main(argv: list[str]) -> int:
    """One job's process (``--as-job``): ``jobs.process.run_job.main`` with the hashed embedder and the fake
    trainer, at the niceness asked."""
    from functools import partial

    from jobs.labelling.job import run_label_job
    from jobs.process import run_job
    from jobs.process.fake_runner import fake_predict, fake_train

    dim = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--dim=")), 384)
    nice = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--job-nice=")), 0)
    if nice:
        os.nice(nice)
    rest = [a for a in argv if a != "--as-job" and not a.startswith(("--dim=", "--job-nice="))]
    return run_job.main(rest, train_fn=fake_train, predict_fn=fake_predict,
                        label_fn=partial(run_label_job, embedder=embedder(dim)))


def refitting(wb, pid: int, runner, stop: threading.Event):
    """A worker running label jobs with ``runner``, and a thread that queues a refit whenever none is queued or
    running, until ``stop`` is set; returns (the worker, the thread)."""
    from jobs.queue.worker import EmbeddedWorker, Worker
    from storage.models import KIND_LABEL_REFIT, QUEUED, RUNNING, Run
    from workbench.services import labelling

    worker = EmbeddedWorker(Worker(wb, runner, max_jobs=2, gpus=[])).start()

    def keep_refitting() -> None:
        while not stop.is_set():
            with wb.db.session() as session:
                busy = session.query(Run).filter(Run.label_project_id == pid, Run.kind == KIND_LABEL_REFIT,
                                                 Run.status.in_([QUEUED, RUNNING])).count()
            if not busy:
                labelling.queue_refit(wb, pid)
            stop.wait(0.05)

    feeder = threading.Thread(target=keep_refitting, daemon=True)
    feeder.start()
    return worker, feeder


def give_labels(wb, pid: int, labels: int, pause: float = 0.0) -> list[float]:
    """Milliseconds of ``labels`` calls of ``give_label`` in this process (``pause`` seconds apart)."""
    from workbench.services import labelling

    times = []
    for _ in range(labels):
        item = labelling.next_item(wb, pid, "bench")
        started = time.perf_counter()
        labelling.give_label(wb, pid, item["item_id"], "ham", "bench")
        times.append((time.perf_counter() - started) * 1000)
        time.sleep(pause)
    return times


def where_it_goes(calls: list) -> dict:
    """Medians (ms) of the three parts of a key's wait: the key to the label call leaving the page (Gradio's
    client), the call itself (network + server), its answer to the next text drawn (the page's rendering);
    and how many keys met a progress refresh (a queued call) within their wait."""
    parts: dict[str, list[float]] = {"key_to_request_ms": [], "request_ms": [], "answer_to_shown_ms": []}
    refreshes = 0
    for total, seen in calls:
        label = [c for c in seen if "/run/predict" in c[0]]
        refreshes += any("/queue/" in c[0] for c in seen)
        if label:
            _, start, end = label[0]
            parts["key_to_request_ms"].append(start)
            parts["request_ms"].append(end - start)
            parts["answer_to_shown_ms"].append(total - end)
    out = {k: round(statistics.median(v), 1) for k, v in parts.items() if v}
    out["p95_answer_to_shown_ms"] = summary(parts["answer_to_shown_ms"])["p95_ms"] if parts["answer_to_shown_ms"] \
        else None
    out["keys_with_a_progress_refresh"] = refreshes
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=50)
    parser.add_argument("--pool", type=int, default=4460)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--job-nice", type=int, default=0, help="niceness of each job's process")
    parser.add_argument("--in-process", action="store_true", help="run the jobs in threads of this process")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from jobs.queue.worker import EmbeddedWorker, Worker
    from storage.context import open_workbench
    from storage.models import KIND_LABEL_REFIT, Run
    from storage.settings import Settings
    from workbench.services import labelling

    with SMS.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))[: args.pool]
    truth = {" ".join(r["text"].split()): r["label"] for r in rows}
    home = Path(tempfile.mkdtemp(prefix="bench-labelling-"))
    pool = home / "pool.csv"
    with pool.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text"])
        writer.writerows([i, r["text"]] for i, r in enumerate(rows))
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    project = labelling.create_project(wb, pool, ["ham", "spam"], name="sms")
    pid = project["id"]
    worker = EmbeddedWorker(Worker(wb, make_runner(wb, args), max_jobs=2, gpus=[])).start()
    started = time.perf_counter()
    while (job := labelling.project_status(wb, pid)["jobs"]["embed"])["status"] != "succeeded":
        if job["status"] in ("failed", "cancelled"):
            raise RuntimeError(f"the embed job {job['status']}: {job.get('error')}")
        time.sleep(0.2)
    embed_s = time.perf_counter() - started
    worker.stop()
    process, url = serve(home)
    result = {"pool": len(rows), "dim": args.dim, "jobs": "in this process (threads)" if args.in_process else
              f"one process each, as the worker runs them, at niceness {args.job_nice}", "labels_per_phase": args.labels, "goal_p95_ms": GOAL_MS,
              "embed_job_seconds_hashed": round(embed_s, 2), "machine": f"{platform.node()}, {os.cpu_count()} CPUs",
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_average_before": [round(x, 1) for x in os.getloadavg()]}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                                 args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.goto(f"{url}/?label={pid}")
            page.get_by_role("tab", name="Label").click()
            page.wait_for_function("() => /^\\d+$/.test((document.getElementById('label-item') || "
                                   "{dataset: {}}).dataset.item || '')", timeout=60_000)
            page.evaluate(OBSERVER_JS)
            label_keys(page, truth, 5)  # warm-up: first calls compile and fill caches
            calls: list = []
            result["idle"] = summary(label_keys(page, truth, args.labels, calls))
            result["idle"]["where"] = where_it_goes(calls)
            for total, seen in sorted(calls, key=lambda c: -c[0])[:5]:
                print(f"{total:7.1f} ms", [(path[:40], round(a), round(b)) for path, a, b in seen], flush=True)
            print("idle", result["idle"], flush=True)

            stop = threading.Event()
            refits: list[float] = []
            worker, feeder = refitting(wb, pid, make_runner(wb, args), stop)
            phase = time.perf_counter()
            calls = []
            result["refit"] = summary(label_keys(page, truth, args.labels, calls))
            result["refit"]["where"] = where_it_goes(calls)
            phase = time.perf_counter() - phase
            stop.set()
            feeder.join()
            worker.stop()
            with wb.db.session() as session:
                done = session.query(Run).filter(Run.label_project_id == pid, Run.kind == KIND_LABEL_REFIT,
                                                 Run.status == "succeeded").all()
                refits = [(r.finished_at - r.started_at).total_seconds() for r in done
                          if r.finished_at and r.started_at]
            result["refit"].update({"phase_seconds": round(phase, 1), "refits_done": len(refits),
                                    "refit_seconds_median": round(statistics.median(refits), 2) if refits else None})
            print("refit", result["refit"], flush=True)
            browser.close()
    finally:
        process.terminate()
        process.wait(20)
    # The service calls alone: give_label (which answers with the next item), on the same database, idle and
    # while refits run back to back (the SQLite write lock is shared with the refit's one-transaction update).
    result["service_give_label"] = summary(give_labels(wb, pid, args.labels))
    print("service", result["service_give_label"])
    stop = threading.Event()
    worker, feeder = refitting(wb, pid, make_runner(wb, args), stop)
    result["service_give_label_during_refits"] = summary(give_labels(wb, pid, args.labels, pause=0.1))
    stop.set()
    feeder.join()
    worker.stop()
    print("service during refits", result["service_give_label_during_refits"])
    result["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    result["met"] = all(result[k]["p95_ms"] < GOAL_MS for k in ("idle", "refit"))
    wb.close()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]) if "--as-job" in sys.argv else main())
