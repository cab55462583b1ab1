"""Playground serving speed: latency of single REST predictions and throughput of batches of 32.

    python bench/serve_latency.py [--requests 200] [--batches 20] [--clients 4] [--server-threads N]

The packaged all-MiniLM-L6-v2 is saved as a 2-label sequence classifier into a
temporary run folder, published, and served by ``workbench publish RUN
--standalone`` in its own process on loopback (so the client does not share
the server's GIL). The client sends sequential single requests (p50/p95
latency as the client sees it, and the server's own ``latency_ms``), then
batches of 32 (examples/s), then single requests from several client threads
at once (requests/s). Results go to bench/results/serve_latency.json.
"""
from __future__ import annotations

import argparse
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SENTENCES = [
    "The film was a delight from start to finish.",
    "I would not recommend this hotel to anyone.",
    "Delivery took three weeks and the box arrived crushed.",
    "Great value for money, the battery lasts for days.",
    "The staff were friendly but the room smelled of smoke and the wifi kept dropping out all evening.",
    "Absolutely loved it.",
    "Customer support never answered my emails about the refund I was promised last month.",
    "A solid, if unremarkable, sequel that fans of the first book will enjoy.",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def prepare(home: Path) -> int:
    """Save MiniLM as a 2-label classifier in a succeeded run's output folder; return the run id."""
    from bench.minilm_run import save_minilm_classifier_run
    from storage.context import open_workbench
    from storage.settings import Settings

    wb = open_workbench(Settings.from_env({}, home=str(home)))
    try:
        return save_minilm_classifier_run(wb, {})[0]
    finally:
        wb.close()


def start_server(home: Path, run_id: int, port: int, threads: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "WORKBENCH_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)  # torch's intra-op threads in the server process
    process = subprocess.Popen(
        [sys.executable, "-c", "from workbench.cli import entry; entry()", "publish", str(run_id), "--standalone",
         "--port", str(port), "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    while True:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("server exited:\n" + "".join(lines))
        lines.append(line)
        if line.startswith("Serving only this playground"):
            slug = line.split("/play/")[1].split("/")[0]
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
            return process, slug


def measure(base: str, slug: str, requests: int, batches: int, clients: int) -> dict:
    import httpx

    url = f"{base}/api/v1/predict/{slug}"
    with httpx.Client(timeout=120) as client:
        for i in range(10):  # warm-up: loads the model, fills caches
            client.post(url, json={"inputs": SENTENCES[i % len(SENTENCES)]}).raise_for_status()
        wall, server = [], []
        for i in range(requests):
            started = time.perf_counter()
            answer = client.post(url, json={"inputs": SENTENCES[i % len(SENTENCES)]})
            wall.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
            server.append(answer.json()["latency_ms"])
        batch = [SENTENCES[i % len(SENTENCES)] for i in range(32)]
        client.post(url, json={"inputs": batch}).raise_for_status()
        batch_ms = []
        for _ in range(batches):
            started = time.perf_counter()
            client.post(url, json={"inputs": batch}).raise_for_status()
            batch_ms.append((time.perf_counter() - started) * 1000)

    per_client = max(1, requests // clients)

    def worker() -> None:
        with httpx.Client(timeout=120) as own:
            for i in range(per_client):
                own.post(url, json={"inputs": SENTENCES[i % len(SENTENCES)]}).raise_for_status()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    concurrent_s = time.perf_counter() - started
    return {
        "single": {"requests": requests, "p50_ms": round(statistics.median(wall), 1),
                   "p95_ms": round(percentile(wall, 95), 1), "mean_ms": round(statistics.fmean(wall), 1),
                   "server_p50_ms": round(statistics.median(server), 1),
                   "server_p95_ms": round(percentile(server, 95), 1)},
        "batch32": {"batches": batches, "p50_ms": round(statistics.median(batch_ms), 1),
                    "examples_per_s": round(32 * batches / (sum(batch_ms) / 1000), 1)},
        "concurrent": {"clients": clients, "requests": per_client * clients,
                       "requests_per_s": round(per_client * clients / concurrent_s, 1)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--server-threads", type=int, default=0,
                        help="OMP_NUM_THREADS for the server (0: the workbench's choice, a quarter of the cores, "
                             "see playground.cache.configure_serving_threads).")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "serve_latency.json"))
    args = parser.parse_args()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", args.port))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        run_id = prepare(home)
        process, slug = start_server(home, run_id, port, args.server_threads)
        try:
            results = measure(f"http://127.0.0.1:{port}", slug, args.requests, args.batches, args.clients)
        finally:
            process.terminate()
            process.wait(timeout=30)
    import torch

    results["machine"] = {"cpu_count": os.cpu_count(),
                          "server_threads": args.server_threads or max(1, (os.cpu_count() or 1) // 4),
                          "load_average_1m": round(os.getloadavg()[0], 2),
                          "processor": platform.processor() or platform.machine(),
                          "device": "cuda" if torch.cuda.is_available() else "cpu"}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    single, batch = results["single"], results["batch32"]
    print(f"single REST prediction: p50 {single['p50_ms']} ms, p95 {single['p95_ms']} ms "
          f"(server-side p50 {single['server_p50_ms']} ms) over {single['requests']} requests")
    print(f"batches of 32: {batch['examples_per_s']} examples/s (p50 {batch['p50_ms']} ms per batch)")
    print(f"{results['concurrent']['clients']} concurrent clients: {results['concurrent']['requests_per_s']} "
          "requests/s")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
