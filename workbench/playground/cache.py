"""Models loaded on first use and kept within a memory bound, least recently used evicted first.

The bound (``WORKBENCH_PLAYGROUND_MEMORY_MB``) counts the bytes of the loaded
weights. Before loading, the size is estimated from the weight files so the
cache makes room first instead of overshooting. Each key has its own lock, so
two requests for the same cold model load it once while other models keep
serving.
"""
from __future__ import annotations

import collections
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Generic, Hashable, Optional, Protocol, TypeVar

from workbench.errors import ModelUnavailable

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


class Sized(Protocol):
    nbytes: int


T = TypeVar("T", bound=Sized)


def folder_weight_bytes(folder: Path) -> int:
    """Bytes of the weight files in a model folder: the estimate used before loading it."""
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def pick_device(preference: str = "auto") -> str:
    """``cuda`` when a GPU is present (unless the preference says ``cpu``), else ``cpu``."""
    import torch

    if preference == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return preference if preference.startswith("cuda") else "cuda"


_SERVING_THREADS: Optional[int] = None  # chosen by configure_serving_threads, given to torch by apply_serving_threads
_THREADS_APPLIED = False
_THREADS_LOCK = threading.Lock()


def configure_serving_threads() -> int:
    """Give this (server) process few torch threads, unless OMP_NUM_THREADS says otherwise; returns the count.

    The workbench trains in worker subprocesses that use every core. A server
    whose torch also starts one thread per core then oversubscribes the CPU,
    and its OpenMP barriers stall: on 2 busy cores a MiniLM prediction took
    ~270 ms with 2 threads and ~17 ms with 1 (bench/serve_latency.py). A
    quarter of the cores (at least one) keeps requests fast; concurrent
    requests still spread over the cores through the server's thread pool.
    Process-wide, so call it only from server entry points, never from a library.

    Torch takes the count when the first model loads (``apply_serving_threads``): a server that serves no
    prediction never imports torch, which cost each start about 1.5 s of CPU and 250 MB.
    """
    global _SERVING_THREADS
    omp = os.environ.get("OMP_NUM_THREADS", "")
    threads = int(omp) if omp.isdigit() and int(omp) > 0 else max(1, (os.cpu_count() or 1) // 4)
    _SERVING_THREADS = threads
    log.info("playground serving uses %d torch thread(s) per request", threads)
    if "torch" in sys.modules:
        apply_serving_threads()
    return threads


def apply_serving_threads() -> None:
    """Give torch the count ``configure_serving_threads`` chose, once, before a model serves; nothing in a process
    that did not configure it (a job, a test)."""
    global _THREADS_APPLIED
    if _SERVING_THREADS is None or _THREADS_APPLIED:
        return
    with _THREADS_LOCK:
        if _THREADS_APPLIED:
            return
        import torch

        if not os.environ.get("OMP_NUM_THREADS"):  # else torch read it at import
            torch.set_num_threads(_SERVING_THREADS)
        _THREADS_APPLIED = True


class ModelCache(Generic[T]):
    def __init__(self, memory_mb: int):
        self.limit_bytes = int(memory_mb) * 1024 * 1024
        self._items: "collections.OrderedDict[Hashable, T]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self._load_locks: dict[Hashable, threading.Lock] = {}
        self.loads = 0
        self.evictions = 0

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return sum(item.nbytes for item in self._items.values())

    def keys(self) -> list[Hashable]:
        """Cached keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def get(self, key: Hashable, load: Callable[[], T], estimate_bytes: int = 0) -> T:
        """The cached item for ``key``, loading it with ``load()`` on a miss."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            key_lock = self._load_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._items:  # loaded by the thread we waited for
                    self._items.move_to_end(key)
                    return self._items[key]
            self._check_fits(key, estimate_bytes)
            self._make_room(estimate_bytes)
            item = load()
            self._check_fits(key, item.nbytes)
            with self._lock:
                self._items[key] = item
                self.loads += 1
            self._make_room(0)
            log.info("loaded %s (%.1f MB); cache holds %d model(s), %.1f MB", key, item.nbytes / 2**20,
                     len(self._items), self.used_bytes / 2**20)
            return item

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def _check_fits(self, key: Hashable, nbytes: int) -> None:
        if nbytes > self.limit_bytes:
            raise ModelUnavailable(
                f"model {key} needs {nbytes / 2**20:.0f} MB but the playground memory bound is "
                f"{self.limit_bytes / 2**20:.0f} MB; raise WORKBENCH_PLAYGROUND_MEMORY_MB")

    def _make_room(self, incoming: int) -> None:
        """Evict least recently used items until ``incoming`` more bytes fit; the newest item always stays."""
        with self._lock:
            while self._items and sum(i.nbytes for i in self._items.values()) + incoming > self.limit_bytes:
                if incoming == 0 and len(self._items) == 1:
                    break
                key, _ = self._items.popitem(last=False)
                self.evictions += 1
                log.info("evicted %s from the playground cache", key)
        _release_gpu_cache()


def _release_gpu_cache() -> None:
    """Hand memory of evicted models back to the GPU (on CPU there is nothing to do)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
