"""The REST API drives a whole flow against a real server (issue 43): docs/api.md's own httpx script uploads a
file, trains a tiny config-built model, waits, reads the metrics, predicts a file, downloads the output and the
model, publishes a playground and predicts through ``/api/v1/predict/<slug>``, all with an admin's API token."""
from __future__ import annotations

import re
import zipfile

import pytest

from tests.access_support import team as make_team
from tests.conftest import ROOT
from tests.playground_support import ServerThread
from tests.tiny_models import tiny_bert

pytestmark = pytest.mark.e2e


def docs_script() -> str:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/api.md has one Python example"
    return blocks[0]


def test_docs_example_uses_only_httpx():
    imports = set(re.findall(r"^(?:import|from) (\w+)", docs_script(), re.M))
    assert imports <= {"os", "time", "pathlib", "httpx"}, imports


def test_whole_flow_through_the_api(wb, tmp_path, monkeypatch, caplog):
    from fastapi import FastAPI

    from workbench.api import mount_api
    from workbench.playground.mount import mount_playgrounds
    from workbench.services import accounts
    from workbench.services.workers import start_embedded_worker

    caplog.set_level("INFO")
    team = make_team(wb)
    token = accounts.create_token(wb, "ada", "flow script", "write", by=team.admin)["token"]
    model = tiny_bert(tmp_path / "tiny-bert")  # a folder on the server: an admin's token may name it
    train = tmp_path / "reviews.csv"
    rows = [("great film loved it", "pos"), ("wonderful acting", "pos"), ("a joy to watch", "pos"),
            ("terrible film hated it", "neg"), ("awful and boring", "neg"), ("a pain to watch", "neg")]
    train.write_text("text,label\n" + "".join(f"{t} {i},{label}\n" for i in range(8) for t, label in rows))
    new = tmp_path / "new_reviews.csv"
    new.write_text("text\nloved it\nhated it\nboring\n")

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    mount_api(app, wb)
    mount_playgrounds(app, wb)
    worker = start_embedded_worker(wb)
    try:
        with ServerThread(app) as server:
            for key, value in {"WORKBENCH_URL": server.url, "WORKBENCH_TOKEN": token, "TRAIN_FILE": str(train),
                               "PREDICT_FILE": str(new), "WORKBENCH_MODEL": str(model)}.items():
                monkeypatch.setenv(key, value)
            monkeypatch.chdir(tmp_path)
            scope: dict = {"__name__": "docs_api_example"}
            exec(compile(docs_script(), "docs/api.md", "exec"), scope)  # noqa: S102 - our own documentation
    finally:
        worker.stop()

    assert "accuracy" in scope["metrics"]["metrics"]
    lines = scope["predictions"].splitlines()
    assert len(lines) == 4 and "loved it" in lines[1]
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        assert "config.json" in archive.namelist()
    answer = scope["answer"]
    assert answer and str(answer).count("pos") + str(answer).count("neg") >= 1, answer

    done = {(row["action"], row["target_kind"], row["token"]) for row in accounts.list_activity(wb)}
    for action, kind in (("create", "dataset"), ("create", "run"), ("download", "run"), ("publish", "playground"),
                         ("token_use", "token")):
        assert (action, kind, "flow script") in done, (action, kind, sorted(done))
    assert token not in str(accounts.list_activity(wb))
    assert token not in caplog.text and scope["playground"]["token"] not in caplog.text
