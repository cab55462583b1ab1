"""A playground unpublished while a visitor has its page open: every later call says so, as JSON.

Issue 25: the page's Predict asked the queue (``queue/join``), the gate answered its HTML 404 page,
and Gradio's client showed "Could not parse server response: SyntaxError: Unexpected token '<'".
Through the real workbench app (``create_app``) with an untrained config-built model: no training.
"""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests import playground_support as ps
from workbench.playground import service
from workbench.server import create_app

GONE = "This playground is no longer published."


@pytest.fixture
def tiny_classifier(tmp_path):
    import transformers as tf

    tok = ps.tokenizer()
    folder = tmp_path / "tiny-classifier"
    tf.BertForSequenceClassification(ps.tiny_config(tok, id2label={0: "neg", 1: "pos"},
                                                    label2id={"neg": 0, "pos": 1})).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _predict_index(config: dict) -> int:
    return next(d["id"] for d in config["dependencies"] if d.get("api_name") == "predict")


def test_an_open_page_and_the_api_say_the_playground_is_no_longer_published(wb, tiny_classifier):
    slug = service.publish(wb, ps.add_run(wb, "text-classification", tiny_classifier)).slug
    base = f"/play/{slug}"
    with TestClient(create_app(wb, worker=False)) as client:
        assert client.get(f"{base}/").status_code == 200  # the visitor opens the page ...
        fn_index = _predict_index(client.get(f"{base}/config").json())

        service.unpublish(wb, slug)  # ... and it is unpublished while the page stays open

        join = client.post(f"{base}/gradio_api/queue/join",
                           json={"data": ["a fine film"], "fn_index": fn_index, "session_hash": "visitor1"})
        assert join.status_code == 404
        assert join.headers["content-type"].startswith("application/json")
        # Gradio's client shows a refused call's "error" (or "detail") as the page's error message.
        assert join.json()["error"] == GONE
        for route in ("config", "gradio_api/info"):  # every other call of the page says the same
            answer = client.get(f"{base}/{route}")
            assert answer.status_code == 404 and answer.json()["error"] == GONE

        api = client.post(f"/api/v1/predict/{slug}", json={"inputs": "a fine film"})
        assert api.status_code == 404 and api.headers["content-type"].startswith("application/json")
        assert api.json() == {"error": GONE, "status": 404}

        reloaded = client.get(f"{base}/")  # a visit to the page itself still gets a page that says so
        assert reloaded.status_code == 404 and reloaded.headers["content-type"].startswith("text/html")
        assert GONE in reloaded.text

        unknown = client.post("/play/no-such-playground-1-abc/gradio_api/queue/join", json={"data": ["x"]})
        assert unknown.status_code == 404 and "does not exist" in unknown.json()["error"]


def test_a_token_refusal_of_a_page_call_is_json_too(wb, tiny_classifier):
    slug = service.publish(wb, ps.add_run(wb, "text-classification", tiny_classifier), token="a-token-1234").slug
    with TestClient(create_app(wb, worker=False)) as client:
        page = client.get(f"/play/{slug}/")
        assert page.status_code == 401 and "<form" in page.text
        join = client.post(f"/play/{slug}/gradio_api/queue/join", json={"data": ["x"], "fn_index": 0})
        assert join.status_code == 401 and "access token" in join.json()["error"]
