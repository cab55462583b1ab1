"""How much CPU the server spends on one idle workbench tab.

Fills a temporary home with ``--runs`` finished runs (curves included, as ``bench/runs_tab.py`` does),
starts ``workbench serve`` on it (with its embedded worker, as a user runs it), and reads the server
process's CPU time (psutil, user + system, children included) over ``--seconds``: first with no tab
open, then with one Chromium tab on the page, left alone. The difference is what the open tab costs.

Usage: python bench/idle_tab_cpu.py [--runs 50] [--seconds 60]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from sqlalchemy import update

from bench.runs_tab import fill
from storage.context import open_workbench
from storage.models import Run
from storage.settings import Settings

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds of the process and its children so far."""
    total = 0.0
    for proc in [process, *process.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def chromium_seconds() -> float:
    """CPU seconds so far of the Chromium processes this script started (through Playwright's driver)."""
    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" in proc.name().lower():
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def share_of_a_core(process: psutil.Process, seconds: float, wait=time.sleep) -> float:
    """The process's mean CPU use over ``seconds`` of wall time, as a share of one core. ``wait`` waits out the
    seconds (a page's own wait lets Playwright hear the page's requests meanwhile)."""
    start_cpu, start = cpu_seconds(process), time.monotonic()
    wait(seconds)
    return (cpu_seconds(process) - start_cpu) / (time.monotonic() - start)


def measure(home: Path, seconds: float, open_run: bool = False) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env.update(WORKBENCH_HOME=str(home), WORKBENCH_PORT=str(port), WORKBENCH_HOST="127.0.0.1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
    server = subprocess.Popen([sys.executable, "-c", "from workbench.cli import entry; entry()", "serve"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        import httpx

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        process = psutil.Process(server.pid)
        time.sleep(5)  # start-up work (imports, the worker's first poll) is not the tab's
        no_tab = share_of_a_core(process, seconds)
        from playwright.sync_api import sync_playwright

        chromium = os.environ.get("WORKBENCH_TEST_CHROMIUM") or "/usr/bin/chromium"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(url + ("?run=1" if open_run else ""))
            page.wait_for_selector("#wb-title h1", timeout=60_000)
            page.wait_for_timeout(5000)  # the page load's own requests are not the idle tab's
            requests.clear()
            start_browser = chromium_seconds()
            one_tab = share_of_a_core(process, seconds, lambda s: page.wait_for_timeout(s * 1000))
            tab_browser = (chromium_seconds() - start_browser) / seconds
            calls = sum("/gradio_api/queue/join" in u or "/gradio_api/run/" in u for u in requests)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"no tab": round(no_tab, 3), "one idle tab": round(one_tab, 3),
            "the tab's cost": round(one_tab - no_tab, 3), "events the tab sent": calls,
            "Chromium (share of a core)": round(tab_browser, 3) }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--points", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--open-run", action="store_true", help="open the Runs tab on run 1 (?run=1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        wb = open_workbench(Settings.from_env({}, home=home))
        fill(wb, args.runs, args.points)
        with wb.db.session() as session:  # an idle workbench: nothing queued or running
            session.execute(update(Run).values(status="succeeded", progress=1.0, eta_seconds=None))
        wb.close()
        result = measure(home, args.seconds, args.open_run)
    print(json.dumps({"runs": args.runs, "seconds": args.seconds, "run open": args.open_run,
                      "share of one core": result}, indent=2))


if __name__ == "__main__":
    main()
