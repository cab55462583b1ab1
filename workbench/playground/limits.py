"""What one server process spends on playground predictions, at most: forward-pass slots, per-address rates and
per-client bounds.

``ForwardSlots`` runs ``concurrency`` predictions at once on threads of its own and lets ``queue``
more wait, each for at most ``max_wait_s``; anything beyond is refused at once with ``Busy`` (HTTP
503 with ``Retry-After``) instead of piling up. One instance per server serves every playground and every
edge (REST API and pages), so memory is bounded by the slots, whatever the callers do.

``RateLimit`` gives each client address a bucket of ``per_minute`` predictions that refills
continuously; an empty bucket refuses with ``RateLimited`` (HTTP 429 with ``Retry-After``).
``ClientBounds`` bounds what one client holds and spends, on every playground: requests in flight
(running or waiting for a slot) and model input tokens a minute, so one client cannot take every
slot, nor fill them one maximum-size request after another. The
address is the one uvicorn hands the app (behind a proxy, what ``--forwarded-allow-ips`` makes of
it); nothing here reads forwarding headers. All three take an injectable clock for tests.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import logging
import math
import threading
import time
from typing import Any, Callable, TypeVar

from workbench.errors import WorkbenchError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Refused(WorkbenchError):
    """A prediction refused for load, not for its content; ``retry_after`` says when to try again (seconds)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class Busy(Refused):
    """Every forward-pass slot is taken and the wait queue is full, or the wait ran out (HTTP 503)."""


class RateLimited(Refused):
    """This client address used up its predictions per minute (HTTP 429)."""


class ForwardSlots:
    """Runs predictions on ``concurrency`` threads of its own, with at most ``queue`` more waiting.

    The work runs on these threads, not the caller's, for memory too: the C allocator keeps a
    heap (arena) per thread that ran a large forward pass, so predictions spread over the
    server's thread pool grew the RSS with every thread that ever predicted: 1.9 GB peak
    against 1.1 GB on these threads, for the same 40 concurrent requests of 64 x 20,000
    characters (bench/playground_memory.py --max-length 128). A waiting prediction gives up
    after ``max_wait_s``.
    """

    def __init__(self, concurrency: int, queue: int, max_wait_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.concurrency, self.queue, self.max_wait_s, self.clock = concurrency, queue, max_wait_s, clock
        self._pool = concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="playground-forward")
        self._lock = threading.Lock()
        self._queued = 0  # handed to the pool, not started
        self._starts: dict[int, float] = {}  # when each running prediction started
        self._ids = itertools.count()
        self._mean_s = 1.0  # until a first prediction is timed

    @property
    def running(self) -> int:
        return len(self._starts)

    @property
    def waiting(self) -> int:
        return self._queued

    def retry_after(self) -> int:
        """Seconds until a slot is likely free for one more caller (see ``_estimate``)."""
        with self._lock:
            return self._estimate()

    def _estimate(self) -> int:
        """The queue ahead at the recent mean time per prediction, or at the age of the oldest running one
        when that is longer (a run of slow requests shows there before any of them is timed). Lock held."""
        oldest = max((self.clock() - start for start in self._starts.values()), default=0.0)
        return math.ceil(max(self._mean_s, oldest) * (self._queued + 1) / self.concurrency)

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a forward thread; ``Busy`` at once when the queue is full, or when the wait runs out."""
        with self._lock:
            if self._queued + len(self._starts) >= self.concurrency + self.queue:
                raise Busy(f"the playground server is busy: {self.running} predictions are running and "
                           f"{self._queued} waiting; try again shortly", self._estimate())
            self._queued += 1
        started = threading.Event()
        future = self._pool.submit(self._timed, started, fn, args)
        if not started.wait(self.max_wait_s) and future.cancel():
            with self._lock:
                self._queued -= 1
                raise Busy(f"the playground server is busy: no prediction slot came free within "
                           f"{self.max_wait_s:g} s; try again shortly", self._estimate())
        return future.result()

    def _timed(self, started: threading.Event, fn: Callable[..., T], args: tuple) -> T:
        with self._lock:
            self._queued -= 1
            job = next(self._ids)
            self._starts[job] = self.clock()
        started.set()
        try:
            return fn(*args)
        finally:
            with self._lock:
                took = self.clock() - self._starts.pop(job)
                self._mean_s = 0.8 * self._mean_s + 0.2 * took


class RateLimit:
    """Token buckets per client address: ``per_minute`` capacity, refilled at ``per_minute`` a minute."""

    def __init__(self, per_minute: int, max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.per_minute, self.max_keys, self.clock = per_minute, max_keys, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many addresses are tracked."""
        return len(self._buckets)

    def take(self, address: str) -> None:
        """Spend one prediction of ``address``; ``RateLimited`` when its bucket is empty. 0 per minute: no limit."""
        if self.per_minute <= 0:
            return
        now = self.clock()
        rate = self.per_minute / 60.0
        with self._lock:
            tokens, at = self._buckets.get(address, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - at) * rate)
            if tokens < 1.0:
                self._buckets[address] = (tokens, now)
                wait = math.ceil((1.0 - tokens) / rate)
                log.warning("playground rate limit: %s is over %d predictions a minute", address, self.per_minute)
                raise RateLimited(f"too many predictions from your address: the limit is {self.per_minute} a "
                                  f"minute; try again in {wait} s", wait)
            self._buckets[address] = (tokens - 1.0, now)
            if len(self._buckets) > self.max_keys:
                self._prune(now, rate)

    def _prune(self, now: float, rate: float) -> None:
        """Forget full buckets (they hold no debt), then the oldest, until within ``max_keys``."""
        for address, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * rate >= self.per_minute:
                del self._buckets[address]
        while len(self._buckets) > self.max_keys:
            del self._buckets[min(self._buckets, key=lambda a: self._buckets[a][1])]


class ClientBounds:
    """What one client may hold at once and spend a minute: ``max_in_flight`` requests and ``tokens_per_minute``.

    A client is named by one or more keys: its address, and on a token-protected playground also
    its token (a token is handed to one person, so it is a client too, whatever addresses it comes
    from). ``enter`` checks every key and counts the request against all of them in one step under
    one lock, so concurrent requests of a client cannot both pass; ``leave`` gives the request back
    and charges the model input tokens it used. The token budget is a bucket of
    ``tokens_per_minute`` that refills continuously and may go into debt: a request is admitted
    while the bucket is above zero and charged what it really used once answered (its size is known
    only after tokenization), so one maximum-size request can pass and then keeps its client out
    until the debt is refilled. Held together with the in-flight bound, a client overspends by at
    most one request. Either bound at 0 is off. Refusals are ``RateLimited`` (HTTP 429) with
    ``retry_after``.
    """

    def __init__(self, max_in_flight: int, tokens_per_minute: int, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.max_in_flight, self.tokens_per_minute = max_in_flight, tokens_per_minute
        self.max_keys, self.clock = max_keys, clock
        self._held: dict[tuple, list[float]] = {}  # key -> start times of its requests in flight
        self._budgets: dict[tuple, tuple[float, float]] = {}  # key -> (tokens left, at)
        self._lock = threading.Lock()
        self._mean_s = 1.0  # how long a request is held, recent mean (for Retry-After)

    def __len__(self) -> int:
        """How many keys are tracked (held or in debt)."""
        return len(set(self._held) | set(self._budgets))

    def in_flight(self, key: tuple) -> int:
        with self._lock:
            return len(self._held.get(key, ()))

    def tokens_left(self, key: tuple) -> float:
        """The key's budget now (negative: in debt)."""
        with self._lock:
            return self._level(key, self.clock())

    def _level(self, key: tuple, now: float) -> float:
        """The key's bucket refilled up to ``now``. Lock held."""
        left, at = self._budgets.get(key, (float(self.tokens_per_minute), now))
        return min(float(self.tokens_per_minute), left + (now - at) * self.tokens_per_minute / 60.0)

    def enter(self, keys: tuple[tuple, ...]) -> float:
        """Count one request against every key (``RateLimited`` when any key is at a bound); the start time,
        to hand back to ``leave``."""
        now = self.clock()
        with self._lock:
            for key in keys:
                held = self._held.get(key, [])
                if self.max_in_flight and len(held) >= self.max_in_flight:
                    wait = math.ceil(max(1.0, self._mean_s - (now - min(held))))
                    log.warning("playground client bound: %s has %d prediction(s) in flight", _name(key), len(held))
                    raise RateLimited(
                        f"your {_name(key)} already has {len(held)} prediction(s) running; the limit is "
                        f"{self.max_in_flight} at a time: wait for the answer, then try again (in about {wait} s)",
                        wait)
                left = self._level(key, now) if self.tokens_per_minute else 1.0
                if left <= 0:
                    wait = math.ceil(-left / (self.tokens_per_minute / 60.0)) or 1
                    log.warning("playground token budget: %s is %.0f tokens in debt", _name(key), -left)
                    raise RateLimited(
                        f"your {_name(key)} used its {self.tokens_per_minute:,} model tokens a minute "
                        f"(long inputs and batches cost more); try again in {wait} s", wait)
            for key in keys:
                self._held.setdefault(key, []).append(now)
            self._prune(now)
        return now

    def leave(self, keys: tuple[tuple, ...], started: float, tokens: int = 0) -> None:
        """Give back a request ``enter`` counted and charge the ``tokens`` it used to every key."""
        now = self.clock()
        with self._lock:
            for key in keys:
                held = self._held.get(key, [])
                if started in held:
                    held.remove(started)
                if not held:
                    self._held.pop(key, None)
                if self.tokens_per_minute and tokens:
                    self._budgets[key] = (self._level(key, now) - tokens, now)
            self._mean_s = 0.8 * self._mean_s + 0.2 * (now - started)

    def _prune(self, now: float) -> None:
        """Forget full buckets of keys with nothing in flight (they hold no debt) when over ``max_keys``."""
        if len(self._budgets) <= self.max_keys:
            return
        for key in [k for k in self._budgets if self._level(k, now) >= self.tokens_per_minute]:
            del self._budgets[key]
        while len(self._budgets) > self.max_keys:  # debts of the longest quiet keys go first
            del self._budgets[min(self._budgets, key=lambda k: self._budgets[k][1])]


def _name(key: tuple) -> str:
    """How a refusal names a client key: ``address 10.0.0.7`` or ``access token``."""
    return f"address {key[1]}" if key[0] == "address" else "access token"
