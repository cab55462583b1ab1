"""The REST API's document, docs page and edges (issue 43): the OpenAPI document validates, the docs page loads
nothing from elsewhere, the playgrounds' predict route is never shadowed, errors carry the CLI's messages, and
the single-user workbench (no account) acts as its local admin."""
from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.access_support import team as make_team
from tests.api_support import World, api_app, csv_text
from workbench.services import accounts


def test_openapi_document_validates_and_lists_the_routes(wb):
    from openapi_spec_validator import validate

    client = TestClient(api_app(wb))
    document = client.get("/api/v1/openapi.json").json()
    validate(document)
    assert document["openapi"].startswith("3.")
    assert "/api/v1/runs" in document["paths"] and "post" in document["paths"]["/api/v1/runs"]
    body = document["paths"]["/api/v1/datasets"]["post"]["requestBody"]["content"]
    assert "file" in body["multipart/form-data"]["schema"]["properties"]
    assert not any(path.startswith("/api/v1/predict") for path in document["paths"])
    assert {"bearer", "session"} <= set(document["components"]["securitySchemes"])


def test_docs_page_is_self_contained(wb):
    page = TestClient(api_app(wb)).get("/api/v1/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html, re.I), "the page names another server"
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html, re.I), "the page loads an asset"
    assert 'fetch("openapi.json"' in html


def test_playground_predict_route_is_not_shadowed(wb):
    from fastapi import FastAPI

    from workbench.api import mount_api
    from workbench.playground.mount import mount_playgrounds

    for order in ("api first", "playgrounds first"):
        app = FastAPI()
        if order == "api first":
            mount_api(app, wb)
            mount_playgrounds(app, wb)
        else:
            mount_playgrounds(app, wb)
            mount_api(app, wb)
        client = TestClient(app)
        answer = client.post("/api/v1/predict/no-such-slug", json={"inputs": "hi"})
        assert answer.status_code == 404 and "no-such-slug" in answer.json()["error"], (order, answer.text)
        assert client.get("/api/v1/predict/x").status_code == 405  # the playgrounds' own GET answer
        assert client.get("/api/v1/nothing-here").json()["status"] == 404


def test_without_accounts_every_call_acts_as_local(wb):
    client = TestClient(api_app(wb))
    answer = client.post("/api/v1/datasets", files={"file": ("r.csv", csv_text().encode())},
                         data={"task": "text-classification"})
    assert answer.status_code == 201, answer.text
    dataset = answer.json()["id"]
    assert client.delete(f"/api/v1/datasets/{dataset}").status_code == 200
    assert [row["action"] for row in accounts.list_activity(wb)] == ["delete", "create"]


def test_errors_carry_the_services_messages(wb):
    team = make_team(wb)
    client = TestClient(api_app(wb), headers={"Authorization": f"Bearer {team.write_token}"})
    missing = client.get("/api/v1/runs/999")
    assert missing.status_code == 404 and missing.json()["error"].startswith("run 999 does not exist")
    bad = client.post("/api/v1/datasets", files={"file": ("r.csv", b"text,label\n,\n")},
                      data={"task": "text-classification"})
    assert bad.status_code == 422 and bad.json()["problems"], bad.text
    typo = client.post("/api/v1/runs", json={"task": "text-classification", "trian": {}})
    assert typo.status_code == 422 and "trian" in typo.json()["error"]
    wrong = client.put("/api/v1/runs")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
    revoked = client.get("/api/v1/runs", headers={"Authorization": f"Bearer {team.revoked_token}"})
    assert revoked.status_code == 401 and revoked.headers["www-authenticate"] == "Bearer"
    assert team.revoked_token not in revoked.text


def test_an_editor_names_no_file_or_folder_on_the_server(wb, tmp_path):
    team = make_team(wb)
    world = World(wb, team)
    client = TestClient(api_app(wb), headers={"Authorization": f"Bearer {team.write_token}"})
    folder = tmp_path / "some-model"
    folder.mkdir()
    spec = {"task": "text-classification", "data": {"dataset_id": world.base_dataset}}
    for changed in ({"model": str(folder)}, {"model": "../models/x"},
                    {"data": {"train_path": str(tmp_path / "x.csv")}}):
        answer = client.post("/api/v1/runs", json={**spec, **changed})
        assert answer.status_code == 403, answer.text
        assert "server" in answer.json()["error"]
    sweep = {"base": {**spec, "model": "fake:succeed"}, "space": {"model": [str(folder), "fake:succeed"]}}
    assert client.post("/api/v1/sweeps", json=sweep).status_code == 403
    admin = TestClient(api_app(wb), headers={"Authorization": "Bearer " + accounts.create_token(
        wb, "ada", "admin script", "write", by=team.admin)["token"]})
    assert admin.post("/api/v1/runs", json={**spec, "model": "fake:succeed"}).status_code == 201


def test_lists_and_pages_name_the_owner(wb):
    team = make_team(wb)
    world = World(wb, team)
    mine, theirs = world.run("own"), world.run("other")
    client = TestClient(api_app(wb), headers={"Authorization": f"Bearer {team.read_token}"})
    owners = {row["id"]: row["owner"] for row in client.get("/api/v1/runs").json()}
    assert owners[mine] == "ed" and owners[theirs] == "olga"
    assert client.get(f"/api/v1/runs/{theirs}").json()["owner"] == "olga"
    assert client.get(f"/api/v1/datasets/{world.base_dataset}").json()["owner"] == "ed"
    slug = world.playground("other")
    assert [p["owner"] for p in client.get("/api/v1/playgrounds").json() if p["slug"] == slug] == ["olga"]
    project = world.project("own")
    assert client.get(f"/api/v1/label-projects/{project}").json()["project"]["owner"] == "ed"


def test_bodies_are_bounded_and_forms_checked(wb):
    team = make_team(wb)
    client = TestClient(api_app(wb), headers={"Authorization": f"Bearer {team.write_token}"})
    large = client.post("/api/v1/runs", content=b"{" + b" " * 70_000 + b"}",
                        headers={"Content-Type": "application/json"})
    assert large.status_code == 413, large.text
    not_a_form = client.post("/api/v1/datasets", json={"task": "text-classification"})
    assert not_a_form.status_code == 415 and "multipart/form-data" in not_a_form.json()["error"]
    no_file = client.post("/api/v1/datasets", files={"other": ("x.csv", b"a")}, data={"task": "text-classification"})
    assert no_file.status_code == 422 and "'file'" in no_file.json()["error"]
    no_task = client.post("/api/v1/datasets", files={"file": ("x.csv", csv_text().encode())})
    assert no_task.status_code == 422 and "'task'" in no_task.json()["error"]
    listed = client.get("/api/v1/runs?limit=many")
    assert listed.status_code == 422 and "limit" in listed.json()["error"]
    assert not list(wb.settings.home.glob(".api-upload-*")), "an upload's temporary folder was left behind"


def test_an_evaluation_already_made_is_reused(wb):
    team = make_team(wb)
    world = World(wb, team)
    client = TestClient(api_app(wb), headers={"Authorization": f"Bearer {team.write_token}"})
    test_set = {"files": {"file": ("test.csv", csv_text(6, extra="held out").encode())}}
    first = client.post(f"/api/v1/runs/{world.shared_run}/evaluations", **test_set)
    again = client.post(f"/api/v1/runs/{world.shared_run}/evaluations", **test_set)
    assert (first.status_code, first.json()["reused"]) == (201, False), first.text
    assert (again.status_code, again.json()) == (200, {**first.json(), "reused": True})
    created = [row for row in accounts.list_activity(wb) if row["action"] == "create" and row["target_kind"] == "run"]
    assert len(created) == 1
