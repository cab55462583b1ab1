"""`workbench worker`: claim runs from the queue and train them, until stopped."""
from __future__ import annotations

import signal
import threading
from typing import Optional

import typer

from workbench.cli import app
from workbench.errors import ConfigError


def parse_gpus(value: Optional[str]) -> Optional[list[int]]:
    """``"0,1"`` -> [0, 1]; ``"none"``/``"cpu"``/``""`` -> [] (CPU); None -> detect."""
    if value is None:
        return None
    if value.strip().lower() in ("", "none", "cpu"):
        return []
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--gpus {value!r}: give GPU indices separated by commas (0,1) or 'none'") from None


@app.command()
def worker(max_jobs: Optional[int] = typer.Option(None, "--max-jobs", help="Runs at once (default WORKBENCH_MAX_JOBS)."),
           gpus: Optional[str] = typer.Option(None, help="GPU indices to use, e.g. 0,1; 'none' for CPU only. "
                                                        "Default: every visible GPU, else CPU."),
           procs: Optional[int] = typer.Option(None, "--procs",
                                               help="Training processes per run on the CPU (DDP, gloo; default "
                                                    "WORKBENCH_CPU_PROCS). A run spec's `procs` overrides it."),
           short_jobs: Optional[int] = typer.Option(None, "--short-jobs",
                                                    help="Prediction, evaluation and export jobs run beside the "
                                                         "runs (default WORKBENCH_SHORT_JOBS); 0: none.")) -> None:
    """Run queued trainings, each in its own process; Ctrl-C or SIGTERM hands running runs back to the queue."""
    from workbench.services.workers import Worker
    from storage.context import open_workbench

    if procs is not None and procs < 1:
        raise ConfigError(f"--procs {procs}: give at least 1 training process per run")
    if short_jobs is not None and short_jobs < 0:
        raise ConfigError(f"--short-jobs {short_jobs}: give 0 or more")
    wb = open_workbench()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        Worker(wb, max_jobs=max_jobs, gpus=parse_gpus(gpus), procs=procs, short_jobs=short_jobs).run_forever(stop)
    except KeyboardInterrupt:
        pass
    finally:
        wb.close()
