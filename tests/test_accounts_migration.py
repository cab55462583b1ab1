"""An existing home made before accounts (migration 0015), with runs, datasets and a WORKBENCH_AUTH file, upgrades:
its users sign in with their passwords (hashed, as admins), its work belongs to the first admin, nothing is lost.

On SQLite and on PostgreSQL (``WORKBENCH_TEST_PG_URL``). The 0014 database is filled through the models'
tables, leaving out only the ``owner_id`` columns that 0015 adds.
"""
from __future__ import annotations

import pytest
from sqlalchemy import func, insert, inspect, select, table

from storage.context import open_workbench
from storage.db import make_engine, upgrade
from storage.models import (Artifact, Audit, Dataset, LabelClass, LabelItem, LabelProject, MetricPoint, Playground,
                            Run, Sweep)
from storage.settings import Settings
from tests.queue_support import backend_url
from workbench.services import accounts
from workbench.services.bootstrap import first_start_message, import_bootstrap_users

AUTH = "# the team, before accounts\nalice:first:Secret-1\nbob:second-Secret-2\n"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def home_at_0014(request, tmp_path):
    """(database URL, engine) of a database migrated to 0014_tracking, the revision before accounts."""
    with backend_url(request.param, tmp_path) as url:
        engine = make_engine(url)
        upgrade(engine, "0014_tracking")
        yield url, engine
        engine.dispose()


def _fill(connection) -> dict[str, object]:
    """A little of everything that 0015 gives an owner, and rows that hang off it; the ids by kind."""
    def add(model_class, **values):
        key = model_class.__table__.primary_key.columns.values()[0]
        return connection.execute(insert(model_class.__table__).values(**values).returning(key)).scalar_one()

    dataset = add(Dataset, id="d" * 32, name="reviews", task="text-classification", format="csv",
                  content_hash="0" * 64, path="datasets/reviews", num_train=80, num_validation=20)
    add(Dataset, id="e" * 32, name="ner", task="token-classification", format="conll", content_hash="1" * 64,
        path="datasets/ner", num_train=10, num_validation=2)
    sweep = add(Sweep, task="text-classification", spec={"n_trials": 2}, study_name="s1", n_trials=2,
                status="finished")
    run = add(Run, name="first", task="text-classification", model="m", spec={}, dataset_id=dataset,
              status="succeeded")
    add(Run, name="trial", task="text-classification", model="m", spec={}, sweep_id=sweep, trial_number=0,
        sweep_n_trials=2)
    add(Run, name="", task="text-classification", model="m", spec={}, parent_run_id=run, kind="predict")
    add(MetricPoint, run_id=run, step=1, name="train/loss", value=0.5)
    add(Artifact, run_id=run, kind="model", path="runs/1/model")
    audit = add(Audit, task="text-classification", spec={"folds": 2}, folder="audits/1", dataset_id=dataset)
    project = add(LabelProject, name="tickets", folder="labelling/1", model="m")
    add(LabelClass, project_id=project, position=0, name="bug")
    add(LabelItem, project_id=project, position=0, external_id="k0", text="it crashes")
    playground = add(Playground, slug="demo", run_id=run)
    return {"dataset": dataset, "run": run, "sweep": sweep, "audit": audit, "label_project": project,
            "playground": playground}


def _counts(engine, names) -> dict[str, int]:
    with engine.connect() as connection:
        return {name: connection.execute(select(func.count()).select_from(table(name))).scalar() for name in names}


def test_a_home_with_workbench_auth_upgrades_signs_in_and_gives_its_work_to_the_first_admin(home_at_0014, tmp_path):
    url, engine = home_at_0014
    with engine.begin() as connection:
        ids = _fill(connection)
    tables = sorted(set(inspect(engine).get_table_names()) - {"alembic_version"})
    before = _counts(engine, tables)
    assert before["runs"] == 3 and before["datasets"] == 2 and before["label_items"] == 1
    auth_file = tmp_path / "users.txt"
    auth_file.write_text(AUTH, encoding="utf-8")
    settings = Settings.from_env({}, home=str(tmp_path / "home"), database_url=url, auth=str(auth_file))

    with open_workbench(settings) as wb:  # upgrades to head, as `workbench serve` does at start
        assert first_start_message(wb) is not None  # no account yet: the tables came, empty
        assert import_bootstrap_users(wb) == ["alice", "bob"]
        alice = accounts.authenticate(wb, "alice", "first:Secret-1")
        bob = accounts.authenticate(wb, "bob", "second-Secret-2")
        assert (alice.role, bob.role) == ("admin", "admin")
        assert accounts.authenticate(wb, "alice", "second-Secret-2") is None
        session = accounts.start_session(wb, alice)
        assert accounts.actor_for_session(wb, session).name == "alice"
        # Everything made before accounts is the first admin's: the first user of WORKBENCH_AUTH.
        for kind, target in ids.items():
            assert accounts.owner_of(wb, kind, target) == alice.user_id, kind
        assert first_start_message(wb) is None
        added = accounts.list_activity(wb, action="user_add")
        assert sorted((e["user"], e["target_id"]) for e in added) == [("WORKBENCH_AUTH", "alice"),
                                                                       ("WORKBENCH_AUTH", "bob")]

    after = _counts(engine, tables)
    assert after == before  # nothing lost, nothing doubled by the batch copies of the owned tables
    with engine.connect() as connection:
        assert connection.execute(select(Run.dataset_id).where(Run.id == ids["run"])).scalar() == ids["dataset"]
        assert connection.execute(select(func.count()).select_from(table("users"))).scalar() == 2
        stored = " ".join(str(row) for name in ("users", "activity", "web_sessions")
                          for row in connection.execute(select(table(name, *_columns(engine, name)))).all())
    for secret in ("first:Secret-1", "second-Secret-2", session):
        assert secret not in stored
    if url.startswith("sqlite"):
        database = (tmp_path / "home" / "workbench.db").read_bytes()
        assert b"Secret-1" not in database and b"Secret-2" not in database

    # The next start imports nobody again and changes no owner.
    with open_workbench(settings) as wb:
        assert import_bootstrap_users(wb) == []
        assert accounts.owner_of(wb, "run", ids["run"]) == alice.user_id
        assert len(accounts.list_users(wb)) == 2


def _columns(engine, name: str):
    from sqlalchemy import column

    return [column(c["name"]) for c in inspect(engine).get_columns(name)]
