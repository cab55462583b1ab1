"""What `--wait` commands share: with no worker alive, run the awaited runs in this process."""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import typer


@contextlib.contextmanager
def worker_unless_one_is_alive(wb, run_ids: Iterable[int], what: str) -> Iterator[None]:
    """With no worker heard from lately, run ``run_ids`` (only those) on a worker thread of this process,
    saying so on stderr (``what``: "training run 5"), so that a command that waits still completes."""
    from workbench.services.workers import live_workers, start_embedded_worker

    recent = max(15.0, 3 * wb.settings.heartbeat_seconds)
    embedded = None
    if live_workers(wb.db, recent) == 0:
        typer.echo(f"no worker has been seen in the last {recent:.0f} s; {what} in this process", err=True)
        embedded = start_embedded_worker(wb, max_jobs=1, only_runs=list(run_ids))
    try:
        yield
    finally:
        if embedded is not None:
            embedded.stop()
