"""`workbench publish|unpublish|playgrounds`, run as real processes against a real SQLite home.

A playground published by the CLI while a server is already running must be
served by that server at once (the DB is the source of truth), and
``--standalone --share`` must say plainly when there is no internet.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from tests import playground_support as ps

pytestmark = pytest.mark.e2e
# Generous: the first request to a playground builds its page, and CI machines are slow and shared.
HTTP = httpx.Client(timeout=120)
WORKBENCH = [sys.executable, "-c", "from workbench.cli import entry; entry()"]


def cli(home, *args, timeout=120):
    env = {**os.environ, "WORKBENCH_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([*WORKBENCH, *args], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return ps.train_tiny("text-classification", tmp_path_factory.mktemp("cli-model") / "cls")


def test_cli_publish_is_served_by_a_running_server(wb, trained):
    from fastapi import FastAPI

    from workbench.playground.mount import mount_playgrounds

    run_id = ps.add_run(wb, "text-classification", trained, name="Review sentiment")
    app = FastAPI()
    mount_playgrounds(app, wb)
    with ps.ServerThread(app) as server:
        done = cli(wb.settings.home, "publish", str(run_id), "--generate-token", "--json")
        assert done.returncode == 0, done.stderr
        info = json.loads(done.stdout)
        assert info["slug"].startswith(f"review-sentiment-{run_id}-") and len(info["token"]) >= 16
        assert info["url"].endswith(f"/play/{info['slug']}/?token={info['token']}")
        assert info["url"].startswith(f"http://127.0.0.1:{wb.settings.port}/")

        page = HTTP.get(f"{server.url}/play/{info['slug']}/?token={info['token']}")
        assert page.status_code == 200
        api = f"{server.url}{info['api_path']}"
        assert HTTP.post(api, json={"inputs": "great"}).status_code == 401
        answer = HTTP.post(api, json={"inputs": "great"}, headers={"Authorization": f"Bearer {info['token']}"})
        assert answer.status_code == 200 and answer.json()["predictions"][0]["label"] in ("neg", "pos")

        listed = json.loads(cli(wb.settings.home, "playgrounds", "--json").stdout)
        assert [p["slug"] for p in listed] == [info["slug"]] and "token" not in listed[0]

        assert cli(wb.settings.home, "unpublish", info["slug"]).returncode == 0
        assert HTTP.get(f"{server.url}/play/{info['slug']}/?token={info['token']}").status_code == 404
        assert cli(wb.settings.home, "playgrounds").stdout.strip() == "no playgrounds"

    missing = cli(wb.settings.home, "publish", "999")
    assert missing.returncode == 3 and "run 999 does not exist" in missing.stderr


@pytest.mark.timeout(240)
def test_standalone_serves_only_that_playground_and_says_when_offline(wb, trained):
    from workbench.playground.standalone import internet_reachable

    first = ps.add_run(wb, "text-classification", trained)
    other_slug = json.loads(cli(wb.settings.home, "publish", str(first), "--json").stdout)["slug"]
    port = ps.free_port()
    env = {**os.environ, "WORKBENCH_HOME": str(wb.settings.home), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([*WORKBENCH, "publish", str(first), "--standalone",
                                "--port", str(port), "--share"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any("locally only" in l or "Public link" in l for l in lines):
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
        output = "".join(lines)
        slug = next(l.split()[-1] for l in lines if l.startswith("published run"))
        assert f"http://127.0.0.1:{port}/play/{slug}/" in output
        if not internet_reachable():
            assert "Sharing needs internet" in output and "served locally only" in output
        base = f"http://127.0.0.1:{port}"
        root = HTTP.get(f"{base}/", follow_redirects=True)
        assert root.status_code == 200 and str(root.url).endswith(f"/play/{slug}/")
        assert HTTP.post(f"{base}/api/v1/predict/{slug}", json={"inputs": "fine"}).status_code == 200
        # Another published playground exists in the same DB but is not served here.
        assert HTTP.get(f"{base}/play/{other_slug}/").status_code == 404
        assert HTTP.post(f"{base}/api/v1/predict/{other_slug}", json={"inputs": "x"}).status_code == 404
    finally:
        process.terminate()
        process.wait(timeout=20)
