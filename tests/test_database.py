from sqlalchemy import inspect, text

from storage.db import MIGRATIONS_DIR, Database
from storage.models import Dataset, MetricPoint, Run


def _head() -> str:
    """The single head revision of the migration scripts (two heads would be a broken chain)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    [head] = ScriptDirectory.from_config(config).get_heads()
    return head


def test_empty_database_upgrades_to_head(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'wb.db'}")
    tables = set(inspect(db.engine).get_table_names())
    assert {"datasets", "runs", "metric_points", "artifacts", "playgrounds", "alembic_version"} <= tables
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == _head()
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
    # Upgrading again is a no-op.
    Database(db.url).dispose()
    db.dispose()


def test_deleting_a_dataset_keeps_its_runs_and_cascades_points(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'wb.db'}")
    with db.session() as s:
        s.add(Dataset(id="d1", name="x", task="text-classification", format="csv", content_hash="h",
                      path="p", num_train=1, num_validation=1, labels={}, stats={}, warnings=[]))
        s.flush()
        run = Run(task="text-classification", model="m", spec={}, dataset_id="d1")
        s.add(run)
        s.flush()
        s.add(MetricPoint(run_id=run.id, step=1, name="train/loss", value=1.0))
        run_id = run.id
    with db.session() as s:
        s.delete(s.get(Dataset, "d1"))
    with db.session() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.dataset_id is None and run.status == "queued"
        s.delete(run)
    with db.session() as s:
        assert s.query(MetricPoint).count() == 0
    db.dispose()


def test_postgres_upgrades_to_head(pg_url):
    from tests.queue_support import fresh_pg_database

    with fresh_pg_database(pg_url) as url:  # not the shared test database: other tests may run meanwhile
        db = Database(url)
        assert "runs" in inspect(db.engine).get_table_names()
        db.dispose()
