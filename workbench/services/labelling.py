"""Labelling projects as the UI and the CLI see them: create one from a file of texts, hand each labeller the
next item, record labels, skips and undos with their history, show the progress, and hand the labels over
(export, import, a dataset and a normal run, a prediction job over the rest of the pool, items sent back by an
audit).

The database is the truth: an item is handed to one labeller at a time by ONE conditional UPDATE with a lease
(as the queue claims runs), every label is an event row, and the background work (embedding the pool, refitting
the fast model and ranking the pool again) is queued as short jobs that ``jobs.labelling`` runs. Nothing here
waits for them: the next item comes from the current ranking. Plain dicts out, ``workbench.errors`` raised.
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from sqlalchemy import String, cast, false, func, insert, literal, null, or_, select, text, true, update

from jobs.queue import table as queue
from jobs.queue.states import ACTIVE
from jobs.specs.run import DEFAULT_MODEL, DataSpec, RunSpec
from storage.cells import escape_cell, unescape_row
from storage.context import Workbench
from storage.datasets.problems import ProblemLog
from storage.datasets.read_classification import DelimitedRows
from storage.datasets.read_pool import LABEL_SEPARATOR, PoolColumns, PoolRow, read_pool
from storage.datasets.records import as_label
from storage.datasets.source import open_text, scan
from storage.models import (CANCELLED, EVENT_LABEL, EVENT_SKIP, EVENT_UNDO, FAILED, KIND_LABEL_EMBED,
                            KIND_LABEL_REFIT, LABEL_KINDS, QUEUED, STRATEGIES, SUCCEEDED, Audit, LabelClass,
                            LabelEstimate, LabelEvent, LabelItem, LabelProject, Run, utcnow)
from workbench.errors import ConfigError, DataValidationError, InvalidState, NotFound

log = logging.getLogger(__name__)

LEASE_SECONDS = 300
# Rows inserted per statement when a pool is created: memory stays bounded whatever the pool's size.
INSERT_CHUNK = 2000
# A claim lost to another labeller (PostgreSQL: the row changed between the sub-select and the UPDATE) is
# tried again this many times before the next tier.
CLAIM_TRIES = 5
MAX_CLASSES = 200
# Below this many labelled random-share items, "train from these labels" splits its validation part as an
# upload is split: a handful of items would make a useless validation set.
MIN_RANDOM_VALIDATION = 20
EXPORT_FORMATS = ("csv", "jsonl")
EXPORT_COLUMNS = ("id", "text", "label", "labelled_by", "labelled_at", "random_pick")


def _iso(value: Optional[dt.datetime]) -> Optional[str]:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def _projects_dir(wb: Workbench) -> Path:
    return wb.settings.home / "labelling"


def _require(session, project_id: int) -> LabelProject:
    project = session.get(LabelProject, project_id)
    if project is None:
        raise NotFound(f"labelling project {project_id} does not exist; `workbench label list` shows the projects")
    return project


def _classes(session, project_id: int) -> list[LabelClass]:
    return list(session.scalars(select(LabelClass).where(LabelClass.project_id == project_id)
                                .order_by(LabelClass.position)))


# ---------------------------------------------------------------------------------------------- creating


def parse_labels(labels: Sequence[str] | Sequence[tuple[str, str]] | str,
                 multi_label: bool = False) -> list[tuple[str, str]]:
    """(name, description) of each label: names alone, ``"name: description"`` lines, (name, description)
    pairs, or one comma-separated string (``"spam,ham"``, as ``--labels`` gives them)."""
    if isinstance(labels, str):
        labels = labels.split(",")
    found: list[tuple[str, str]] = []
    for entry in labels:
        if isinstance(entry, (tuple, list)):
            name, description = (str(entry[0]), str(entry[1]) if len(entry) > 1 else "")
        else:
            name, _, description = str(entry).partition(":")
        name, description = name.strip(), " ".join(description.split())
        if not name:
            continue
        if len(name) > 200:
            raise ConfigError(f"the label {name[:40]!r}… has {len(name)} characters; at most 200")
        if any(name == known for known, _ in found):
            raise ConfigError(f"the label {name!r} is given twice; give each label once")
        if multi_label and LABEL_SEPARATOR in name:
            raise ConfigError(f"the label {name!r} contains {LABEL_SEPARATOR!r}, which separates the labels of a "
                              "multi-label cell; rename it")
        found.append((name, description))
    least = 1 if multi_label else 2
    if len(found) < least:
        raise ConfigError("give at least two labels (e.g. --labels spam,ham)" if least == 2 else
                          "give at least one label")
    if len(found) > MAX_CLASSES:
        raise ConfigError(f"{len(found)} labels; a project has at most {MAX_CLASSES}")
    return found


def create_project(wb: Workbench, path: str | Path, labels: Sequence[str] | Sequence[tuple[str, str]] | str, *,
                   name: Optional[str] = None, multi_label: bool = False, user: str = "",
                   text_column: Optional[str] = None, id_column: Optional[str] = None,
                   label_column: Optional[str] = None, model: str = DEFAULT_MODEL, strategy: str = "margin",
                   random_share: float = 0.1, refit_every: int = 10,
                   owner_id: Optional[int] = None) -> dict[str, Any]:
    """A project over the texts of ``path`` (CSV, TSV, JSON Lines or plain text, one text a line): reads and
    validates the file (``DataValidationError`` with the file, line and fix of every problem, nothing stored),
    inserts the items in chunks, records the labels already in the file as ``user``'s, keeps a copy of the
    file in the project's folder and queues the job that embeds the pool. Returns ``get_project``'s dict."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if not 0 <= float(random_share) <= 1:
        raise ConfigError(f"the random share is a fraction from 0 to 1, got {random_share}")
    if int(refit_every) < 1:
        raise ConfigError(f"refit every is at least 1 label, got {refit_every}")
    source = Path(path).expanduser()
    if not source.is_file():
        raise NotFound(f"no such file: {source}")
    classes = parse_labels(labels, multi_label)
    title = (name or source.stem).strip()[:200]
    problems = ProblemLog()
    folder: Optional[Path] = None
    try:
        with wb.db.session() as session:
            project = LabelProject(name=title, multi_label=bool(multi_label), folder="", source_name=source.name,
                                   model=model, strategy=strategy, random_share=float(random_share),
                                   refit_every=int(refit_every), created_by=user, owner_id=owner_id)
            session.add(project)
            session.flush()
            project_id = project.id
            folder = _projects_dir(wb) / str(project_id)
            project.folder = str(folder)
            session.add_all(LabelClass(project_id=project_id, position=i, name=n, description=d)
                            for i, (n, d) in enumerate(classes))
            rows = read_pool(source, problems, columns=PoolColumns(text_column, id_column, label_column),
                             multi_label=bool(multi_label), max_bytes=wb.settings.max_upload_mb * 10**6)
            count = _insert_items(session, project_id, rows, {n for n, _ in classes}, bool(multi_label), user,
                                  source.name, problems)
            if problems.has_errors:
                raise DataValidationError(problems.errors())
            _record_file_labels(session, project_id)
            (folder / "source").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / "source" / source.name)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    _analyze(wb)
    job_id = queue.submit_label_job(wb.db, KIND_LABEL_EMBED, project_id, wb.settings.runs_dir)
    log.info("labelling project %s: %d texts from %s, embed job %s", project_id, count, source.name, job_id)
    return {**get_project(wb, project_id), "warnings": [str(w) for w in problems.warnings()], "embed_job": job_id}


def _analyze(wb: Workbench) -> None:
    """Refresh PostgreSQL's statistics of the items after a bulk insert. Without them the planner took the claim's
    unranked tier through the wrong index and sorted all 100,000 rows (76 ms a label instead of 20 ms,
    bench/labelling_memory.py); autovacuum would get there only later."""
    if not wb.db.is_sqlite:
        with wb.db.session() as session:
            session.execute(text("ANALYZE label_items"))


def _insert_items(session, project_id: int, rows: Iterable[PoolRow], names: set[str], multi_label: bool, user: str,
                  file: str, problems: ProblemLog) -> int:
    """Insert the pool in chunks of ``INSERT_CHUNK`` rows; a label that is not in the label set is an error on its
    line. Unlabelled rows leave ``label`` out of the INSERT, so it is SQL NULL (not JSON ``null``)."""
    now = utcnow()
    table = LabelItem.__table__
    plain: list[dict[str, Any]] = []
    labelled: list[dict[str, Any]] = []
    position = 0

    def flush() -> None:
        if not problems.has_errors:
            if plain:
                session.execute(insert(table), plain)
            if labelled:
                session.execute(insert(table), labelled)
        plain.clear()
        labelled.clear()

    for row in rows:
        label = row.label
        if label is not None:
            unknown = [n for n in (label if multi_label else [label]) if n not in names]
            if unknown:
                problems.error(file, f"the label {unknown[0]!r} is not in the project's label set "
                               f"({', '.join(sorted(names)[:20])})", line=row.line, column="label",
                               hint=f"add {unknown[0]!r} to the labels, or correct the label on this line")
                continue
        values = {"project_id": project_id, "position": position, "external_id": row.external_id, "text": row.text}
        if label is None:
            plain.append(values)
        else:
            labelled.append({**values, "label": label, "labelled_by": user, "labelled_at": now})
        position += 1
        if len(plain) + len(labelled) >= INSERT_CHUNK:
            flush()
    flush()
    return position


def _record_file_labels(session, project_id: int) -> None:
    """One label event per label the file already held (by its ``labelled_by``), in one INSERT … SELECT: no row
    passes through Python's memory."""
    picked = select(LabelItem.project_id, LabelItem.id, literal(EVENT_LABEL), LabelItem.label,
                    LabelItem.labelled_by, LabelItem.labelled_at, LabelItem.random_pick, false(), true()
                    ).where(LabelItem.project_id == project_id, LabelItem.labelled_at.is_not(None))
    session.execute(insert(LabelEvent).from_select(
        ["project_id", "item_id", "action", "label", "user", "at", "random_pick", "undone", "bulk"], picked,
        include_defaults=False))


def _project_dict(session, project: LabelProject) -> dict[str, Any]:
    pool = session.scalar(select(func.count()).select_from(LabelItem).where(LabelItem.project_id == project.id))
    return {"id": project.id, "name": project.name, "multi_label": project.multi_label,
            "labels": [{"name": c.name, "description": c.description, "key": str(c.position + 1)
                        if c.position < 9 else None} for c in _classes(session, project.id)],
            "pool": int(pool or 0), "labelled": _labelled(session, project.id), "model": project.model,
            "strategy": project.strategy, "random_share": project.random_share, "refit_every": project.refit_every,
            "ranked_at_labels": project.ranked_at_labels, "folder": project.folder,
            "source_name": project.source_name, "created_by": project.created_by,
            "created_at": _iso(project.created_at)}


def _labelled(session, project_id: int) -> int:
    """Items with a label (``labelled_at`` is set exactly when ``label`` is: the index answers it)."""
    return int(session.scalar(select(func.count()).select_from(LabelItem).where(
        LabelItem.project_id == project_id, LabelItem.labelled_at.is_not(None))) or 0)


def get_project(wb: Workbench, project_id: int) -> dict[str, Any]:
    """A project: its label set (with keys 1–9), pool size, labels given, strategy and settings."""
    with wb.db.session() as session:
        return _project_dict(session, _require(session, project_id))


def list_projects(wb: Workbench) -> list[dict[str, Any]]:
    """Every project, newest first."""
    with wb.db.session() as session:
        projects = session.scalars(select(LabelProject).order_by(LabelProject.id.desc())).all()
        return [_project_dict(session, p) for p in projects]


# ---------------------------------------------------------------------------------------------- claiming


def _free(user: str, now: dt.datetime):
    """An item nobody else holds: never claimed, its lease past, or claimed by ``user``."""
    return or_(LabelItem.claim_until.is_(None), LabelItem.claim_until < now, LabelItem.claimed_by == user)


def _wanted():
    """An item that waits for a label: unlabelled, or sent back to be labelled again."""
    return or_(LabelItem.label.is_(None), LabelItem.relabel == true())


# The tiers a labeller is served from, best first: (conditions, order). Each walks one index
# (migration 0013_labelling_indexes) instead of sorting the pool.
def _tiers() -> list[tuple[list[Any], list[Any]]]:
    unlabelled = LabelItem.label.is_(None)
    fresh = LabelItem.skipped_at.is_(None)
    return [
        ([LabelItem.relabel == true()], [LabelItem.id]),
        ([unlabelled, fresh, LabelItem.rank.is_not(None)], [LabelItem.rank, LabelItem.position]),
        ([unlabelled, fresh, LabelItem.rank.is_(None)], [LabelItem.rank, LabelItem.position]),
        ([unlabelled, LabelItem.skipped_at.is_not(None)], [LabelItem.skipped_at, LabelItem.position]),
    ]


ITEM_COLUMNS = (LabelItem.id, LabelItem.text, LabelItem.external_id, LabelItem.suggestion, LabelItem.confidence,
                LabelItem.random_pick, LabelItem.relabel, LabelItem.label, LabelItem.position)


def _item_dict(row: Any, project_id: int) -> dict[str, Any]:
    return {"project_id": project_id, "item_id": row.id, "text": row.text, "external_id": row.external_id,
            "suggestion": row.suggestion, "confidence": row.confidence, "random_pick": bool(row.random_pick),
            "relabel": bool(row.relabel), "label": row.label, "position": row.position}


def next_item(wb: Workbench, project_id: int, user: str, lease_seconds: float = LEASE_SECONDS,
              now: Optional[dt.datetime] = None, *, claimant: Optional[str] = None) -> Optional[dict[str, Any]]:
    """Claim the best free item for ``user`` and return it (None when nothing is left to label).

    ``claimant`` (default: ``user``) is who holds the claim: with sign-in off every browser is the user "",
    so the UI passes a name of its own per browser session there; labels still carry ``user``.

    The user's own live claim comes back first (a page refresh shows the same text). Otherwise ONE
    conditional UPDATE per tier takes the first free item of the tier (relabel, ranked, unranked by position,
    skipped last); its WHERE repeats the sub-select's conditions, so two labellers never hold one item, and a
    claim lost on PostgreSQL (the row changed meanwhile) is tried again."""
    now = now or utcnow()
    with wb.db.session() as session:
        _require(session, project_id)
        return _claim_next(session, wb.db.is_sqlite, project_id, claimant or user, now, lease_seconds)


def _claim_next(session, is_sqlite: bool, project_id: int, user: str, now: dt.datetime,
                lease_seconds: float = LEASE_SECONDS) -> Optional[dict[str, Any]]:
    """``next_item`` for the claimant ``user`` inside the caller's transaction (a label and the next claim commit together: one commit
    per label). PostgreSQL runs each statement on a fresh snapshot, so a retry sees the other claim."""
    until = now + dt.timedelta(seconds=lease_seconds)
    mine = session.execute(
        update(LabelItem).where(LabelItem.id == select(LabelItem.id).where(
            LabelItem.project_id == project_id, LabelItem.claimed_by == user, LabelItem.claim_until >= now,
            _wanted()).order_by(LabelItem.claim_until.desc()).limit(1).scalar_subquery())
        .values(claim_until=until).returning(*ITEM_COLUMNS).execution_options(synchronize_session=False)).first()
    if mine is not None:
        return _item_dict(mine, project_id)
    for conditions, order in _tiers():
        where = [LabelItem.project_id == project_id, _free(user, now), *conditions]
        pick = select(LabelItem.id).where(*where).order_by(*order).limit(1)
        if not is_sqlite:
            pick = pick.with_for_update(skip_locked=True)
        # The UPDATE repeats that the item is free and waits for a label, not the tier's rank and skip
        # conditions: with those, PostgreSQL (its statistics stale after a ranking was written) walked the rank
        # index for the row instead of the primary key, 100 ms a claim on a 100,000-text pool.
        claim = (update(LabelItem).where(LabelItem.id == pick.scalar_subquery(), LabelItem.project_id == project_id,
                                         _free(user, now), _wanted())
                 .values(claimed_by=user, claim_until=until).returning(*ITEM_COLUMNS)
                 .execution_options(synchronize_session=False))
        for _ in range(CLAIM_TRIES):
            row = session.execute(claim).first()
            if row is not None:
                return _item_dict(row, project_id)
            if session.scalar(select(LabelItem.id).where(*where).limit(1)) is None:
                break  # the tier is empty (not a race lost to another labeller)
    return None


def _lock_item(session, project_id: int, item_id: int, user: str, now: dt.datetime) -> LabelItem:
    """Take the write lock on the item first (SQLite: the transaction becomes the writer before it reads, so it
    never fails to upgrade; PostgreSQL: the row lock), refusing an item another labeller holds."""
    touched = session.execute(
        update(LabelItem).where(LabelItem.id == item_id, LabelItem.project_id == project_id,
                                or_(_free(user, now), LabelItem.claimed_by.is_(None)))
        .values(claimed_by=LabelItem.claimed_by).execution_options(synchronize_session=False)).rowcount
    item = session.get(LabelItem, item_id, populate_existing=True)
    if item is None or item.project_id != project_id:
        raise NotFound(f"item {item_id} is not in labelling project {project_id}")
    if not touched:
        raise InvalidState(f"item {item_id} is being labelled by {item.claimed_by or 'someone else'} until "
                           f"{_iso(item.claim_until)}; take the next item instead")
    return item


def check_label(session, project: LabelProject, label: Any) -> Any:
    """``label`` as stored: a class name, or for a multi-label project a sorted list of names (``[]`` = none
    apply; a single name or ``"a|b"`` is accepted too). ``ConfigError`` names the project's labels otherwise."""
    names = [c.name for c in _classes(session, project.id)]
    if project.multi_label:
        given = label if isinstance(label, (list, tuple)) else [p for p in str(label).split(LABEL_SEPARATOR)]
        value: Any = sorted({as_label(p) for p in given if as_label(p)})
        unknown = [n for n in value if n not in names]
    else:
        if isinstance(label, (list, tuple)) or label is None or not as_label(label):
            raise ConfigError(f"project {project.id} is single-label: give one of {', '.join(names)}")
        value = as_label(label)
        unknown = [] if value in names else [value]
    if unknown:
        raise ConfigError(f"{unknown[0]!r} is not a label of project {project.id}; its labels are "
                          f"{', '.join(names)}")
    return value


def give_label(wb: Workbench, project_id: int, item_id: int, label: Any, user: str,
               now: Optional[dt.datetime] = None, *, claimant: Optional[str] = None) -> dict[str, Any]:
    """Give (or change) an item's label: one event with what it replaced, the item's label set, its claim
    released; then a refit is queued when enough new labels arrived. Returns ``{"next", "labelled",
    "refit"}``: the user's next item from the current ranking, the labels given, the refit job queued or None."""
    now = now or utcnow()
    with wb.db.session() as session:
        project = _require(session, project_id)
        value = check_label(session, project, label)
        item = _lock_item(session, project_id, item_id, claimant or user, now)
        session.add(LabelEvent(project_id=project_id, item_id=item_id, action=EVENT_LABEL, label=value,
                               previous=item.label, user=user, at=now, suggestion=item.suggestion,
                               random_pick=item.random_pick))
        session.execute(update(LabelItem).where(LabelItem.id == item_id).values(
            label=value, labelled_by=user, labelled_at=now, relabel=False, skipped_at=None, claimed_by=None,
            claim_until=None).execution_options(synchronize_session=False))
        labelled = _labelled(session, project_id)
        due = _refit_due(session, project, labelled)
        following = _claim_next(session, wb.db.is_sqlite, project_id, claimant or user, now)
    refit = queue_refit(wb, project_id) if due else None
    return {"next": following, "labelled": labelled, "refit": refit}


def skip_item(wb: Workbench, project_id: int, item_id: int, user: str,
              now: Optional[dt.datetime] = None, *, claimant: Optional[str] = None) -> dict[str, Any]:
    """Put an item at the back of the queue (asked again once the rest is labelled) and return the next one."""
    now = now or utcnow()
    with wb.db.session() as session:
        _require(session, project_id)
        item = _lock_item(session, project_id, item_id, claimant or user, now)
        session.add(LabelEvent(project_id=project_id, item_id=item_id, action=EVENT_SKIP, label=None,
                               previous=item.label, user=user, at=now, suggestion=item.suggestion,
                               random_pick=item.random_pick))
        session.execute(update(LabelItem).where(LabelItem.id == item_id).values(
            skipped_at=now, claimed_by=None, claim_until=None).execution_options(synchronize_session=False))
        return {"next": _claim_next(session, wb.db.is_sqlite, project_id, claimant or user, now)}


def undo_last(wb: Workbench, project_id: int, user: str, lease_seconds: float = LEASE_SECONDS,
              now: Optional[dt.datetime] = None, *, claimant: Optional[str] = None) -> dict[str, Any]:
    """Take back ``user``'s last label or skip that is not undone yet: the item gets what it had before (the
    label, who gave it and when; a changed label goes back to be labelled again), the event is marked undone and
    an undo event records it. The item is claimed for the user and returned as ``next``."""
    now = now or utcnow()
    holder = claimant or user
    with wb.db.session() as session:
        _require(session, project_id)
        event = session.scalars(select(LabelEvent).where(
            LabelEvent.project_id == project_id, LabelEvent.user == user,
            LabelEvent.action.in_((EVENT_LABEL, EVENT_SKIP)), LabelEvent.undone == false())
            .order_by(LabelEvent.id.desc()).limit(1)).first()
        if event is None:
            raise InvalidState("nothing to undo: you have given no label or skip in this project yet")
        item = _lock_item(session, project_id, event.item_id, holder, now)
        if event.action == EVENT_LABEL:
            before = session.scalars(select(LabelEvent).where(
                LabelEvent.item_id == item.id, LabelEvent.action == EVENT_LABEL, LabelEvent.undone == false(),
                LabelEvent.id < event.id).order_by(LabelEvent.id.desc()).limit(1)).first()
            restored = {"label": null(), "labelled_by": None, "labelled_at": None, "relabel": item.relabel}
            if event.previous is not None:
                restored = {"label": event.previous, "labelled_by": before.user if before else None,
                            "labelled_at": before.at if before else now, "relabel": True}
        else:
            restored = {"skipped_at": None}
        event.undone = True
        session.add(LabelEvent(project_id=project_id, item_id=item.id, action=EVENT_UNDO,
                               label=event.previous if event.action == EVENT_LABEL else None,
                               previous=event.label, user=user, at=now, undoes=event.id))
        # The user's other claims go back to the pool: the undone item is the one they work on now.
        session.execute(update(LabelItem).where(LabelItem.project_id == project_id, LabelItem.claimed_by == holder,
                                                LabelItem.id != item.id)
                        .values(claimed_by=None, claim_until=None).execution_options(synchronize_session=False))
        row = session.execute(update(LabelItem).where(LabelItem.id == item.id).values(
            **restored, claimed_by=holder, claim_until=now + dt.timedelta(seconds=lease_seconds))
            .returning(*ITEM_COLUMNS).execution_options(synchronize_session=False)).first()
        undone = event.id
    return {"next": _item_dict(row, project_id), "undone": undone}


def release_claims(wb: Workbench, project_id: int, user: str) -> int:
    """Give back every item ``user`` (a claimant) holds in the project (leaving the page); returns how many."""
    with wb.db.session() as session:
        return session.execute(update(LabelItem).where(LabelItem.project_id == project_id,
                                                       LabelItem.claimed_by == user)
                               .values(claimed_by=None, claim_until=None)
                               .execution_options(synchronize_session=False)).rowcount


def item_history(wb: Workbench, item_id: int) -> list[dict[str, Any]]:
    """Every event of one item, oldest first."""
    with wb.db.session() as session:
        if session.get(LabelItem, item_id) is None:
            raise NotFound(f"item {item_id} does not exist")
        events = session.scalars(select(LabelEvent).where(LabelEvent.item_id == item_id).order_by(LabelEvent.id))
        return [{"id": e.id, "action": e.action, "label": e.label, "previous": e.previous, "user": e.user,
                 "at": _iso(e.at), "suggestion": e.suggestion, "random_pick": e.random_pick, "undone": e.undone,
                 "undoes": e.undoes} for e in events]


# ---------------------------------------------------------------------------------------------- background jobs


def _label_jobs(session, project_id: int, kinds: Sequence[str], states: Sequence[str]) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.label_project_id == project_id, Run.kind.in_(list(kinds)),
                                                  Run.status.in_(list(states))).order_by(Run.id)))


def _refit_due(session, project: LabelProject, labelled: int) -> bool:
    """Whether the labels given call for a refit: ``refit_every`` new ones since the pool was last ranked, the
    pool embedded (its latest embed job succeeded), and, after a refit that failed or was cancelled,
    ``refit_every`` more labels since then (a refit that fails every time is not queued again at every label)."""
    if labelled < project.ranked_at_labels + project.refit_every:
        return False
    embed = _latest_job(session, project.id, KIND_LABEL_EMBED)
    if embed is None or embed.status != SUCCEEDED:
        return False
    refit = _latest_job(session, project.id, KIND_LABEL_REFIT)
    if refit is None or refit.status not in (FAILED, CANCELLED):
        return True
    since = session.scalar(select(func.count()).select_from(LabelEvent).where(
        LabelEvent.project_id == project.id, LabelEvent.action == EVENT_LABEL,
        LabelEvent.at >= (refit.finished_at or refit.created_at))) or 0
    return since >= project.refit_every


def queue_refit(wb: Workbench, project_id: int) -> Optional[int]:
    """Queue a refit of the fast model and a new ranking; None when a label job of the project is queued or
    running already (the embedding must be done first, and one refit at a time covers every new label)."""
    with wb.db.session() as session:
        _require(session, project_id)
        if _label_jobs(session, project_id, LABEL_KINDS, (QUEUED, *ACTIVE)):
            return None
    return queue.submit_label_job(wb.db, KIND_LABEL_REFIT, project_id, wb.settings.runs_dir)


# ---------------------------------------------------------------------------------------------- progress


def _per_class(session, project: LabelProject) -> dict[str, int]:
    counts = {c.name: 0 for c in _classes(session, project.id)}
    # Grouped on the JSON text: PostgreSQL's json type has no equality to group by.
    stored = cast(LabelItem.label, String)
    rows = session.execute(select(stored, func.count()).where(
        LabelItem.project_id == project.id, LabelItem.labelled_at.is_not(None)).group_by(stored))
    for text, count in rows:
        value = json.loads(text) if text is not None else None
        for name in (value if isinstance(value, list) else [value]):
            if name in counts:
                counts[name] += int(count)
    return counts


def _estimate_dict(row: LabelEstimate) -> dict[str, Any]:
    return {"labels": row.labels, "metric": row.metric, "estimate": row.estimate, "low": row.low, "high": row.high,
            "majority": row.majority, "source": row.source, "agreement": row.agreement, "at": _iso(row.created_at)}


def _stop_hint(rows: list[LabelEstimate]) -> Optional[str]:
    """The stopping rule's hint over the refits in the order they ran (``jobs.labelling.curve.stop_hint``)."""
    if len(rows) < 3:
        return None
    from jobs.labelling import curve

    return curve.stop_hint([curve.Estimate(labels=r.labels, metric=r.metric, estimate=r.estimate, low=r.low,
                                           high=r.high, majority=r.majority, source=r.source,
                                           agreement=r.agreement) for r in rows])


def _job_dict(run: Optional[Run]) -> Optional[dict[str, Any]]:
    if run is None:
        return None
    return {"id": run.id, "status": run.status, "progress": float(run.progress or 0.0), "phase": run.phase,
            "done": run.phase_done, "total": run.phase_total, "error": run.error}


def _latest_job(session, project_id: int, kind: str) -> Optional[Run]:
    return session.scalars(select(Run).where(Run.label_project_id == project_id, Run.kind == kind)
                           .order_by(Run.id.desc()).limit(1)).first()


def peek(session, project_id: int, now: dt.datetime, limit: int = 5) -> list[dict[str, Any]]:
    """The next ``limit`` free items in the order labellers get them, without claiming any."""
    found: list[dict[str, Any]] = []
    for conditions, order in _tiers():
        if len(found) >= limit:
            break
        rows = session.execute(select(*ITEM_COLUMNS).where(
            LabelItem.project_id == project_id, or_(LabelItem.claim_until.is_(None), LabelItem.claim_until < now),
            *conditions).order_by(*order).limit(limit - len(found)))
        found.extend(_item_dict(row, project_id) for row in rows)
    return found


def project_status(wb: Workbench, project_id: int, now: Optional[dt.datetime] = None) -> dict[str, Any]:
    """Progress of a project: labelled / pool, the count per class, labels per minute (last 10 minutes), the
    latest estimate and the learning curve with the majority baseline, the stop hint, the background jobs,
    how much of the pool is embedded, and the next texts to label."""
    now = now or utcnow()
    with wb.db.session() as session:
        project = _require(session, project_id)
        summary = _project_dict(session, project)
        recent = session.scalar(select(func.count()).select_from(LabelEvent).where(
            LabelEvent.project_id == project_id, LabelEvent.at >= now - dt.timedelta(minutes=10),
            LabelEvent.action == EVENT_LABEL, LabelEvent.undone == false(), LabelEvent.bulk == false())) or 0
        estimates = list(session.scalars(select(LabelEstimate).where(LabelEstimate.project_id == project_id)
                                         .order_by(LabelEstimate.labels, LabelEstimate.id)))
        embedded = session.scalar(select(func.count()).select_from(LabelItem).where(
            LabelItem.project_id == project_id, LabelItem.embedded == true())) or 0
        latest = max(estimates, key=lambda r: r.id) if estimates else None
        return {**summary, "per_class": _per_class(session, project), "labels_per_minute": round(recent / 10, 2),
                "estimate": _estimate_dict(latest) if latest else None,
                "curve": [_estimate_dict(r) for r in estimates], "majority": latest.majority if latest else None,
                "stop_hint": _stop_hint(sorted(estimates, key=lambda r: r.id)), "embedded": int(embedded),
                "jobs": {"embed": _job_dict(_latest_job(session, project_id, KIND_LABEL_EMBED)),
                         "refit": _job_dict(_latest_job(session, project_id, KIND_LABEL_REFIT))},
                "next_items": [item["text"] for item in peek(session, project_id, now)]}


# ---------------------------------------------------------------------------------------------- hand-off


def _items(wb: Workbench, project_id: int, *conditions: Any) -> Iterator[Any]:
    """The project's items in pool order, streamed (a 100,000-text pool is never in memory at once)."""
    with wb.db.session() as session:
        stmt = (select(LabelItem.external_id, LabelItem.text, LabelItem.label, LabelItem.labelled_by,
                       LabelItem.labelled_at, LabelItem.random_pick)
                .where(LabelItem.project_id == project_id, *conditions).order_by(LabelItem.position)
                .execution_options(yield_per=INSERT_CHUNK))
        yield from session.execute(stmt)


def _cell_label(label: Any) -> str:
    if label is None:
        return ""
    return LABEL_SEPARATOR.join(label) if isinstance(label, list) else str(label)


def export_labels(wb: Workbench, project_id: int, path: str | Path, fmt: str = "csv") -> Path:
    """Write every item with its label, ``labelled_by``, ``labelled_at`` and ``random_pick`` to ``path`` (CSV
    with spreadsheet-safe cells, multi-label as ``a|b``; or JSON Lines, multi-label as a list). Written to a
    temporary file first and moved into place, so a failed export leaves no half file."""
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose {' or '.join(EXPORT_FORMATS)}")
    get_project(wb, project_id)
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            writer = csv.writer(out) if fmt == "csv" else None
            if writer is not None:
                writer.writerow(EXPORT_COLUMNS)
            for row in _items(wb, project_id):
                values = [row.external_id, row.text, row.label, row.labelled_by, _iso(row.labelled_at),
                          bool(row.random_pick)]
                if writer is not None:
                    values[2] = _cell_label(values[2])
                    writer.writerow([escape_cell(v) if isinstance(v, str) else ("" if v is None else v)
                                     for v in values])
                else:
                    out.write(json.dumps(dict(zip(EXPORT_COLUMNS, values)), ensure_ascii=False) + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def import_labels(wb: Workbench, project_id: int, path: str | Path, user: str,
                  now: Optional[dt.datetime] = None) -> dict[str, Any]:
    """Add labels from a CSV or TSV file with an ``id`` and a ``label`` column (an export of the project works):
    each becomes ``user``'s label event, a changed label keeps the old one in its history. All or nothing:
    an unknown id or label is an error on its line and nothing is recorded. Blank labels are skipped."""
    now = now or utcnow()
    source = Path(path).expanduser()
    if not source.is_file():
        raise NotFound(f"no such file: {source}")
    problems = ProblemLog()
    with wb.db.session() as session:
        project = _require(session, project_id)
        pairs = list(_read_id_labels(source, problems))
        labels: dict[str, tuple[int, Any]] = {}
        for line, external_id, raw in pairs:
            try:
                labels[external_id] = (line, check_label(session, project, raw))
            except ConfigError as exc:
                problems.error(source.name, str(exc), line=line, column="label",
                               hint="use one of the project's labels, or add the label to the project")
        items: dict[str, LabelItem] = {}
        ids = list(labels)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            items.update((i.external_id, i) for i in session.scalars(select(LabelItem).where(
                LabelItem.project_id == project_id, LabelItem.external_id.in_(chunk))))
        for external_id, (line, _) in labels.items():
            if external_id not in items:
                problems.error(source.name, f"no item of project {project_id} has the id {external_id!r}",
                               line=line, column="id", hint="use the ids of the project's export")
        if problems.has_errors:
            raise DataValidationError(problems.errors())
        changed = 0
        for external_id, (_, value) in labels.items():
            item = items[external_id]
            if item.label == value and not item.relabel:
                continue
            changed += 1
            session.add(LabelEvent(project_id=project_id, item_id=item.id, action=EVENT_LABEL, label=value,
                                   previous=item.label, user=user, at=now, suggestion=item.suggestion,
                                   random_pick=item.random_pick, bulk=True))
            item.label, item.labelled_by, item.labelled_at, item.relabel = value, user, now, False
            item.skipped_at = None
        session.flush()
        labelled = _labelled(session, project_id)
        due = _refit_due(session, project, labelled)
    refit = queue_refit(wb, project_id) if due and changed else None
    return {"imported": changed, "unchanged": len(labels) - changed, "labelled": labelled, "refit": refit,
            "warnings": [str(w) for w in problems.warnings()]}


def _read_id_labels(source: Path, problems: ProblemLog) -> Iterator[tuple[int, str, str]]:
    """(line, id, label cell) of each row of a CSV/TSV file with ``id`` and ``label`` columns; blank labels are
    skipped with a warning."""
    info = scan(source, problems, max_bytes=1 << 40)
    if info.encoding is None:
        return
    delimiter = "\t" if source.suffix.lower() in (".tsv", ".tab") else ","
    with open_text(info) as stream:
        reader = csv.reader(stream, delimiter=delimiter)
        header = unescape_row(h.strip().lstrip("\ufeff") for h in next(reader, []))
        lowered = [h.lower() for h in header]
        if "id" not in lowered or "label" not in lowered:
            problems.error(source.name, f"the file needs an 'id' and a 'label' column (found: "
                           f"{', '.join(map(repr, header)) or 'none'})", line=1,
                           hint="write a header row 'id,label' and one id and label per row")
            return
        where_id, where_label = lowered.index("id"), lowered.index("label")
        for line, row in DelimitedRows(reader, len(header), source.name, problems, delimiter):
            if not row[where_label].strip():
                problems.warning("blank label", source.name, "blank label; the row was skipped", line=line,
                                 column="label", hint="fill in the label or delete the row")
                continue
            yield line, row[where_id].strip(), row[where_label]


def train_from_labels(wb: Workbench, project_id: int, user: str = "", wait: bool = False, *,
                      owner_id: Optional[int] = None) -> int:
    """Store the project's labels as a dataset version (its validation part: the labelled random-share items,
    an unbiased sample of the pool, when there are ``MIN_RANDOM_VALIDATION`` of them; else split as an upload
    is) and queue a normal training run with the defaults, linked to the project. Returns the run id (after
    it ends, with ``wait``)."""
    from workbench.services import datasets as datasets_service
    from workbench.services import runs as runs_service

    with wb.db.session() as session:
        project = _require(session, project_id)
        title, model = project.name, project.model
        labelled = _labelled(session, project_id)
    if labelled < 2:
        raise InvalidState(f"project {project_id} has {labelled} label(s); label some texts first")
    with tempfile.TemporaryDirectory(dir=wb.settings.home, prefix="labels-") as tmp:
        train, validation = Path(tmp) / "train.jsonl", Path(tmp) / "validation.jsonl"
        counts = {"train": 0, "validation": 0}
        with train.open("w", encoding="utf-8") as out_train, validation.open("w", encoding="utf-8") as out_valid:
            for row in _items(wb, project_id, LabelItem.labelled_at.is_not(None)):
                part = "validation" if row.random_pick else "train"
                (out_valid if row.random_pick else out_train).write(
                    json.dumps({"text": row.text, "label": row.label}, ensure_ascii=False) + "\n")
                counts[part] += 1
        held_out = counts["validation"] >= MIN_RANDOM_VALIDATION and counts["train"] > 0
        if not held_out:
            with train.open("a", encoding="utf-8") as out_train, validation.open(encoding="utf-8") as src:
                shutil.copyfileobj(src, out_train)
        dataset = datasets_service.import_dataset(
            wb, train, "text-classification", name=f"{title} ({labelled} labels)", format="jsonl",
            validation_path=validation if held_out else None, tokenizer=False, owner_id=owner_id)
    spec = RunSpec(task="text-classification", model=model or DEFAULT_MODEL,
                   data=DataSpec(dataset_id=dataset.id, name=dataset.name),
                   name=f"{title}: trained from {labelled} labels")
    runs_service.submit_run_checks(wb, spec)
    estimate = runs_service.run_estimate(wb, spec)
    with wb.db.session() as session:
        run_id = queue.add_queued_run(session, spec, wb.settings.runs_dir, label_project_id=project_id,
                                      estimate=estimate, owner_id=owner_id).id
    log.info("project %s: run %s queued on dataset %s (%s)", project_id, run_id, dataset.id,
             "random-share validation" if held_out else "split validation")
    if wait:
        runs_service.wait_for_run(wb, run_id)
    return run_id


def predict_pool(wb: Workbench, project_id: int, run_id: int, *, owner_id: Optional[int] = None) -> int:
    """Queue a prediction job of run ``run_id``'s model over the project's unlabelled texts (a CSV of ``id`` and
    ``text``, kept in the project's folder); returns the job's id, linked to the project."""
    from workbench.services import predictions

    with wb.db.session() as session:
        project = _require(session, project_id)
        folder = Path(project.folder)
    folder.mkdir(parents=True, exist_ok=True)
    pool = folder / "unlabelled.csv"
    rows = 0
    with pool.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text"])
        for row in _items(wb, project_id, LabelItem.label.is_(None)):
            writer.writerow([escape_cell(row.external_id), escape_cell(row.text)])
            rows += 1
    if not rows:
        raise InvalidState(f"project {project_id} has no unlabelled text left to predict")
    job_id = predictions.submit_prediction(wb, run_id, pool, input_name=f"project-{project_id}-unlabelled.csv",
                                           columns={"text": "text"}, owner_id=owner_id)
    with wb.db.session() as session:
        session.execute(update(Run).where(Run.id == job_id).values(label_project_id=project_id)
                        .execution_options(synchronize_session=False))
    return job_id


def send_to_relabel(wb: Workbench, audit_id: int, project_id: Optional[int] = None, user: str = "",
                    examples: Optional[Sequence[str]] = None, *, owner_id: Optional[int] = None) -> dict[str, Any]:
    """Put a finished audit's flagged examples (``examples``, else every flagged one not marked keep or drop)
    into a project's queue to be labelled again: into ``project_id``'s items of the same text, or into a new
    project made from the audit's examples with their labels. Returns ``{"project_id", "sent", "not_found"}``."""
    from workbench.services import audits

    rows = audits.audit_issues(wb, audit_id)
    with wb.db.session() as session:
        audit = session.get(Audit, audit_id)
        if audit.task != "text-classification":
            raise ConfigError("only text-classification audits can be sent to a labelling project")
        classes = list((audit.summary or {}).get("labels") or [])
        folder, folds, name = Path(audit.folder), int(audit.spec["folds"]), audit.name
    chosen = [r for r in rows if (r["example"] in examples if examples is not None
                                  else r.get("decision") not in (audits.KEEP, audits.DROP))]
    if not chosen:
        raise InvalidState(f"audit {audit_id} flagged no example to relabel")
    if project_id is None:
        project_id = _project_from_audit(wb, audit_id, name, folder, folds, classes, user, owner_id)
        match, keys = LabelItem.external_id, [r["example"] for r in chosen]
    else:
        match, keys = LabelItem.text, [r["text"] for r in chosen]
    with wb.db.session() as session:
        _require(session, project_id)
        found = set(session.scalars(select(match).where(LabelItem.project_id == project_id, match.in_(keys))))
        session.execute(update(LabelItem).where(LabelItem.project_id == project_id, match.in_(keys))
                        .values(relabel=True).execution_options(synchronize_session=False))
    missing = [r["example"] for r, key in zip(chosen, keys) if key not in found]
    return {"project_id": project_id, "sent": len(chosen) - len(missing), "not_found": missing}


def _project_from_audit(wb: Workbench, audit_id: int, name: str, folder: Path, folds: int, classes: list[str],
                        user: str, owner_id: Optional[int] = None) -> int:
    """A new project of the audit's examples (its fold files: they outlive the dataset), ids ``train:17``."""
    from workbench.services import audits

    with tempfile.TemporaryDirectory(dir=wb.settings.home, prefix="relabel-") as tmp:
        pool = Path(tmp) / f"audit-{audit_id}.jsonl"
        with pool.open("w", encoding="utf-8") as out:
            for fold in range(folds):
                with (folder / f"fold-{fold}" / "heldout.jsonl").open(encoding="utf-8") as src:
                    for raw in src:
                        if raw.strip():
                            record = json.loads(raw)
                            out.write(json.dumps({"id": record[audits.EXAMPLE_KEY], "text": record["text"],
                                                  "label": record["label"]}, ensure_ascii=False) + "\n")
        created = create_project(wb, pool, classes, name=f"relabel: {name}", user=user, owner_id=owner_id,
                                 id_column="id", label_column="label", text_column="text")
    return created["id"]


__all__ = ["EXPORT_FORMATS", "LEASE_SECONDS", "check_label", "create_project", "export_labels", "get_project",
           "give_label", "import_labels", "item_history", "list_projects", "next_item", "parse_labels",
           "predict_pool", "project_status", "queue_refit", "release_claims", "send_to_relabel", "skip_item",
           "train_from_labels", "undo_last"]
