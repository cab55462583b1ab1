"""The handle every service and the worker take: settings plus an open database.

Opening the database is storage's job, so the handle lives here, where the
worker (``jobs``) and the services above it can both be handed one.
"""
from __future__ import annotations

import dataclasses
import os

from sqlalchemy.exc import SQLAlchemyError

from storage.db import Database, describe_error, display_url
from storage.errors import StorageError
from storage.settings import Settings


@dataclasses.dataclass
class Workbench:
    settings: Settings
    db: Database

    def close(self) -> None:
        self.db.dispose()

    def __enter__(self) -> "Workbench":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def open_workbench(settings: Settings | None = None) -> Workbench:
    """Build settings from the environment (unless given), create the home folder, migrate the DB."""
    settings = settings or Settings.from_env()
    settings.home.mkdir(parents=True, exist_ok=True)
    if settings.offline:
        # Never reach for a hub at run time; a missing model is reported, not waited for.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        db = Database(settings.database_url)
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot open the database {display_url(settings.database_url)}: {describe_error(exc)}",
                           "check WORKBENCH_DATABASE_URL (or WORKBENCH_HOME for the default SQLite file) "
                           "and that the database server is running") from exc
    return Workbench(settings=settings, db=db)
