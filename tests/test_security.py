"""What a logged-in user, a playground visitor and an anonymous client can reach, tried as an attacker would.

The real ``create_app`` with ``WORKBENCH_AUTH`` set runs under uvicorn on a loopback port,
with one published playground (a tiny trained classifier). Each test names the hole it closes.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

import httpx
import pytest

from tests import playground_support as ps
from workbench.errors import ConfigError, Forbidden
from workbench.throttle import LoginThrottle
from workbench.ui.uploads import received_file, upload_folder

pytestmark = pytest.mark.e2e
USER, PASSWORD = "alice", "correct horse"
PASSWD_FILE = "/etc/passwd"


class Served(ps.ServerThread):
    """The workbench app under uvicorn as `workbench serve` starts it (``uvicorn_options``), on a free port."""

    def __init__(self, app, settings):
        import uvicorn

        from workbench.server import uvicorn_options

        super().__init__(app)
        options = {**uvicorn_options(settings), "host": "127.0.0.1", "port": self.port}
        self.server = uvicorn.Server(uvicorn.Config(app, **options))
        self.thread = threading.Thread(target=self.server.run, daemon=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(server, workbench, playground slug, run id) with WORKBENCH_AUTH on (a users file)."""
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.playground import service
    from workbench.server import create_app

    home = tmp_path_factory.mktemp("home")
    users = tmp_path_factory.mktemp("etc") / "users"
    users.write_text(f"{USER}:{PASSWORD}\n", encoding="utf-8")
    wb = open_workbench(Settings.from_env({"WORKBENCH_AUTH": str(users)}, home=str(home)))
    model = ps.train_tiny("text-classification", tmp_path_factory.mktemp("model") / "m")
    run_id = ps.add_run(wb, "text-classification", model)
    slug = service.publish(wb, run_id).slug
    with Served(create_app(wb, worker=False), wb.settings) as server:
        yield server, wb, slug, run_id
    wb.close()


@pytest.fixture(scope="module")
def client(site):
    from gradio_client import Client

    return Client(site[0].url + "/", auth=(USER, PASSWORD), verbose=False)


def anonymous() -> httpx.Client:
    return httpx.Client(timeout=120)


def logged_in(url: str) -> httpx.Client:
    http = httpx.Client(timeout=120)
    assert http.post(f"{url}/login", data={"username": USER, "password": PASSWORD}).status_code == 200
    return http


def raw_call(http: httpx.Client, url: str, api: str, data: list, expect: str = "complete") -> object:
    """Call a UI endpoint over Gradio's HTTP API, as a hostile client can (gradio_client would upload a local
    file named in a FileData first); returns what the server sent for the ``expect`` event."""
    event = http.post(f"{url}/gradio_api/call/{api}", json={"data": data}).json()["event_id"]
    stream = http.get(f"{url}/gradio_api/call/{api}/{event}").text
    lines = stream.splitlines()
    assert f"event: {expect}" in lines, stream[:500]
    return json.loads(lines[lines.index(f"event: {expect}") + 1].removeprefix("data: "))


def assert_refused(answer: object) -> None:
    """Gradio's own check (switched on by the server) or workbench.ui.uploads refused the path, and said so."""
    text = json.dumps(answer)
    assert "root:x:0:0" not in text and "SQLite format" not in text
    assert "was not uploaded through this page" in text, text


def server_file(path: str) -> dict:
    """A FileData naming a server path, as a hostile client can send it."""
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


# ------------------------------------------------------------------ 1. uploads are only uploaded files

def test_received_file_accepts_only_files_inside_the_upload_folder(tmp_path):
    folder = tmp_path / "uploads"
    (folder / "abc").mkdir(parents=True)
    good = folder / "abc" / "data.csv"
    good.write_text("text,label\nhi,a\n")
    secret = tmp_path / "workbench.db"
    secret.write_text("secret")
    (folder / "abc" / "link.csv").symlink_to(secret)
    assert received_file(str(good), folder=folder) == good
    assert received_file({"path": str(good)}, folder=folder) == good
    assert received_file(None, folder=folder) is None and received_file("", folder=folder) is None
    for hostile in (str(secret), str(folder / "abc" / ".." / ".." / "workbench.db"), str(folder / "abc" / "link.csv"),
                    str(folder), str(folder / "abc"), str(folder / "missing.csv"), "/etc/passwd"):
        with pytest.raises(Forbidden, match="was not uploaded through this page"):
            received_file(hostile, "training file", folder=folder)


def test_upload_handlers_refuse_server_paths(site):
    server, wb, _, _ = site
    http = logged_in(server.url)
    secrets = [PASSWD_FILE, str(wb.settings.home / "workbench.db"), str(wb.settings.home / "uploads" / ".." / "workbench.db")]
    for path in secrets:
        for api in ("on_upload", "on_recheck", "on_validation"):
            refused = raw_call(http, server.url, api, [server_file(path), "masked-lm", "auto-detect", "", "", "", "",
                                                       128], expect="error")
            assert_refused(refused)
        refused = raw_call(http, server.url, "on_import", [server_file(path), "masked-lm", "auto-detect", "", "", "",
                                                           "", "stolen", None, 0.1, 13], expect="error")
        assert_refused(refused)
    from workbench.services import datasets as data_service

    assert data_service.list_datasets(wb) == []


def test_validation_file_must_be_uploaded_too(site, tmp_path):
    from workbench.services import datasets as data_service

    server = site[0]
    http = logged_in(server.url)
    train = tmp_path / "train.txt"
    train.write_text("".join(f"line {i} of a plain text corpus.\n" for i in range(40)))
    uploaded = http.post(f"{server.url}/gradio_api/upload", files={"files": ("train.txt", train.read_bytes())}).json()[0]
    refused = raw_call(http, server.url, "on_import", [server_file(uploaded), "masked-lm", "auto-detect", "", "", "",
                                                       "", "stolen", server_file(PASSWD_FILE), 0.1, 13], expect="error")
    assert_refused(refused)
    assert data_service.list_datasets(site[1]) == []


def test_a_real_upload_is_still_checked_and_imported(site, client, tmp_path):
    from gradio_client import handle_file

    from workbench.services import datasets as data_service

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} about the weather.\n" for i in range(40)))
    view = client.predict(handle_file(str(corpus)), "masked-lm", "auto-detect", "", "", "", "", 128,
                          api_name="/on_upload")
    assert view[0].startswith("✔") and "corpus.txt" in view[0]
    message, _, selected = client.predict(handle_file(str(corpus)), "masked-lm", "auto-detect", "", "", "", "",
                                          "weather", None, 0.1, 13, api_name="/on_import")
    assert "Imported as **weather**" in message
    stored = data_service.list_datasets(site[1])
    assert [d.name for d in stored] == ["weather"] and selected == stored[0].id  # the new dataset is selected
    data_service.delete_dataset(site[1], stored[0].id)


@pytest.fixture
def hard_link():
    """A hard link in Gradio's upload folder to a file outside it, as someone with write access there can make;
    yields its path. The linked file sits beside the upload folder, on the same file system (a link needs that)."""
    root = upload_folder()
    root.mkdir(parents=True, exist_ok=True)
    outside = Path(tempfile.mkdtemp(dir=root.parent, prefix="outside-"))
    inside = Path(tempfile.mkdtemp(dir=root, prefix="linked-"))
    secret = outside / "private.csv"
    secret.write_text("text,label\nconfidential row,a\n" * 20)
    link = inside / "private.csv"
    os.link(secret, link)
    yield link
    shutil.rmtree(inside)
    shutil.rmtree(outside)


def test_received_file_refuses_a_hard_link(tmp_path):
    folder = tmp_path / "uploads"
    (folder / "abc").mkdir(parents=True)
    secret = tmp_path / "workbench.db"
    secret.write_text("secret")
    os.link(secret, folder / "abc" / "data.csv")
    with pytest.raises(Forbidden, match="is a hard link") as refused:
        received_file(str(folder / "abc" / "data.csv"), "training file", folder=folder)
    assert str(tmp_path / "workbench.db") not in str(refused.value)
    # Once the other name is gone the file is an ordinary upload again.
    secret.unlink()
    assert received_file(str(folder / "abc" / "data.csv"), folder=folder) == folder / "abc" / "data.csv"


# Every handler that takes a file from the browser: (endpoint, its input with the file at FILE, what it calls the
# file, how it answers: a page error, or a "✘" line in its status box).
FILE = object()
UPLOAD_HANDLERS = {
    "check": ("on_upload", [FILE, "text-classification", "auto-detect", "", "", "", "", 128], "file", "error"),
    "recheck": ("on_recheck", [FILE, "text-classification", "auto-detect", "", "", "", "", 128], "file", "error"),
    "validation check": ("on_validation", [FILE, "text-classification", "auto-detect", "", "", "", "", 128],
                         "validation file", "error"),
    "import": ("on_import", [FILE, "text-classification", "auto-detect", "", "", "", "", "stolen", None, 0.1, 13],
               "training file", "error"),
    "import's validation file": ("on_import", ["UPLOAD", "text-classification", "auto-detect", "", "", "", "",
                                               "stolen", FILE, 0.1, 13], "validation file", "error"),
    "predict": ("on_predict", ["RUN", FILE, None, "auto-detect", "", "", "csv", "pytorch"], "file to label",
                "complete"),
    "evaluate": ("on_evaluate", ["RUN", None, FILE, "", ""], "labelled file", "complete"),
}


@pytest.mark.parametrize("handler", list(UPLOAD_HANDLERS))
def test_upload_handlers_refuse_a_hard_link(site, hard_link, handler):
    from workbench.services import datasets as data_service
    from workbench.services import runs as runs_service

    server, wb, _, run_id = site
    api, template, what, expect = UPLOAD_HANDLERS[handler]
    http = logged_in(server.url)
    train = "".join(f"message {i} is fine,{'ab'[i % 2]}\n" for i in range(40))
    uploaded = http.post(f"{server.url}/gradio_api/upload",
                         files={"files": ("train.csv", ("text,label\n" + train).encode())}).json()[0]
    sent = {"UPLOAD": server_file(uploaded), "RUN": run_id}
    data = [server_file(str(hard_link)) if item is FILE else sent.get(item, item) for item in template]
    jobs_before = len(runs_service.list_runs(wb))
    answer = raw_call(http, server.url, api, data, expect=expect)
    message = answer["error"] if expect == "error" else answer[0]
    refusal = (f"the {what} {str(hard_link)!r} is a hard link (it has another name on the server), so it is not a "
               "file this page received; choose the file again with the upload box")
    assert message == (refusal if expect == "error" else f"✘ {refusal}")
    assert "confidential" not in json.dumps(answer) and "outside-" not in message
    assert data_service.list_datasets(wb) == [] and len(runs_service.list_runs(wb)) == jobs_before


# ------------------------------------------------------------------ 2. + 3. playgrounds serve only themselves

def test_playground_routes_serve_no_workbench_file(site, client, tmp_path):
    server, wb, slug, run_id = site
    csv = tmp_path / "private.csv"
    csv.write_text("text,label\nconfidential row,a\n")
    uploaded = logged_in(server.url).post(f"{server.url}/gradio_api/upload",
                                          files={"files": ("private.csv", csv.read_bytes())}).json()[0]
    (zip_update,) = raw_call(logged_in(server.url), server.url, "on_download", [run_id, None])
    model_zip = zip_update["path"]  # the button's new value: the zip as a file
    assert Path(model_zip).name.endswith("-model.zip") and Path(model_zip).is_file()
    http = anonymous()
    for path in (uploaded, model_zip, str(wb.settings.runs_dir / str(run_id) / "validation.jsonl"), "/etc/passwd"):
        assert http.get(f"{server.url}/gradio_api/file={path}").status_code in (401, 403)  # the login holds
        for route in (f"gradio_api/file={path}", f"file={path}", f"gradio_api/file/{path.lstrip('/')}"):
            answer = http.get(f"{server.url}/play/{slug}/{route}")
            assert answer.status_code == 404, (route, answer.status_code)
            assert b"confidential" not in answer.content and b"PK" not in answer.content[:2]
    # Other Gradio routes a playground has no use for are closed too.
    for route in ("monitoring", "gradio_api/proxy=http://127.0.0.1/", "login", "gradio_api/run-history/records"):
        assert http.get(f"{server.url}/play/{slug}/{route}").status_code == 404, route
    # The page, its config and its queue still work.
    assert http.get(f"{server.url}/play/{slug}/").status_code == 200
    assert http.get(f"{server.url}/play/{slug}/config").json()["root"].rstrip("/").endswith(f"/play/{slug}")


def test_playground_refuses_uploads(site):
    server, _, slug, _ = site
    before = sum(1 for _ in upload_folder().rglob("*")) if upload_folder().exists() else 0
    http = anonymous()
    big = os.urandom(2 * 10**6)
    for route in ("gradio_api/upload", "gradio_api/upload?upload_id=x", "upload"):
        answer = http.post(f"{server.url}/play/{slug}/{route}", files={"files": ("big.bin", big)})
        assert answer.status_code == 403 and answer.json()["error"] == "playgrounds take no file uploads"
    after = sum(1 for _ in upload_folder().rglob("*")) if upload_folder().exists() else 0
    assert after == before


# ------------------------------------------------------------------ 5. hostile bodies get 4xx, the server keeps serving

def test_hostile_rest_bodies_are_4xx_json(site):
    server, _, slug, _ = site
    url = f"{server.url}/api/v1/predict/{slug}"
    http = anonymous()
    deep = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    cases = [
        (deep, 422, "nested too deeply"),
        (b'{"inputs": "\\ud800"}', 422, "lone surrogate"),
        (b'{"inputs": {"text": "ok \\udfff"}}', 422, "lone surrogate"),
        (b"x" * (16 * 10**6 + 1), 413, "limit is 16,000,000"),
    ]
    for body, status, needle in cases:
        answer = http.post(url, content=body, headers={"content-type": "application/json"})
        assert answer.status_code == status, (needle, answer.status_code, answer.text[:200])
        assert needle in answer.json()["error"]
    get = http.get(url)
    assert get.status_code == 405 and get.headers["allow"] == "POST" and "POST" in get.json()["error"]
    assert http.post(url, json={"inputs": "a great film"}).status_code == 200


def test_hostile_queue_calls_are_4xx_json(site):
    server, _, slug, _ = site
    join = f"{server.url}/play/{slug}/gradio_api/queue/join"
    http = anonymous()
    body = {"data": ["a great film"], "session_hash": "attacker", "event_data": None, "trigger_id": None}
    for payload, status, needle in [
        (json.dumps({**body, "fn_index": 999}).encode(), 422, "fn_index 999 is not a function"),
        (json.dumps({**body, "fn_index": "0"}).encode(), 422, "is not a function"),
        (json.dumps({**body, "fn_index": 0, "data": "x"}).encode(), 422, '{"data": [...]}'),
        (b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
        (b"\xff\xfe not json", 400, "not valid JSON"),
        (b"y" * (4 * 10**6 + 1), 413, "larger than 4,000,000 bytes"),
    ]:
        answer = http.post(join, content=payload, headers={"content-type": "application/json"})
        assert answer.status_code == status, (needle, answer.status_code, answer.text[:200])
        assert needle in answer.json()["error"]
    from gradio_client import Client

    visitor = Client(f"{server.url}/play/{slug}/", verbose=False)
    assert visitor.predict("a great film", api_name="/predict")[0]["label"] in ("pos", "neg")
    # gradio_client cannot even encode a lone surrogate; a raw call can, and gets the task's 4xx-style message.
    event = http.post(f"{server.url}/play/{slug}/gradio_api/call/predict", content=b'{"data": ["bad \\ud800 text"]}',
                      headers={"content-type": "application/json"}).json()["event_id"]
    stream = http.get(f"{server.url}/play/{slug}/gradio_api/call/predict/{event}").text
    assert "event: error" in stream and "lone surrogate" in stream, stream[:300]


# ------------------------------------------------------------------ 7. sign-in throttling

def test_throttle_locks_after_repeated_failures_and_backs_off():
    now = [1000.0]
    throttle = LoginThrottle(max_failures=5, max_failures_per_ip=20, lock_s=30, max_lock_s=900,
                             clock=lambda: now[0])
    for _ in range(4):
        throttle.failed("1.2.3.4", "alice")
    assert throttle.retry_after("1.2.3.4", "alice") == 0
    throttle.failed("1.2.3.4", "Alice ")  # the same user, however it is typed
    assert throttle.retry_after("1.2.3.4", "alice") == 30
    assert throttle.retry_after("1.2.3.4", "bob") == 0  # another user from the same address
    assert throttle.retry_after("5.6.7.8", "alice") == 30  # the same user from anywhere else: the lock is the user's
    now[0] += 31
    assert throttle.retry_after("1.2.3.4", "alice") == 0
    throttle.failed("1.2.3.4", "alice")  # one more failure after the lock locks again, twice as long
    assert throttle.retry_after("1.2.3.4", "alice") == 60
    now[0] += 61
    throttle.succeeded("1.2.3.4", "alice")
    for _ in range(4):
        throttle.failed("1.2.3.4", "alice")
    assert throttle.retry_after("1.2.3.4", "alice") == 0  # a success started the count afresh


def test_throttle_locks_an_address_that_tries_many_users():
    throttle = LoginThrottle(max_failures=5, max_failures_per_ip=20, clock=lambda: 0.0)
    for i in range(20):
        throttle.failed("9.9.9.9", f"user{i}")
    assert throttle.retry_after("9.9.9.9", "somebody-new") > 0
    assert throttle.retry_after("8.8.8.8", "somebody-new") == 0


def test_throttle_memory_is_bounded():
    throttle = LoginThrottle(max_keys=100, clock=lambda: 0.0)
    for i in range(500):
        throttle.failed(f"10.0.{i // 250}.{i % 250}", "x")
    assert len(throttle._records) <= 100


def test_no_change_of_address_gives_a_user_more_guesses():
    throttle = LoginThrottle(max_failures=5, max_failures_per_ip=20, max_failures_total=100, clock=lambda: 0.0)
    for i in range(5):
        assert throttle.retry_after(f"10.1.0.{i}", "alice") == 0
        throttle.failed(f"10.1.0.{i}", "alice")
    assert throttle.retry_after("10.1.0.99", "alice") == 30 and throttle.retry_after("10.1.0.99", "ALICE ") == 30
    assert throttle.retry_after("10.1.0.99", "bob") == 0


def test_made_up_users_from_many_addresses_meet_the_total_limit():
    """A botnet (or a trusted proxy passing on what clients claim) spreads guesses over names and addresses."""
    throttle = LoginThrottle(max_failures=5, max_failures_per_ip=20, max_failures_total=100, clock=lambda: 0.0)
    for i in range(99):
        throttle.failed(f"10.2.{i // 200}.{i % 200}", f"made-up-{i}")
    assert throttle.retry_after("10.9.9.9", "alice") == 0
    throttle.failed("10.2.9.9", "made-up-99")
    assert throttle.retry_after("10.9.9.9", "alice") == 30  # everybody waits: the price of the bound


def test_flooding_made_up_names_does_not_free_a_locked_user():
    throttle = LoginThrottle(max_failures=5, max_failures_per_ip=10**6, max_failures_total=10**6, max_keys=50,
                             clock=lambda: 0.0)
    for _ in range(5):
        throttle.failed("10.3.0.1", "alice")
    for i in range(500):
        throttle.failed("10.3.0.2", f"made-up-{i}")
    assert len(throttle._records) <= 50 and throttle.retry_after("10.3.0.3", "alice") == 30


def test_wrong_passwords_are_locked_out_at_the_login_route(site):
    server, _, _, _ = site
    http = anonymous()
    answers = [http.post(f"{server.url}/login", data={"username": "mallory", "password": f"guess{i}"})
               for i in range(30)]
    codes = [a.status_code for a in answers]
    assert codes[:5] == [400] * 5 and set(codes[5:]) == {429}, codes
    assert 0 < int(answers[5].headers["retry-after"]) <= 30
    assert "Too many failed sign-ins" in answers[5].json()["detail"]
    # Locked out: even the right password is not looked at, so a guesser cannot find it.
    assert http.post(f"{server.url}/login", data={"username": "mallory", "password": "x"}).status_code == 429
    # Another user from the same address still signs in.
    assert http.post(f"{server.url}/login", data={"username": USER, "password": PASSWORD}).status_code == 200


@pytest.fixture
def login_server(tmp_path):
    """``serve(forwarded_allow_ips)``: a fresh workbench server with WORKBENCH_AUTH (its own throttle) as
    `workbench serve` starts it; the tests below lock out 127.0.0.1, so they cannot share the module's site."""
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.server import create_app

    opened = []

    def serve(forwarded_allow_ips: str = "") -> str:
        wb = open_workbench(Settings.from_env({"WORKBENCH_AUTH": f"{USER}:{PASSWORD}",
                                               "WORKBENCH_FORWARDED_ALLOW_IPS": forwarded_allow_ips},
                                              home=str(tmp_path / f"home{len(opened)}")))
        server = Served(create_app(wb, worker=False), wb.settings).__enter__()
        opened.append((server, wb))
        return server.url

    yield serve
    for server, wb in opened:
        server.__exit__(None, None, None)
        wb.close()


def sign_in(http: httpx.Client, url: str, user: str, address: str, password: str = "wrong") -> int:
    return http.post(f"{url}/login", data={"username": user, "password": password},
                     headers={"X-Forwarded-For": address}).status_code


def test_a_forged_forwarded_for_changes_nothing_by_default(login_server):
    url = login_server()
    http = anonymous()
    codes = [sign_in(http, url, "mallory", f"203.0.113.{i}") for i in range(8)]
    assert codes == [400] * 5 + [429] * 3, codes
    # 25 made-up users, each from a "different" address: the per-address limit (20) still counts them together.
    codes = [sign_in(http, url, f"made-up-{i}", f"198.51.100.{i}") for i in range(25)]
    assert codes == [400] * 15 + [429] * 10, codes  # 5 failures were mallory's, from the same real address


def test_forwarded_for_from_a_trusted_proxy_keeps_the_per_user_lock(login_server):
    url = login_server("127.0.0.1")  # the test plays the proxy: uvicorn believes the addresses it names
    http = anonymous()
    codes = [sign_in(http, url, "mallory", f"203.0.113.{i}") for i in range(8)]
    assert codes == [400] * 5 + [429] * 3, codes
    # A made-up user from each believed address is counted nowhere but in the total: locked at 100 failures.
    codes = [sign_in(http, url, f"made-up-{i}", f"198.51.100.{i}") for i in range(100)]
    assert codes == [400] * 95 + [429] * 5, codes
    # Another real address, a real user, the right password: locked too while the total lock lasts.
    assert sign_in(http, url, USER, "192.0.2.7", PASSWORD) == 429


def test_workbench_serve_starts_uvicorn_with_those_options(cli, monkeypatch):
    import uvicorn

    import workbench.server

    started = []
    monkeypatch.setattr(workbench.server, "create_app", lambda wb, worker=True: "app")
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: started.append(options))
    assert cli("serve", "--no-worker")[0] == 0
    assert cli("serve", "--no-worker", "--forwarded-allow-ips", "10.0.0.1")[0] == 0
    assert [(o["proxy_headers"], o["forwarded_allow_ips"]) for o in started] == [(False, ""), (True, "10.0.0.1")]
    code, _, err = cli("serve", "--forwarded-allow-ips", "proxy.local")
    assert code == 2 and "'proxy.local' is not an IP address" in err


def test_proxy_headers_are_read_only_from_the_configured_proxies():
    from storage.settings import Settings
    from workbench.server import uvicorn_options

    default = uvicorn_options(Settings.from_env({}))
    assert default["proxy_headers"] is False
    trusted = uvicorn_options(Settings.from_env({"WORKBENCH_FORWARDED_ALLOW_IPS": " 10.0.0.1, 10.8.0.0/16 "}))
    assert trusted["proxy_headers"] is True and trusted["forwarded_allow_ips"] == "10.0.0.1,10.8.0.0/16"
    assert Settings.from_env({}, forwarded_allow_ips="*").forwarded_allow_ips == "*"
    with pytest.raises(ConfigError, match="WORKBENCH_FORWARDED_ALLOW_IPS.*'proxy.local' is not an IP address"):
        Settings.from_env({"WORKBENCH_FORWARDED_ALLOW_IPS": "10.0.0.1,proxy.local"})


# ------------------------------------------------------------------ 8. what refusals and the login page give away

def test_a_forged_path_is_refused_without_naming_a_server_path(site, capfd, caplog):
    server, wb, _, _ = site
    http = logged_in(server.url)
    from workbench.server import _secret_paths

    secrets = {str(Path(p)) for p in _secret_paths(wb)} | {str(upload_folder()), str(wb.settings.home)}
    assert len(secrets) == 4  # the database, the users file, the upload folder, the home folder
    capfd.readouterr()
    caplog.set_level(logging.WARNING)
    sent = [PASSWD_FILE, "uploads/../workbench.db", str(wb.settings.home / "workbench.db")]
    for path in sent:
        refused = raw_call(http, server.url, "on_upload", [server_file(path), "masked-lm", "auto-detect", "", "", "",
                                                           "", 128], expect="error")
        message = refused["error"]
        assert message == f"the file {path!r} was not uploaded through this page; choose it again with the upload box"
        assert not any(secret in message for secret in secrets if secret not in path), message
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING and "refused" in r.getMessage()]
    assert [r.getMessage() for r in lines] == [
        f"upload refused: the file {path!r} was not uploaded through this page; choose it again with the upload box"
        for path in sent]
    assert all(r.exc_info is None for r in lines)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("encoding", ["br", "gzip", "identity"])
def test_the_login_page_carries_no_api_description(site, encoding):
    server = site[0]
    headers = {"accept-encoding": encoding}
    for path in ("/", "/gradio_api/runs"):
        page = anonymous().get(server.url + path, headers=headers)
        assert page.status_code == 200 and "auth_required" in page.text, path
        assert "window.gradio_api_info = null;" in page.text
        assert "named_endpoints" not in page.text and "on_upload" not in page.text, path
    assert anonymous().get(server.url + "/gradio_api/info").status_code == 401
    # Signed in, the page is Gradio's own: the API description is there (and the login was not needed for it).
    page = logged_in(server.url).get(server.url + "/", headers=headers).text
    assert "named_endpoints" in page and "on_upload" in page and "auth_required" not in page


def session_events(http: httpx.Client, url: str, calls: list[tuple[str, list]]) -> tuple[list, list]:
    """Join ``calls`` (api name, data) on one session as the browser does, then read its event stream to the end:
    (the answer to each join, every message of the stream, or "aborted" when the server broke it off)."""
    config = http.get(f"{url}/config").json()
    fn_index = {d["api_name"]: d["id"] for d in config["dependencies"]}
    session = os.urandom(8).hex()
    joins = []
    for api, data in calls:
        body = json.dumps({"data": data, "fn_index": fn_index[api], "session_hash": session, "event_data": None,
                           "trigger_id": None}, ensure_ascii=True)  # keeps "\ud800" as the escape a browser sends
        joins.append(http.post(f"{url}/gradio_api/queue/join", content=body.encode(),
                               headers={"content-type": "application/json"}))
    messages: list = []
    try:
        with http.stream("GET", f"{url}/gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    messages.append(json.loads(line.removeprefix("data: ")))
    except httpx.HTTPError:
        messages.append("aborted")
    return joins, messages


def test_a_lone_surrogate_is_refused_and_the_session_keeps_its_events(site):
    server = site[0]
    http = logged_in(server.url)
    quiet = [None, "(any)", "(any)", 0, "all"]  # the audit panel's view with no audit picked
    joins, messages = session_events(http, server.url, [
        ("show", quiet),
        ("show", [None, "\ud800", "(any)", 0, "all"]),  # the "given label" filter
        ("handler_2", [None, "ok \udfff", "\ud83d"]),  # keep: the example and the new label
        ("show", quiet),
    ])
    # The stream runs to its end with both good calls done (unfixed, Gradio broke it off at the first echo).
    assert "aborted" not in messages and not any(m.get("msg") == "unexpected_error" for m in messages), messages
    done = {m["event_id"] for m in messages if m.get("msg") == "process_completed" and m["success"]}
    assert done == {joins[0].json()["event_id"], joins[3].json()["event_id"]}
    assert [j.status_code for j in joins] == [200, 422, 422, 200]
    assert joins[1].json()["detail"] == ("data[1] holds a lone surrogate '\\ud800' at character 0: send valid "
                                         "Unicode text (an unpaired UTF-16 surrogate is not a character)")
    assert "data[1] holds a lone surrogate '\\udfff' at character 3" in joins[2].json()["detail"]
    # The same refusal for the plain HTTP API.
    answer = http.post(f"{server.url}/gradio_api/call/show", content=b'{"data": [null, "\\ud800", "(any)", 0, "all"]}',
                       headers={"content-type": "application/json"})
    assert answer.status_code == 422 and "lone surrogate" in answer.json()["detail"]


def test_a_json_call_body_over_the_cap_is_refused_unread(site):
    """The surrogate check reads JSON calls before Gradio does: at most MAX_JSON_BODY bytes of them."""
    from workbench.asgi import MAX_JSON_BODY

    server = site[0]
    body = b'{"data": ["' + b"a" * MAX_JSON_BODY + b'"]}'
    for http in (httpx.Client(timeout=60), logged_in(server.url)):
        answer = http.post(f"{server.url}/gradio_api/call/show", content=body,
                           headers={"content-type": "application/json"})
        assert answer.status_code == 413, answer.text
        assert answer.json()["detail"] == f"the request body is larger than {MAX_JSON_BODY:,} bytes"
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_lone_surrogate_finds_the_first_one_anywhere():
    from workbench.asgi import lone_surrogate

    assert lone_surrogate({"data": ["fine", "😀", {"k": ["ok"]}]}) is None
    assert lone_surrogate({"data": ["fine", {"k": ["ok", "a\udc00"]}]}) == ("data[1].k[1]", "\udc00", 1)
    assert lone_surrogate({"data": [{"\ud800": 1}]}) == ("a key of data[0]", "\ud800", 0)
    assert lone_surrogate("\ud800") == ("the body", "\ud800", 0)
