"""Engines and sessions. No module-level engine: callers build one from settings."""
from __future__ import annotations

import contextlib
import fcntl
import threading
from pathlib import Path
from typing import Iterator

from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Key of the PostgreSQL advisory lock held while the schema is created or upgraded ("wbschema").
SCHEMA_LOCK_KEY = 0x7762736368656D61
# Alembic installs its migration context globally: two threads must not migrate at once, even two databases.
_MIGRATING_IN_THIS_PROCESS = threading.Lock()


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


@contextlib.contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """Hold an exclusive lock on ``<database>.lock`` next to a SQLite file (none for an in-memory one)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    lock_path = Path(database).with_name(Path(database).name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed, also if this process dies
        yield


def _lock_schema(connection: Connection) -> None:
    """On PostgreSQL, wait for the transaction-scoped advisory lock that serialises schema changes."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Create or upgrade the schema with Alembic, one process at a time.

    Processes that start together on a fresh database (N workers, a worker next to
    ``workbench train``) would otherwise all create the same tables; the second one fails.
    SQLite serialises through a file lock next to the database, PostgreSQL through an
    advisory lock; whoever comes second finds the schema at head and changes nothing.
    """
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with _MIGRATING_IN_THIS_PROCESS, _sqlite_file_lock(engine), _migration_transaction(engine) as connection:
        _lock_schema(connection)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


@contextlib.contextmanager
def _migration_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction for migrations; on SQLite with foreign keys off, as Alembic's batch mode needs.

    A batch migration copies a table and drops the old one; with foreign keys on, that DROP deletes
    every row first and ON DELETE CASCADE removed each run's metric points, artifacts and playgrounds.
    The keys are checked before the commit instead, and switched on again for the pool.
    """
    with engine.connect() as connection:
        if engine.dialect.name != "sqlite":
            with connection.begin():
                yield connection
            return
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction: before it
        connection.commit()
        try:
            with connection.begin():
                yield connection
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"the schema upgrade left rows whose foreign key points nowhere: {broken[:5]}")
        finally:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def describe_error(exc: SQLAlchemyError) -> str:
    """The driver's own sentence (``database is locked``), without the SQL statement SQLAlchemy appends."""
    reason = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(reason).strip().splitlines()
    return lines[0] if lines else type(reason).__name__


def display_url(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "WORKBENCH_DATABASE_URL"


class Database:
    """An engine plus a session factory; the one handle services need."""

    def __init__(self, url: str, migrate: bool = True):
        self.url = url
        self.engine = make_engine(url)
        if migrate:
            upgrade(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success and rolled back on any error."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()
