"""Playground memory under load: the server's peak RSS while many clients send maximum-size predictions.

    python bench/playground_memory.py [--clients 40] [--rounds 1] [--inputs 64] [--chars 20000]
                                      [--max-length 512] [--stop-above-gb 12]

The packaged all-MiniLM-L6-v2 is saved as a 2-label sequence classifier in a succeeded run that
records ``--max-length`` as its training length (in ``metrics.json``, as the engine writes it;
512 is the most a playground reads), published as a public playground, and served by
``workbench serve`` (the real server, embedded worker included) in its own process on loopback.
After one small warm-up prediction, ``--clients`` threads each send one request of ``--inputs``
texts of ``--chars`` characters at the same time: inside every documented input limit (``--rounds``
repeats that burst once the previous one is answered, to see whether memory creeps). Meanwhile
the RSS of the server's whole process tree is sampled every 0.2 s and ``/healthz`` is polled
every 0.5 s (2 s timeout). If the RSS passes ``--stop-above-gb`` the server is killed and the
result says "over N GB". Prints the peak RSS, the health checks answered and failed, and the
status codes; results go to bench/results/playground_memory.json.

The server imports the code of the checkout this script lives in (PYTHONPATH and working folder
are set to it), so a copy of the script in another worktree measures that worktree's code.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
         "under pale northern lights and distant harbour bells ring for the evening tide").split()


def long_text(chars: int, seed: int) -> str:
    """About ``chars`` characters of ordinary words (about four characters per token)."""
    words, size, i = [], 0, seed
    while size < chars:
        word = WORDS[(i * 7 + seed) % len(WORDS)]
        words.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(words)[:chars]


def prepare(home: Path, max_length: int) -> str:
    """Save MiniLM as a 2-label classifier in a succeeded run trained at ``max_length``; publish it; the slug."""
    from bench.minilm_run import save_minilm_classifier_run
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.playground import service

    wb = open_workbench(Settings.from_env({}, home=str(home)))
    try:
        run_id, output_dir = save_minilm_classifier_run(
            wb, {"task": "text-classification", "train": {"max_length": max_length}})
        (output_dir / "metrics.json").write_text(json.dumps({"accuracy": 0.5,
                                                             "hyperparameters": {"max_length": max_length}}))
        return service.publish(wb, run_id).slug
    finally:
        wb.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, port: int, log_path: Path) -> subprocess.Popen:
    """``workbench serve`` on loopback in its own process group, importing this checkout's code."""
    env = {**os.environ, "WORKBENCH_HOME": str(home), "WORKBENCH_HOST": "127.0.0.1", "WORKBENCH_PORT": str(port),
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                 os.environ.get("PYTHONPATH")]))}
    with log_path.open("w") as log:
        return subprocess.Popen([sys.executable, "-c", "from workbench.cli import entry; entry()", "serve"],
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_server(process: subprocess.Popen) -> None:
    """End the server started in its own process group: SIGTERM, then SIGKILL after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def wait_ready(base: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not answer /healthz")


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and all its descendants (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def load(base: str, slug: str, process: subprocess.Popen, args: argparse.Namespace) -> dict:
    import httpx

    url = f"{base}/api/v1/predict/{slug}"
    httpx.post(url, json={"inputs": "a short warm-up"}, timeout=300).raise_for_status()  # loads the model
    idle_rss = tree_rss(process.pid)
    body = json.dumps({"inputs": [long_text(args.chars, seed) for seed in range(args.inputs)]}).encode()
    stop = threading.Event()
    samples: list[tuple[float, int]] = []
    health = {"answered": 0, "failed": 0, "slowest_s": 0.0}
    statuses: collections.Counter = collections.Counter()
    retry_after: collections.Counter = collections.Counter()
    latencies: list[float] = []
    killed = {}
    limit = args.stop_above_gb * 2**30

    def sample() -> None:
        while not stop.is_set():
            rss = tree_rss(process.pid)
            samples.append((time.monotonic(), rss))
            if rss > limit and not killed:
                killed["at_bytes"] = rss
                os.killpg(process.pid, signal.SIGKILL)
            stop.wait(0.2)

    def poll_health() -> None:
        with httpx.Client(timeout=2) as client:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    ok = client.get(f"{base}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.monotonic() - started
                health["answered" if ok else "failed"] += 1
                health["slowest_s"] = max(health["slowest_s"], round(took, 3))
                stop.wait(max(0.0, 0.5 - took))

    def client_request() -> None:
        started = time.monotonic()
        try:
            answer = httpx.post(url, content=body, headers={"content-type": "application/json"},
                                timeout=args.timeout)
            statuses[answer.status_code] += 1
            if "retry-after" in answer.headers:
                retry_after[f"{answer.status_code}: Retry-After {answer.headers['retry-after']}"] += 1
        except httpx.HTTPError as exc:
            statuses[type(exc).__name__] += 1
        latencies.append(time.monotonic() - started)

    watchers = [threading.Thread(target=sample, daemon=True), threading.Thread(target=poll_health, daemon=True)]
    for thread in watchers:
        thread.start()
    started = time.monotonic()
    round_peaks = []
    for _ in range(args.rounds):
        round_started = time.monotonic()
        clients = [threading.Thread(target=client_request, daemon=True) for _ in range(args.clients)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        round_peaks.append(round(max((rss for at, rss in samples if at >= round_started), default=0) / 2**30, 2))
        if killed or process.poll() is not None:
            break
    elapsed = time.monotonic() - started
    time.sleep(1.0)  # a last sample or two after the load
    stop.set()
    for thread in watchers:
        thread.join()
    alive = process.poll() is None
    after = None
    if alive:
        try:
            after = httpx.post(url, json={"inputs": "still serving?"}, timeout=300).status_code
        except httpx.HTTPError as exc:
            after = type(exc).__name__
    peak = max((rss for _, rss in samples), default=0)
    return {
        "clients": args.clients, "inputs_per_request": args.inputs, "chars_per_input": args.chars,
        "max_length": args.max_length, "body_bytes": len(body),
        "rounds": len(round_peaks), "idle_rss_gb": round(idle_rss / 2**30, 2), "peak_rss_gb": round(peak / 2**30, 2),
        "peak_rss_gb_per_round": round_peaks,
        "stopped_over_gb": round(killed["at_bytes"] / 2**30, 2) if killed else None,
        "server_alive_after": alive, "prediction_after_load": after,
        "healthz": health, "statuses": {str(k): v for k, v in sorted(statuses.items(), key=str)},
        "retry_after": dict(retry_after), "load_seconds": round(elapsed, 1),
        "slowest_request_s": round(max(latencies, default=0.0), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1, help="bursts of --clients requests, one after the other")
    parser.add_argument("--inputs", type=int, default=64, help="texts per request (the documented limit is 64)")
    parser.add_argument("--chars", type=int, default=20_000,
                        help="characters per text (the documented limit is 20,000)")
    parser.add_argument("--max-length", type=int, default=512, help="the run's training max_length")
    parser.add_argument("--stop-above-gb", type=float, default=12.0,
                        help="kill the server when its RSS passes this (protects the machine)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a client waits for its answer")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "playground_memory.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        slug = prepare(home, args.max_length)
        port = free_port()
        log_path = Path(tmp) / "server.log"
        process = start_server(home, port, log_path)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, process)
            results = load(base, slug, process, args)
        finally:
            stop_server(process)
            server_log = log_path.read_text(errors="replace").splitlines()
    results["server_log_tail"] = server_log[-15:]
    results["code"] = str(ROOT)
    results["machine"] = {"cpu_count": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    peak = (f"over {results['stopped_over_gb']} GB (stopped there)" if results["stopped_over_gb"]
            else f"{results['peak_rss_gb']} GB")
    print(f"code: {ROOT}")
    print(f"{args.clients} concurrent requests of {args.inputs} x {args.chars:,} characters "
          f"(run max_length {args.max_length}, body {results['body_bytes']:,} bytes)")
    print(f"server RSS: idle {results['idle_rss_gb']} GB, peak {peak}; peak per round "
          f"{results['peak_rss_gb_per_round']} GB")
    print(f"/healthz: {results['healthz']['answered']} answered, {results['healthz']['failed']} failed, "
          f"slowest {results['healthz']['slowest_s']} s")
    print(f"status codes: {results['statuses']}  {results['retry_after']}")
    print(f"server alive after the load: {results['server_alive_after']} "
          f"(a prediction after it: {results['prediction_after_load']}); load took {results['load_seconds']} s")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
