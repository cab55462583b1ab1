"""`workbench label`: create, import, status, export and train through the CLI, with their JSON contracts and
the usual exit codes and line-numbered errors. No job runs (the hand-off run is only queued)."""
from __future__ import annotations

import csv
import json

from sqlalchemy import select, update

from storage.models import QUEUED, LabelItem, Run


def _pool(tmp_path, n=24):
    path = tmp_path / "tickets.csv"
    path.write_text("id,text\n" + "".join(f"k{i},ticket about thing {i}\n" for i in range(n)), encoding="utf-8")
    return path


def test_create_import_status_export_and_train(cli, wb, tmp_path):
    code, out, err = cli("label", "create", str(_pool(tmp_path)), "--labels", "billing: money,bug", "--name",
                         "tickets", "--json")
    assert code == 0, err
    project = json.loads(out)
    assert (project["name"], project["pool"], project["labelled"]) == ("tickets", 24, 0)
    assert [label["name"] for label in project["labels"]] == ["billing", "bug"]
    pid = str(project["id"])

    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\n" + "".join(f"k{i},{'billing' if i % 2 else 'bug'}\n" for i in range(20)),
                      encoding="utf-8")
    code, out, err = cli("label", "import", pid, str(labels), "--json")
    assert code == 0, err
    assert json.loads(out)["imported"] == 20
    with wb.db.session() as session:
        assert session.scalar(select(LabelItem.labelled_by).where(LabelItem.external_id == "k3"))

    code, out, err = cli("label", "status", pid, "--json")
    status = json.loads(out)
    assert (status["labelled"], status["per_class"]) == (20, {"billing": 10, "bug": 10})
    assert status["estimate"] is None and status["next_items"][0] == "ticket about thing 20"
    code, out, _ = cli("label", "status", pid)
    assert "20 of 24 labelled" in out and "next to label:" in out
    code, out, _ = cli("label", "list", "--json")
    assert [(p["id"], p["labelled"]) for p in json.loads(out)] == [(project["id"], 20)]

    target = tmp_path / "out.csv"
    code, out, err = cli("label", "export", pid, "--output", str(target))
    assert code == 0 and out.strip() == str(target)
    with target.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["id", "text", "label", "labelled_by", "labelled_at", "random_pick"]
    assert len(rows) == 24 and rows[1]["label"] == "billing" and rows[23]["label"] == ""

    with wb.db.session() as session:  # the embed job and the refit it queued are done
        session.execute(update(Run).values(status="succeeded"))
    code, out, err = cli("label", "train", pid, "--json")
    assert code == 0, err
    queued = json.loads(out)
    assert queued["status"] == QUEUED
    with wb.db.session() as session:
        run = session.get(Run, queued["id"])
        assert (run.kind, run.label_project_id) == ("train", project["id"])


def test_errors_are_one_line_each_with_the_usual_exit_codes(cli, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine", "label": "spam"}\n{"text": broken\n{"text": "x", "label": "eggs"}\n',
                   encoding="utf-8")
    code, _, err = cli("label", "create", str(bad), "--labels", "spam,ham")
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("bad.jsonl:2: error: broken JSON")
    assert lines[1].startswith("bad.jsonl:3, column 'label': error: the label 'eggs' is not in")
    code, _, err = cli("label", "status", "99")
    assert code == 3 and "labelling project 99 does not exist" in err
    code, _, err = cli("label", "export", "0", "--output", str(tmp_path / "x.csv"))
    assert code == 3
