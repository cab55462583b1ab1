"""bench/gpu_check.py: a clear failure without CUDA, its figures, and the whole harness in --smoke mode on the CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_check

ROOT = Path(__file__).resolve().parent.parent


def test_without_cuda_it_fails_with_one_clear_line_and_measures_nothing():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == gpu_check.EXIT_NO_CUDA
    assert done.stderr.strip().splitlines()[-1].startswith("gpu_check: no CUDA device is visible")
    assert "--smoke" in done.stderr and "Traceback" not in done.stderr
    assert json.loads(done.stdout) == {"ok": False, "mode": "gpu", "error": done.stderr.strip()[len("gpu_check: "):]}


def test_peak_flops_and_model_flops_utilisation():
    assert gpu_check.peak_tflops("NVIDIA H100 PCIe") == 756.0 and gpu_check.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu_check.peak_tflops("NVIDIA L40S") == 362.0 and gpu_check.peak_tflops("NVIDIA L4") == 121.0
    assert gpu_check.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and gpu_check.peak_tflops("NVIDIA A10") == 125.0
    assert gpu_check.peak_tflops("Some Future GPU") is None and gpu_check.peak_tflops("Some Future GPU", 500) == 500.0
    from transformers import BertForSequenceClassification

    base = BertForSequenceClassification(gpu_check.bert_config(smoke=False))
    params = gpu_check.non_embedding_parameters(base)
    assert 85_000_000 < params < 86_500_000  # BERT-base: 12 x 7.1M per layer + pooler + head
    per_sample = gpu_check.flops_per_sample(params, 12, 768, 128)
    assert per_sample == pytest.approx(128 * (6 * params + 12 * 12 * 768 * 128))
    # 1000 samples/s of ~67 GFLOPs on one 989-TFLOPS GPU: ~6.8% MFU; two GPUs halve it
    assert gpu_check.mfu(1000, per_sample, 989.0) == pytest.approx(1000 * per_sample / 989e12, abs=1e-4)
    assert gpu_check.mfu(1000, per_sample, 989.0, devices=2) == pytest.approx(gpu_check.mfu(1000, per_sample, 989.0) / 2,
                                                                            abs=1e-4)
    assert gpu_check.mfu(1000, per_sample, None) is None


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_smoke_mode_runs_every_part_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # main() prepends the project root
    for key in [k for k in os.environ if k.startswith("WORKBENCH_") and not k.startswith("WORKBENCH_TEST_")]:
        monkeypatch.delenv(key)
    out = tmp_path / "report.json"
    # a budget far above the 5 minutes: the CI machine is slow and shared, and nothing may be skipped here
    assert gpu_check.main(["--smoke", "--out", str(out), "--budget-seconds", "1200"]) == gpu_check.EXIT_OK
    report = json.loads(out.read_text())
    assert report["ok"] and report["mode"] == "smoke" and not report["failed"] and not report["skipped"]
    assert [t["precision"] for t in report["throughput"]] == ["fp32", "bf16"]
    for part in report["throughput"]:
        assert part["seq_len"] == 128 and part["samples_per_second"] > 0 and part["loss_finite"]
        assert part["tokens_per_second"] == pytest.approx(part["samples_per_second"] * 128, rel=0.01)
    onnx = report["onnx"]  # part 4: the export job on the CPU (no fp16 there)
    assert onnx["status"] == "succeeded" and [v["name"] for v in onnx["variants"]] == ["onnx-fp32", "onnx-int8"]
    assert onnx["variants"][0]["agreement"] >= 0.999 and all(v["rows_per_s"] > 0 for v in onnx["variants"])
    [engine] = report["engine"]
    assert engine["status"] == "succeeded" and engine["device"] == "cpu" and engine["steps"] == 4
    assert report["ddp"]["status"] == "succeeded" and report["ddp"]["device"] == "cpu x2"
    assert report["ddp"]["samples_per_second"] > 0
