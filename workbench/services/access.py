"""Who may do what: the roles, the actor a request acts as, and the one check every edge calls.

Three roles, checked on the server for every action (docs/access.md has the table):

* **viewer** reads everything (datasets, runs, sweeps, audits, comparisons, labelling projects, playgrounds)
  and changes nothing;
* **editor** also creates work (uploads, runs, sweeps, audits, predictions, exports, labelling projects,
  publications), and cancels, deletes, unpublishes or edits only the work they own. A model is a catalogue
  entry or a hub id: never a folder on the server;
* **admin** does everything, on everyone's work, plus users, tokens, the activity log and server folders
  as models.

An API token acts as its user, never above: a ``read`` token reads, a ``write`` token does what its user may.
With no account in the database the workbench is the single-user tool it always was: every request acts as
``LOCAL``, an admin (``workbench users add NAME --role admin`` ends that; the server says so at start).

The edges (the UI's handler wrapper, the REST API, the CLI) resolve the actor, then call ``require`` before
they validate or touch anything, so a refused call changes nothing.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from storage.errors import Forbidden, WorkbenchError

VIEWER, EDITOR, ADMIN = "viewer", "editor", "admin"
ROLES = (VIEWER, EDITOR, ADMIN)
READ_SCOPE, WRITE_SCOPE = "read", "write"
SCOPES = (READ_SCOPE, WRITE_SCOPE)

# The actions ``require`` knows. Everything an edge does maps onto one of them.
READ = "read"                    # see anything
CREATE = "create"                # make new work: upload, train, predict, export, publish, label, audit, sweep
CHANGE = "change"                # cancel, delete, unpublish, edit, rename: the owner's, or an admin's
SERVER_FOLDER = "server_folder"  # name a folder on the server as a model to load
ADMINISTER = "administer"        # users, other users' tokens, the activity log
ACTIONS = (READ, CREATE, CHANGE, SERVER_FOLDER, ADMINISTER)
_LEAST_ROLE = {READ: VIEWER, CREATE: EDITOR, CHANGE: EDITOR, SERVER_FOLDER: ADMIN, ADMINISTER: ADMIN}
_RANK = {role: rank for rank, role in enumerate(ROLES)}


class SignInRequired(WorkbenchError):
    """No valid session or token came with a request that needs one (HTTP 401)."""

    exit_code = 2
    status = 401


class AccessDenied(Forbidden):
    """The actor is known, and their role, their token's scope or ownership does not allow the action
    (HTTP 403)."""

    status = 403


@dataclasses.dataclass(frozen=True)
class Actor:
    """Whoever a request acts as: a signed-in user, a user's API token, or ``LOCAL`` when there are no accounts.

    ``token`` is the name of the API token in use (never its value); ``scope`` caps what it may do."""

    user_id: Optional[int]
    name: str
    role: str
    token: Optional[str] = None
    scope: str = WRITE_SCOPE
    local: bool = False

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; one of {', '.join(ROLES)}")
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope {self.scope!r}; one of {', '.join(SCOPES)}")

    @property
    def label(self) -> str:
        """How the activity log and messages name the actor: ``alice``, ``alice (token ci)``."""
        return f"{self.name} (token {self.token})" if self.token else self.name


LOCAL = Actor(user_id=None, name="local", role=ADMIN, local=True)


def allows(actor: Optional[Actor], action: str, owner_id: Optional[int] = None) -> bool:
    """Whether ``actor`` may do ``action``; for ``CHANGE``, on work owned by ``owner_id`` (None: made before
    accounts, or in the single-user workbench, and so an admin's)."""
    if action not in _LEAST_ROLE:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    if actor is None:
        return False
    if action != READ and actor.scope != WRITE_SCOPE:
        return False
    if _RANK[actor.role] < _RANK[_LEAST_ROLE[action]]:
        return False
    if action == CHANGE and actor.role != ADMIN:
        return owner_id is not None and owner_id == actor.user_id
    return True


def require(actor: Optional[Actor], action: str, owner_id: Optional[int] = None, what: str = "") -> Actor:
    """``actor`` when it may do ``action`` (on ``what``, owned by ``owner_id``); else ``SignInRequired`` for no
    actor and ``AccessDenied`` naming why for one whose role, scope or ownership does not allow it."""
    if actor is None:
        raise SignInRequired("sign in first: this needs an account (or an API token)")
    if allows(actor, action, owner_id):
        return actor
    target = f" {what}" if what else ""
    if action != READ and actor.scope != WRITE_SCOPE:
        raise AccessDenied(f"token {actor.token!r} is read-only: it cannot {_verb(action)}{_about(what)}")
    if action == CHANGE and _RANK[actor.role] >= _RANK[EDITOR]:
        raise AccessDenied(f"{actor.name} is an editor and can change only their own work;{target or ' this'} "
                           "belongs to someone else (an admin can change it)")
    raise AccessDenied(f"{actor.name} is a{'n' if actor.role[0] in 'aeiou' else ''} {actor.role}: "
                       f"{_LEAST_ROLE[action]}s{' and admins' if _LEAST_ROLE[action] == EDITOR else ''} "
                       f"can {_verb(action)}{_about(what)}")


def _about(what: str) -> str:
    return f" ({what})" if what else ""


def _verb(action: str) -> str:
    return {READ: "see", CREATE: "create work", CHANGE: "change or delete", SERVER_FOLDER:
            "name a folder on the server as a model", ADMINISTER: "manage users, tokens and the activity log"}[action]
