"""Workers as the edges start them: the worker loop of ``workbench worker``, the embedded worker that
``workbench serve`` and the waiting commands start, and whether any worker is alive
(``jobs.queue.worker`` and ``jobs.queue.table`` are the one definition)."""
from __future__ import annotations

from jobs.queue.table import live_workers
from jobs.queue.worker import Worker, start_embedded_worker

__all__ = ["Worker", "live_workers", "start_embedded_worker"]
