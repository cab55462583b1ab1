"""The labelling service (workbench.services.labelling) on real databases: creating a project from each file
format, line-numbered errors, claims that never collide (SQLite and PostgreSQL), undo and relabel with their
history, export and import, the hand-off to a dataset and a run, and items sent back by an audit. No job runs:
the embed and refit jobs are only checked to be queued."""
from __future__ import annotations

import csv
import datetime as dt
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from storage.models import (EVENT_LABEL, FAILED, KIND_LABEL_EMBED, KIND_LABEL_REFIT, QUEUED, SUCCEEDED, Audit, LabelEstimate,
                            LabelEvent, LabelItem, LabelProject, Run, utcnow)
from tests.queue_support import qwb, second_workbench  # noqa: F401
from workbench.errors import ConfigError, DataValidationError, InvalidState
from workbench.services import datasets
from workbench.services import labelling as lab


def _pool(tmp_path: Path, n: int = 30, name: str = "pool.csv") -> Path:
    path = tmp_path / name
    path.write_text("id,text\n" + "".join(f"t{i},text number {i}\n" for i in range(n)), encoding="utf-8")
    return path


def _items(wb, project_id: int) -> dict[str, LabelItem]:
    with wb.db.session() as session:
        return {i.external_id: i for i in session.scalars(select(LabelItem).where(LabelItem.project_id == project_id))}


def _jobs(wb, project_id: int, kind: str) -> list[Run]:
    with wb.db.session() as session:
        return list(session.scalars(select(Run).where(Run.label_project_id == project_id, Run.kind == kind)))


@pytest.mark.parametrize("name, content, multi", [
    ("pool.csv", 'id,category,text,label\na,x,"one, quoted",spam\nb,y,two,\nc,z,three,ham\n', False),
    ("pool.tsv", "id\ttext\tlabel\na\tone, quoted\tspam\nb\ttwo\t\nc\tthree\tham\n", False),
    ("pool.jsonl", '{"id": "a", "text": "one, quoted", "label": ["spam"]}\n{"id": "b", "text": "two"}\n'
                   '{"id": "c", "text": "three", "label": ["ham", "spam"]}\n', True),
    ("pool.txt", "one, quoted\n\ntwo\nthree\n", False),
])
def test_a_project_reads_each_format_with_ids_and_the_labels_already_given(wb, tmp_path, name, content, multi):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    project = lab.create_project(wb, path, ["spam: unwanted", "ham"], multi_label=multi, user="ann")
    items = _items(wb, project["id"])
    assert project["pool"] == 3 and [c["key"] for c in project["labels"]] == ["1", "2"]
    assert project["labels"][0]["description"] == "unwanted"
    texts = sorted(i.text for i in items.values())
    assert texts == ["one, quoted", "three", "two"]
    if name.endswith(".txt"):  # no id column: the line names the text
        assert sorted(items) == ["1", "3", "4"] and project["labelled"] == 0
        return
    expected = {"a": ["spam"], "b": None, "c": ["ham", "spam"]} if multi else {"a": "spam", "b": None, "c": "ham"}
    assert {k: i.label for k, i in items.items()} == expected
    assert items["a"].labelled_by == "ann" and items["b"].labelled_at is None
    with wb.db.session() as session:  # unlabelled is SQL NULL (what "label IS NULL" finds), not JSON null
        assert session.scalar(select(func.count()).select_from(LabelItem).where(LabelItem.label.is_(None))) == 1
        events = session.scalars(select(LabelEvent).order_by(LabelEvent.item_id)).all()
    assert [(e.action, e.user, e.label) for e in events] == [(EVENT_LABEL, "ann", expected["a"]),
                                                            (EVENT_LABEL, "ann", expected["c"])]
    assert [j.status for j in _jobs(wb, project["id"], KIND_LABEL_EMBED)] == [QUEUED]
    assert (Path(project["folder"]) / "source" / name).read_text(encoding="utf-8") == content


def test_a_bad_file_gets_line_numbered_errors_and_nothing_is_stored(wb, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,text,label\na,fine,spam\nb,unknown label,eggs\na,repeated id,\nc,ragged,ham,extra\n"
                    "d,,\n", encoding="utf-8")
    with pytest.raises(DataValidationError) as caught:
        lab.create_project(wb, path, "spam,ham")
    found = [(p.line, p.message) for p in caught.value.problems]
    assert [line for line, _ in found] == [3, 4, 5]
    assert "'eggs' is not in the project's label set" in found[0][1]
    assert "the id 'a' is repeated (first on line 2)" in found[1][1]
    assert "ragged row" in found[2][1]
    assert all(p.file == "bad.csv" and p.hint for p in caught.value.problems)
    with wb.db.session() as session:
        assert session.scalar(select(func.count()).select_from(LabelProject)) == 0
        assert session.scalar(select(func.count()).select_from(LabelItem)) == 0
    assert not (wb.settings.home / "labelling").exists() or not any((wb.settings.home / "labelling").iterdir())
    binary = tmp_path / "book.xlsx"
    binary.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    with pytest.raises(DataValidationError, match="not a text file"):
        lab.create_project(wb, binary, "spam,ham")
    headless = tmp_path / "headless.csv"
    headless.write_text("first text\nsecond text\n", encoding="utf-8")
    created = lab.create_project(wb, headless, "spam,ham")
    assert created["pool"] == 1 and "headless.csv:1, column 'first text': warning" in created["warnings"][0]
    with pytest.raises(ConfigError, match="at least two labels"):
        lab.create_project(wb, _pool(tmp_path), "spam")


def test_two_labellers_never_hold_the_same_item(qwb, tmp_path):
    """Two users label a 40-text pool at once, each through its own connection pool (SQLite and PostgreSQL):
    every item is claimed and labelled exactly once, and what the two hold at one moment always differs."""
    project = lab.create_project(qwb, _pool(tmp_path, 40), "spam,ham", refit_every=1000)
    other = second_workbench(qwb.settings)
    held: dict[str, int] = {}
    clashes: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    # Both claim their first item before either labels: on SQLite one labeller's back-to-back writes could
    # otherwise keep the other's busy handler waiting until the pool was done (seen once on a loaded machine:
    # bob labelled all 40), and the test would not have had two labellers at all.
    start, both_hold, guard = threading.Barrier(2), threading.Barrier(2, timeout=30), threading.Lock()

    def label_all(wb, user: str) -> None:
        try:
            start.wait()
            item = lab.next_item(wb, project["id"], user)
            both_hold.wait()
            while item is not None:
                with guard:
                    held[user] = item["item_id"]
                    if len(set(held.values())) < len(held):
                        clashes.append(tuple(held.values()))
                item = lab.give_label(wb, project["id"], item["item_id"], "spam", user)["next"]
                with guard:
                    held.pop(user, None)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=label_all, args=(w, u)) for w, u in ((qwb, "ann"), (other, "bob"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    other.close()
    assert not errors and not clashes
    with qwb.db.session() as session:
        per_item = session.execute(select(LabelEvent.item_id, func.count()).group_by(LabelEvent.item_id)).all()
        users = set(session.scalars(select(LabelEvent.user)))
    assert len(per_item) == 40 and all(count == 1 for _, count in per_item)
    assert users == {"ann", "bob"}
    assert lab.next_item(qwb, project["id"], "ann") is None


KILLED_SERVER = """
import json, os, signal, sys
from storage.context import open_workbench
from storage.settings import Settings
from workbench.services import labelling
wb = open_workbench(Settings.from_env({}, home=sys.argv[1]))
item = labelling.next_item(wb, int(sys.argv[2]), "ann")
answer = labelling.give_label(wb, int(sys.argv[2]), item["item_id"], "spam", "ann")
print(json.dumps({"labelled": item["item_id"], "next": answer["next"]["item_id"]}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_server_killed_between_two_labels_loses_nothing(wb, tmp_path):
    """kill -9 of the serving process right after a label: the label, its event and the claim of the next item
    are in the database, and the labeller goes on with that item."""
    pid = lab.create_project(wb, _pool(tmp_path, 5), "spam,ham")["id"]
    done = subprocess.run([sys.executable, "-c", KILLED_SERVER, str(wb.settings.home), str(pid)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == -9, done.stderr
    seen = json.loads(done.stdout)
    assert lab.item_history(wb, seen["labelled"])[0]["label"] == "spam"
    again = lab.next_item(wb, pid, "ann")
    assert again["item_id"] == seen["next"]
    assert lab.give_label(wb, pid, again["item_id"], "ham", "ann")["labelled"] == 2


def test_claims_follow_the_tiers_come_back_on_refresh_and_expire(wb, tmp_path):
    project = lab.create_project(wb, _pool(tmp_path, 6), "spam,ham")
    pid, items = project["id"], _items(wb, project["id"])
    with wb.db.session() as session:
        for key, rank in (("t4", 0), ("t2", 1)):
            session.execute(update(LabelItem).where(LabelItem.id == items[key].id).values(rank=rank))
        session.execute(update(LabelItem).where(LabelItem.id == items["t5"].id).values(relabel=True, label="ham"))
    order = []
    for user in ("u1", "u2", "u3", "u4"):
        order.append(lab.next_item(wb, pid, user)["external_id"])
    assert order == ["t5", "t4", "t2", "t0"]  # relabel, then the ranking, then unranked by position
    assert lab.next_item(wb, pid, "u2")["external_id"] == "t4"  # a refresh shows the same text
    skipped = lab.skip_item(wb, pid, items["t4"].id, "u2")["next"]
    assert skipped["external_id"] == "t1"
    later = utcnow() + dt.timedelta(seconds=lab.LEASE_SECONDS + 1)
    assert lab.next_item(wb, pid, "u5", now=later)["external_id"] == "t5"  # u1's lease ran out
    with pytest.raises(InvalidState, match="being labelled by u5"):
        lab.give_label(wb, pid, items["t5"].id, "spam", "u1", now=later)
    rest = [lab.next_item(wb, pid, f"v{i}")["external_id"] for i in range(2)]
    assert rest == ["t3", "t4"]  # the skipped item comes last


def test_browsers_of_one_user_hold_their_own_claims(wb, tmp_path):
    """Sign-in off: every browser is the user "", told apart by the claimant the UI passes."""
    pid = lab.create_project(wb, _pool(tmp_path, 4), "spam,ham")["id"]
    one = lab.next_item(wb, pid, "", claimant="browser-1")
    two = lab.next_item(wb, pid, "", claimant="browser-2")
    assert one["item_id"] != two["item_id"]
    with pytest.raises(InvalidState, match="being labelled by browser-2"):
        lab.give_label(wb, pid, two["item_id"], "spam", "", claimant="browser-1")
    following = lab.give_label(wb, pid, one["item_id"], "spam", "", claimant="browser-1")["next"]
    assert following["item_id"] not in (one["item_id"], two["item_id"])
    assert _items(wb, pid)["t0"].labelled_by == "" and _items(wb, pid)["t2"].claimed_by == "browser-1"
    assert lab.undo_last(wb, pid, "", claimant="browser-1")["next"]["item_id"] == one["item_id"]
    assert _items(wb, pid)["t2"].claimed_by is None  # the undone item replaced browser-1's other claim


def test_undo_and_relabel_keep_the_history(qwb, tmp_path):
    wb = qwb
    project = lab.create_project(wb, _pool(tmp_path, 5), "spam,ham")
    pid = project["id"]
    first = lab.next_item(wb, pid, "ann")
    answer = lab.give_label(wb, pid, first["item_id"], "spam", "ann")
    assert answer["labelled"] == 1 and answer["next"]["item_id"] != first["item_id"]
    lab.give_label(wb, pid, first["item_id"], "ham", "bob")  # a change by someone else
    undone = lab.undo_last(wb, pid, "bob")
    assert undone["next"]["item_id"] == first["item_id"] and undone["next"]["label"] == "spam"
    item = _items(wb, pid)["t0"]
    assert (item.label, item.labelled_by, item.relabel, item.claimed_by) == ("spam", "ann", True, "bob")
    assert lab.next_item(wb, pid, "bob")["item_id"] == first["item_id"]  # the undone item is bob's to redo
    with pytest.raises(InvalidState, match="being labelled by bob"):
        lab.undo_last(wb, pid, "ann")
    assert lab.release_claims(wb, pid, "bob") == 1
    lab.undo_last(wb, pid, "ann")
    item = _items(wb, pid)["t0"]
    assert item.label is None and item.labelled_by is None and item.labelled_at is None
    history = lab.item_history(wb, first["item_id"])
    assert [(h["action"], h["user"], h["label"], h["previous"], h["undone"]) for h in history] == [
        ("label", "ann", "spam", None, True), ("label", "bob", "ham", "spam", True),
        ("undo", "bob", "spam", "ham", False), ("undo", "ann", None, "spam", False)]
    assert history[2]["undoes"] == history[1]["id"]
    with pytest.raises(InvalidState, match="nothing to undo"):
        lab.undo_last(wb, pid, "bob")
    with pytest.raises(ConfigError, match="'eggs' is not a label"):
        lab.give_label(wb, pid, first["item_id"], "eggs", "ann")


def test_a_refit_is_queued_every_few_labels_and_never_twice(wb, tmp_path):
    project = lab.create_project(wb, _pool(tmp_path, 20), "spam,ham", refit_every=3)
    pid = project["id"]
    item = lab.next_item(wb, pid, "ann")

    def label(times: int) -> list:
        nonlocal item
        refits = []
        for _ in range(times):
            answer = lab.give_label(wb, pid, item["item_id"], "ham", "ann")
            refits.append(answer["refit"])
            item = answer["next"]
        return refits

    def end_jobs(status: str) -> None:
        with wb.db.session() as session:
            session.execute(update(Run).where(Run.label_project_id == pid)
                            .values(status=status, finished_at=utcnow()))

    assert label(3) == [None] * 3  # the pool is not embedded yet
    end_jobs(FAILED)
    assert label(1) == [None]  # nor will it be: the embed job failed
    end_jobs(SUCCEEDED)
    refits = label(3)
    assert refits[0] is not None and refits[1:] == [None, None]
    assert [r.status for r in _jobs(wb, pid, KIND_LABEL_REFIT)] == [QUEUED]
    assert lab.queue_refit(wb, pid) is None
    with wb.db.session() as session:
        session.execute(update(Run).where(Run.kind == KIND_LABEL_REFIT)
                        .values(status=FAILED, finished_at=utcnow()))
    refits = label(3)  # after a failed refit: refit_every more labels first
    assert refits[:2] == [None, None] and refits[2] is not None


def test_status_counts_classes_and_shows_the_curve(qwb, tmp_path):
    wb = qwb
    path = tmp_path / "multi.jsonl"
    path.write_text("".join(json.dumps({"text": f"t{i}", "label": lbl}) + "\n"
                            for i, lbl in enumerate([["a"], ["a", "b"], [], None, None])), encoding="utf-8")
    project = lab.create_project(wb, path, "a,b", multi_label=True)
    with wb.db.session() as session:
        for labels, value in ((10, 0.5), (20, 0.7)):
            session.add(LabelEstimate(project_id=project["id"], labels=labels, metric="macro_f1", estimate=value,
                                      low=value - 0.1, high=value + 0.1, majority=0.4, source="cross-validation"))
    status = lab.project_status(wb, project["id"])
    assert (status["labelled"], status["pool"], status["per_class"]) == (3, 5, {"a": 2, "b": 1})
    assert status["labels_per_minute"] == 0  # the file's labels were not given by anyone just now
    assert status["estimate"]["estimate"] == 0.7 and [p["labels"] for p in status["curve"]] == [10, 20]
    assert status["majority"] == 0.4 and status["next_items"] == ["t3", "t4"] and status["stop_hint"] is None
    with wb.db.session() as session:  # three refits in a row that changed under 1 % of the predictions
        session.add_all(LabelEstimate(project_id=project["id"], labels=labels, metric="macro_f1", estimate=0.8,
                                      low=0.7, high=0.9, majority=0.4, source="cross-validation", agreement=0.995)
                        for labels in (50, 60, 70))
    assert lab.project_status(wb, project["id"])["stop_hint"].startswith("You could stop here")
    assert status["jobs"]["embed"]["status"] == QUEUED and status["jobs"]["refit"] is None
    item = lab.next_item(wb, project["id"], "ann")
    lab.give_label(wb, project["id"], item["item_id"], "b|a", "ann")
    assert _items(wb, project["id"])["4"].label == ["a", "b"]
    assert lab.project_status(wb, project["id"])["labels_per_minute"] == 0.1


def test_export_escapes_formulas_and_jsonl_is_exact_and_import_reads_it_back(wb, tmp_path):
    path = tmp_path / "pool.csv"
    path.write_text('id,text\nx1,"=HYPERLINK(""http://x"")"\nx2,"line one\nline two"\nx3,plain\n',
                    encoding="utf-8")
    pid = lab.create_project(wb, path, "spam,ham")["id"]
    item = lab.next_item(wb, pid, "ann")
    lab.give_label(wb, pid, item["item_id"], "spam", "ann")
    out = lab.export_labels(wb, pid, tmp_path / "out" / "labels.csv")
    with out.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["text"] for r in rows] == ["'=HYPERLINK(\"http://x\")", "line one\nline two", "plain"]
    assert (rows[0]["label"], rows[0]["labelled_by"], rows[1]["label"]) == ("spam", "ann", "")
    jsonl = lab.export_labels(wb, pid, tmp_path / "labels.jsonl", fmt="jsonl")
    records = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    labelled_at = _items(wb, pid)["x1"].labelled_at.isoformat(timespec="seconds") + "Z"
    assert records[0] == {"id": "x1", "text": '=HYPERLINK("http://x")', "label": "spam", "labelled_by": "ann",
                          "labelled_at": labelled_at, "random_pick": False}
    assert records[1]["label"] is None and records[1]["labelled_at"] is None
    rows[1]["label"] = "ham"
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = lab.import_labels(wb, pid, out, "bob")
    assert (result["imported"], result["unchanged"], result["labelled"]) == (1, 1, 2)
    assert _items(wb, pid)["x2"].label == "ham" and _items(wb, pid)["x2"].labelled_by == "bob"
    bad = tmp_path / "bad.csv"
    bad.write_text("id,label\nx3,eggs\nnope,ham\nx3,spam\n", encoding="utf-8")
    with pytest.raises(DataValidationError) as caught:
        lab.import_labels(wb, pid, bad, "bob")
    assert [p.line for p in caught.value.problems] == [2, 3]
    assert _items(wb, pid)["x3"].label is None  # all or nothing


def test_train_from_labels_holds_out_the_random_share(wb, tmp_path):
    pid = lab.create_project(wb, _pool(tmp_path, 70), "spam,ham")["id"]
    items = _items(wb, pid)
    random_keys = {f"t{i}" for i in range(0, 70, 3)}  # 24 random-share items
    with wb.db.session() as session:
        session.execute(update(LabelItem).where(LabelItem.external_id.in_(random_keys))
                        .values(random_pick=True))
    for n, key in enumerate(sorted(items, key=lambda k: items[k].position)[:60]):
        lab.give_label(wb, pid, items[key].id, "spam" if n % 2 else "ham", "ann")
    run_id = lab.train_from_labels(wb, pid, "ann")
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        assert (run.status, run.kind, run.label_project_id) == (QUEUED, "train", pid)
        dataset_id = run.dataset_id
    train, validation = datasets.dataset_files(wb, dataset_id)
    held = {json.loads(line)["text"] for line in validation.read_text(encoding="utf-8").splitlines()}
    expected = {items[k].text for k in random_keys if items[k].position < 60}
    assert held == expected and len(held) == 20
    trained = {json.loads(line)["text"] for line in train.read_text(encoding="utf-8").splitlines()}
    assert len(trained) == 40 and not trained & held


def test_a_finished_run_labels_the_rest_of_the_pool(wb, tmp_path):
    from tests.predict_support import trained_run

    pid = lab.create_project(wb, _pool(tmp_path, 5), "neg,pos")["id"]
    item = lab.next_item(wb, pid, "ann")
    lab.give_label(wb, pid, item["item_id"], "pos", "ann")
    job_id = lab.predict_pool(wb, pid, trained_run(wb))
    with wb.db.session() as session:
        job = session.get(Run, job_id)
        assert (job.kind, job.status, job.label_project_id) == ("predict", QUEUED, pid)
        source = Path(job.spec["input_path"])
    with source.open(encoding="utf-8", newline="") as handle:
        assert [row["id"] for row in csv.DictReader(handle)] == ["t1", "t2", "t3", "t4"]


def test_send_to_relabel_from_an_audit(wb, tmp_path):
    """An audit's ranking, written directly (training one is too slow here): its flagged examples go to an
    existing project's items of the same text, or to a new project of the audit's examples."""
    folder = tmp_path / "audit"
    (folder / "fold-0").mkdir(parents=True)
    records = [{"text": f"review {i}", "label": "pos" if i % 2 else "neg", "_example": f"train:{i}"}
               for i in range(6)]
    (folder / "fold-0" / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = [{"rank": 1, "example": "train:1", "text": "review 1", "given": "pos", "suggested": "neg"},
            {"rank": 2, "example": "train:4", "text": "review 4", "given": "neg", "suggested": "pos"}]
    (folder / "issues.json").write_text(json.dumps(rows))
    with wb.db.session() as session:
        audit = Audit(name="audit of reviews", task="text-classification", spec={"folds": 1}, folder=str(folder),
                      summary={"issues": 2, "examples": 6, "labels": ["neg", "pos"]})
        session.add(audit)
        session.flush()
        audit_id = audit.id
    created = lab.send_to_relabel(wb, audit_id, user="ann")
    pid = created["project_id"]
    assert (created["sent"], created["not_found"]) == (2, [])
    items = _items(wb, pid)
    assert len(items) == 6 and items["train:1"].label == "pos" and items["train:1"].relabel
    assert [lab.next_item(wb, pid, u)["external_id"] for u in ("a", "b")] == ["train:1", "train:4"]
    pool = tmp_path / "pool.csv"
    pool.write_text("text\nreview 4\nsomething else\n", encoding="utf-8")
    other = lab.create_project(wb, pool, "neg,pos")["id"]
    sent = lab.send_to_relabel(wb, audit_id, other)
    assert (sent["sent"], sent["not_found"]) == (1, ["train:1"])
    assert lab.next_item(wb, other, "ann")["text"] == "review 4"


def test_the_loop_through_the_real_jobs(wb, tmp_path):
    """The service with the real embed and refit jobs (a tiny BERT as the frozen encoder): the first item is
    the cold start's, the tenth label queues a refit, and after it the status has an estimate and the next
    item a suggestion."""
    from jobs.process import run_job
    from jobs.queue import table as queue
    from tests.tiny_models import classification_records, distinct, tiny_bert

    records = distinct(classification_records(40, seed=3))
    pool = tmp_path / "reviews.jsonl"
    pool.write_text("".join(json.dumps({"id": f"r{i}", "text": r["text"]}) + "\n" for i, r in enumerate(records)))
    gold = {f"r{i}": r["label"] for i, r in enumerate(records)}
    project = lab.create_project(wb, pool, ["pos: a review that liked the film", "neg: a review that disliked it"],
                                 model=str(tiny_bert(tmp_path / "bert")))

    def execute(run_id: int) -> None:
        claimed = queue.claim(wb.db, "test-worker", only=[run_id])
        assert run_job.execute(wb, run_id, claimed.attempt, train_fn=None) == 0

    execute(project["embed_job"])
    item = lab.next_item(wb, project["id"], "ann")
    assert _items(wb, project["id"])[item["external_id"]].rank == 0 and item["suggestion"] in ("pos", "neg")
    refit = None
    for _ in range(10):
        answer = lab.give_label(wb, project["id"], item["item_id"], gold[item["external_id"]], "ann")
        item, refit = answer["next"], answer["refit"] or refit
    assert refit is not None
    execute(refit)
    status = lab.project_status(wb, project["id"])
    assert status["labelled"] == 10 and status["embedded"] == 40 and status["jobs"]["refit"]["status"] == SUCCEEDED
    assert status["estimate"]["labels"] == 10 and len(status["curve"]) == 1
    following = lab.next_item(wb, project["id"], "ann")
    assert following["suggestion"] in ("pos", "neg") and 0 <= following["confidence"] <= 1
