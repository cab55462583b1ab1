"""`workbench users`: accounts from a terminal, through the same service as the admin page.

    workbench users add NAME --role admin|editor|viewer [--password-stdin] [--json]
    workbench users list [--json]
    workbench users set-role NAME ROLE [--json]
    workbench users disable NAME [--json]
    workbench users reset-password NAME [--password-stdin] [--json]

Whoever can run the CLI can open the database, so the CLI acts as the operator: an admin (``operator()``),
named ``cli:<login>`` in the activity log. A password is read from standard input (``--password-stdin``) or
prompted twice without echo; it is never printed, logged or passed on a command line.
"""
from __future__ import annotations

import getpass
import sys
from typing import Any

import typer

from workbench.cli import app, emit
from workbench.errors import ConfigError
from workbench.services.access import ADMIN, ROLES, Actor

users_app = typer.Typer(help="Accounts: add users, list them, change roles, disable, reset passwords.",
                        no_args_is_help=True)
app.add_typer(users_app, name="users")

ROLE_HELP = f"One of {', '.join(ROLES)} (docs/access.md has what each may do)."


def operator() -> Actor:
    """The actor the CLI acts as: an admin, named after the login that runs it."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = "unknown"
    return Actor(user_id=None, name=f"cli:{login}", role=ADMIN)


def read_password(from_stdin: bool) -> str:
    """The new password: all of standard input less its final line break with ``--password-stdin``, else
    typed twice without echo. An empty one, or two that differ, is a ``ConfigError`` (exit 2)."""
    if from_stdin:
        password = sys.stdin.read()
        for ending in ("\r\n", "\n"):
            if password.endswith(ending):
                password = password[:-len(ending)]
                break
    else:
        try:
            password = getpass.getpass("Password: ")
            if password and getpass.getpass("Password again: ") != password:
                raise ConfigError("the two passwords differ; nothing was changed")
        except EOFError:
            raise ConfigError("no password was typed (the input ended): type it at a terminal, or pipe it in "
                              "with --password-stdin; nothing was changed") from None
    if not password:
        raise ConfigError("the password is empty: every user has a password; nothing was changed")
    return password


def _role(value: str) -> str:
    if value not in ROLES:
        raise ConfigError(f"unknown role {value!r}; choose one of {', '.join(ROLES)}")
    return value


def _when(value: Any) -> str:
    return str(value)[:16] if value else "-"


def _table(users: list[dict]) -> str:
    if not users:
        return "no users (the workbench is open to anyone who reaches it: `workbench users add NAME --role admin`)"
    lines = [f"{'id':<5} {'name':<24} {'role':<7} {'state':<9} {'created':<17} last sign-in"]
    lines += [f"{u['id']:<5} {u['name']:<24} {u['role']:<7} {'disabled' if u['disabled'] else 'active':<9} "
              f"{_when(u['created_at']):<17} {_when(u['last_sign_in_at'])}" for u in users]
    return "\n".join(lines)


@users_app.command()
def add(name: str = typer.Argument(..., help="The user name (case-sensitive) they sign in with."),
        role: str = typer.Option(..., "--role", help=ROLE_HELP),
        password_stdin: bool = typer.Option(False, "--password-stdin",
                                            help="Read the password from standard input (else it is prompted "
                                                 "twice, hidden)."),
        as_json: bool = typer.Option(False, "--json", help="Print the user as JSON.")) -> None:
    """Add a user with a role and a password. The first admin also takes over the work made before accounts."""
    from storage.context import open_workbench
    from workbench.services import accounts

    role = _role(role)
    password = read_password(password_stdin)
    with open_workbench() as wb:
        user = accounts.add_user(wb, name, password, role, by=operator())
    emit(user, as_json, f"added {user['name']} ({user['role']})")


@users_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print a JSON list.")) -> None:
    """The users, with their roles, whether they are disabled and when they last signed in."""
    from storage.context import open_workbench
    from workbench.services import accounts

    with open_workbench() as wb:
        users = accounts.list_users(wb)
    emit(users, as_json, _table(users))


@users_app.command("set-role")
def set_role(name: str = typer.Argument(..., help="The user name."),
             role: str = typer.Argument(..., help=ROLE_HELP),
             as_json: bool = typer.Option(False, "--json", help="Print the user as JSON.")) -> None:
    """Change a user's role; it applies to their next request (sessions and tokens included)."""
    from storage.context import open_workbench
    from workbench.services import accounts

    role = _role(role)
    with open_workbench() as wb:
        user = accounts.set_role(wb, name, role, by=operator())
    emit(user, as_json, f"{user['name']} is now {'an' if user['role'][0] in 'aeiou' else 'a'} {user['role']}")


@users_app.command()
def disable(name: str = typer.Argument(..., help="The user name."),
            as_json: bool = typer.Option(False, "--json", help="Print the user as JSON.")) -> None:
    """Disable a user: they cannot sign in, their sessions end and their tokens stop working. Their work stays."""
    from storage.context import open_workbench
    from workbench.services import accounts

    with open_workbench() as wb:
        user = accounts.disable_user(wb, name, by=operator())
    emit(user, as_json, f"disabled {user['name']}: their sessions ended and their tokens stopped working")


@users_app.command("reset-password")
def reset_password(name: str = typer.Argument(..., help="The user name."),
                   password_stdin: bool = typer.Option(False, "--password-stdin",
                                                       help="Read the new password from standard input (else it "
                                                            "is prompted twice, hidden)."),
                   as_json: bool = typer.Option(False, "--json", help="Print the user as JSON.")) -> None:
    """Give a user a new password."""
    from storage.context import open_workbench
    from workbench.services import accounts

    password = read_password(password_stdin)
    with open_workbench() as wb:
        user = accounts.reset_password(wb, name, password, by=operator())
    emit(user, as_json, f"new password set for {user['name']}")
