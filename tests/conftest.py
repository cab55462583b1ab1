"""Shared fixtures: a workbench on real SQLite in a temp folder, and service availability."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two test processes share the cores: an OpenMP thread (torch's, here and in every training process the
    # tests start) that waits for work sleeps rather than spinning on a core the other process needs.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TESTS_DIR = Path(__file__).parent
DATA_DIR = TESTS_DIR / "data"
ROOT = TESTS_DIR.parent


def require_service(reason: str) -> None:
    """Skip when a service is missing, except in CI where a missing service is a failure."""
    if os.environ.get("WORKBENCH_REQUIRE_SERVICES") == "1":
        pytest.fail(f"required service missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def settings(tmp_path, monkeypatch):
    from storage.settings import Settings

    for key in list(os.environ):
        if key.startswith("WORKBENCH_") and key not in ("WORKBENCH_REQUIRE_SERVICES",) and not key.startswith("WORKBENCH_TEST_"):
            monkeypatch.delenv(key)
    return Settings.from_env({}, home=str(tmp_path / "home"))


@pytest.fixture
def wb(settings):
    from storage.context import open_workbench

    workbench = open_workbench(settings)
    yield workbench
    workbench.close()


@pytest.fixture(scope="session", autouse=True)
def _fresh_sqlite_from_a_template(tmp_path_factory):
    """A new SQLite database made in this process starts as a copy of one migrated here once, instead of
    replaying every migration (0.14 s against 0.01 s; the suite makes hundreds). Same schema, same rows: the
    copy is Alembic's own result, and Alembic still runs after it and finds it at head. Migrations themselves
    are tested where they are named (an older revision, PostgreSQL, processes the tests start)."""
    import contextlib
    import sqlite3

    from storage import db

    original = db.upgrade
    template = tmp_path_factory.mktemp("schema") / "template.db"
    engine = db.make_engine(f"sqlite:///{template}")
    try:
        original(engine)
    finally:
        engine.dispose()

    def upgrade(engine, revision: str = "head") -> None:
        database = engine.url.database
        if revision == "head" and engine.dialect.name == "sqlite" and database and database != ":memory:" \
                and not database.startswith("file:"):
            with db._sqlite_file_lock(engine), contextlib.suppress(sqlite3.Error):  # not a database: as before
                with contextlib.closing(sqlite3.connect(database)) as target:
                    if not target.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall():
                        with contextlib.closing(sqlite3.connect(template)) as source:
                            source.backup(target)
        original(engine, revision)

    db.upgrade = upgrade
    yield
    db.upgrade = original


@pytest.fixture(autouse=True)
def _cheap_password_hashing(request, monkeypatch):
    """Argon2id at 1 MiB and one pass for the passwords a test hashes in this process, as Django's test settings
    do. At the product's profile (64 MiB, 3 passes, 4 lanes) a sign-in costs ~0.2 s of a 2-core machine and the
    account, sign-in and access tests make hundreds: those files took 137 s at the real profile and 67 s cheap.
    Tests marked ``real_password_hashing`` check the real profile and its rehash at sign-in; servers and CLI
    commands started as processes hash at the real profile (and rehash a cheap hash at its next sign-in)."""
    if request.node.get_closest_marker("real_password_hashing"):
        return
    from argon2 import PasswordHasher

    from workbench.services import accounts

    monkeypatch.setattr(accounts, "_hasher", lambda: PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))


@pytest.fixture
def pg_url():
    url = os.environ.get("WORKBENCH_TEST_PG_URL")
    if not url:
        require_service("no PostgreSQL server (WORKBENCH_TEST_PG_URL unset); run `make test` as root to start one")
    return url


@pytest.fixture
def cli(wb, monkeypatch, capsys):
    """``cli("runs", "list")`` runs the CLI in-process on ``wb``'s home: (exit code, stdout, stderr)."""
    from workbench.cli import main

    monkeypatch.setenv("WORKBENCH_HOME", str(wb.settings.home))

    def invoke(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        captured = capsys.readouterr()
        return exc.value.code, captured.out, captured.err

    return invoke


@pytest.fixture(scope="session")
def review_audit(tmp_path_factory):
    """A finished audit of 150 reviews with 10 flipped labels (tests/audit_support.py), trained once per test
    run, pytest-xdist workers included. Its home is read-only: a test works in a copy, ``review_audit_wb``."""
    from tests.audit_support import shared_review_audit

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder of this run that every pytest-xdist worker's own folder is in
    return shared_review_audit(root / "review-audit")


@pytest.fixture
def review_audit_wb(review_audit, tmp_path):
    """A workbench of this test's own holding the finished ``review_audit`` (a copy of its database); afterwards,
    the template's files are checked to be unchanged."""
    from storage.context import open_workbench
    from storage.settings import Settings
    from tests.audit_support import assert_untouched, clone_home

    workbench = open_workbench(Settings.from_env({}, home=str(clone_home(review_audit, tmp_path / "review-home"))))
    yield workbench
    workbench.close()
    assert_untouched(review_audit)


# The files with the longest tests (their sum on a 2-core machine), longest first, which pytest-xdist hands out
# first: started last, one of them would keep a worker busy alone at the end. test_audits.py comes before
# test_audit_browser.py, so that the audit both share is trained while the other worker has other work.
SLOW_FILES = ("tests/browser/test_workbench_ui.py", "tests/test_audits.py", "tests/test_ddp_cpu.py",
              "tests/test_worker_e2e.py", "tests/test_engine_e2e.py", "tests/test_gpu_check.py",
              "tests/browser/test_audit_browser.py", "tests/test_sweep_cli.py", "tests/test_playground_cli.py",
              "tests/test_evaluate_job.py", "tests/test_predict_e2e.py", "tests/browser/test_predict_browser.py",
              "tests/test_ui_predict.py", "tests/test_cli_predict.py",
              "tests/test_engine_architectures.py", "tests/test_worker.py", "tests/test_sweeps.py",
              "tests/test_cli_runs.py", "tests/browser/test_sweeps_browser.py", "tests/test_data_store.py",
              "tests/browser/test_playground_browser.py", "tests/test_run_compare.py",
              "tests/browser/test_export_browser.py", "tests/test_export.py", "tests/test_export_queue.py",
              "tests/test_onnx_serving.py", "tests/browser/test_label_browser.py", "tests/test_labelling_jobs.py",
              "tests/test_labelling_service.py", "tests/test_tracking.py", "tests/test_api_flow.py",
              "tests/test_web_signin.py", "tests/test_ui_access.py", "tests/test_chunking.py")


def pytest_collection_finish(session):
    """What collection imported (torch, transformers, gradio and the rest: modules, classes, functions) lives until the
    test process ends. Collected once, then frozen (``gc.freeze()``), it is no longer walked by every full collection
    the tests cause. Garbage is collected first, so nothing that could be freed is kept."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n 2 --dist loadfile --no-loadscope-reorder`) each file is one unit
    of work, handed out in collection order: put the slow files first. Within a file the order stays."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(SLOW_FILES)))
