"""Sign-in throttling: repeated wrong passwords lock sign-in for a while.

Gradio's login route answers every attempt at once, so a password can be guessed as fast as
the network allows. ``LoginThrottle`` counts failed sign-ins on three keys, within ``window_s``:

* per user name, whatever the address (``max_failures``): no change of address, real or forged,
  gives a guesser more tries at one account;
* per client address, whatever the user name (``max_failures_per_ip``): one address cannot
  spray passwords over many names, made up or real;
* over everybody (``max_failures_total``): the last bound when addresses are many (a botnet, or a
  proxy that is trusted with ``WORKBENCH_FORWARDED_ALLOW_IPS`` and passes on what clients claim).

A key that reaches its limit is locked for ``lock_s`` seconds, doubling with every further failure
up to ``max_lock_s``. While any key of an attempt is locked, sign-in answers 429 with ``Retry-After``
without looking at the password, so a locked-out guesser learns nothing. A success clears the
user's count (not the address's or the total). The clock is injectable for tests.

The price: whoever knows a user name can keep that user from signing in (one wrong password each
time the lock ends keeps it on, at most ``max_lock_s`` at a time), and enough failures from enough
addresses lock sign-in for everybody. Browsers that are signed in already keep working (their
session cookie is not touched), and the counts live in this process: a restart clears them.

``LoginThrottleMiddleware`` applies it to ``POST /login`` of the workbench app. The address is
the connection's peer; uvicorn replaces it by ``X-Forwarded-For`` only for the proxies named in
``WORKBENCH_FORWARDED_ALLOW_IPS`` (see ``workbench.server.uvicorn_options``).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from typing import Any, Callable, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse

from workbench.asgi import read_body, replay

log = logging.getLogger(__name__)
LOGIN_PATHS = ("/login", "/login/")
MAX_FORM_BYTES = 64 * 1024
MAX_NAME_CHARS = 200  # longer names share a key: more locking, never less
EVERYBODY = ("all",)


@dataclasses.dataclass
class _Record:
    failures: int = 0
    first_at: float = 0.0
    locked_until: float = 0.0
    locks: int = 0


class LoginThrottle:
    """Failure counts and lock-outs; thread-safe, bounded in memory (``max_keys``, stale and unlocked keys
    dropped first; the total is never dropped)."""

    def __init__(self, max_failures: int = 5, max_failures_per_ip: int = 20, max_failures_total: int = 100,
                 window_s: float = 900.0, lock_s: float = 30.0, max_lock_s: float = 900.0, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.max_failures, self.max_failures_per_ip = max_failures, max_failures_per_ip
        self.max_failures_total = max_failures_total
        self.window_s, self.lock_s, self.max_lock_s = window_s, lock_s, max_lock_s
        self.max_keys, self.clock = max_keys, clock
        self._records: dict[tuple, _Record] = {}
        self._lock = threading.Lock()

    def _limits(self, ip: str, user: str) -> list[tuple[tuple, int]]:
        name = user.strip().lower()[:MAX_NAME_CHARS]
        return [(("user", name), self.max_failures), (("ip", ip), self.max_failures_per_ip),
                (EVERYBODY, self.max_failures_total)]

    def retry_after(self, ip: str, user: str) -> float:
        """Seconds until ``user`` may try again from ``ip``; 0 when not locked."""
        now = self.clock()
        with self._lock:
            records = [self._records.get(key) for key, _ in self._limits(ip, user)]
        return max([0.0, *(r.locked_until - now for r in records if r)])

    def failed(self, ip: str, user: str) -> None:
        """Count a wrong password; lock every key that reached its limit."""
        now = self.clock()
        with self._lock:
            for key, limit in self._limits(ip, user):
                record = self._records.get(key)
                if record is None or (now - record.first_at > self.window_s and record.locked_until <= now):
                    record = self._records[key] = _Record(first_at=now)
                record.failures += 1
                if record.failures >= limit:
                    record.locked_until = now + min(self.max_lock_s, self.lock_s * 2 ** record.locks)
                    record.locks += 1
                    record.failures = limit - 1  # one more failure after the lock locks again, for longer
                    what = {"user": "user", "ip": "address"}.get(key[0], "every user")
                    log.warning("sign-in locked for %.0f s after %d failures (%s%s)", record.locked_until - now,
                                limit, what, "".join(f" {part!r}" for part in key[1:]))
            self._prune(now)

    def succeeded(self, ip: str, user: str) -> None:
        with self._lock:
            self._records.pop(self._limits(ip, user)[0][0], None)

    def _prune(self, now: float) -> None:
        if len(self._records) <= self.max_keys:
            return
        for key in [k for k, r in self._records.items()
                    if now - r.first_at > self.window_s and r.locked_until <= now and k != EVERYBODY]:
            del self._records[key]
        # Over the bound with live keys: unlocked ones go first, so flooding made-up names cannot free a locked one.
        by_age = sorted((k for k in self._records if k != EVERYBODY),
                        key=lambda k: (self._records[k].locked_until > now, self._records[k].first_at))
        for key in by_age[:max(0, len(self._records) - self.max_keys)]:
            del self._records[key]


class LoginThrottleMiddleware:
    """ASGI middleware: ``POST /login`` passes ``throttle`` first; the app's answer is counted. ``on_locked(address,
    user)`` is told of each failure that locks sign-in (for the activity log)."""

    def __init__(self, app: Any, throttle: LoginThrottle,
                 on_locked: Optional[Callable[[str, str], None]] = None):
        self.app, self.throttle, self.on_locked = app, throttle, on_locked

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
            if self.on_locked is not None and self.throttle.retry_after(ip, user) > 0:
                self.on_locked(ip, user)
