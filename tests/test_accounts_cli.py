"""`workbench users`, `workbench tokens` and `workbench activity`: every command, its JSON, its exit codes, the
password read from standard input or prompted twice; and the WORKBENCH_AUTH bootstrap and the first-start
message. No password and no token value is in any output, log line or file of the home folder."""
from __future__ import annotations

import io
import json
import logging

import pytest

from workbench.services import accounts
from workbench.services.bootstrap import first_start_message, import_bootstrap_users, parse_auth

PASSWORD = "correct horse battery staple"
NEW_PASSWORD = "Tr0ub4dor&3-but-longer"


@pytest.fixture
def stdin(monkeypatch):
    """``stdin("text")`` makes the next commands read ``text`` from standard input."""
    def feed(text: str) -> None:
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
    return feed


@pytest.fixture
def typed(monkeypatch):
    """``typed("a", "b")``: what the user types at the next hidden prompts, in order; the prompts are kept."""
    prompts: list[str] = []

    def answers(*values: str) -> list[str]:
        queue = list(values)

        def getpass(prompt: str = "Password: ", stream=None) -> str:
            prompts.append(prompt)
            return queue.pop(0)
        monkeypatch.setattr("getpass.getpass", getpass)
        return prompts
    return answers


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def _admin(wb):
    """The actor the CLI acts as (an admin), for the changes a test makes through the services."""
    from workbench.commands.users import operator

    return operator()


def _add(cli, stdin, name: str, role: str, password: str = PASSWORD) -> dict:
    stdin(password + "\n")
    code, out, err = cli("users", "add", name, "--role", role, "--password-stdin", "--json")
    assert code == 0, err
    return json.loads(out)


# -- users -----------------------------------------------------------------------------------------------------

def test_users_add_from_stdin_list_and_sign_in(cli, wb, stdin):
    user = _add(cli, stdin, "alice", "admin")
    assert (user["name"], user["role"], user["disabled"]) == ("alice", "admin", False)
    assert not {"password", "password_hash"} & set(user)
    # All of standard input less its one final line break is the password: spaces inside and around it count.
    assert accounts.authenticate(wb, "alice", PASSWORD) is not None
    assert accounts.authenticate(wb, "alice", PASSWORD + "\n") is None

    stdin(" spaced out \r\n")
    code, out, err = cli("users", "add", "bob", "--role", "viewer", "--password-stdin")
    assert code == 0, err
    assert out.strip() == "added bob (viewer)"
    assert accounts.authenticate(wb, "bob", " spaced out ").role == "viewer"

    code, out, _ = cli("users", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(u["name"], u["role"]) for u in listed] == [("alice", "admin"), ("bob", "viewer")]
    assert {"id", "name", "role", "disabled", "created_at", "last_sign_in_at"} <= set(listed[0])
    code, out, _ = cli("users", "list")
    assert code == 0
    assert "alice" in out and "admin" in out and "bob" in out and "viewer" in out and "active" in out


def test_users_add_prompts_twice_hidden(cli, wb, typed):
    prompts = typed(PASSWORD, PASSWORD)
    code, out, err = cli("users", "add", "carol", "--role", "editor")
    assert code == 0, err
    assert len(prompts) == 2
    assert accounts.authenticate(wb, "carol", PASSWORD).role == "editor"


@pytest.mark.parametrize("answers", [(PASSWORD, PASSWORD + "x"), ("",)], ids=["differ", "empty"])
def test_a_mistyped_or_empty_prompted_password_adds_nobody(cli, wb, typed, answers):
    typed(*answers)
    code, out, err = cli("users", "add", "carol", "--role", "editor")
    assert code == 2 and out == ""
    assert err.startswith("error: the ") and ("differ" in err or "empty" in err)
    assert accounts.list_users(wb) == []


@pytest.mark.parametrize("text", ["", "\n", "\r\n"])
def test_an_empty_password_on_stdin_is_refused(cli, wb, stdin, text):
    stdin(text)
    code, out, err = cli("users", "add", "alice", "--role", "admin", "--password-stdin")
    assert code == 2 and out == "" and "password is empty" in err
    assert not accounts.has_accounts(wb)


def test_a_prompt_with_no_input_left_is_refused_not_aborted(cli, wb, monkeypatch):
    def ended(prompt: str = "", stream=None) -> str:
        raise EOFError
    monkeypatch.setattr("getpass.getpass", ended)
    code, out, err = cli("users", "add", "alice", "--role", "admin")
    assert code == 2 and "--password-stdin" in err and not accounts.has_accounts(wb)


def test_users_add_refuses_an_unknown_role_before_asking_for_a_password(cli, wb, typed):
    prompts = typed()
    code, out, err = cli("users", "add", "alice", "--role", "owner")
    assert code == 2 and "unknown role 'owner'" in err and "viewer, editor, admin" in err
    assert prompts == [] and not accounts.has_accounts(wb)


def test_users_add_twice_is_refused(cli, wb, stdin):
    _add(cli, stdin, "alice", "admin")
    stdin("another\n")
    code, out, err = cli("users", "add", "alice", "--role", "viewer", "--password-stdin")
    assert code == 4 and err.startswith("error: ") and "alice" in err
    assert [(u["name"], u["role"]) for u in accounts.list_users(wb)] == [("alice", "admin")]
    assert accounts.authenticate(wb, "alice", "another") is None


def test_set_role_disable_and_reset_password(cli, wb, stdin):
    _add(cli, stdin, "alice", "admin")
    _add(cli, stdin, "bob", "viewer")

    code, out, err = cli("users", "set-role", "bob", "editor", "--json")
    assert code == 0, err
    assert json.loads(out)["role"] == "editor"
    code, out, _ = cli("users", "set-role", "bob", "admin")
    assert code == 0 and out.strip() == "bob is now an admin"
    assert cli("users", "set-role", "bob", "root")[0] == 2
    code, _, err = cli("users", "set-role", "nobody", "viewer")
    assert code == 3 and "nobody" in err

    stdin(NEW_PASSWORD + "\n")
    code, out, err = cli("users", "reset-password", "bob", "--password-stdin", "--json")
    assert code == 0, err
    assert json.loads(out)["name"] == "bob"
    assert accounts.authenticate(wb, "bob", PASSWORD) is None
    assert accounts.authenticate(wb, "bob", NEW_PASSWORD) is not None
    stdin("")
    assert cli("users", "reset-password", "bob", "--password-stdin")[0] == 2
    assert accounts.authenticate(wb, "bob", NEW_PASSWORD) is not None  # unchanged by the refused reset
    stdin("whatever\n")
    assert cli("users", "reset-password", "nobody", "--password-stdin")[0] == 3

    token = accounts.create_token(wb, "bob", "ci", "write", by=_admin(wb))["token"]
    assert accounts.actor_for_token(wb, token) is not None
    code, out, err = cli("users", "disable", "bob", "--json")
    assert code == 0, err
    assert json.loads(out)["disabled"] is True
    assert accounts.authenticate(wb, "bob", NEW_PASSWORD) is None
    assert accounts.actor_for_token(wb, token) is None
    code, out, _ = cli("users", "list")
    assert "disabled" in out
    assert cli("users", "disable", "nobody")[0] == 3


# -- tokens ----------------------------------------------------------------------------------------------------

def test_tokens_create_list_and_revoke(cli, wb, stdin):
    _add(cli, stdin, "alice", "admin")
    _add(cli, stdin, "bob", "editor")

    code, out, err = cli("tokens", "create", "ci", "--user", "bob", "--scope", "read")
    assert code == 0, err
    value = out.strip()
    assert value.startswith("wbt_") and "\n" not in value  # the value alone on stdout: TOKEN=$(…) keeps it
    assert "shown once" in err and "bob" in err and value not in err
    actor = accounts.actor_for_token(wb, value)
    assert (actor.name, actor.scope, actor.token) == ("bob", "read", "ci")

    code, out, err = cli("tokens", "create", "nightly", "--user", "alice", "--scope", "write", "--expires", "30",
                         "--json")
    assert code == 0, err
    made = json.loads(out)
    assert made["token"].startswith("wbt_") and made["token"] != value
    assert (made["name"], made["user"], made["scope"]) == ("nightly", "alice", "write")
    assert made["expires_at"] is not None

    code, out, _ = cli("tokens", "list", "--json")
    listed = json.loads(out)
    assert sorted(t["name"] for t in listed) == ["ci", "nightly"]
    assert "token" not in listed[0] and value not in out and made["token"] not in out
    assert {"id", "name", "user", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"} <= set(listed[0])
    code, out, _ = cli("tokens", "list", "--user", "bob", "--json")
    assert [t["name"] for t in json.loads(out)] == ["ci"]
    code, out, _ = cli("tokens", "list")
    assert "ci" in out and "nightly" in out and value not in out

    ci = next(t for t in listed if t["name"] == "ci")
    code, out, err = cli("tokens", "revoke", str(ci["id"]), "--json")
    assert code == 0, err
    assert json.loads(out)["revoked_at"] is not None
    assert accounts.actor_for_token(wb, value) is None
    code, out, _ = cli("tokens", "list")
    assert "revoked" in out


@pytest.mark.parametrize("args, code", [
    (("tokens", "create", "ci", "--user", "nobody", "--scope", "read"), 3),
    (("tokens", "create", "ci", "--user", "alice", "--scope", "admin"), 2),
    (("tokens", "create", "ci", "--user", "alice", "--scope", "read", "--expires", "0"), 2),
    (("tokens", "create", "ci", "--scope", "read"), 2),
    (("tokens", "revoke", "999"), 3),
    (("tokens", "revoke", "abc"), 3),
    (("tokens", "revoke", "-1"), 3),
])
def test_token_errors_have_their_exit_codes(cli, wb, stdin, args, code):
    _add(cli, stdin, "alice", "admin")
    got, out, err = cli(*args)
    assert got == code, err
    assert out == "" and err.strip()
    assert accounts.list_tokens(wb) == []


# -- activity --------------------------------------------------------------------------------------------------

def test_activity_lists_and_filters(cli, wb, stdin):
    _add(cli, stdin, "alice", "admin")
    _add(cli, stdin, "bob", "editor")
    accounts.authenticate(wb, "bob", "wrong password")
    accounts.authenticate(wb, "bob", PASSWORD)
    assert cli("tokens", "create", "ci", "--user", "bob", "--scope", "read")[0] == 0

    code, out, err = cli("activity", "--json")
    assert code == 0, err
    entries = json.loads(out)
    actions = [e["action"] for e in entries]
    assert {"user_add", "sign_in_failed", "sign_in", "token_create"} <= set(actions)
    assert entries == sorted(entries, key=lambda e: e["at"], reverse=True)  # newest first
    assert {"at", "action", "target_kind", "target_id", "detail", "address"} <= set(entries[0])

    code, out, _ = cli("activity", "--action", "sign_in_failed", "--json")
    assert [e["action"] for e in json.loads(out)] == ["sign_in_failed"]
    code, out, _ = cli("activity", "--user", "bob", "--action", "sign_in", "--json")
    assert len(json.loads(out)) == 1
    code, out, _ = cli("activity", "--limit", "2", "--json")
    assert len(json.loads(out)) == 2
    code, out, _ = cli("activity", "--since", "2999-01-01", "--json")
    assert json.loads(out) == []
    code, out, _ = cli("activity", "--since", "2000-01-01T00:00:00+02:00", "--json")
    assert len(json.loads(out)) == len(entries)
    code, out, _ = cli("activity", "--since", "2999-01-01")
    assert code == 0 and out.strip() == "no activity"
    code, out, _ = cli("activity", "--action", "token_create")
    assert code == 0 and "token_create" in out and "bob" in out

    code, out, err = cli("activity", "--since", "last tuesday")
    assert code == 2 and "ISO 8601" in err and out == ""
    assert cli("activity", "--limit", "0")[0] == 2
    code, out, err = cli("activity", "--action", "signin")  # a typo is refused, not an empty answer
    assert code == 2 and "unknown action 'signin'" in err and "sign_in_failed" in err


# -- secrets ---------------------------------------------------------------------------------------------------

def _home_bytes(wb) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(wb.settings.home.rglob("*")) if path.is_file())


def test_no_password_or_token_value_in_any_output_log_or_file(cli, wb, stdin, typed, logs):
    outputs = []
    stdin(PASSWORD + "\n")
    outputs.append(cli("users", "add", "alice", "--role", "admin", "--password-stdin"))
    typed(NEW_PASSWORD, NEW_PASSWORD)
    outputs.append(cli("users", "add", "bob", "--role", "editor", "--json"))
    stdin("Another-Secret-1\n")
    outputs.append(cli("users", "reset-password", "bob", "--password-stdin", "--json"))
    typed("mismatch-one", "mismatch-two")
    outputs.append(cli("users", "add", "eve", "--role", "viewer"))
    code, raw, _ = cli("tokens", "create", "ci", "--user", "bob", "--scope", "write")
    code, raw_json, _ = cli("tokens", "create", "nb", "--user", "bob", "--scope", "read", "--json")
    values = [raw.strip(), json.loads(raw_json)["token"]]
    accounts.authenticate(wb, "bob", "Wrong-Guess-7")
    accounts.authenticate(wb, "bob", "Another-Secret-1")
    assert accounts.actor_for_token(wb, values[0]) is not None
    assert import_bootstrap_users(_with_auth(wb, "carol:Boot-Secret-9")) == ["carol"]
    outputs += [cli("users", "list", "--json"), cli("tokens", "list", "--json"), cli("activity", "--json"),
                cli("activity")]

    secrets = [PASSWORD, NEW_PASSWORD, "Another-Secret-1", "mismatch-one", "mismatch-two", "Wrong-Guess-7",
               "Boot-Secret-9", *values]
    printed = "\n".join(out + err for _, out, err in outputs)
    logged = logs.text + "\n".join(str(record.__dict__) for record in logs.records)
    assert "WORKBENCH_AUTH: 1 user imported" in logs.text  # the capture worked
    stored = _home_bytes(wb)
    for secret in secrets:
        assert secret not in printed, secret
        assert secret not in logged, secret
        assert secret.encode() not in stored, secret


# -- the WORKBENCH_AUTH bootstrap and the first start ----------------------------------------------------------

def _with_auth(wb, value: str):
    import dataclasses

    from storage.context import Workbench

    return Workbench(dataclasses.replace(wb.settings, auth=value), wb.db)


def test_bootstrap_imports_once_as_admins_hashed_and_warns(wb, logs, tmp_path):
    users = tmp_path / "users"
    users.write_text("# the team\nalice:pa:ss-1\n\nbob:pass-2\n", encoding="utf-8")
    boot = _with_auth(wb, str(users))
    assert first_start_message(boot) is not None

    assert import_bootstrap_users(boot) == ["alice", "bob"]
    assert [(u["name"], u["role"]) for u in accounts.list_users(wb)] == [("alice", "admin"), ("bob", "admin")]
    assert accounts.authenticate(wb, "alice", "pa:ss-1").role == "admin"
    warning = [r for r in logs.records if r.levelno == logging.WARNING and "WORKBENCH_AUTH" in r.getMessage()]
    assert len(warning) == 1
    assert "2 users imported as admins, hashed" in warning[0].getMessage()
    assert str(users) in warning[0].getMessage() and "remove the plain text" in warning[0].getMessage()
    assert first_start_message(boot) is None

    # The next start imports nobody (a password reset since stays) and still asks to remove the plain text.
    accounts.reset_password(wb, "bob", NEW_PASSWORD, by=_admin(wb))
    logs.clear()
    assert import_bootstrap_users(boot) == []
    assert accounts.authenticate(wb, "bob", "pass-2") is None
    assert "remove the plain text" in logs.text
    # A name that is new is added, beside the existing accounts.
    users.write_text("alice:pa:ss-1\ncarol:pass-3\n", encoding="utf-8")
    assert import_bootstrap_users(boot) == ["carol"]
    for secret in ("pa:ss-1", "pass-2", "pass-3"):
        assert secret not in logs.text and secret.encode() not in _home_bytes(wb)


def test_bootstrap_without_auth_does_nothing_and_the_first_start_says_how_to_begin(wb, logs):
    assert import_bootstrap_users(wb) == [] and not logs.records
    message = first_start_message(wb)
    assert "open to anyone" in message and "workbench users add NAME --role admin" in message
    assert f"{wb.settings.host}:{wb.settings.port}" in message
    accounts.add_user(wb, "alice", PASSWORD, "viewer", by=_admin(wb))
    assert first_start_message(wb) is None


def test_bootstrap_inline_value_names_the_variable(wb, logs):
    assert import_bootstrap_users(_with_auth(wb, "alice:one-pass")) == ["alice"]
    assert "1 user imported as admins" in logs.text and "the WORKBENCH_AUTH variable" in logs.text


def test_parse_auth_never_echoes_a_password_and_the_server_still_exports_it():
    from workbench.errors import ConfigError
    from workbench.server import parse_auth as from_server

    assert from_server is parse_auth
    with pytest.raises(ConfigError) as refused:
        parse_auth(":hunter2")
    assert "hunter2" not in str(refused.value) and "no user name" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        parse_auth("alice:")
    assert "'alice' with no password" in str(refused.value)
