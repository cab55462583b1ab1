"""Sign-in owned by the web app: POST /login sets a session cookie, GET /logout ends it, sessions expire, the throttle
still locks (and says so in the activity log), and a forged Gradio call is refused by role on a real server.

The in-process tests use ``fastapi.testclient``; one test runs the app under uvicorn and speaks Gradio's own
queue protocol (``queue/join`` then ``queue/data``) as a hostile editor would.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import threading
import time
import uuid

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from storage.models import Base, Run, WebSession
from tests.access_support import team
from workbench.server import create_app
from workbench.services import accounts
from workbench.ui import access


@pytest.fixture
def signed(wb):
    """(workbench, team, a TestClient of the app): a database with accounts."""
    people = team(wb)
    with TestClient(create_app(wb, worker=False)) as client:
        yield wb, people, client


def sign_in(client, name: str, password: str):
    return client.post("/login", data={"username": name, "password": password})


def test_sign_in_cookie_config_sign_out(signed):
    wb, people, client = signed
    page = client.get("/")
    assert page.status_code == 200 and '"auth_required":true' in page.text  # Gradio's own login screen
    assert "window.gradio_api_info = null;" in page.text
    assert client.get("/config").status_code == 401
    answer = sign_in(client, "ed", people.PASSWORDS["ed"])
    assert answer.status_code == 200
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{access.SESSION_COOKIE}=") and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    config = client.get("/config")
    assert config.status_code == 200 and "BERT Workbench" in config.text
    assert client.get("/gradio_api/user").json() == "ed"
    assert '"auth_required"' not in client.get("/").text
    out = client.get("/logout", follow_redirects=False)
    assert out.status_code == 302 and out.headers["location"] == "/"
    assert client.get("/config").status_code == 401
    actions = [a["action"] for a in accounts.list_activity(wb, user="ed")]
    assert actions[:2] == ["sign_out", "sign_in"]


def test_over_https_the_cookie_is_secure(wb):
    people = team(wb)
    with TestClient(create_app(wb, worker=False), base_url="https://testserver") as client:
        cookie = sign_in(client, "vic", people.PASSWORDS["vic"]).headers["set-cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie


def test_wrong_password_is_400_and_recorded(signed):
    wb, _, client = signed
    assert sign_in(client, "ed", "not-his").status_code == 400
    assert sign_in(client, "", "").status_code == 400
    assert client.get("/config").status_code == 401
    assert accounts.list_activity(wb, action="sign_in_failed")[0]["user"] == "ed"


def test_a_session_expires_and_a_disabled_user_is_out(signed):
    wb, people, client = signed
    assert sign_in(client, "ed", people.PASSWORDS["ed"]).status_code == 200
    assert client.get("/config").status_code == 200
    with wb.db.session() as session:
        session.execute(update(WebSession).values(expires_at=dt.datetime(2000, 1, 1)))
    assert client.get("/config").status_code == 401
    assert '"auth_required":true' in client.get("/").text
    assert sign_in(client, "olga", people.PASSWORDS["olga"]).status_code == 200
    accounts.disable_user(wb, "olga", by=people.admin)
    assert client.get("/config").status_code == 401


def test_locked_sign_in_is_429_and_recorded(signed):
    wb, _, client = signed
    codes = [sign_in(client, "olga", f"guess-{i}").status_code for i in range(7)]
    assert codes == [400] * 5 + [429] * 2
    locked = accounts.list_activity(wb, action="sign_in_locked")
    assert len(locked) == 1 and locked[0]["target_id"] == "olga"


def test_playgrounds_and_health_need_no_sign_in(signed):
    _, _, client = signed
    assert client.get("/healthz").json() == {"ok": True}
    assert client.post("/api/v1/predict/no-such-playground", json={"inputs": "hi"}).status_code == 404
    assert client.get("/play/no-such-playground/").status_code == 404


def test_without_accounts_nothing_changes(wb):
    with TestClient(create_app(wb, worker=False)) as client:
        page = client.get("/")
        assert page.status_code == 200 and '"auth_required"' not in page.text
        assert client.get("/config").status_code == 200


def test_no_password_in_the_home_folder_or_the_log(wb, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    people = team(wb)
    with TestClient(create_app(wb, worker=False)) as client:
        for name, password in people.PASSWORDS.items():
            assert sign_in(client, name, password).status_code == 200
            assert sign_in(client, name, password + "-typo").status_code == 400
            client.get("/logout")
        assert client.get("/config", headers={"authorization": f"Bearer {people.write_token}"}).status_code == 401
    secrets = [*people.PASSWORDS.values(), people.read_token, people.write_token]
    wb.close()
    for path in wb.settings.home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(s.encode() in data for s in secrets), path
    logged = "\n".join(r.getMessage() for r in caplog.records) + "".join(capfd.readouterr())
    assert "sign-in failed" in logged
    assert not any(s in logged for s in secrets)


# ------------------------------------------------------------------ one real server, a forged Gradio call


@pytest.fixture
def served(wb):
    import uvicorn

    people = team(wb)
    app = create_app(wb, worker=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    blocks = next(r.app for r in app.routes if hasattr(getattr(r, "app", None), "get_blocks")).get_blocks()
    yield wb, people, f"http://127.0.0.1:{port}", blocks
    server.should_exit = True
    thread.join(timeout=10)


def _dump(wb) -> dict:
    with wb.db.session() as session:
        return {t.name: sorted(map(repr, session.execute(select(t)).all())) for t in Base.metadata.sorted_tables
                if t.name not in ("web_sessions", "activity")}  # signing in writes these; the call must not


def _join(http: httpx.Client, url: str, fn_index: int, data: list) -> dict:
    """Gradio's queue protocol by hand: join, then read the event stream to the end of the call."""
    session_hash = uuid.uuid4().hex[:10]
    joined = http.post(f"{url}/gradio_api/queue/join",
                       json={"data": data, "fn_index": fn_index, "session_hash": session_hash, "event_data": None,
                             "trigger_id": None})
    assert joined.status_code == 200, joined.text
    with http.stream("GET", f"{url}/gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    raise AssertionError("the stream ended without the call's end")


def test_a_forged_queue_join_deleting_another_users_run_is_refused(served, caplog):
    wb, people, url, blocks = served
    with wb.db.session() as session:
        run = Run(name="olga's", task="text-classification", model="m", spec={}, status="failed",
                  owner_id=people.other_editor.user_id)
        session.add(run)
        session.flush()
        run_id = run.id
    fn_index = next(i for i, f in blocks.fns.items() if f.fn and access.handler_key(f.fn) ==
                    "runs_tab:_wire_actions.on_delete")
    anonymous = httpx.Client(timeout=60)
    assert anonymous.post(f"{url}/gradio_api/queue/join", json={"data": [run_id], "fn_index": fn_index,
                                                                  "session_hash": "x"}).status_code == 401
    http = httpx.Client(timeout=60)
    assert http.post(f"{url}/login", data={"username": "ed", "password": people.PASSWORDS["ed"]}).status_code == 200
    before = _dump(wb)
    caplog.set_level(logging.WARNING)
    answer = _join(http, url, fn_index, [run_id])
    assert answer["success"] is False
    assert "belongs to someone else" in json.dumps(answer), answer
    assert _dump(wb) == before
    assert [r.getMessage() for r in caplog.records if "refused" in r.getMessage()] == [
        f"delete refused: ed is an editor and can change only their own work; run {run_id} belongs to someone else "
        "(an admin can change it)"]
    # The admin's same call goes through.
    admin = httpx.Client(timeout=60)
    assert admin.post(f"{url}/login", data={"username": "ada", "password": people.PASSWORDS["ada"]}).status_code == 200
    assert _join(admin, url, fn_index, [run_id])["success"] is True
    with wb.db.session() as session:
        assert session.get(Run, run_id) is None
    assert accounts.list_activity(wb, action="delete")[0]["user"] == "ada"
