"""How often an open page asks the server again: every ``POLL_SECONDS`` while something is moving, less and less
often while nothing changes (an idle tab cost the server and the browser a refresh every 2 seconds for nothing)."""
from __future__ import annotations

import hashlib
import json
from typing import Any

import gradio as gr

POLL_SECONDS = 2.0  # while a run is queued or running, or the last tick changed something
MAX_POLL_SECONDS = 30.0  # an idle page still notices a run started elsewhere (the CLI, another tab) within this


def page_key(elem_id: str) -> gr.Textbox:
    """Where a polled panel keeps the fingerprint of what it shows (``content_key``): in the page, not in a
    ``gr.State``. A State is kept on the server and written when a handler returns, while the page applies answers
    in the order they arrive. A timer tick (``queue=False``: sent straight, not through the queue) computed for the
    run selected before a click, and answered after the click's queued event, would leave the page showing the old
    run under the new run's key on the server, and every later tick would find it unchanged. In the page, a key
    always arrives with what it describes."""
    return gr.Textbox("", visible="hidden", interactive=False, container=False, elem_id=elem_id)


def picker_update(choices: list[tuple[str, Any]], current: Any, otherwise: Any = None) -> dict:
    """A picker's fresh ``choices``, sent by an answer that may land late (a tab's refresh, a tick). While
    ``current``, the pick the request was sent with, is still a choice the value is not sent: the user may have
    picked another since, and sending ``current`` back would undo theirs (the browser suite saw a run queued on
    the dataset a slow refresh had put back). Otherwise the value becomes ``otherwise``."""
    if current is not None and current in {value for _, value in choices}:
        return gr.update(choices=choices)
    return gr.update(choices=choices, value=otherwise)


def next_interval(current: Any, changed: bool, active: bool, low: float = POLL_SECONDS) -> float:
    """The timer's next interval: ``low`` when something changed or is queued or running, else twice the
    current one, up to ``MAX_POLL_SECONDS``."""
    if changed or active:
        return low
    try:
        current = float(current)
    except (TypeError, ValueError):
        current = low
    return min(max(current, low) * 2, MAX_POLL_SECONDS)


def timer_update(current: Any, changed: bool, active: bool, low: float = POLL_SECONDS) -> Any:
    """A ``gr.Timer`` update to the next interval, or ``gr.skip()`` when it stays (setting it restarts the count)."""
    interval = next_interval(current, changed, active, low)
    try:
        same = float(current) == interval
    except (TypeError, ValueError):
        same = False
    return gr.skip() if same else gr.Timer(value=interval)


def content_key(*values: Any) -> str:
    """A short fingerprint of what a tick would send, to send it only when it changed."""
    text = json.dumps(values, default=_plain, sort_keys=True)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _plain(value: Any) -> Any:
    # a DataFrame's str() elides rows ("..."): its JSON holds every cell
    return value.to_json(orient="split") if hasattr(value, "to_json") else str(value)
