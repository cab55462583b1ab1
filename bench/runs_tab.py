"""How long the Runs tab takes to load and to refresh with 1,000 runs in the database.

Fills a temporary SQLite database with 1,000 runs (mixed states, final metrics, and
curves of ``--points`` points each), then times the exact functions the tab calls:

- page load and timer tick: ``runs_tab.tick_values`` (the page load calls it with an empty key:
  one table page, the selected run's details with its curves drawn as SVG);
- a tick with a finished run selected (nothing changed: the details are skipped) and one with a
  running run selected (its step moved: everything re-sent);
- filtered/sorted table pages (status filter, search).

With ``--browser`` it also serves that database (``workbench serve --no-worker``) and times, in
Debian's Chromium, opening the Runs tab until the first page of runs is shown, and selecting a
run until its curves are drawn.

Usage: python bench/runs_tab.py [--runs 1000] [--points 60] [--repeat 20] [--browser]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.context import open_workbench
from storage.models import MetricPoint, Run
from storage.settings import Settings

STATES = ["succeeded"] * 6 + ["failed", "cancelled", "queued", "running"]


def fill(wb, runs: int, points: int, seed: int = 0) -> tuple[int, int]:
    """Insert ``runs`` runs with curves; returns (a finished run id, a running run id)."""
    rng = random.Random(seed)
    rows = []
    for i in range(runs):
        status = STATES[i % len(STATES)]
        spec = RunSpec(task="text-classification", data=DataSpec(name=f"dataset-{i % 7}", train_path="x.jsonl"),
                       model=rng.choice(["all-MiniLM-L6-v2", "bert-base-uncased", "distilbert-base-uncased"]),
                       train=TrainSpec(learning_rate=rng.choice([5e-5, 1e-4]), seed=i), name=f"run {i}")
        done = status == "succeeded"
        rows.append(dict(name=spec.name, task=spec.task, model=spec.model, status=status, spec=spec.to_dict(),
                         progress=1.0 if done else rng.random(), step=points * 10, total_steps=points * 10,
                         metrics={"accuracy": rng.uniform(0.8, 0.99), "f1_macro": rng.uniform(0.7, 0.98)} if done
                         else {}, eta_seconds=rng.uniform(10, 900) if status == "running" else None))
    with wb.db.session() as session:
        session.execute(insert(Run), rows)
    with wb.db.session() as session:
        ids = [r.id for r in session.query(Run.id).order_by(Run.id)]
    batch = []
    for run_id in ids:
        for step in range(1, points + 1):
            batch.append(dict(run_id=run_id, step=step * 10, epoch=step / points, name="train/loss",
                              value=1.0 / step))
            if step % 5 == 0:
                batch.append(dict(run_id=run_id, step=step * 10, epoch=step / points, name="eval/accuracy",
                                  value=1 - 1.0 / step))
        if len(batch) > 50_000:
            with wb.db.session() as session:
                session.execute(insert(MetricPoint), batch)
            batch = []
    if batch:
        with wb.db.session() as session:
            session.execute(insert(MetricPoint), batch)
    finished = next(i for i, s in zip(ids, (STATES[k % len(STATES)] for k in range(runs))) if s == "succeeded")
    running = next(i for i, s in zip(ids, (STATES[k % len(STATES)] for k in range(runs))) if s == "running")
    return finished, running


def timed(fn, repeat: int) -> dict:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return summary(samples)


def browser_timings(home: str, repeat: int) -> dict:
    """Open the Runs tab and a run's details in Chromium against ``workbench serve`` on ``home``."""
    import os
    import socket
    import subprocess
    import sys

    import httpx
    from playwright.sync_api import sync_playwright

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "WORKBENCH_HOME": home, "WORKBENCH_PORT": str(port), "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen([sys.executable, "-c", "from workbench.cli import entry; entry()", "serve",
                               "--no-worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(240):
            try:
                if httpx.get(url + "healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        chromium = os.environ.get("WORKBENCH_TEST_CHROMIUM") or "/usr/bin/chromium"
        args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"]
        tab_ms, detail_ms = [], []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=args)
            for _ in range(repeat):
                page = browser.new_page()
                page.goto(url)
                page.get_by_role("tab", name="Runs").wait_for()
                start = time.perf_counter()
                page.get_by_role("tab", name="Runs").click()
                page.wait_for_function("() => { const t = document.querySelector('#runs-table');"
                                       " return t && t.innerText.includes('run 999'); }", timeout=60_000)
                tab_ms.append((time.perf_counter() - start) * 1000)
                box = page.locator("#runs-selected input")
                start = time.perf_counter()
                box.fill("1")
                box.press("Enter")
                page.wait_for_selector("#run-loss polyline", state="attached", timeout=60_000)
                detail_ms.append((time.perf_counter() - start) * 1000)
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"browser: Runs tab click → first page shown": summary(tab_ms),
            "browser: run selected → curves drawn": summary(detail_ms)}


def summary(samples: list[float]) -> dict:
    return {"median_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=60, help="training-loss points per run")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--browser", action="store_true", help="also time the tab in Chromium")
    args = parser.parse_args()

    from workbench.ui import runs_tab

    with tempfile.TemporaryDirectory() as home:
        wb = open_workbench(Settings.from_env({}, home=home))
        start = time.perf_counter()
        finished, running = fill(wb, args.runs, args.points)
        fill_s = time.perf_counter() - start
        defaults = ("all", "", "newest first", 1)
        key_finished = runs_tab.tick_values(wb, *defaults, finished, "")[-1]

        def load():
            runs_tab.tick_values(wb, *defaults, finished, "")

        def tick_unchanged():  # the selected run did not change: its details are skipped
            assert runs_tab.tick_values(wb, *defaults, finished, key_finished)[-1] == key_finished

        def tick_running():  # a running run moved a step since the last tick: everything is re-sent
            runs_tab.tick_values(wb, *defaults, running, "")

        results = {
            "runs": args.runs, "points_per_run": args.points, "fill_seconds": round(fill_s, 1),
            "page_load (table page + selected run)": timed(load, args.repeat),
            "table page only": timed(lambda: runs_tab.list_page(wb), args.repeat),
            "tick, finished run selected": timed(tick_unchanged, args.repeat),
            "tick, running run selected": timed(tick_running, args.repeat),
            "table, status filter 'failed'": timed(lambda: runs_tab.list_page(wb, status="failed"), args.repeat),
            "table, search 'bert-base' page 3": timed(lambda: runs_tab.list_page(wb, search="bert-base", page=3),
                                                      args.repeat),
            "table, sorted by status, page 40": timed(lambda: runs_tab.list_page(wb, sort="status", page=40),
                                                      args.repeat),
        }
        wb.close()
        if args.browser:
            results.update(browser_timings(home, max(3, args.repeat // 4)))
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "runs_tab.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
