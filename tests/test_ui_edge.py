"""A user's mistake is one WARNING line in the server log, never a traceback: Gradio UI and playground REST API."""
from __future__ import annotations

import logging
import socket
import threading
import time

import gradio as gr
import pytest
from fastapi.testclient import TestClient

from workbench.errors import NotFound
from workbench.server import create_app
from workbench.ui.edge import guard


@pytest.fixture
def served(wb):
    """The real workbench app under uvicorn on a free loopback port (gradio_client needs a real server)."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(wb, worker=False), host="127.0.0.1", port=port,
                                          log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = server.force_exit = True  # gradio_client's event stream would hold a graceful stop
    thread.join(timeout=10)


def refusals(caplog, prefix):
    return [r for r in caplog.records if r.name.startswith(prefix) and r.levelno == logging.WARNING]


def test_refused_ui_actions_log_one_line_each_and_no_traceback(served, tmp_path, capfd, caplog):
    from gradio_client import Client, handle_file

    bad = tmp_path / "ner.conll"
    bad.write_text("John\tB-PER\nlives\tO\n\nin\tO\nBerlin B-LOC extra junk\nnow\tO\n")
    client = Client(served, verbose=False)
    capfd.readouterr()
    caplog.set_level(logging.WARNING)
    # A refused import is shown in the import status with its problems; the stored-datasets table is untouched.
    status, _, _ = client.predict(handle_file(str(bad)), "token-classification", "auto-detect", "", "", "", "", "",
                               None, 0.1, 13, api_name="/on_import")
    assert status.startswith("✘ Nothing was imported") and "ner.conll, line 5" in status
    # A refused delete is said in the delete status; the selection and the table are left as they were.
    status, selected, table = client.predict("no-such-dataset", api_name="/on_delete")
    # (the CLI hint of the service's message stays in the terminal and the log)
    assert status == "✘ Dataset **no-such-dataset** was not deleted: no dataset 'no-such-dataset'."
    assert selected == table == {"__type__": "update"}
    _, asked = client.predict("", api_name="/on_ask")
    assert asked == "✘ Pick a dataset first (click its row)."
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    lines = [r.getMessage() for r in refusals(caplog, "workbench.ui.data_tab")]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert lines[0].startswith("import refused: Nothing was imported. ner.conll:5: error: found 4 space-separated")
    assert lines[1] == ("delete refused: no dataset 'no-such-dataset'; `workbench data list` shows the stored "
                        "datasets")
    assert lines[2] == "ask refused: Pick a dataset first (click its row)."


def test_refused_rest_request_logs_one_line(wb, caplog):
    pytest.importorskip("workbench.playground.mount")
    caplog.set_level(logging.WARNING)
    with TestClient(create_app(wb, worker=False)) as client:
        answer = client.post("/api/v1/predict/no-such-playground", json={"inputs": "hi"})
    assert answer.status_code == 404
    (record,) = refusals(caplog, "workbench.playground")
    assert record.getMessage() == "predict refused (404): " + answer.json()["error"]


def test_guard_turns_workbench_errors_into_quiet_gradio_errors_and_leaves_bugs_alone(caplog):
    def on_open(name):
        if name == "bug":
            raise KeyError(name)
        raise NotFound(f"no run {name!r}")

    guarded = guard(on_open)
    with pytest.raises(gr.Error) as info:
        guarded("r1")
    assert info.value.print_exception is False and info.value.message == "no run 'r1'"
    with pytest.raises(KeyError):
        guarded("bug")
    assert [r.getMessage() for r in caplog.records] == ["open refused: no run 'r1'"]


def test_a_value_gradio_refuses_before_the_handler_is_one_line_too(served, capfd, caplog):
    """Gradio checks some input itself (a value a dropdown does not offer, a forged file path) and printed a
    traceback for each refusal; the workbench's edge makes those one WARNING line as well."""
    from gradio_client import Client

    client = Client(served, verbose=False)
    capfd.readouterr()
    caplog.set_level(logging.WARNING)
    with pytest.raises(Exception, match="is not in the list of choices"):
        client.predict(None, "no-such-label", "(any)", 0, "all", api_name="/show")  # the audit panel's filters
    assert "Traceback" not in capfd.readouterr().err
    (record,) = refusals(caplog, "workbench.ui.audit_panel")
    assert record.getMessage().startswith("show refused: Value: no-such-label is not in the list of choices")
