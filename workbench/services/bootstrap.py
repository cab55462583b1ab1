"""What the server does about accounts when it starts: import ``WORKBENCH_AUTH``'s users once, and say how to
make the first admin when there is no account.

``WORKBENCH_AUTH`` was the whole access model before accounts (plain ``user:password`` pairs); it is now only
a bootstrap: each of its users that has no account yet becomes an admin, with the password hashed, and a
warning asks to remove the plain text. An account that exists is never touched by it (a password reset or a
role change made since stays), so importing is safe at every start.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from storage.context import Workbench
from workbench.errors import ConfigError
from workbench.services import accounts
from workbench.services.access import ADMIN, Actor

log = logging.getLogger(__name__)

# Whoever set WORKBENCH_AUTH runs the server, so owns its database: the import acts as an admin, and the
# activity log names it so.
BOOTSTRAP = Actor(user_id=None, name="WORKBENCH_AUTH", role=ADMIN)


def parse_auth(value: str) -> list[tuple[str, str]]:
    """``WORKBENCH_AUTH`` as (user, password) pairs; an empty list means no user to import.

    The value is either ``user:password[,user:password...]`` or the path of a
    file with one ``user:password`` per line (blank lines and ``#`` comments
    skipped). A password may contain ``:``; the user name may not.
    """
    value = (value or "").strip()
    if not value:
        return []
    path = Path(value).expanduser()
    if path.is_file():
        entries = [(line.strip(), f"{path}:{number}") for number, line in
                   enumerate(path.read_text(encoding="utf-8").splitlines(), 1)]
        entries = [(text, where) for text, where in entries if text and not text.startswith("#")]
        if not entries:
            raise ConfigError(f"WORKBENCH_AUTH file {path} has no 'user:password' line")
    elif "/" in value and ":" not in value:
        raise ConfigError(f"WORKBENCH_AUTH file {value} does not exist")
    else:
        entries = [(part.strip(), "WORKBENCH_AUTH") for part in value.split(",") if part.strip()]
    users = []
    for text, where in entries:
        user, sep, password = text.partition(":")
        if not sep or not user.strip() or not password:
            # Only the user part is shown: the rest of a malformed entry may be a password.
            raise ConfigError(f"{where}: expected 'user:password', got {user.strip()!r} "
                              f"{'with no password' if sep else 'with no colon'}" if user.strip()
                              else f"{where}: expected 'user:password', got an entry with no user name")
        users.append((user.strip(), password))
    return users


def _where(value: str) -> str:
    """Where the plain text lives, for the warning: the file, or the variable itself."""
    path = Path(value.strip()).expanduser()
    return f"the file {path}" if path.is_file() else "the WORKBENCH_AUTH variable"


def import_bootstrap_users(wb: Workbench) -> list[str]:
    """Add each ``WORKBENCH_AUTH`` user that has no account yet, as an admin with its password hashed; the
    names added, in the order given (the first of them is the first admin when there was no account, and so
    owns the work made before accounts). A WARNING says what was done and that the plain text should go."""
    pairs = parse_auth(wb.settings.auth)
    if not pairs:
        return []
    where = _where(wb.settings.auth)
    existing = {user["name"] for user in accounts.list_users(wb)}
    added: list[str] = []
    for name, password in pairs:
        if name in existing or name in added:
            continue
        accounts.add_user(wb, name, password, ADMIN, by=BOOTSTRAP)
        added.append(name)
    if added:
        log.warning("WORKBENCH_AUTH: %d user%s imported as admins, hashed (%s); remove the plain text from %s: "
                    "from now on the accounts are in the database (`workbench users list`)",
                    len(added), "" if len(added) == 1 else "s", ", ".join(added), where)
    else:
        log.warning("WORKBENCH_AUTH is set, but each of its users has an account already, so it is ignored; "
                    "remove the plain text from %s (passwords are changed with `workbench users reset-password`)",
                    where)
    return added


def first_start_message(wb: Workbench) -> Optional[str]:
    """The line the server prints at start while there is no account (None once there is one): the workbench
    is open to whoever reaches it, and how to make the first admin."""
    if accounts.has_accounts(wb):
        return None
    settings = wb.settings
    reach = ("this machine only" if settings.host in ("127.0.0.1", "localhost", "::1")
             else "every machine that reaches this one")
    return (f"No account yet: the workbench at {settings.host}:{settings.port} is open to anyone who can reach it "
            f"({reach}), and every visitor acts as an admin. Make the first admin with "
            "`workbench users add NAME --role admin` (the password is prompted, or read with --password-stdin); "
            "from then on everyone signs in.")
