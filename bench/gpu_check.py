"""The whole GPU path in one command, for the first machine with a GPU (target: under 5 minutes).

    python bench/gpu_check.py [--out gpu_check.json] [--model FOLDER] [--peak-tflops N]
    python bench/gpu_check.py --smoke        # the same harness on the CPU with a tiny model (CI)

Three parts, each recorded in one JSON document (stdout, and ``--out``):

1. ``throughput``: BERT-base (built from its config unless ``--model`` names a
   local folder with weights) for sequence classification, synthetic batches of
   sequence length 128, a plain loop of forward + backward + AdamW step under
   autocast: samples/s, tokens/s, achieved model TFLOPS and model FLOPs
   utilisation (MFU) per precision (fp32, bf16 when supported, fp16 with a grad
   scaler). Model FLOPs per token: 6 x non-embedding parameters + 12 x layers x
   hidden x sequence length (attention scores), forward and backward.
2. ``engine``: a real run through the queue and the worker -- ``runs.submit_run``
   then ``Worker.loop_once`` launching ``python -m jobs.process.run_job`` -- with
   ``precision: bf16`` and ``precision: fp16`` on one GPU: status, samples/s as
   the engine measures it (optimisation only), MFU from it, accuracy, loss finite.
3. ``ddp``: with two GPUs or more, the same run with ``gpus: 2`` (``accelerate
   launch --multi_gpu`` on a free port); otherwise ``{"skipped": ...}``.
4. ``onnx``: the model exported by the workbench's export job (``jobs.export.job``)
   on the device: fp32, int8 and, on a GPU, fp16, each checked against PyTorch
   and timed (p50/p95 at batch 1, rows/s at batch 32); each variant names the
   ONNX Runtime provider that ran it (CUDA needs ``onnxruntime-gpu`` installed).

Exit code 0 when every check passed, 1 when one failed (``failed`` lists them),
2 without CUDA (one line on stderr; nothing is measured) unless ``--smoke``.
``--smoke`` runs parts 1-4 on the CPU with a 2-layer model (fp32, bf16 autocast
on the CPU; the engine runs in fp32 there; part 3 with 2 CPU processes on gloo)
to test this script itself; its figures mean nothing for a GPU.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench.gpu_check")

SEQ_LEN = 128
EXIT_OK, EXIT_FAILED, EXIT_NO_CUDA = 0, 1, 2
# Dense tensor-core peak (bf16/fp16, fp32 accumulate), TFLOPS, by a name fragment; first match wins.
PEAK_TFLOPS = (("H200", 989.0), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("GH200", 989.0),
               ("A100", 312.0), ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0),
               ("V100", 125.0), ("T4", 65.0), ("4090", 165.0), ("3090", 71.0))


class NoCuda(Exception):
    """This machine has no usable CUDA device."""


# -- figures -------------------------------------------------------------------------------------
def peak_tflops(device_name: str, override: Optional[float] = None) -> Optional[float]:
    """Peak dense bf16/fp16 TFLOPS of one GPU, from ``override`` or the table; None when unknown."""
    if override:
        return float(override)
    for fragment, value in PEAK_TFLOPS:
        if fragment.lower() in device_name.lower():
            return value
    return None


def flops_per_sample(non_embedding_params: int, layers: int, hidden: int, seq_len: int) -> float:
    """Model FLOPs of one training sample (forward + backward) of ``seq_len`` tokens."""
    return seq_len * (6.0 * non_embedding_params + 12.0 * layers * hidden * seq_len)


def non_embedding_parameters(model) -> int:
    """Parameters that take part in matrix products (embedding lookups are not FLOPs)."""
    return sum(p.numel() for name, p in model.named_parameters() if ".embeddings." not in f".{name}")


def mfu(samples_per_second: float, sample_flops: float, peak: Optional[float], devices: int = 1) -> Optional[float]:
    """Achieved model FLOPs over the peak of ``devices`` GPUs; None without a known peak."""
    if not peak or samples_per_second <= 0:
        return None
    return round(samples_per_second * sample_flops / (peak * 1e12 * devices), 4)


# -- the model -----------------------------------------------------------------------------------
def bert_config(smoke: bool):
    """BERT-base (the defaults of BertConfig are bert-base-uncased), or a 2-layer one for the smoke run."""
    from transformers import BertConfig

    if smoke:
        return BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                          max_position_embeddings=SEQ_LEN, num_labels=2)
    return BertConfig(num_labels=2)


def model_folder(folder: Path, smoke: bool, model: Optional[str]) -> tuple[Path, str]:
    """A local model folder the engine can train: ``model`` when given, else BERT-base from its config
    (random weights) with the packaged MiniLM tokenizer (the same uncased BERT vocabulary)."""
    if model:
        return Path(model), "local weights"
    from transformers import AutoTokenizer, BertForSequenceClassification

    from jobs.training.catalogue import packaged_model_path

    if not (folder / "config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
        BertForSequenceClassification(bert_config(smoke)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder, "built from config (random weights)"


# -- part 1: the training loop alone -------------------------------------------------------------
def measure_throughput(model_path: Path, device: str, precision: str, batch_size: int, steps: int,
                       peak: Optional[float]) -> dict[str, Any]:
    """Samples/s of forward + backward + AdamW on synthetic batches of SEQ_LEN tokens at ``precision``."""
    import torch
    from transformers import AutoModelForSequenceClassification

    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(model_path), num_labels=2).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    use_scaler = precision == "fp16" and device.startswith("cuda")
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None
    vocab = model.config.vocab_size
    batch = {"input_ids": torch.randint(1000, vocab, (batch_size, SEQ_LEN), device=device),
             "attention_mask": torch.ones(batch_size, SEQ_LEN, dtype=torch.long, device=device),
             "labels": torch.randint(0, 2, (batch_size,), device=device)}
    device_type = "cuda" if device.startswith("cuda") else "cpu"

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = model(**batch).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    def sync() -> None:
        if device_type == "cuda":
            torch.cuda.synchronize()

    for _ in range(max(2, steps // 4)):  # warm-up: kernels chosen, memory allocated
        step()
    sync()
    started = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - started
    samples_per_second = batch_size * steps / seconds
    sample_flops = flops_per_sample(non_embedding_parameters(model), model.config.num_hidden_layers,
                                    model.config.hidden_size, SEQ_LEN)
    result = {"precision": precision, "batch_size": batch_size, "seq_len": SEQ_LEN, "steps": steps,
              "samples_per_second": round(samples_per_second, 2),
              "tokens_per_second": round(samples_per_second * SEQ_LEN, 1),
              "model_tflops": round(samples_per_second * sample_flops / 1e12, 6),
              "mfu": mfu(samples_per_second, sample_flops, peak) if precision != "fp32" else None,
              "loss": round(float(loss), 4), "loss_finite": bool(torch.isfinite(loss).item())}
    if device_type == "cuda":
        result["peak_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        torch.cuda.reset_peak_memory_stats()
    del model, optimizer
    if device_type == "cuda":
        torch.cuda.empty_cache()
    return result


# -- parts 2 and 3: real runs through the queue ----------------------------------------------------
def _records(n: int, seed: int) -> list[dict]:
    """Texts long enough to fill SEQ_LEN tokens; the label is which word list the text is drawn from."""
    import random

    rng = random.Random(seed)
    words = {"pos": "good great fine nice happy bright warm kind".split(),
             "neg": "bad awful poor sad dark cold grim cruel".split()}
    out = []
    for i in range(n):
        label = "pos" if i % 2 == 0 else "neg"
        out.append({"text": " ".join(rng.choice(words[label]) for _ in range(SEQ_LEN + 20)), "label": label})
    return out


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def queue_run(home: Path, model_path: Path, data: tuple[Path, Path], *, precision: str, gpus: list[int],
              procs: int, batch_size: int, max_steps: int, timeout: float, sample_flops: float,
              peak: Optional[float]) -> dict[str, Any]:
    """Submit one run and drive a worker until it ends: the path a user's run takes."""
    from jobs.queue.worker import Worker
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.services import runs

    wb = open_workbench(Settings.from_env({}, home=str(home), device="auto" if gpus else "cpu",
                                          heartbeat_seconds=1.0, lease_seconds=60.0))
    started = time.perf_counter()
    try:
        spec = RunSpec(task="text-classification", model=str(model_path), gpus=max(1, len(gpus)), procs=procs,
                       data=DataSpec(train_path=str(data[0]), validation_path=str(data[1])),
                       train=TrainSpec(max_steps=max_steps, eval_steps=max_steps, batch_size=batch_size,
                                       max_length=SEQ_LEN, learning_rate=5e-5, precision=precision))
        run_id = runs.submit_run(wb, spec)
        worker = Worker(wb, gpus=gpus, procs=procs)
        try:
            while time.perf_counter() - started < timeout:
                worker.loop_once()
                record = runs.get_run(wb, run_id)
                if record["status"] not in ("queued", "running", "cancelling") and not worker.slots:
                    break
                time.sleep(0.5)
            timed_out = runs.get_run(wb, run_id)["status"] in ("queued", "running", "cancelling")
        finally:
            worker.shutdown()
        record = runs.get_run(wb, run_id)
    finally:
        wb.close()
    if timed_out:
        record = {**record, "status": "timed out", "error": f"the run did not finish within {timeout:.0f} s"}
    metrics = record.get("metrics") or {}
    devices = max(1, len(gpus))
    sps = float(metrics.get("samples_per_second") or 0.0)
    result = {"precision": precision, "gpus": len(gpus), "procs": procs if not gpus else devices,
              "device": record.get("device"), "status": record["status"], "error": record.get("error"),
              "seconds": round(time.perf_counter() - started, 1), "steps": metrics.get("steps"),
              "samples_per_second": sps or None, "mfu": mfu(sps, sample_flops, peak, devices) if gpus else None,
              "accuracy": metrics.get("accuracy"), "train_loss": metrics.get("train_loss"),
              "peak_gpu_mb": metrics.get("peak_gpu_mb")}
    if record["status"] != "succeeded":
        result["log_tail"] = (record.get("error_detail") or "")[-2000:]
    return result


# -- the whole check -----------------------------------------------------------------------------
# -- part 4: ONNX export ------------------------------------------------------------------------------
def onnx_export(model_path: Path, work: Path, device: str, validation: Path) -> dict[str, Any]:
    """The model exported as an export job does it on ``device``: each variant's agreement with PyTorch on the
    validation records, its speed and the ONNX Runtime provider that ran it."""
    from jobs.export.job import run_export
    from jobs.export.spec import ExportSpec
    from jobs.predict.spec import ModelRef
    from jobs.process.run_job import model_labels
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec

    spec = RunSpec(task="text-classification", model=str(model_path),
                   data=DataSpec(train_path=str(validation), validation_path=str(validation)))
    ref = ModelRef(run_id=1, task="text-classification", model_dir=str(model_path),
                   hyperparameters={"max_length": SEQ_LEN}, labels=model_labels(model_path))
    report = run_export(ExportSpec(run_id=1), ref, spec, work / "onnx-export", RecordingReporter(), device=device)
    fp32 = next(v for v in report["variants"] if v["name"] == "onnx-fp32")
    return {"check": "onnx", "device": report["device"], "status": "succeeded" if fp32["status"] == "ok" else "failed",
            "error": fp32.get("reason"), "pytorch": report["pytorch"], "variants": report["variants"]}


def environment() -> dict[str, Any]:
    import torch
    import transformers

    info: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                            "gpus": []}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            info["gpus"].append({"index": i, "name": props.name, "memory_gb": round(props.total_memory / 2**30, 1),
                                 "capability": f"{props.major}.{props.minor}"})
        info["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
    return info


def require_cuda(env: dict[str, Any]) -> None:
    if not env["cuda_available"] or not env["gpus"]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise NoCuda(f"no CUDA device is visible (torch {env['torch']}, built for CUDA {env['cuda_build']}, "
                     f"CUDA_VISIBLE_DEVICES={visible!r}) — run this on a GPU machine with a CUDA build of torch, "
                     "or pass --smoke for the CPU self-test")


def run_check(smoke: bool, model: Optional[str], peak_override: Optional[float], budget: float,
              work: Path) -> dict[str, Any]:
    """Every part in turn; a part that raises is recorded as failed and the others still run."""
    import torch

    t0 = time.perf_counter()
    env = environment()
    if not smoke:
        require_cuda(env)
    device = "cpu" if smoke else "cuda:0"
    peak = peak_tflops(env["gpus"][0]["name"], peak_override) if env["gpus"] and not smoke else peak_override
    model_path, origin = model_folder(work / "model", smoke, model)
    report: dict[str, Any] = {"mode": "smoke" if smoke else "gpu", "environment": env, "model": str(model_path),
                              "model_origin": origin, "peak_tflops_per_gpu": peak, "seq_len": SEQ_LEN,
                              "throughput": [], "engine": [], "ddp": None, "onnx": None, "failed": [],
                              "skipped": []}

    def left() -> float:
        return budget - (time.perf_counter() - t0)

    def attempt(name: str, fn: Callable[[], dict[str, Any]], need: float) -> Optional[dict[str, Any]]:
        if left() < need:
            report["skipped"].append(f"{name}: not enough of the time budget left ({left():.0f} s)")
            return None
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - one broken part must not hide the others
            log.exception("%s failed", name)
            report["failed"].append(f"{name}: {type(exc).__name__}: {exc}"[:500])
            return {"check": name, "error": f"{type(exc).__name__}: {exc}"[:500]}
        ok = result.get("loss_finite", True) and result.get("status", "succeeded") == "succeeded"
        if not ok:
            report["failed"].append(f"{name}: {result.get('error') or 'loss not finite'}")
        return result

    bf16 = smoke or env.get("bf16_supported", False)
    precisions = ["fp32", "bf16", "fp16"] if not smoke else ["fp32", "bf16"]
    batch, steps = (8, 4) if smoke else (32, 30)
    for precision in precisions:
        if precision == "bf16" and not bf16:
            report["throughput"].append({"precision": "bf16", "skipped": "this GPU does not support bf16"})
            continue
        result = attempt(f"throughput {precision}",
                         lambda p=precision: measure_throughput(model_path, device, p, batch, steps, peak), 20)
        if result:
            report["throughput"].append(result)

    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_path))
    import transformers

    probe = transformers.AutoModelForSequenceClassification.from_config(config)
    sample_flops = flops_per_sample(non_embedding_parameters(probe), config.num_hidden_layers, config.hidden_size,
                                    SEQ_LEN)
    del probe
    n_train = 64 if smoke else 1024
    data = (_write_jsonl(work / "train.jsonl", _records(n_train, 0)),
            _write_jsonl(work / "validation.jsonl", _records(64, 1)))
    run_kwargs = {"model_path": model_path, "data": data, "sample_flops": sample_flops, "peak": peak,
                  "batch_size": 4 if smoke else 32, "max_steps": 4 if smoke else 40}
    engine_precisions = ["fp32"] if smoke else [p for p in ("bf16", "fp16") if p != "bf16" or bf16]
    for precision in engine_precisions:
        result = attempt(f"engine {precision}", lambda p=precision: queue_run(
            work / f"home-{p}", precision=p, gpus=[] if smoke else [0], procs=1, timeout=min(150, left()),
            **run_kwargs), 45)
        if result:
            report["engine"].append(result)

    gpu_count = len(env["gpus"])
    if smoke or gpu_count >= 2:
        precision = "fp32" if smoke else ("bf16" if bf16 else "fp16")
        report["ddp"] = attempt("ddp 2 processes", lambda: queue_run(
            work / "home-ddp", precision=precision, gpus=[] if smoke else [0, 1], procs=2,
            timeout=min(180, left()), **run_kwargs), 60)
    else:
        report["ddp"] = {"skipped": f"{gpu_count} GPU visible; the 2-GPU run needs two"}
    report["onnx"] = attempt("onnx export", lambda: onnx_export(model_path, work, device, data[1]), 30)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["ok"] = not report["failed"]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return report


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU self-test with a tiny model (figures meaningless)")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    parser.add_argument("--model", help="a local model folder with weights instead of BERT-base from its config")
    parser.add_argument("--peak-tflops", type=float, help="peak bf16/fp16 TFLOPS of one GPU, for an MFU on a GPU "
                                                           "the built-in table does not know")
    parser.add_argument("--budget-seconds", type=float, default=270.0,
                        help="parts that would start after this are skipped (default 270: done within 5 minutes)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # the training processes the worker starts (python -m jobs.process.run_job) import the project from here
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        try:
            report = run_check(args.smoke, args.model, args.peak_tflops, args.budget_seconds, Path(tmp))
        except NoCuda as exc:
            print(f"gpu_check: {exc}", file=sys.stderr)
            report = {"ok": False, "mode": "gpu", "error": str(exc)}
            code = EXIT_NO_CUDA
        else:
            code = EXIT_OK if report["ok"] else EXIT_FAILED
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
