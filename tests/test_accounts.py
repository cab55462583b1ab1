"""Accounts (workbench/services/accounts.py): Argon2id passwords, sessions, API tokens, owners of work and the
append-only activity log, on SQLite and PostgreSQL."""
from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import DatabaseError

from storage.errors import ConfigError, InvalidState, NotFound
from storage.models import ApiToken, Run, User, WebSession
from tests.access_support import OPERATOR, PASSWORDS, team
from tests.queue_support import fake_spec
from workbench.services import access, accounts, runs
from workbench.services.access import LOCAL, AccessDenied, Actor


def _dump(wb) -> str:
    """Every row of every accounts table, as text."""
    with wb.db.session() as session:
        return "\n".join(str(tuple(row)) for table in ("users", "web_sessions", "api_tokens", "activity")
                         for row in session.execute(text(f"SELECT * FROM {table}")))


@pytest.mark.real_password_hashing
def test_passwords_are_argon2id_at_or_above_owasps_minimum_and_never_stored_in_plain_text(wb):
    from argon2 import extract_parameters

    t = team(wb)
    with wb.db.session() as session:
        hashes = list(session.scalars(select(User.password_hash)))
    for encoded in hashes:
        params = extract_parameters(encoded)
        assert encoded.startswith("$argon2id$")
        assert params.memory_cost >= 19 * 1024 and params.time_cost >= 2 and params.parallelism >= 1
    dump = _dump(wb)
    for password in PASSWORDS.values():
        assert password not in dump
    for raw in (t.read_token, t.write_token, t.revoked_token, t.expired_token):
        assert raw not in dump and raw.startswith("wbt_")


def test_sign_in_checks_the_password_and_records_each_attempt(wb):
    team(wb)
    assert accounts.authenticate(wb, "ed", PASSWORDS["ed"], address="10.0.0.1").role == "editor"
    assert accounts.authenticate(wb, "ed", "wrong") is None
    assert accounts.authenticate(wb, "nobody", "x") is None
    assert accounts.authenticate(wb, "ed", "") is None
    accounts.disable_user(wb, "ed", by=OPERATOR)
    assert accounts.authenticate(wb, "ed", PASSWORDS["ed"]) is None
    newest = [(e["action"], (e["detail"] or {}).get("reason")) for e in accounts.list_activity(wb, user="ed")[:4]]
    assert newest == [("sign_in_failed", "disabled"), ("sign_in_failed", "wrong password"),
                      ("sign_in_failed", "wrong password"), ("sign_in", None)]
    failed = accounts.list_activity(wb, action="sign_in_failed")
    # a name that is no user's is not kept (it may be a password typed into the wrong box)
    assert [(e["user"], e["target_id"]) for e in failed if e["user"] != "ed"] == [("", None)] and len(failed) == 4
    assert "nobody" not in _dump(wb)
    assert accounts.list_activity(wb, action="user_disable")[0]["user"] == "cli:test"
    assert any(e["address"] == "10.0.0.1" for e in accounts.list_activity(wb, action="sign_in"))


@pytest.mark.real_password_hashing
def test_a_hash_with_old_parameters_is_replaced_at_the_next_sign_in(wb):
    from argon2 import PasswordHasher

    accounts.add_user(wb, "old", "old-password-1", "editor", by=OPERATOR)
    weak = PasswordHasher(time_cost=1, memory_cost=8 * 1024, parallelism=1).hash("old-password-1")
    with wb.db.session() as session:
        session.execute(update(User).where(User.name == "old").values(password_hash=weak))
    assert accounts.authenticate(wb, "old", "old-password-1") is not None
    with wb.db.session() as session:
        assert session.scalar(select(User.password_hash).where(User.name == "old")) != weak
    assert accounts.authenticate(wb, "old", "old-password-1") is not None


def test_sessions_end_at_sign_out_expiry_and_when_the_user_is_disabled(wb):
    t = team(wb)
    raw = accounts.start_session(wb, t.editor)
    assert accounts.actor_for_session(wb, raw) == t.editor
    accounts.end_session(wb, raw)
    assert accounts.actor_for_session(wb, raw) is None
    raw = accounts.start_session(wb, t.editor)
    with wb.db.session() as session:
        session.execute(update(WebSession).values(expires_at=dt.datetime(2000, 1, 1)))
    assert accounts.actor_for_session(wb, raw) is None
    raw = accounts.start_session(wb, t.viewer)
    accounts.disable_user(wb, "vic", by=t.admin)
    assert accounts.actor_for_session(wb, raw) is None
    assert accounts.actor_for_session(wb, "forged") is None and accounts.actor_for_session(wb, None) is None


def test_tokens_act_as_their_user_capped_by_scope_until_revoked_or_expired(wb):
    t = team(wb)
    read, write = accounts.actor_for_token(wb, t.read_token), accounts.actor_for_token(wb, t.write_token)
    assert (read.name, read.role, read.scope, read.token) == ("ed", "editor", "read", "notebook")
    assert (write.scope, write.token) == ("write", "ci")
    assert not access.allows(read, access.CREATE) and access.allows(write, access.CREATE)
    assert accounts.actor_for_token(wb, t.revoked_token) is None
    assert accounts.actor_for_token(wb, t.expired_token) is None
    assert accounts.actor_for_token(wb, "wbt_" + "x" * 43) is None
    listed = {row["name"]: row for row in accounts.list_tokens(wb, "ed")}
    assert listed["ci"]["last_used_at"] and listed["notebook"]["last_used_at"] and not listed["old"]["last_used_at"]
    assert listed["old"]["revoked_at"] and "token" not in listed["ci"]
    # a use is logged once a minute at most, by the token's name
    accounts.actor_for_token(wb, t.write_token)
    uses = accounts.list_activity(wb, action="token_use")
    assert sorted(u["token"] for u in uses) == ["ci", "notebook"]
    # someone else's token: only an admin revokes it; a user makes tokens only for themselves
    with pytest.raises(AccessDenied):
        accounts.revoke_token(wb, listed["ci"]["id"], by=t.other_editor)
    with pytest.raises(AccessDenied):
        accounts.create_token(wb, "olga", "mine", "write", by=t.editor)
    with pytest.raises(AccessDenied):
        accounts.create_token(wb, "ed", "more", "write", by=read)
    accounts.revoke_token(wb, listed["ci"]["id"], by=t.admin)
    assert accounts.actor_for_token(wb, t.write_token) is None
    accounts.disable_user(wb, "ed", by=t.admin)
    assert accounts.actor_for_token(wb, t.read_token) is None


def test_with_no_account_every_request_is_local_and_with_one_it_must_sign_in(wb):
    assert accounts.resolve(wb) is LOCAL and accounts.resolve(wb, bearer="wbt_nothing") is LOCAL
    t = team(wb)
    assert accounts.resolve(wb) is None
    assert accounts.resolve(wb, bearer=t.write_token).token == "ci"
    raw = accounts.start_session(wb, t.viewer)
    assert accounts.resolve(wb, session=raw) == t.viewer
    assert accounts.resolve(wb, session=raw, bearer=t.revoked_token) is None  # a bad token is not topped up


def test_the_first_admin_owns_the_work_made_before_accounts(wb):
    before = runs.submit_run(wb, fake_spec(wb, "fake:steps:1:0", name="before accounts"))
    assert accounts.owner_of(wb, "run", before) is None
    accounts.add_user(wb, "ed", PASSWORDS["ed"], "editor", by=OPERATOR)
    assert accounts.owner_of(wb, "run", before) is None  # an editor adopts nothing
    ada = accounts.add_user(wb, "ada", PASSWORDS["ada"], "admin", by=OPERATOR)
    assert accounts.owner_of(wb, "run", before) == ada["id"]
    entry = accounts.list_activity(wb, action="user_add")[0]
    assert entry["detail"]["adopted"]["run"] == 1 and entry["user"] == "cli:test"
    mine = runs.submit_run(wb, fake_spec(wb, "fake:steps:1:0", name="mine"), owner_id=7)
    assert accounts.owner_of(wb, "run", mine) == 7
    with pytest.raises(NotFound):
        accounts.owner_of(wb, "run", 999)
    assert accounts.owner_names(wb) == {ada["id"]: "ada", ada["id"] - 1: "ed"}


def test_users_are_checked_and_the_last_admin_stays(wb):
    t = team(wb)
    with pytest.raises(ConfigError, match="empty"):
        accounts.add_user(wb, "new", "", "viewer", by=t.admin)
    with pytest.raises(ConfigError, match="role"):
        accounts.add_user(wb, "new", "pw-long-enough", "owner", by=t.admin)
    with pytest.raises(ConfigError, match="user name"):
        accounts.add_user(wb, "a b", "pw-long-enough", "viewer", by=t.admin)
    with pytest.raises(InvalidState, match="exists"):
        accounts.add_user(wb, "ed", "pw-long-enough", "viewer", by=t.admin)
    with pytest.raises(AccessDenied):
        accounts.add_user(wb, "new", "pw-long-enough", "viewer", by=t.editor)
    with pytest.raises(InvalidState, match="last active admin"):
        accounts.set_role(wb, "ada", "editor", by=t.admin)
    with pytest.raises(InvalidState, match="last active admin"):
        accounts.disable_user(wb, "ada", by=t.admin)
    assert accounts.set_role(wb, "vic", "editor", by=t.admin)["role"] == "editor"
    assert accounts.list_activity(wb, action="role_change")[0]["detail"] == {"from": "viewer", "to": "editor"}
    # one's own password, or an admin's reset; the other sessions end
    raw = accounts.start_session(wb, t.editor)
    accounts.reset_password(wb, "ed", "a-new-password-5", by=t.editor)
    assert accounts.actor_for_session(wb, raw) is None
    assert accounts.authenticate(wb, "ed", "a-new-password-5") is not None
    with pytest.raises(AccessDenied):
        accounts.reset_password(wb, "olga", "x-password-6", by=t.editor)


def _append_only(wb) -> None:
    accounts.record(wb, LOCAL, "create", "run", 1)
    for statement in ("UPDATE activity SET action = 'delete'", "DELETE FROM activity"):
        with pytest.raises(DatabaseError, match="append-only"):
            with wb.db.session() as session:
                session.execute(text(statement))
    assert [e["action"] for e in accounts.list_activity(wb)] == ["create"]


def test_the_activity_log_refuses_update_and_delete(wb):
    _append_only(wb)
    with pytest.raises(ValueError):
        accounts.record(wb, LOCAL, "frobnicate")


def test_postgres_keeps_the_activity_log_append_only_and_accounts_work(pg_url, tmp_path):
    from storage.context import open_workbench
    from storage.settings import Settings

    settings = Settings.from_env({}, home=str(tmp_path / "home"), database_url=pg_url)
    with open_workbench(settings) as pg_wb:
        with pg_wb.db.session() as session:  # a database other tests used: start from no user and no activity
            session.execute(text("ALTER TABLE activity DISABLE TRIGGER USER"))
            session.execute(text("DELETE FROM activity"))
            session.execute(text("ALTER TABLE activity ENABLE TRIGGER USER"))
            session.execute(text("DELETE FROM users"))
        _append_only(pg_wb)
        with pytest.raises(DatabaseError, match="append-only"):
            with pg_wb.db.session() as session:
                session.execute(text("TRUNCATE activity"))
        t = team(pg_wb)
        assert accounts.actor_for_token(pg_wb, t.read_token).scope == "read"
        assert accounts.authenticate(pg_wb, "ada", PASSWORDS["ada"]).role == "admin"


def test_a_token_is_never_looked_up_by_anything_but_its_hash(wb):
    t = team(wb)
    with wb.db.session() as session:
        stored = set(session.scalars(select(ApiToken.token_hash)))
    assert all(len(h) == 64 for h in stored) and not any(t.read_token in h for h in stored)
    assert Actor(1, "x", "viewer").label == "x" and accounts.actor_for_token(wb, t.read_token).label == \
        "ed (token notebook)"
    with pytest.raises(NotFound):
        accounts.owner_of(wb, "playground", "no-such-slug")
