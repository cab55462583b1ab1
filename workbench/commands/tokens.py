"""`workbench tokens`: API tokens (``Authorization: Bearer wbt_…``) from a terminal, as the operator (an admin).

    workbench tokens create NAME --user USER --scope read|write [--expires DAYS] [--json]   the value, once
    workbench tokens list [--user USER] [--json]                                              never a value
    workbench tokens revoke ID [--json]

``create`` prints the token's value alone on standard output (``{"token": …, …}`` with ``--json``) and what it
is on standard error, so ``TOKEN=$(workbench tokens create ci --user alice --scope read)`` keeps just the
value. Only its hash is stored: it cannot be shown again.
"""
from __future__ import annotations

import datetime as dt
from typing import Optional

import typer

from workbench.cli import app, emit, id_argument
from workbench.commands.users import operator
from workbench.errors import ConfigError
from workbench.services.access import SCOPES

tokens_app = typer.Typer(help="API tokens: create (the value is shown once), list, revoke.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")


def _when(value) -> str:
    return str(value)[:16] if value else "-"


def _state(token: dict) -> str:
    if token.get("revoked_at"):
        return "revoked"
    expires = token.get("expires_at")
    if expires and dt.datetime.fromisoformat(expires) <= dt.datetime.now(dt.timezone.utc).replace(tzinfo=None):
        return "expired"  # the times are naive UTC, as the database keeps them
    return "active"


def _table(tokens: list[dict]) -> str:
    if not tokens:
        return "no tokens"
    lines = [f"{'id':<5} {'name':<20} {'user':<16} {'scope':<6} {'state':<8} {'created':<17} {'expires':<17} "
             "last used"]
    lines += [f"{t['id']:<5} {t['name']:<20} {t['user']:<16} {t['scope']:<6} {_state(t):<8} "
              f"{_when(t['created_at']):<17} {_when(t['expires_at']) if t['expires_at'] else 'never':<17} "
              f"{_when(t['last_used_at'])}" for t in tokens]
    return "\n".join(lines)


@tokens_app.command()
def create(name: str = typer.Argument(..., help="What the token is for (ci, notebook); the activity log names "
                                                "it so."),
           user: str = typer.Option(..., "--user", help="The user it acts as; it never grants more than their "
                                                        "role."),
           scope: str = typer.Option(..., "--scope", help="read (see only) or write (whatever the user may do)."),
           expires: Optional[int] = typer.Option(None, "--expires", min=1, metavar="DAYS",
                                                 help="Stops working after this many days (default: never)."),
           as_json: bool = typer.Option(False, "--json", help="Print JSON: {token, id, name, user, scope, "
                                                              "expires_at}.")) -> None:
    """Create an API token and print its value, once: only its hash is stored."""
    from storage.context import open_workbench
    from workbench.services import accounts

    if scope not in SCOPES:
        raise ConfigError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")
    with open_workbench() as wb:
        token = accounts.create_token(wb, user, name, scope, expires, by=operator())
    emit(token, as_json, token["token"])
    if not as_json:
        until = f"until {_when(token['expires_at'])}" if token.get("expires_at") else "with no expiry"
        typer.echo(f"token {token['id']} ({token['name']!r}) for {token['user']}, scope {token['scope']}, {until}: "
                   "shown once, only its hash is stored; send it as 'Authorization: Bearer <token>'", err=True)


@tokens_app.command("list")
def list_(user: Optional[str] = typer.Option(None, "--user", help="Only this user's tokens."),
          as_json: bool = typer.Option(False, "--json", help="Print a JSON list (never a token's value).")) -> None:
    """The tokens, with their user, scope, expiry and last use; never their values."""
    from storage.context import open_workbench
    from workbench.services import accounts

    with open_workbench() as wb:
        tokens = accounts.list_tokens(wb, user)
    emit(tokens, as_json, _table(tokens))


@tokens_app.command()
def revoke(token_id: int = id_argument("token", "The token id (`workbench tokens list`)."),
           as_json: bool = typer.Option(False, "--json", help="Print the token as JSON.")) -> None:
    """Revoke a token: it stops working at once."""
    from storage.context import open_workbench
    from workbench.services import accounts

    with open_workbench() as wb:
        token = accounts.revoke_token(wb, token_id, by=operator())
    emit(token, as_json, f"token {token['id']} ({token['name']!r}) of {token['user']} revoked")
