"""Playground fairness: do light clients keep being answered while one heavy client hammers the server?

    python bench/playground_fairness.py [--seconds 60] [--heavy-threads 3] [--light 10] [--think 1.2]
                                        [--modes bounded,unbounded]

The packaged all-MiniLM-L6-v2 is published as a 2-label classifier trained at 512 tokens (as in
``bench/playground_memory.py``) and served by ``workbench serve`` on loopback, once per mode:
``bounded`` with the default per-client bounds (one prediction in flight, 20,000 model tokens a
minute), ``unbounded`` with both set to 0 (what the server did before them). In each, for
``--seconds``, one heavy client (source address 127.0.0.2, ``--heavy-threads`` threads) sends
maximum-size requests (64 texts of 20,000 characters) one after another, waiting 0.5 s after a
refusal, while ``--light`` light clients (127.0.0.10, .11, ...) each send a one-line request, wait
``--think`` seconds (under the 60 a minute an address may ask) and send the next. Every client binds
its own loopback source address, so the server sees eleven clients. Prints and writes to
bench/results/playground_fairness.json the light clients' p50/p95 latency and status counts, and the
heavy client's.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.playground_memory import free_port, long_text, prepare, stop_server, wait_ready  # noqa: E402

HEAVY_ADDRESS = "127.0.0.2"
MODES = {"bounded": {}, "unbounded": {"WORKBENCH_PLAYGROUND_MAX_IN_FLIGHT": "0",
                                      "WORKBENCH_PLAYGROUND_TOKEN_BUDGET": "0"}}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def start_server(home: Path, port: int, log_path: Path, extra_env: dict) -> subprocess.Popen:
    """``workbench serve`` on loopback in its own process group, importing this checkout's code."""
    env = {**os.environ, **extra_env, "WORKBENCH_HOME": str(home), "WORKBENCH_HOST": "127.0.0.1",
           "WORKBENCH_PORT": str(port), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with log_path.open("w") as log:
        return subprocess.Popen([sys.executable, "-c", "from workbench.cli import entry; entry()", "serve"],
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def hammer(base: str, slug: str, args: argparse.Namespace) -> dict:
    import httpx

    url = f"{base}/api/v1/predict/{slug}"
    httpx.post(url, json={"inputs": "a short warm-up"}, timeout=300).raise_for_status()  # loads the model
    heavy_body = json.dumps({"inputs": [long_text(20_000, seed) for seed in range(64)]}).encode()
    stop = threading.Event()
    lock = threading.Lock()
    light: list[tuple[object, float]] = []
    heavy: list[tuple[object, float]] = []

    def heavy_thread() -> None:
        transport = httpx.HTTPTransport(local_address=HEAVY_ADDRESS)
        with httpx.Client(transport=transport, timeout=args.seconds + 300) as client:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    status: object = client.post(url, content=heavy_body,
                                                 headers={"content-type": "application/json"}).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with lock:
                    heavy.append((status, time.monotonic() - started))
                if status != 200:
                    stop.wait(0.5)

    def light_thread(n: int) -> None:
        transport = httpx.HTTPTransport(local_address=f"127.0.0.{10 + n}")
        with httpx.Client(transport=transport, timeout=120) as client:
            stop.wait(n * args.think / args.light)  # spread the light clients over one think time
            while not stop.is_set():
                started = time.monotonic()
                try:
                    status: object = client.post(url, json={"inputs": f"one ordinary line number {n}"}).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with lock:
                    light.append((status, time.monotonic() - started))
                stop.wait(args.think)

    threads = [threading.Thread(target=heavy_thread, daemon=True) for _ in range(args.heavy_threads)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the heavy requests reach the slots first
    lights = [threading.Thread(target=light_thread, args=(n,), daemon=True) for n in range(args.light)]
    for thread in lights:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in lights:
        thread.join()
    for thread in threads:  # a heavy request in progress is awaited, so the next mode starts on a quiet server
        thread.join(timeout=300)
    answered = [seconds for status, seconds in light if status == 200]
    return {
        "light": {"requests": len(light),
                  "statuses": dict(collections.Counter(str(s) for s, _ in light)),
                  "p50_s": round(percentile(answered, 0.5), 3), "p95_s": round(percentile(answered, 0.95), 3),
                  "max_s": round(max(answered, default=float("nan")), 3)},
        "heavy": {"requests": len(heavy), "statuses": dict(collections.Counter(str(s) for s, _ in heavy)),
                  "answered_p50_s": round(percentile([t for s, t in heavy if s == 200], 0.5), 1)},
    }


def run_mode(mode: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        slug = prepare(home, 512)
        port = free_port()
        log_path = Path(tmp) / "server.log"
        process = start_server(home, port, log_path, MODES[mode])
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, process)
            result = hammer(base, slug, args)
        finally:
            stop_server(process)
    return {"mode": mode, "server_env": MODES[mode], **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the load lasts, per mode")
    parser.add_argument("--heavy-threads", type=int, default=3, help="concurrent requests of the heavy client")
    parser.add_argument("--light", type=int, default=10, help="light clients, one address each")
    parser.add_argument("--think", type=float, default=1.2, help="seconds a light client waits between requests")
    parser.add_argument("--modes", default="bounded,unbounded")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "playground_fairness.json"))
    args = parser.parse_args()
    results = [run_mode(mode.strip(), args) for mode in args.modes.split(",") if mode.strip()]
    out = {"seconds": args.seconds, "heavy_threads": args.heavy_threads, "light_clients": args.light,
           "think_s": args.think, "results": results, "code": str(ROOT),
           "machine": {"cpu_count": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    for result in results:
        light, heavy = result["light"], result["heavy"]
        print(f"{result['mode']:>9}: light p50 {light['p50_s']} s, p95 {light['p95_s']} s, statuses "
              f"{light['statuses']}; heavy statuses {heavy['statuses']}")


if __name__ == "__main__":
    main()
