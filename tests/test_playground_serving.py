"""Playgrounds served for real: a tiny trained model per task, called through REST and gradio_client.

The server is a stand-in for the workbench (a Gradio app at ``/`` behind a
login, as with WORKBENCH_AUTH) plus ``mount_playgrounds``; it runs in uvicorn
on a loopback port because gradio_client needs a real server.
"""
from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from tests import playground_support as ps
from workbench.playground import service

pytestmark = pytest.mark.e2e
# Generous: the first request to a playground builds its page, and CI machines are slow and shared.
HTTP = httpx.Client(timeout=120)

TOKEN = "colleague-token-123"
WORKBENCH_MARKER = "WORKBENCH-ONLY-DATASETS-TAB"
INPUTS = {
    "text-classification": "a great film, I loved it",
    "text-pair-classification": {"text": "a man is playing a guitar", "text_pair": "someone plays music"},
    "token-classification": "John Smithers lives in New York.",
    "question-answering": {"question": "Where is the Eiffel Tower?",
                           "context": "The Eiffel Tower is in Paris, the capital of France."},
    "masked-lm": "the cat [MASK] on the mat.",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-models")
    return {kind: ps.train_tiny(kind, root / kind) for kind in ps.TASK_DATA}


@pytest.fixture(scope="module")
def module_wb(tmp_path_factory):
    from storage.context import open_workbench
    from storage.settings import Settings

    wb = open_workbench(Settings.from_env({}, home=str(tmp_path_factory.mktemp("home"))))
    yield wb
    wb.close()


@pytest.fixture(scope="module")
def published(module_wb, models):
    """One playground per task; the masked-LM one has a token."""
    out = {}
    for kind, folder in models.items():
        run_id = ps.add_run(module_wb, kind, folder)
        out[kind] = service.publish(module_wb, run_id, token=TOKEN if kind == "masked-lm" else None)
    return out


def workbench_standin(wb):
    """FastAPI app shaped like workbench.server.create_app: playgrounds first, a login-protected UI at /."""
    import gradio as gr
    from fastapi import FastAPI

    from workbench.playground.mount import mount_playgrounds

    app = FastAPI()
    mount_playgrounds(app, wb)
    with gr.Blocks() as ui:
        gr.Markdown(WORKBENCH_MARKER)
    gr.mount_gradio_app(app, ui, path="/", auth=[("admin", "pw")], ssr_mode=False)
    return app


@pytest.fixture(scope="module")
def server(module_wb, published):
    with ps.ServerThread(workbench_standin(module_wb)) as running:
        yield running


def _headers(kind):
    return {"Authorization": f"Bearer {TOKEN}"} if kind == "masked-lm" else {}


def _check_prediction(kind, prediction, text_input):
    if kind in ("text-classification", "text-pair-classification"):
        assert set(prediction["scores"]) == ({"neg", "pos"} if kind == "text-classification"
                                             else {"contradiction", "entailment"})
        assert sum(prediction["scores"].values()) == pytest.approx(1.0, abs=1e-4)
        assert prediction["label"] == max(prediction["scores"], key=prediction["scores"].get)
    elif kind == "token-classification":
        for entity in prediction["entities"]:
            assert text_input[entity["start"]:entity["end"]] == entity["word"]
            assert entity["entity"] in {"PER", "LOC"}
            assert "#" not in entity["word"]
    elif kind == "question-answering":
        context = text_input["context"]
        assert context[prediction["start"]:prediction["end"]] == prediction["answer"]
        assert 0.0 <= prediction["score"] <= 1.0
    else:
        candidates = prediction["masks"][0]["candidates"]
        assert len(candidates) == 5
        assert all("[MASK]" not in c["token"] and "[CLS]" not in c["token"] for c in candidates)
        assert candidates[0]["sequence"] == f"the cat {candidates[0]['token']} on the mat."


@pytest.mark.parametrize("kind", list(ps.TASK_DATA))
def test_rest_single_and_batch(server, published, kind):
    url = f"{server.url}/api/v1/predict/{published[kind].slug}"
    single = HTTP.post(url, json={"inputs": INPUTS[kind]}, headers=_headers(kind))
    assert single.status_code == 200, single.text
    body = single.json()
    assert body["batch"] is False and len(body["predictions"]) == 1 and body["latency_ms"] > 0
    _check_prediction(kind, body["predictions"][0], INPUTS[kind])

    batch = HTTP.post(url, json={"inputs": [INPUTS[kind]] * 3}, headers=_headers(kind)).json()
    assert batch["batch"] is True and len(batch["predictions"]) == 3
    # SDPA's kernels split a batch differently from a single input: equal up to float rounding.
    assert _rounded(batch["predictions"][0]) == _rounded(body["predictions"][0])


def _rounded(value, places=4):
    """``value`` with every float rounded to ``places`` decimals (nested dicts and lists too)."""
    if isinstance(value, float):
        return round(value, places)
    if isinstance(value, dict):
        return {k: _rounded(v, places) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v, places) for v in value]
    return value


@pytest.mark.parametrize("kind", list(ps.TASK_DATA))
def test_gradio_client_named_api(server, published, kind):
    from gradio_client import Client

    client = Client(f"{server.url}/play/{published[kind].slug}/", headers=_headers(kind), verbose=False,
                    download_files=False)
    value = INPUTS[kind]
    args = [value] if isinstance(value, str) else list(value.values())
    widget, raw = client.predict(*args, api_name="/predict")
    _check_prediction(kind, raw, value)
    if kind.endswith("classification") and kind != "token-classification":
        assert widget["label"] == raw["label"]
    info = client.view_api(print_info=False, return_format="dict")
    assert list(info["named_endpoints"]) == ["/predict"]


def test_empty_page_input_asks_for_text(server, published):
    from gradio_client import Client

    for kind, message in (("text-classification", "Type some text first."),
                          ("question-answering", "Type a question and a context first.")):
        client = Client(f"{server.url}/play/{published[kind].slug}/", verbose=False)
        args = ["  "] if kind == "text-classification" else ["", " "]
        with pytest.raises(Exception, match=re.escape(message)):
            client.predict(*args, api_name="/predict")


def test_token_is_enforced(server, published):
    slug = published["masked-lm"].slug
    url = f"{server.url}/api/v1/predict/{slug}"
    assert published["masked-lm"].has_token
    assert HTTP.post(url, json={"inputs": INPUTS["masked-lm"]}).status_code == 401
    wrong = HTTP.post(url, json={"inputs": INPUTS["masked-lm"]}, headers={"Authorization": "Bearer nope-nope"})
    assert wrong.status_code == 401 and "not valid" in wrong.json()["error"]
    # Without the token even a malformed body answers 401: nothing is revealed about the inputs.
    assert HTTP.post(url, content=b"{not json").status_code == 401

    page = HTTP.get(f"{server.url}/play/{slug}/")
    assert page.status_code == 401 and "access token" in page.text.lower() and "<form" in page.text
    assert HTTP.get(f"{server.url}/play/{slug}/config").status_code == 401
    with httpx.Client(base_url=server.url, timeout=120) as browser:
        opened = browser.get(f"/play/{slug}/?token={TOKEN}")
        assert opened.status_code == 200
        assert browser.get(f"/play/{slug}/config").status_code == 200  # the cookie carries the token on
    assert HTTP.get(f"{server.url}/play/{slug}/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_unknown_and_unpublished_slugs_are_404(server, module_wb, models):
    assert HTTP.post(f"{server.url}/api/v1/predict/no-such-slug-1-abc", json={"inputs": "x"}).status_code == 404
    page = HTTP.get(f"{server.url}/play/no-such-slug-1-abc/")
    assert page.status_code == 404 and "no longer published" in page.text

    run_id = ps.add_run(module_wb, "text-classification", models["text-classification"])
    info = service.publish(module_wb, run_id)
    assert HTTP.get(f"{server.url}/play/{info.slug}/").status_code == 200
    service.unpublish(module_wb, info.slug)
    assert HTTP.get(f"{server.url}/play/{info.slug}/").status_code == 404
    gone = HTTP.post(f"{server.url}/api/v1/predict/{info.slug}", json={"inputs": "x"})
    assert gone.status_code == 404 and "no longer published" in gone.json()["error"]


@pytest.mark.parametrize("body, needle", [
    (b"{not json", "not valid JSON"),
    (b'{"text": "hello"}', '"inputs" is missing from the request body (it has "text")'),
    (b'{"inputs": 42}', "expected a string"),
    (b'{"inputs": ""}', "non-empty"),
    (b'{"inputs": []}', "empty"),
    (b'{"inputs": {"txt": "hello"}}', "unknown field"),
    (json.dumps({"inputs": ["x"] * 65}).encode(), "limit is 64"),
])
def test_bad_input_is_422_with_a_clear_message(server, published, body, needle):
    url = f"{server.url}/api/v1/predict/{published['text-classification'].slug}"
    answer = HTTP.post(url, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422
    assert needle in answer.json()["error"]


def test_task_specific_422(server, published):
    qa = HTTP.post(f"{server.url}/api/v1/predict/{published['question-answering'].slug}",
                    json={"inputs": "just a string"})
    assert qa.status_code == 422 and '"question"' in qa.json()["error"]
    mlm = HTTP.post(f"{server.url}/api/v1/predict/{published['masked-lm'].slug}", json={"inputs": "no mask"},
                     headers=_headers("masked-lm"))
    assert mlm.status_code == 422 and "[MASK]" in mlm.json()["error"]


def test_published_after_start_is_served(server, module_wb, models):
    run_id = ps.add_run(module_wb, "token-classification", models["token-classification"], name="Late NER")
    info = service.publish(module_wb, run_id)
    assert info.slug.startswith("late-ner-")
    page = HTTP.get(f"{server.url}/play/{info.slug}", follow_redirects=True)
    assert page.status_code == 200 and str(page.url).endswith(f"/play/{info.slug}/")
    answer = HTTP.post(f"{server.url}/api/v1/predict/{info.slug}", json={"inputs": INPUTS["token-classification"]})
    assert answer.status_code == 200


def test_page_exposes_nothing_of_the_workbench(server, published):
    slug = published["text-classification"].slug
    base = f"{server.url}/play/{slug}"
    assert HTTP.get(f"{server.url}/").status_code in (200, 401)  # the workbench shows only its login
    assert WORKBENCH_MARKER not in HTTP.get(f"{server.url}/config").text  # the login holds, config is closed
    html = HTTP.get(f"{base}/").text
    config = HTTP.get(f"{base}/config").json()
    text = html + json.dumps(config)
    assert WORKBENCH_MARKER not in text
    for word in ("Datasets", "Runs tab", "/api/v1/runs", "Train"):
        assert word not in text
    assert config["root"].rstrip("/").endswith(f"/play/{slug}")
    # Every link on the page stays inside this playground (or is an external gradio.app / docs link).
    for href in re.findall(r'href="([^"]+)"', html):
        assert not href.startswith("/") or href.startswith(f"/play/{slug}/"), href
    kinds = {c["type"] for c in config["components"]}
    assert kinds <= {"markdown", "row", "column", "textbox", "button", "label", "accordion", "json", "dataset",
                     "examples", "slider", "image", "form", "group", "html", "state", "tabs", "tabitem"}, kinds
    api = HTTP.get(f"{base}/gradio_api/info").json()
    assert list(api["named_endpoints"]) == ["/predict"]
    card = config["components"][0]["props"]["value"]
    for fact in ("Text classification", "tiny-bert", "tiny text-classification set", "accuracy", "4 training"):
        assert fact in card


def test_examples_come_from_validation_set(server, published):
    config = HTTP.get(f"{server.url}/play/{published['question-answering'].slug}/config").json()
    dumped = json.dumps(config)
    assert "Where is the Eiffel Tower?" in dumped and "Ada Lovelace wrote the first program" in dumped


def test_real_workbench_server_keeps_playgrounds_outside_its_login(module_wb, published):
    """With the real create_app and WORKBENCH_AUTH set: / asks for a login, /play/<slug>/ does not."""
    import dataclasses

    from storage.context import Workbench
    from workbench.server import create_app

    guarded = Workbench(settings=dataclasses.replace(module_wb.settings, auth="admin:pw"), db=module_wb.db)
    slug = published["text-classification"].slug
    with ps.ServerThread(create_app(guarded, worker=False)) as running:
        config = HTTP.get(f"{running.url}/config")
        assert config.status_code in (401, 403) or "login" in config.text.lower()
        page = HTTP.get(f"{running.url}/play/{slug}/")
        assert page.status_code == 200
        play_config = HTTP.get(f"{running.url}/play/{slug}/config").json()
        assert play_config["root"].rstrip("/").endswith(f"/play/{slug}")
        assert "Publish playground" not in json.dumps(play_config)
        answer = HTTP.post(f"{running.url}/api/v1/predict/{slug}", json={"inputs": "good"})
        assert answer.status_code == 200


def test_concurrent_requests_are_all_served_consistently(server, published):
    from concurrent.futures import ThreadPoolExecutor

    url = f"{server.url}/api/v1/predict/{published['question-answering'].slug}"
    payload = {"inputs": INPUTS["question-answering"]}
    expected = HTTP.post(url, json=payload).json()["predictions"]
    # Eight clients, each from its own loopback address: one address has one prediction in flight at a time.
    clients = [httpx.Client(timeout=120, transport=httpx.HTTPTransport(local_address=f"127.0.0.{10 + n}"))
               for n in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = [a for two in pool.map(lambda n: [clients[n].post(url, json=payload) for _ in range(2)], range(8))
                   for a in two]
    for one in clients:
        one.close()
    assert [a.status_code for a in answers] == [200] * 16
    assert all(a.json()["predictions"] == expected for a in answers)


def test_call_routes_name_only_the_playgrounds_functions(server, published):
    """Unknown APIs and function indexes used to reach Gradio and answer 500 with a KeyError in the log."""
    base = f"{server.url}/play/{published['text-classification'].slug}/gradio_api"
    for route, body, status, needle in (
            ("call/no_such_api", {"data": ["x"]}, 404, "'no_such_api' is not an API of this playground"),
            ("call/v2/no_such_api", {"text": "x"}, 404, "it has: /predict"),
            ("run/no_such_api", {"data": ["x"]}, 404, "is not an API"),
            ("run/predict", {"data": ["x"], "fn_index": 999}, 422, "fn_index 999 is not a function"),
            ("api/predict", {"data": ["x"], "fn_index": 999}, 422, "fn_index 999 is not a function")):
        answer = HTTP.post(f"{base}/{route}", json=body)
        assert answer.status_code == status, (route, answer.status_code, answer.text[:200])
        assert needle in answer.json()["error"], route
    # A prediction cannot skip the queue (and its bounds) through the direct routes.
    assert HTTP.post(f"{base}/run/predict", json={"data": ["x"]}).status_code == 404
    # The page's own routes still work: the named API by call/, any function by queue/join (gradio_client).
    event = HTTP.post(f"{base}/call/predict", json={"data": [INPUTS["text-classification"]]}).json()["event_id"]
    stream = HTTP.get(f"{base}/call/predict/{event}").text
    assert "event: complete" in stream, stream[:300]


def _limited_server(module_wb, **limits):
    """The real workbench app (no worker) over the module's database, with playground limits changed."""
    import dataclasses

    from storage.context import Workbench
    from workbench.server import create_app

    limited = Workbench(settings=dataclasses.replace(module_wb.settings, **limits), db=module_wb.db)
    return create_app(limited, worker=False)


def test_a_saturated_server_refuses_with_503_and_retry_after(module_wb, published):
    """With every forward-pass slot taken and no room to wait, REST and page predictions are refused at once,
    with Retry-After, and the server keeps answering /healthz."""
    from gradio_client import Client

    app = _limited_server(module_wb, playground_concurrency=1, playground_queue=0)
    slug = published["text-classification"].slug
    with ps.ServerThread(app) as running:
        url = f"{running.url}/api/v1/predict/{slug}"
        assert HTTP.post(url, json={"inputs": "good"}).status_code == 200
        page = Client(f"{running.url}/play/{slug}/", verbose=False)
        slots, release = app.state.playgrounds.slots, threading.Event()
        holder = threading.Thread(target=slots.run, args=(release.wait, 30))  # a long prediction
        holder.start()
        deadline = time.monotonic() + 10
        while slots.running < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            started = time.monotonic()
            busy = HTTP.post(url, json={"inputs": "good"})
            assert time.monotonic() - started < 10
            assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1, busy.text
            assert "busy" in busy.json()["error"] and busy.json()["retry_after"] >= 1
            assert HTTP.get(f"{running.url}/healthz").status_code == 200
            with pytest.raises(Exception, match="busy"):
                page.predict("good", api_name="/predict")
        finally:
            release.set()
            holder.join(10)
        assert HTTP.post(url, json={"inputs": "good"}).status_code == 200
        assert page.predict("good", api_name="/predict")[1]["label"] in ("pos", "neg")


def test_anonymous_predictions_are_rate_limited_per_address(module_wb, published):
    from gradio_client import Client

    app = _limited_server(module_wb, playground_rate_limit=3)
    slug = published["text-classification"].slug
    with ps.ServerThread(app) as running:
        url = f"{running.url}/api/v1/predict/{slug}"
        assert [HTTP.post(url, json={"inputs": "good"}).status_code for _ in range(3)] == [200] * 3
        limited = HTTP.post(url, json={"inputs": "good"})
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1, limited.text
        assert "3 a minute" in limited.json()["error"]
        # The page's predictions come from the same address: the same bucket.
        with pytest.raises(Exception, match="3 a minute"):
            Client(f"{running.url}/play/{slug}/", verbose=False).predict("good", api_name="/predict")
        # Callers with a token are not anonymous: a token-protected playground is not limited.
        protected = f"{running.url}/api/v1/predict/{published['masked-lm'].slug}"
        for _ in range(4):
            assert HTTP.post(protected, json={"inputs": INPUTS["masked-lm"]}, headers=_headers("masked-lm")
                             ).status_code == 200
        assert HTTP.get(f"{running.url}/healthz").status_code == 200
