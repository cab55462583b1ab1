"""Small ASGI helpers for the middlewares that look at a request body before the app does."""
from __future__ import annotations

from typing import Any, Optional


async def read_body(receive: Any, limit: int) -> Optional[bytes]:
    """The whole request body, or None when it is longer than ``limit`` bytes (reading stops there)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that hands the app the body already read, then passes on (disconnects)."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
