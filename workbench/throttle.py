"""Sign-in throttling for ``WORKBENCH_AUTH``: repeated wrong passwords lock the caller out for a while.

Gradio's login route answers every attempt at once, so a password can be guessed as fast as
the network allows. ``LoginThrottle`` counts failed sign-ins per (client address, user name)
and per client address: after ``max_failures`` failures for one user (or ``max_failures_per_ip``
for one address, whatever the user names) within ``window_s``, that key is locked for
``lock_s`` seconds, doubling with every further failure up to ``max_lock_s``. While locked,
sign-in answers 429 with ``Retry-After`` without looking at the password, so a locked-out guesser
learns nothing. A success clears the user's count. The clock is injectable for tests.

``LoginThrottleMiddleware`` applies it to ``POST /login`` of the workbench app. Behind a reverse
proxy every caller has the proxy's address: the per-user key still holds, the per-address key
then counts everybody together (set ``--forwarded-allow-ips`` in uvicorn to see real addresses).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Any, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse

from workbench.asgi import read_body, replay

log = logging.getLogger(__name__)
LOGIN_PATHS = ("/login", "/login/")
MAX_FORM_BYTES = 64 * 1024


@dataclasses.dataclass
class _Record:
    failures: int = 0
    first_at: float = 0.0
    locked_until: float = 0.0
    locks: int = 0


class LoginThrottle:
    """Failure counts and lock-outs; thread-safe, bounded in memory (``max_keys``, oldest dropped)."""

    def __init__(self, max_failures: int = 5, max_failures_per_ip: int = 20, window_s: float = 900.0,
                 lock_s: float = 30.0, max_lock_s: float = 900.0, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.max_failures, self.max_failures_per_ip = max_failures, max_failures_per_ip
        self.window_s, self.lock_s, self.max_lock_s = window_s, lock_s, max_lock_s
        self.max_keys, self.clock = max_keys, clock
        self._records: dict[tuple, _Record] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(ip: str, user: str) -> tuple[tuple, tuple]:
        return ("user", ip, user.strip().lower()), ("ip", ip)

    def retry_after(self, ip: str, user: str) -> float:
        """Seconds until ``user`` may try again from ``ip``; 0 when not locked."""
        now = self.clock()
        with self._lock:
            waits = [r.locked_until - now for r in map(self._records.get, self._keys(ip, user)) if r]
        return max([0.0, *waits])

    def failed(self, ip: str, user: str) -> None:
        """Count a wrong password; lock a key that reached its limit."""
        now = self.clock()
        with self._lock:
            for key, limit in zip(self._keys(ip, user), (self.max_failures, self.max_failures_per_ip)):
                record = self._records.get(key)
                if record is None or (now - record.first_at > self.window_s and record.locked_until <= now):
                    record = self._records[key] = _Record(first_at=now)
                record.failures += 1
                if record.failures >= limit:
                    record.locked_until = now + min(self.max_lock_s, self.lock_s * 2 ** record.locks)
                    record.locks += 1
                    record.failures = limit - 1  # one more failure after the lock locks again, for longer
                    log.warning("sign-in locked for %.0f s after repeated failures (%s %s)",
                                record.locked_until - now, key[0], " ".join(key[1:]))
            self._prune(now)

    def succeeded(self, ip: str, user: str) -> None:
        with self._lock:
            self._records.pop(self._keys(ip, user)[0], None)

    def _prune(self, now: float) -> None:
        if len(self._records) <= self.max_keys:
            return
        stale = [k for k, r in self._records.items() if now - r.first_at > self.window_s and r.locked_until <= now]
        for key in stale:
            del self._records[key]
        while len(self._records) > self.max_keys:
            del self._records[min(self._records, key=lambda k: self._records[k].first_at)]


class LoginThrottleMiddleware:
    """ASGI middleware: ``POST /login`` passes ``throttle`` first; the app's answer is counted."""

    def __init__(self, app: Any, throttle: LoginThrottle):
        self.app, self.throttle = app, throttle

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in LOGIN_PATHS:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, MAX_FORM_BYTES)
        if body is None:
            await JSONResponse({"detail": "the sign-in form is too large"}, status_code=413)(scope, receive, send)
            return
        form = await Request(scope, replay(body, receive)).form()
        user = str(form.get("username") or "")
        await form.close()
        ip = (scope.get("client") or ("unknown", 0))[0]
        wait = self.throttle.retry_after(ip, user)
        if wait > 0:
            seconds = math.ceil(wait)
            log.warning("sign-in refused: locked for %d s more (%s)", seconds, ip)
            await JSONResponse({"detail": f"Too many failed sign-ins. Try again in {seconds} s."},
                               status_code=429, headers={"Retry-After": str(seconds)})(scope, receive, send)
            return
        status: dict[str, int] = {}

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        await self.app(scope, replay(body, receive), counted)
        if status.get("code") == 200:
            self.throttle.succeeded(ip, user)
        elif status.get("code") in (400, 401, 403):
            self.throttle.failed(ip, user)
