"""Starting up: several processes opening one fresh database at once, and database errors at the CLI edge."""
from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from tests.queue_support import fresh_pg_database
from workbench import commands  # noqa: F401 - imported once here, not in each forked child
from workbench.cli import main

PROCESSES = 8
ROUNDS = 3


def _clean_environment(monkeypatch) -> None:
    for key in list(os.environ):
        if key.startswith("WORKBENCH_") and not key.startswith("WORKBENCH_TEST_") and key != "WORKBENCH_REQUIRE_SERVICES":
            monkeypatch.delenv(key)


def _runs_list_after(barrier, stderr_path: str) -> None:
    """A child process: wait for the others, then `workbench runs list` with stderr into a file."""
    # pytest's capture stands in for sys.stderr in the forked child: replace it, and the fd under it.
    sys.stderr = open(stderr_path, "w", buffering=1)
    sys.stdout = open(os.devnull, "w")
    os.dup2(sys.stderr.fileno(), 2)
    barrier.wait(timeout=60)
    main(["runs", "list", "--json"])


def _start_together(folder: Path) -> list[tuple[int, str]]:
    """PROCESSES processes run `workbench runs list` at the same instant; their exit codes and stderr."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(PROCESSES)
    paths = [folder / f"stderr-{i}.txt" for i in range(PROCESSES)]
    children = [context.Process(target=_runs_list_after, args=(barrier, str(path))) for path in paths]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=120)
    return [(child.exitcode, path.read_text()) for child, path in zip(children, paths)]


def _assert_all_started(results: list[tuple[int, str]]) -> None:
    failures = [(code, err) for code, err in results if code != 0 or "Traceback" in err]
    assert not failures, failures[0][1]


def test_processes_starting_together_on_a_fresh_sqlite_home(tmp_path, monkeypatch):
    _clean_environment(monkeypatch)
    for round_ in range(ROUNDS):
        home = tmp_path / f"home-{round_}"
        monkeypatch.setenv("WORKBENCH_HOME", str(home))
        _assert_all_started(_start_together(tmp_path))


@pytest.mark.postgres
def test_processes_starting_together_on_a_fresh_postgres_database(tmp_path, monkeypatch, pg_url):
    _clean_environment(monkeypatch)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    for _ in range(ROUNDS):
        with fresh_pg_database(pg_url) as url:
            monkeypatch.setenv("WORKBENCH_DATABASE_URL", url)
            _assert_all_started(_start_together(tmp_path))


@pytest.mark.parametrize("bad", ["not-a-database", "a-directory"])
def test_a_database_error_is_one_line_without_a_traceback(tmp_path, monkeypatch, capsys, bad):
    _clean_environment(monkeypatch)
    home = tmp_path / "home"
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    target = tmp_path / bad
    if bad == "a-directory":
        target.mkdir()
    else:
        target.write_bytes(b"this is a text file, not SQLite\n" * 64)
    monkeypatch.setenv("WORKBENCH_DATABASE_URL", f"sqlite:///{target}")
    with pytest.raises(SystemExit) as exc:
        main(["runs", "list"])
    err = capsys.readouterr().err
    assert exc.value.code not in (0, None)
    assert "Traceback" not in err and "[SQL:" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and str(target) in lines[0], err
    assert all(line.startswith(("error: ", "hint: ")) for line in lines), err


def test_a_query_failing_mid_command_is_one_line_without_a_traceback(wb, monkeypatch, capsys):
    """The schema is at head, but a table is gone: the error comes from a service's query, not from opening."""
    monkeypatch.setenv("WORKBENCH_HOME", str(wb.settings.home))
    with wb.db.engine.begin() as connection:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        for table in ("metric_points", "artifacts", "playgrounds", "runs"):
            connection.exec_driver_sql(f"DROP TABLE {table}")
    with pytest.raises(SystemExit) as exc:
        main(["runs", "list"])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and "Traceback" not in err and "[SQL:" not in err
    assert err.splitlines()[0] == "error: the database failed: no such table: runs", err
