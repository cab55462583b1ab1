"""One finished label audit, trained once per test run and copied cheaply for each test that uses it.

The audit of 150 reviews with every 15th label flipped (3 folds fine-tuning the packaged MiniLM, the
audit's default model) takes a minute or two of CPU; tests/test_audits.py and the browser test of the audit
panel both need exactly that audit, finished. ``build_review_audit`` runs it once in a template home (the
``review_audit`` fixture of tests/conftest.py; under pytest-xdist the first worker that asks builds it and
the other waits, ``shared_review_audit``). ``clone_home`` gives each test a home of its own whose database
is a copy of the template's, so the decisions, the corrected copies and any new audit a test makes land in
its own home and database only. The copied rows still point at the template's files (the dataset, the fold
files, the fold runs' outputs and the ranking), which nothing writes once the audit has finished:
``assert_untouched`` checks after each test that none of them changed.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

from tests.tiny_models import classification_records, distinct, write_jsonl

# The packaged MiniLM knows "great" from "terrible" after a few steps (what tests/test_audits.py measures was
# tuned for fine-tuned folds).
PRETRAINED = {"epochs": 2, "batch_size": 8, "learning_rate": 1e-4, "max_length": 16, "select_by": "last",
              "method": "finetune"}
REVIEWS, FOLDS = 150, 3
DB_FILE = "workbench.db"


@dataclasses.dataclass(frozen=True)
class ReviewAudit:
    """The finished template: its home (read-only for every test), the dataset, the audit and its flips."""

    home: Path
    dataset_id: str
    audit_id: int
    flipped: tuple[int, ...]
    issues: int
    files: dict  # fingerprint(home) right after the audit finished

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({**dataclasses.asdict(self), "home": str(self.home)}))

    @classmethod
    def load(cls, path: Path) -> "ReviewAudit":
        fields = json.loads(path.read_text())
        return cls(**{**fields, "home": Path(fields["home"]), "flipped": tuple(fields["flipped"]),
                      "files": {name: tuple(value) for name, value in fields["files"].items()}})


def flip(records: list[dict], every: int) -> list[int]:
    """Flip the label of every ``every``-th record from the fourth on; returns their positions."""
    flipped = list(range(3, len(records), every))
    for i in flipped:
        records[i]["label"] = "neg" if records[i]["label"] == "pos" else "pos"
    return flipped


def fingerprint(home: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``home`` but the database, which each test copies."""
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(home.rglob("*"))
            if p.is_file() and not p.name.startswith(DB_FILE)}


def finish_audit(wb, audit_id: int) -> dict:
    """Run the audit's folds on a worker thread of this process until the audit has finished."""
    from jobs.queue.worker import start_embedded_worker
    from workbench.services import audits

    worker = start_embedded_worker(wb, max_jobs=1, gpus=[])
    try:
        record = audits.wait_for_audit(wb, audit_id, timeout=540)
    finally:
        worker.stop()
    assert record["state"] == audits.FINISHED, record
    return record


def build_review_audit(home: Path) -> ReviewAudit:
    """Import the 150 reviews (10 flipped), audit them in 3 folds on a worker thread, wait for the ranking."""
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.services import audits, datasets

    records = distinct(classification_records(REVIEWS))
    flipped = flip(records, 15)
    wb = open_workbench(Settings.from_env({}, home=str(home)))
    try:
        dataset = datasets.import_dataset(wb, write_jsonl(home / "reviews.jsonl", records), "text-classification",
                                          name="reviews", validation_fraction=0.0, tokenizer=False)
        audit_id = audits.create_audit(wb, dataset.id, folds=FOLDS, train=PRETRAINED)
        finish_audit(wb, audit_id)
        issues = len(audits.audit_issues(wb, audit_id))
    finally:
        wb.close()
    return ReviewAudit(home, dataset.id, audit_id, tuple(flipped), issues, fingerprint(home))


def shared_review_audit(home: Path) -> ReviewAudit:
    """The audit in ``home``, built by the first process of the test run that asks for it; the others (the
    pytest-xdist workers) wait for it and then read what it wrote next to it."""
    from filelock import FileLock

    home.parent.mkdir(parents=True, exist_ok=True)
    record = home.with_name(home.name + ".json")
    with FileLock(str(home.with_name(home.name + ".lock"))):
        if record.is_file():
            return ReviewAudit.load(record)
        shutil.rmtree(home, ignore_errors=True)  # what a build that failed left
        home.mkdir()
        audit = build_review_audit(home)
        audit.save(record)
        return audit


def clone_home(template: ReviewAudit, home: Path) -> Path:
    """A new home whose SQLite database is a consistent copy of the template's (WAL included)."""
    home.mkdir(parents=True, exist_ok=True)
    source, target = sqlite3.connect(template.home / DB_FILE), sqlite3.connect(home / DB_FILE)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    return home


def assert_untouched(template: ReviewAudit) -> None:
    """Fail when a test added, removed or rewrote a file of the template (everything but its database)."""
    now = fingerprint(template.home)
    changed = sorted(path for path in set(template.files) | set(now) if template.files.get(path) != now.get(path))
    assert not changed, f"a test changed the shared audit's files, which are read-only: {changed[:5]}"
