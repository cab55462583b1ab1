"""How fast a predictor (the torch model, or an ONNX variant in its place) answers, on validation rows.

Two numbers a user serving the model cares about: the latency of one row at a time (a playground or API
call: p50 and p95 of ``SINGLE_CALLS`` calls of one row) and the throughput of batches (a prediction job:
rows per second over ``BATCH_ROWS`` rows in batches of ``BATCH``). Each is measured after a warm-up call,
which pays the one-off costs (ONNX Runtime's first-run allocations, torch's kernel selection). Rows cycle
when the split has fewer, so a small split still gets every call. Both runtimes run with the same number of
intra-op threads (``torch.get_num_threads()``) so the comparison is between the runtimes, not the threads.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from jobs.progress import Cancelled, report_phase

log = logging.getLogger(__name__)

MEASURING_SPEED = "measuring speed"
SINGLE_CALLS, BATCH, BATCH_ROWS = 50, 32, 256
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".pkl", ".onnx")


@dataclasses.dataclass
class Speed:
    p50_ms: float
    p95_ms: float
    rows_per_s: float


def measure(predictor, rows: Sequence[dict], reporter, *, single_calls: Optional[int] = None,
            batch: Optional[int] = None, batch_rows: Optional[int] = None, phase: str = MEASURING_SPEED) -> Speed:
    """Latency of one-row calls and throughput of ``batch``-row calls of ``predictor`` on ``rows`` (None: this
    module's ``SINGLE_CALLS``, ``BATCH`` and ``BATCH_ROWS``), reported to ``reporter`` as ``phase``."""
    single_calls, batch, batch_rows = single_calls or SINGLE_CALLS, batch or BATCH, batch_rows or BATCH_ROWS
    if not rows:
        raise ValueError("no rows to time")
    report_phase(reporter, phase)
    predictor.predict([rows[0]])  # warm-up
    predictor.predict(_cycled(rows, 0, min(batch, batch_rows)))
    latencies = []
    for i in range(single_calls):
        if i % 10 == 0 and reporter.cancel_requested():
            raise Cancelled()
        row = rows[i % len(rows)]
        started = time.perf_counter()
        predictor.predict([row])
        latencies.append(time.perf_counter() - started)
    timed = 0.0
    for start in range(0, batch_rows, batch):
        if reporter.cancel_requested():
            raise Cancelled()
        chunk = _cycled(rows, start, min(batch, batch_rows - start))
        started = time.perf_counter()
        predictor.predict(chunk)
        timed += time.perf_counter() - started
    p50, p95 = np.percentile(np.asarray(latencies) * 1000.0, [50, 95])
    return Speed(p50_ms=round(float(p50), 3), p95_ms=round(float(p95), 3),
                 rows_per_s=round(batch_rows / max(timed, 1e-9), 1))


def _cycled(rows: Sequence[dict], start: int, count: int) -> list[dict]:
    """``count`` rows from position ``start``, going round ``rows`` as often as it takes."""
    return list(itertools.islice(itertools.cycle(rows), start % len(rows), start % len(rows) + count))


def weights_bytes(model_dir: str | Path) -> int:
    """The size of a model folder's weight files (what PyTorch loads), configs and tokenizer left out."""
    return sum(path.stat().st_size for path in Path(model_dir).rglob("*")
               if path.is_file() and path.suffix in WEIGHT_SUFFIXES)
