"""Refused client input is one rate-limited WARNING line, never a traceback (docs/access.md).

Gradio printed a traceback for each call no page sends: a forged ``FileData`` upload value, fewer input
values than the function takes, a call of a function that runs only in the browser. Anyone can send
those to a public playground, so ``workbench.ui.edge`` logs them in one line each, at most
``REFUSAL_LINES_PER_MINUTE`` of a kind a minute for each page.
"""
from __future__ import annotations

import json
import logging
import math
import time

import httpx
import pytest

from workbench.ui.edge import HANDLER, MALFORMED, REFUSAL_LINES_PER_MINUTE, RefusalLog

FLOOD = 30  # calls of each forged kind: past the limit, so some must go unlogged


def test_refusal_lines_are_limited_per_kind_and_counted_when_dropped(caplog):
    now = [1000.0]
    refusals = RefusalLog(per_minute=3, clock=lambda: now[0])
    log = logging.getLogger("tests.refusals")
    caplog.set_level(logging.WARNING, logger="tests.refusals")
    for i in range(7):
        refusals.warning(log, MALFORMED, "call %d refused", i)
    refusals.warning(log, HANDLER, "a mistake of a person")  # another kind keeps its own count
    now[0] += 59.9
    refusals.warning(log, MALFORMED, "call 7 refused")
    now[0] += 0.2  # a new minute: the count of the last one, then the line
    refusals.warning(log, MALFORMED, "call 8 refused")
    assert [r.getMessage() for r in caplog.records] == [
        "call 0 refused", "call 1 refused", "call 2 refused",
        f"more than 3 {MALFORMED} in a minute: the rest of this minute's are counted, not logged",
        "a mistake of a person",
        f"5 {MALFORMED} were not logged in the last minute (at most 3 a minute are)",
        "call 8 refused"]


def _dependency(config: dict, **match) -> dict:
    return next(d for d in config["dependencies"] if all(d.get(k) == v for k, v in match.items()))


def _flood(http: httpx.Client, base: str, fn_index: int, data: list, calls: int, session: str) -> list[str]:
    """``calls`` queue joins of ``fn_index`` with ``data``, five at a time (a playground queue holds 8); the
    error each one ended with."""
    errors: list[str] = []
    for start in range(0, calls, 5):
        for _ in range(min(5, calls - start)):
            joined = http.post(f"{base}/gradio_api/queue/join", json={
                "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None})
            assert joined.status_code == 200, joined.text[:300]
        with http.stream("GET", f"{base}/gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if '"process_completed"' in line:
                    errors.append(str(json.loads(line.removeprefix("data: "))["output"].get("error")))
                if '"close_stream"' in line:
                    break
    return errors


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_flood_of_forged_calls_leaves_no_traceback_and_a_bounded_log(tmp_path):
    from storage.context import open_workbench
    from storage.settings import Settings
    from tests import playground_support as ps
    from tests.browser.conftest import Server
    from workbench.playground import service

    home = tmp_path / "home"
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    model = ps.train_tiny("text-classification", tmp_path / "model" / "m")
    slug = service.publish(wb, ps.add_run(wb, "text-classification", model)).slug
    wb.close()
    server = Server(home, args=("--no-worker",))
    try:
        http = httpx.Client(timeout=120)
        play = f"{server.url}/play/{slug}"
        upload = _dependency(http.get(f"{server.url}/config").json(), api_name="on_upload")
        playground = http.get(f"{play}/config").json()
        predict = _dependency(playground, api_name="predict")
        browser_only = _dependency(playground, backend_fn=False)
        forged = {"path": 5, "meta": {"_type": "gradio.FileData"}}
        started = time.monotonic()
        answers = {
            "forged FileData": _flood(http, server.url, upload["id"], [forged, "masked-lm", "auto-detect", "", "", "",
                                                                       "", 128], FLOOD, "a"),
            "too few values (workbench)": _flood(http, server.url, upload["id"], [], FLOOD, "b"),
            "too few values (playground)": _flood(http, play, predict["id"], [], FLOOD, "c"),
            "browser-only function": _flood(http, play, browser_only["id"], [], FLOOD, "d"),
        }
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    for name, errors in answers.items():
        assert len(errors) == FLOOD, (name, errors[:3])
        assert all(error.startswith("this ") and "object at 0x" not in error for error in errors), (name, errors[0])
    assert answers["forged FileData"][0] == ("this call was refused: a FileData is malformed (value: Value error, The "
                                             "'meta' field must be explicitly provided in the input data and be equal "
                                             "to {'_type': 'gradio.FileData'}.)")
    assert answers["too few values (playground)"][0] == ("this call was refused: it sent 0 input values where the "
                                                         "function takes 1")
    assert answers["browser-only function"][0] == "this function runs in the browser; it has no server side to call"

    refused = [line for line in log.splitlines() if " WARNING " in line and " refused: " in line]
    assert any("upload refused: a FileData is malformed" in line for line in refused)
    assert any("predict refused: it sent 0 input values where the function takes 1" in line for line in refused)
    assert any("request refused: this function runs in the browser" in line for line in refused)
    # Two kinds on each page (the workbench, the playground): per minute and kind, the limit and one notice.
    minutes = math.ceil(elapsed / 60)
    assert len(refused) <= 4 * REFUSAL_LINES_PER_MINUTE * minutes, (elapsed, len(refused))
    assert log.count("in a minute: the rest of this minute's are counted, not logged") >= 4, log[-3000:]


def test_a_flood_of_refused_rest_calls_leaves_a_bounded_number_of_lines(caplog, monkeypatch):
    """One client hammering ``POST /api/v1/predict/<slug>`` past its rate gets a 429 each time; the server log
    gets at most REFUSAL_LINES_PER_MINUTE lines of that status, then one line saying the rest are counted."""
    from workbench.errors import NotFound
    from workbench.playground import api
    from workbench.playground.limits import RateLimited

    now = [5000.0]
    monkeypatch.setattr(api, "REFUSALS", RefusalLog(clock=lambda: now[0]))
    caplog.set_level(logging.WARNING, logger=api.log.name)
    statuses = [api.error_response(RateLimited("too many requests from 10.0.0.7", 3.0)).status_code
                for _ in range(200)]
    statuses.append(api.error_response(NotFound("playground 'x' does not exist")).status_code)
    lines = [r.getMessage() for r in caplog.records if r.name == api.log.name]
    assert statuses == [429] * 200 + [404]
    assert len(lines) == REFUSAL_LINES_PER_MINUTE + 2  # the limit, the "counted" notice, the 404 (its own kind)
    assert lines[-1].startswith("predict refused (404)")
    now[0] += 61
    api.error_response(RateLimited("too many requests from 10.0.0.7", 3.0))
    assert f"{200 - REFUSAL_LINES_PER_MINUTE} REST refusals 429 were not logged" in caplog.records[-2].getMessage()
