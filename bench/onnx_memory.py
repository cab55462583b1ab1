"""ONNX serving memory: peak and settled RSS of a playground predictor on an ONNX variant under concurrent
maximum-size requests, for each way of holding ONNX Runtime's CPU memory.

    python bench/onnx_memory.py [--configs arena,no-arena,shrink,code] [--inputs 32] [--rounds 2]

The packaged all-MiniLM-L6-v2 is saved as a 2-label classifier (``bench/minilm_run.py``) and exported to
``onnx-fp32`` (``jobs.export.onnx.export_fp32``). Each configuration then runs in a fresh process: the
playground's own ``Predictor`` on that variant (one session, shared by the threads), behind
``ForwardSlots(2, ...)`` as the server holds it; two threads each send ``--rounds`` requests of
``--inputs`` texts of 20,000 characters (cut to 512 tokens), while the process's RSS is sampled every
0.1 s; then it rests 3 s (settled RSS) and times 40 one-line predictions (the throughput cost).
Configurations: ``arena`` (ONNX Runtime's default: a CPU memory arena that keeps what it grew to),
``no-arena`` (``enable_cpu_mem_arena = False``), ``shrink`` (the arena, shrunk after every run with the
run option ``memory.enable_memory_arena_shrinkage``), ``code`` (what ``jobs.export.runtime`` does now).
Results go to bench/results/onnx_memory.json.
"""
from __future__ import annotations

import argparse
import json
import os
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


def prepare(folder: Path) -> tuple[Path, Path]:
    """(model folder, onnx folder) of MiniLM as a classifier exported to fp32."""
    from bench.minilm_run import save_minilm_classifier_run
    from jobs.export.onnx import export_fp32
    from storage.context import open_workbench
    from storage.settings import Settings

    wb = open_workbench(Settings.from_env({}, home=str(folder / "home")))
    try:
        _, output_dir = save_minilm_classifier_run(wb, {"task": "text-classification"})
    finally:
        wb.close()
    onnx_dir = folder / "onnx"
    onnx_dir.mkdir()
    export_fp32(output_dir / "model", "text-classification", onnx_dir / "model.onnx")
    return output_dir / "model", onnx_dir


def child(config: str, model_dir: Path, onnx_dir: Path, inputs: int, rounds: int) -> dict:
    import psutil
    import torch

    import jobs.export.runtime as runtime
    from bench.playground_memory import long_text
    from workbench.playground.limits import ForwardSlots
    from workbench.playground.predictors import TEXT, Predictor

    torch.set_num_threads(1)  # as the server: configure_serving_threads gives it a quarter of the cores
    if config != "code":
        import onnxruntime as ort

        plain = runtime.session_options

        def options(threads=None):
            made = plain(threads)
            made.enable_cpu_mem_arena = config != "no-arena"
            return made

        runtime.session_options = options
        runtime.run_options = lambda: ort.RunOptions() if config != "shrink" else _shrinking(ort)
    predictor = Predictor(model_dir, TEXT, max_length=512, runtime="onnx-fp32", onnx_dir=onnx_dir)
    process = psutil.Process()
    predictor.predict([{"text": "warm-up"}])
    idle = process.memory_info().rss
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(process.memory_info().rss)
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    slots = ForwardSlots(2, 8, max_wait_s=600)
    items = [{"text": long_text(20_000, seed)} for seed in range(inputs)]
    took: list[float] = []

    def client() -> None:
        for _ in range(rounds):
            started = time.perf_counter()
            slots.run(predictor.predict, items)
            took.append(time.perf_counter() - started)

    started = time.perf_counter()
    clients = [threading.Thread(target=client) for _ in range(2)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    load_s = time.perf_counter() - started
    time.sleep(3.0)
    stop.set()
    sampler.join()
    settled = process.memory_info().rss
    single = []
    for n in range(40):
        t0 = time.perf_counter()
        slots.run(predictor.predict, [{"text": f"one ordinary line {n}"}])
        single.append(time.perf_counter() - t0)
    single.sort()
    gb = 2**30
    return {"config": config, "idle_rss_gb": round(idle / gb, 3), "peak_rss_gb": round(max(samples) / gb, 3),
            "settled_rss_gb": round(settled / gb, 3), "load_s": round(load_s, 1),
            "tokens_per_s": round(2 * rounds * inputs * 512 / load_s), "request_s": [round(t, 1) for t in took],
            "single_p50_ms": round(1000 * single[len(single) // 2], 1),
            "single_p95_ms": round(1000 * single[int(0.95 * len(single))], 1)}


def _shrinking(ort):
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="arena,no-arena,shrink,code")
    parser.add_argument("--inputs", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dirs", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "onnx_memory.json"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, Path(args.dirs[0]), Path(args.dirs[1]), args.inputs, args.rounds)))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, onnx_dir = prepare(Path(tmp))
        for config in [c.strip() for c in args.configs.split(",") if c.strip()]:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            out = subprocess.run([sys.executable, __file__, "--child", config, "--dirs", str(model_dir), str(onnx_dir),
                                  "--inputs", str(args.inputs), "--rounds", str(args.rounds)],
                                 env=env, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(result)
            print(json.dumps(result))
    Path(args.output).write_text(json.dumps({"inputs": args.inputs, "rounds": args.rounds, "results": results,
                                             "machine": {"cpu_count": os.cpu_count(),
                                                         "load_average_1m": round(os.getloadavg()[0], 2)}},
                                            indent=2) + "\n")


if __name__ == "__main__":
    main()
