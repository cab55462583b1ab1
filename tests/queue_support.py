"""Fixtures and helpers shared by the queue, worker and runs tests.

``qwb`` is a workbench on SQLite or on a real PostgreSQL (a fresh database per test),
so each queue test runs against both. Import the fixtures into a test module with
``from tests.queue_support import qwb, ...  # noqa: F401``.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError, ProgrammingError

from jobs.specs.run import DataSpec, RunSpec
from storage.context import Workbench, open_workbench
from storage.db import Database
from storage.settings import Settings

FAST = {"heartbeat_seconds": 0.2, "lease_seconds": 3.0, "cancel_timeout_seconds": 10.0}


def _execute_while(admin, statement: str, transient: str, attempts: int, pause: float) -> None:
    """Run ``statement``; while it fails with ``transient`` in its message, wait ``pause`` seconds and try again."""
    with admin.connect() as conn:
        for attempt in range(attempts):
            try:
                conn.execute(text(statement))
                return
            except (OperationalError, ProgrammingError) as exc:
                if transient not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(pause)


def _drop_database(admin, name: str) -> None:
    # FORCE may not end the server's own autovacuum worker on the new database (it belongs to the superuser): it
    # finishes in a moment, then the drop goes through.
    _execute_while(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', "must be a member of the role", 20, 0.5)


def _create_database(admin, name: str, template: str) -> None:
    # An autovacuum worker that was on the template before it stopped taking connections holds it for a moment
    # ("source database ... is being accessed by other users").
    _execute_while(admin, f'CREATE DATABASE "{name}" TEMPLATE "{template}"', "is being accessed by other users", 50,
                   0.2)


_MIGRATED_TEMPLATES: dict[str, str] = {}  # server URL -> this process's database migrated to the latest schema


def _migrated_template(url: str) -> str:
    """A database of this test process's own holding the latest schema and nothing else, made once: a test's
    database is copied from it (a file copy on the server, about 0.1 s) instead of being migrated through every
    revision (0.5-1 s a test). Dropped when the process exits."""
    if url not in _MIGRATED_TEMPLATES:
        base = make_url(url)
        name = f"wb_template_{uuid.uuid4().hex[:12]}"
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
        atexit.register(lambda: (_drop_database(admin, name), admin.dispose()))
        # No connection may stay open on a template while it is copied: the engine goes at once, and the
        # database then refuses connections (autovacuum's workers included, as on template0).
        Database(base.set(database=name).render_as_string(hide_password=False), migrate=True).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
        _MIGRATED_TEMPLATES[url] = name
    return _MIGRATED_TEMPLATES[url]


@contextlib.contextmanager
def fresh_pg_database(url: str, migrated: bool = False) -> Iterator[str]:
    """A new database on the test server for one test, dropped afterwards. Isolated from any other test (or
    other suite) using the server at the same time, unlike a reset schema. Empty, or with ``migrated`` a copy
    of this process's migrated template (what ``open_workbench`` would have made of the empty one)."""
    base = make_url(url)
    name = f"wb_queue_{uuid.uuid4().hex[:12]}"
    # template0 accepts no connections, so a session open on template1 cannot block the copy.
    template = _migrated_template(url) if migrated else "template0"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        _create_database(admin, name, template)
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        _drop_database(admin, name)
        admin.dispose()


@contextlib.contextmanager
def backend_url(backend: str, tmp_path: Path, migrated: bool = False) -> Iterator[str]:
    """A database URL for one test: SQLite in ``tmp_path``, or a fresh PostgreSQL database (``migrated``: at the
    latest schema already; tests of the migrations themselves want it empty)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'home' / 'workbench.db'}"
        return
    url = os.environ.get("WORKBENCH_TEST_PG_URL")
    if not url:
        from tests.conftest import require_service

        require_service("no PostgreSQL server (WORKBENCH_TEST_PG_URL unset); run `make test` as root to start one")
    with fresh_pg_database(url, migrated) as fresh:
        yield fresh


def make_settings(tmp_path: Path, url: str, **overrides) -> Settings:
    return Settings.from_env({}, home=str(tmp_path / "home"), database_url=url, **{**FAST, **overrides})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def qwb(request, tmp_path, monkeypatch):
    for key in list(os.environ):
        if key.startswith("WORKBENCH_") and not key.startswith("WORKBENCH_TEST_") and key != "WORKBENCH_REQUIRE_SERVICES":
            monkeypatch.delenv(key)
    with backend_url(request.param, tmp_path, migrated=True) as url:
        workbench = open_workbench(make_settings(tmp_path, url))
        yield workbench
        workbench.close()


def second_workbench(settings: Settings) -> Workbench:
    """Another connection pool on the same database, as another worker process would have. No migration:
    Alembic keeps global state and must not run in several threads at once."""
    return Workbench(settings, Database(settings.database_url, migrate=False))


def fake_spec(wb, model: str = "fake:succeed", name: str = "", **fields) -> RunSpec:
    """A spec whose data file exists (run_job checks it) and whose model picks the fake's behaviour."""
    data = wb.settings.home / "data" / "train.jsonl"
    if not data.exists():
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text(json.dumps({"text": "good", "label": "pos"}) + "\n")
    return RunSpec(task="text-classification", data=DataSpec(train_path=str(data)), model=model, name=name, **fields)


def wait_until(predicate: Callable[[], bool], timeout: float, step: Callable[[], None] | None = None,
               interval: float = 0.05) -> bool:
    """Call ``step`` (e.g. ``worker.loop_once``) until ``predicate`` holds or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if predicate():
            return True
        time.sleep(interval)
    return False


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return True
