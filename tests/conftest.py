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
