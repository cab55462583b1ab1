"""Migration 0006 on a database that already holds sweeps: trials numbered, budgets set, nothing lost.

On SQLite and on PostgreSQL (``WORKBENCH_TEST_PG_URL``). The 0005 database is filled through the
models' tables, which at 0005 lack only the columns 0006 adds.
"""
from __future__ import annotations

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError

from storage.db import make_engine, upgrade
from storage.models import Artifact, MetricPoint, Playground, Run, Sweep
from tests.queue_support import backend_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_at_0005(request, tmp_path):
    with backend_url(request.param, tmp_path) as url:
        engine = make_engine(url)
        upgrade(engine, "0005_audits")
        yield engine
        engine.dispose()


def _run(connection, **values) -> int:
    row = {"name": "", "task": "text-classification", "model": "m", "spec": {}, **values}
    return connection.execute(insert(Run.__table__).values(**row).returning(Run.id)).scalar_one()


def _sweep(connection, n_trials: int, study_name: str) -> int:
    return connection.execute(insert(Sweep.__table__).values(
        task="text-classification", spec={"n_trials": n_trials}, study_name=study_name, status="finished")
        .returning(Sweep.id)).scalar_one()


def test_existing_trials_are_numbered_within_their_sweeps_budget_and_nothing_is_lost(engine_at_0005):
    engine = engine_at_0005
    with engine.begin() as c:
        overshot = _sweep(c, 2, "overshot")  # the lease race: three trials for a budget of two
        runs = [_run(c, sweep_id=overshot, trial_number=n) for n in (0, 1, 2)]
        runs.append(_run(c, sweep_id=overshot, trial_number=None))
        normal = _sweep(c, 5, "normal")
        _run(c, sweep_id=normal, trial_number=0)
        child = _run(c, parent_run_id=runs[0])
        c.execute(insert(MetricPoint.__table__).values(run_id=runs[0], step=1, name="train/loss", value=0.5))
        c.execute(insert(Artifact.__table__).values(run_id=runs[0], kind="model", path="p"))
        c.execute(insert(Playground.__table__).values(slug="demo", run_id=runs[0]))
    upgrade(engine)
    with engine.begin() as c:
        assert dict(c.execute(select(Sweep.id, Sweep.n_trials)).all()) == {overshot: 4, normal: 5}
        rows = c.execute(select(Run.id, Run.trial_number, Run.sweep_n_trials).where(Run.sweep_id == overshot)
                         .order_by(Run.id)).all()
        assert [(r.trial_number, r.sweep_n_trials) for r in rows] == [(0, 4), (1, 4), (2, 4), (3, 4)]
        # A batch migration copies the runs table: the rows that point at runs must survive the copy.
        for table in (MetricPoint, Artifact, Playground):
            assert c.execute(select(func.count()).select_from(table)).scalar() == 1
        assert c.execute(select(Run.parent_run_id).where(Run.id == child)).scalar() == runs[0]
        _run(c, sweep_id=normal, trial_number=4, sweep_n_trials=5)
    with pytest.raises(IntegrityError), engine.begin() as c:
        _run(c, sweep_id=normal, trial_number=5, sweep_n_trials=5)
    _downgrade(engine, "0005_audits")  # and back, with the trials kept
    upgrade(engine)
    with engine.begin() as c:
        assert c.execute(select(func.count()).select_from(Run).where(Run.sweep_id.is_not(None))).scalar() == 6


def _downgrade(engine, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from storage.db import MIGRATIONS_DIR, _migration_transaction

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with _migration_transaction(engine) as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
