"""`workbench activity`: the activity log (who did what and when), newest first, filtered.

    workbench activity [--user U] [--action A] [--since ISO] [--limit N] [--json]

The log is append-only for everyone; this only reads it.
"""
from __future__ import annotations

import datetime as dt
from typing import Optional

import typer

from workbench.cli import app, emit
from workbench.errors import ConfigError


def parse_since(value: str) -> dt.datetime:
    """``--since`` as a naive UTC datetime (how the log stores times): an ISO 8601 date or date and time; one
    with an offset is converted to UTC, one without is taken as UTC."""
    text = value.strip()
    try:
        when = dt.datetime.fromisoformat(text)  # Python 3.11 reads a trailing Z too
    except ValueError:
        raise ConfigError(f"--since {value!r} is not an ISO 8601 date or time: write 2026-12-01 or "
                          "2026-12-01T09:30 (UTC unless it carries an offset such as +01:00)") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return when


def _line(entry: dict) -> str:
    who = entry.get("user") or "-"
    if entry.get("token"):
        who += f" (token {entry['token']})"
    target = f" {entry['target_kind']} {entry['target_id']}" if entry.get("target_kind") else ""
    detail = entry.get("detail")
    extra = (" " + ", ".join(f"{key}={value}" for key, value in detail.items())) if isinstance(detail, dict) \
        and detail else ""
    address = f" from {entry['address']}" if entry.get("address") else ""
    return f"{str(entry['at'])[:19]}  {who}  {entry['action']}{target}{extra}{address}"


@app.command()
def activity(user: Optional[str] = typer.Option(None, "--user", help="Only what this user did."),
             action: Optional[str] = typer.Option(None, "--action", help="Only this action: sign_in, "
                                                  "sign_in_failed, create, delete, publish, token_create, …"),
             since: Optional[str] = typer.Option(None, "--since", metavar="ISO",
                                                 help="Only from this UTC date or time on (2026-12-01, "
                                                      "2026-12-01T09:30)."),
             limit: int = typer.Option(200, "--limit", min=1, max=10_000, help="At most this many entries "
                                                                                "(1 to 10,000)."),
             as_json: bool = typer.Option(False, "--json", help="Print a JSON list.")) -> None:
    """The activity log, newest first: sign-ins, changes, tokens, roles, downloads."""
    from storage.context import open_workbench
    from workbench.services import accounts

    if action is not None and action not in accounts.ACTIONS:
        raise ConfigError(f"unknown action {action!r}; choose one of {', '.join(accounts.ACTIONS)}")
    start = parse_since(since) if since is not None else None
    with open_workbench() as wb:
        entries = accounts.list_activity(wb, user=user, action=action, since=start, limit=limit)
    emit(entries, as_json, "\n".join(_line(e) for e in entries) or "no activity")
