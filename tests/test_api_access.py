"""The REST API's access matrix (issue 43): every route × every kind of caller, the expected status as data, one
row per route; a route of the app without a row fails. Refused calls (401, 403) carry a malformed body, which
they must never get to read, and leave every table as it was; a call that succeeds writes its one activity row
(RECORDS), by user and token name, and no other call writes any."""
from __future__ import annotations

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from tests.access_support import team as make_team
from tests.api_support import ACTORS, World, actor_headers, api_app, csv_text, dump, flat_routes

READ = "401 200 200 200 200 200 200 401 401"
CREATE = "401 403 201 201 201 403 201 401 401"
CHANGE = "401 403 200 403 200 403 200 401 401"
CREATE_200 = CREATE.replace("201", "200")


def upload(name: str, body: str, **fields):
    return {"files": {"file": (name, body.encode(), "text/csv")}, "data": fields}


def run_spec(world, whose, who):
    return {"json": {"task": "text-classification", "model": "fake:succeed",
                     "data": {"dataset_id": world.base_dataset}, "train": {"epochs": 1}}}


def sweep_spec(world, whose, who):
    return {"json": {"base": {"task": "text-classification", "model": "fake:succeed",
                              "data": {"dataset_id": world.base_dataset}},
                     "space": {"learning_rate": {"low": 1e-5, "high": 1e-4, "log": True}}, "n_trials": 2,
                     "parallelism": 1}}


def claimant(world, who: str):
    return {"editor_own": "ed", "editor_other": "ed", "admin": "ada", "write_token": "ed"}.get(who)


# (method, path as declared, expected status per caller in ACTORS order, how to call it: url and body)
ROWS = [
    ("GET", "/api/v1/datasets", READ, lambda w, o, a: {"url": "/api/v1/datasets"}),
    ("POST", "/api/v1/datasets/validate", CREATE_200, lambda w, o, a: {
        "url": "/api/v1/datasets/validate", **upload("a.csv", csv_text(), task="text-classification")}),
    ("POST", "/api/v1/datasets", CREATE, lambda w, o, a: {
        "url": "/api/v1/datasets", **upload(f"{a}.csv", csv_text(extra=a), task="text-classification")}),
    ("GET", "/api/v1/datasets/{dataset}", READ, lambda w, o, a: {"url": f"/api/v1/datasets/{w.base_dataset}"}),
    ("DELETE", "/api/v1/datasets/{dataset}", CHANGE, lambda w, o, a: {"url": f"/api/v1/datasets/{w.dataset(o)}"}),
    ("GET", "/api/v1/runs", READ, lambda w, o, a: {"url": "/api/v1/runs?status=succeeded&limit=5"}),
    ("POST", "/api/v1/runs", CREATE, lambda w, o, a: {"url": "/api/v1/runs", **run_spec(w, o, a)}),
    ("GET", "/api/v1/runs/{run_id}", READ, lambda w, o, a: {"url": f"/api/v1/runs/{w.shared_run}"}),
    ("GET", "/api/v1/runs/{run_id}/metrics", READ, lambda w, o, a: {"url": f"/api/v1/runs/{w.shared_run}/metrics"}),
    ("GET", "/api/v1/runs/{run_id}/curves", READ, lambda w, o, a: {"url": f"/api/v1/runs/{w.shared_run}/curves"}),
    ("POST", "/api/v1/runs/{run_id}/cancel", CHANGE, lambda w, o, a: {
        "url": f"/api/v1/runs/{w.queued_run(o)}/cancel"}),
    ("DELETE", "/api/v1/runs/{run_id}", CHANGE, lambda w, o, a: {"url": f"/api/v1/runs/{w.run(o)}"}),
    ("GET", "/api/v1/runs/{run_id}/model", READ, lambda w, o, a: {"url": f"/api/v1/runs/{w.shared_run}/model"}),
    ("POST", "/api/v1/runs/{run_id}/predictions", CREATE, lambda w, o, a: {
        "url": f"/api/v1/runs/{w.shared_run}/predictions", **upload("p.csv", "text\nnice film\nbad film\n")}),
    ("POST", "/api/v1/runs/{run_id}/evaluations", CREATE, lambda w, o, a: {
        "url": f"/api/v1/runs/{w.shared_run}/evaluations", **upload(f"t{a}.csv", csv_text(6, extra=f"t{a}"))}),
    ("GET", "/api/v1/jobs", READ, lambda w, o, a: {"url": f"/api/v1/jobs?run_id={w.shared_run}"}),
    ("GET", "/api/v1/jobs/{job_id}", READ, lambda w, o, a: {"url": f"/api/v1/jobs/{w.shared_job}"}),
    ("GET", "/api/v1/jobs/{job_id}/output", READ, lambda w, o, a: {"url": f"/api/v1/jobs/{w.shared_job}/output"}),
    ("GET", "/api/v1/compare", READ.replace("200", "409"), lambda w, o, a: {
        "url": f"/api/v1/compare?a={w.shared_run}&b={w.shared_job - 1}"}),
    ("GET", "/api/v1/sweeps", READ, lambda w, o, a: {"url": "/api/v1/sweeps"}),
    ("POST", "/api/v1/sweeps", CREATE, lambda w, o, a: {"url": "/api/v1/sweeps", **sweep_spec(w, o, a)}),
    ("GET", "/api/v1/sweeps/{sweep_id}", READ, lambda w, o, a: {"url": f"/api/v1/sweeps/{w.shared('sweep')}"}),
    ("POST", "/api/v1/sweeps/{sweep_id}/cancel", CHANGE, lambda w, o, a: {"url": f"/api/v1/sweeps/{w.sweep(o)}/cancel"}),
    ("GET", "/api/v1/audits", READ, lambda w, o, a: {"url": "/api/v1/audits"}),
    ("POST", "/api/v1/audits", CREATE, lambda w, o, a: {"url": "/api/v1/audits", "json": {
        "dataset": w.base_dataset, "folds": 2, "model": "fake:succeed"}}),
    ("GET", "/api/v1/audits/{audit_id}", READ, lambda w, o, a: {"url": f"/api/v1/audits/{w.shared('audit')}"}),
    ("POST", "/api/v1/audits/{audit_id}/cancel", CHANGE, lambda w, o, a: {"url": f"/api/v1/audits/{w.audit(o)}/cancel"}),
    ("GET", "/api/v1/playgrounds", READ, lambda w, o, a: {"url": "/api/v1/playgrounds"}),
    ("POST", "/api/v1/playgrounds", CREATE, lambda w, o, a: {"url": "/api/v1/playgrounds", "json": {
        "run_id": w.shared_run, "generate_token": True}}),
    ("DELETE", "/api/v1/playgrounds/{slug}", CHANGE, lambda w, o, a: {"url": f"/api/v1/playgrounds/{w.playground(o)}"}),
    ("GET", "/api/v1/label-projects", READ, lambda w, o, a: {"url": "/api/v1/label-projects"}),
    ("GET", "/api/v1/label-projects/{project_id}", READ, lambda w, o, a: {
        "url": f"/api/v1/label-projects/{w.shared('project')}"}),
    ("POST", "/api/v1/label-projects", CREATE, lambda w, o, a: {"url": "/api/v1/label-projects", **upload(
        "pool.csv", "text\none\ntwo\nthree\n", labels="pos,neg")}),
    ("POST", "/api/v1/label-projects/{project_id}/next", CREATE_200, lambda w, o, a: {
        "url": f"/api/v1/label-projects/{w.project(o)}/next"}),
    ("POST", "/api/v1/label-projects/{project_id}/items/{item_id}/label", CREATE_200, lambda w, o, a: {
        "url": "/api/v1/label-projects/{}/items/{}/label".format(*w.claimed_item(o, claimant(w, a))),
        "json": {"label": "pos"}}),
    ("GET", "/api/v1/label-projects/{project_id}/export", READ, lambda w, o, a: {
        "url": f"/api/v1/label-projects/{w.shared('project')}/export?format=jsonl"}),
    ("POST", "/api/v1/label-projects/{project_id}/train", CREATE, lambda w, o, a: {
        "url": f"/api/v1/label-projects/{w.labelled_project(o)}/train"}),
    ("GET", "/api/v1/openapi.json", READ, lambda w, o, a: {"url": "/api/v1/openapi.json"}),
    ("GET", "/api/v1/docs", READ, lambda w, o, a: {"url": "/api/v1/docs"}),
    ("*", "/api/v1/{rest:path}", " ".join(["404"] * 9), lambda w, o, a: {"url": "/api/v1/no-such-thing"}),
]


# What a call that succeeds writes in the activity log (action, target kind); every other route writes nothing.
RECORDS = {
    ("POST", "/api/v1/datasets"): ("create", "dataset"), ("DELETE", "/api/v1/datasets/{dataset}"): ("delete", "dataset"),
    ("POST", "/api/v1/runs"): ("create", "run"), ("POST", "/api/v1/runs/{run_id}/cancel"): ("cancel", "run"),
    ("DELETE", "/api/v1/runs/{run_id}"): ("delete", "run"), ("GET", "/api/v1/runs/{run_id}/model"): ("download", "run"),
    ("POST", "/api/v1/runs/{run_id}/predictions"): ("create", "run"),
    ("POST", "/api/v1/runs/{run_id}/evaluations"): ("create", "run"),
    ("GET", "/api/v1/jobs/{job_id}/output"): ("download", "run"), ("POST", "/api/v1/sweeps"): ("create", "sweep"),
    ("POST", "/api/v1/sweeps/{sweep_id}/cancel"): ("cancel", "sweep"), ("POST", "/api/v1/audits"): ("create", "audit"),
    ("POST", "/api/v1/audits/{audit_id}/cancel"): ("cancel", "audit"),
    ("POST", "/api/v1/playgrounds"): ("publish", "playground"),
    ("DELETE", "/api/v1/playgrounds/{slug}"): ("unpublish", "playground"),
    ("POST", "/api/v1/label-projects"): ("create", "label_project"),
    ("GET", "/api/v1/label-projects/{project_id}/export"): ("export", "label_project"),
    ("POST", "/api/v1/label-projects/{project_id}/train"): ("create", "run"),
}


def _logged(wb) -> list[tuple]:
    from workbench.services import accounts

    return [(row["user"], row["token"], row["action"], row["target_kind"]) for row in accounts.list_activity(
        wb, limit=10_000) if row["action"] != "token_use"]


@pytest.fixture(scope="module")
def module_wb(tmp_path_factory):
    """One workbench for the whole matrix (its team and world are made once; each call that changes something
    gets fresh work of its own)."""
    import os

    from storage.context import open_workbench
    from storage.settings import Settings

    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("WORKBENCH_") and key != "WORKBENCH_REQUIRE_SERVICES" and \
                    not key.startswith("WORKBENCH_TEST_"):
                patch.delenv(key)
        workbench = open_workbench(Settings.from_env({}, home=str(tmp_path_factory.mktemp("api") / "home")))
        yield workbench
        workbench.close()


@pytest.fixture(scope="module")
def world(module_wb):
    wb = module_wb
    team = make_team(wb)
    world = World(wb, team)
    shared: dict[str, object] = {}

    def shared_thing(kind: str):
        if kind not in shared:
            shared[kind] = getattr(world, kind)("own")
        return shared[kind]

    world.shared = shared_thing
    return world


def test_every_route_has_a_row(wb):
    app = api_app(wb)
    declared = {(method, route.path) for route in flat_routes(app.routes) if isinstance(route, APIRoute)
                for method in (route.methods - {"HEAD"} if len(route.methods) < 5 else {"*"})}
    rows = {(method, path) for method, path, _, _ in ROWS}
    assert declared - rows == set(), f"routes without a row in ROWS (deny by default): {sorted(declared - rows)}"
    assert rows - declared == set(), f"rows for routes the API does not have: {sorted(rows - declared)}"
    assert len(ROWS) == len(rows)
    from workbench.api import build_api

    api = build_api(wb)  # and every route was declared with its rule (a route added around api.route has none)
    assert set(api.rules) == rows
    assert {rule.action for rule in api.rules.values()} <= {"read", "create", "change", "public"}
    assert [key for key, rule in api.rules.items() if rule.action == "public"] == [("*", "/api/v1/{rest:path}")]
    assert all(rule.owned for rule in api.rules.values() if rule.action == "change")


MALFORMED = {"content": b"{this is not json", "headers": {"Content-Type": "application/json"}}


@pytest.mark.parametrize("method,path,expected,call", ROWS, ids=[f"{m} {p}" for m, p, _, _ in ROWS])
def test_route_matrix(module_wb, world, method, path, expected, call):
    wb = module_wb
    client = TestClient(api_app(wb))
    statuses = dict(zip(ACTORS, map(int, expected.split())))
    got = {}
    for who in ACTORS:
        whose = "other" if who in ("editor_other", "admin") else "own"
        request = call(world, whose, who)
        headers = actor_headers(wb, world.team, who)
        refused = statuses[who] in (401, 403)
        if refused and method != "GET":  # a refused caller's body is never read: a malformed one still gets 401/403
            request = {"url": request["url"], **MALFORMED, "headers": {**MALFORMED["headers"], **headers}}
        else:
            request = {**request, "headers": headers}
        before = dump(wb) if refused else None
        logged = _logged(wb)
        response = client.request("GET" if method == "*" else method, **request)
        got[who] = response.status_code
        after = _logged(wb)
        new = after[: len(after) - len(logged)]  # newest first
        if response.status_code < 300 and (method, path) in RECORDS:
            user = {"viewer": "vic", "admin": "ada"}.get(who, "ed")
            token = {"read_token": "notebook", "write_token": "ci"}.get(who)
            assert new == [(user, token, *RECORDS[(method, path)])], (who, new)
        else:
            assert new == [], (who, new)
        if response.status_code >= 400:
            assert set(response.json()) <= {"error", "status", "problems"} and response.json()["error"], response.text
        if refused:
            assert dump(wb) == before, f"{who}: a refused {method} {path} changed the database"
    assert got == statuses, {who: (got[who], statuses[who]) for who in ACTORS if got[who] != statuses[who]}
