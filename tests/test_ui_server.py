"""The server composition: auth in front of the workbench only, playground routes outside it."""
from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient

from workbench.server import create_app


@pytest.fixture
def client_with_auth(wb):
    wb.settings = dataclasses.replace(wb.settings, auth="alice:wonderland")
    with TestClient(create_app(wb, worker=False)) as client:
        yield client


def test_workbench_config_needs_a_login(client_with_auth):
    assert client_with_auth.get("/healthz").json() == {"ok": True}
    assert client_with_auth.get("/config").status_code == 401
    login = client_with_auth.post("/login", data={"username": "alice", "password": "wonderland"})
    assert login.status_code == 200
    config = client_with_auth.get("/config")
    assert config.status_code == 200 and "BERT Workbench" in config.text


def test_wrong_password_is_refused(client_with_auth):
    assert client_with_auth.post("/login", data={"username": "alice", "password": "nope"}).status_code == 400
    assert client_with_auth.get("/config").status_code == 401


def test_playground_routes_bypass_the_workbench_login(client_with_auth):
    pytest.importorskip("workbench.playground.mount")
    api = client_with_auth.post("/api/v1/predict/no-such-playground", json={"inputs": "hi"})
    assert api.status_code == 404  # answered by the playground API, not the workbench login
    page = client_with_auth.get("/play/no-such-playground/")
    assert page.status_code == 404 and "Playground not found" in page.text


def test_no_auth_serves_the_config(wb):
    with TestClient(create_app(wb, worker=False)) as client:
        config = client.get("/config")
        assert config.status_code == 200
        assert {"Data", "Train", "Runs", "Compare"} <= {c.get("props", {}).get("label")
                                                        for c in config.json()["components"]}
