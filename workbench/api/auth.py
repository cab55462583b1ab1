"""Who a REST request acts as, and the checks every route makes before it reads its body or changes anything.

A request carries ``Authorization: Bearer <API token>`` (a script) or the web app's session cookie
(``workbench_session``: a signed-in browser, which is how the docs page reads the OpenAPI document). With no account in
the database every request acts as ``LOCAL``, the single-user workbench's admin.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional

from fastapi import Request

from storage.context import Workbench
from workbench.services import access, accounts
from workbench.services.access import CHANGE, SERVER_FOLDER, Actor, SignInRequired

log = logging.getLogger(__name__)

# The web app's session cookie (workbench.ui.access.SESSION_COOKIE); the name first agreed for it is read too.
SESSION_COOKIES = ("workbench_session", "wb_session")


def bearer_token(request: Request) -> Optional[str]:
    """The value of ``Authorization: Bearer <value>``, or None."""
    scheme, _, value = request.headers.get("authorization", "").strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def actor_of(wb: Workbench, request: Request) -> Optional[Actor]:
    """The request's actor: its bearer token's user (a token that does not work is a 401 of its own, never a
    fall back to the session), else the session cookie's, else None; ``LOCAL`` without accounts."""
    token, address = bearer_token(request), request.client.host if request.client else ""
    if token is not None:
        actor = accounts.resolve(wb, bearer=token, address=address)  # records the token's use, by its name
        if actor is None:
            raise SignInRequired("the API token is not valid: it is unknown, revoked or expired (an admin or its "
                                 "user lists tokens with `workbench tokens list`; create one with "
                                 "`workbench tokens create`)")
        return actor
    session = next((request.cookies[name] for name in SESSION_COOKIES if request.cookies.get(name)), None)
    return accounts.resolve(wb, session=session, address=address)


def check(wb: Workbench, request: Request, action: str) -> Actor:
    """The actor when it may do ``action`` at all (for ``CHANGE``: on its own work; ownership is checked by the
    route once it knows the thing), else SignInRequired or AccessDenied. Runs before any body is read."""
    actor = actor_of(wb, request)
    if action == CHANGE and actor is not None:
        return access.require(actor, CHANGE, owner_id=actor.user_id if not actor.local else None)
    return access.require(actor, action)


def require_owner(wb: Workbench, actor: Actor, kind: str, target_id: Any, what: str) -> None:
    """Refuse ``CHANGE`` of ``kind`` ``target_id`` (NotFound when it does not exist) unless ``actor`` owns it or
    is an admin."""
    access.require(actor, CHANGE, owner_id=accounts.owner_of(wb, kind, str(target_id)), what=what)


def change_owned(wb: Workbench, request: Any, actor: Actor, kind: str, target_id: Any, action: str,
                 change: Callable[[], Any]) -> Any:
    """``change()``'s answer once ``actor`` may change ``kind`` ``target_id`` (``require_owner``), with ``action``
    recorded in the activity log after it succeeded."""
    require_owner(wb, actor, kind, target_id, f"{kind} {target_id}")
    answer = change()
    record(wb, request, actor, action, kind, target_id)
    return answer


def names_server_folder(model: Any) -> bool:
    """Whether a model name is a folder (or any path) on the server, which only an admin may name: not an
    entry of the catalogue, and a path (``/``, ``~`` or ``.`` first) or something that exists here."""
    if not isinstance(model, str) or not model.strip():
        return False
    from workbench.services.catalogue import list_models

    name = model.strip()
    if any(name in (info.name, info.source) for info in list_models()):
        return False
    return name.startswith(("/", "~", ".", "\\")) or Path(name).expanduser().exists()


def require_models(actor: Actor, models: list[Any]) -> None:
    """AccessDenied unless ``actor`` may name each of ``models`` (a folder on the server: admins only)."""
    for model in models:
        if names_server_folder(model):
            access.require(actor, SERVER_FOLDER, what=f"model {str(model).strip()!r} is a folder on the server; "
                                                      "name a catalogue entry or a hub id")


def owner_id(actor: Actor) -> Optional[int]:
    """What a new thing's ``owner_id`` is: the actor's user id (None for ``LOCAL``)."""
    return None if actor.local else actor.user_id


def record(wb: Workbench, request: Request, actor: Actor, action: str, target_kind: Optional[str] = None,
           target_id: Any = None, detail: Optional[dict] = None) -> None:
    """One row in the activity log for a change (or a download) that succeeded."""
    accounts.record(wb, actor, action, target_kind, None if target_id is None else str(target_id), detail,
                    address=request.client.host if request.client else "")


def with_owners(wb: Workbench, kind: str, rows: list[dict], key: str = "id") -> list[dict]:
    """``rows`` with ``owner``: the name of the user who owns each (None for work made before accounts), read in
    one query."""
    from sqlalchemy import select

    model = accounts.OWNED[kind]
    column = getattr(model, key)  # the id, or a playground's slug
    ids = [row[key] for row in rows if row.get(key) is not None]
    if not ids:
        return rows
    with wb.db.session() as session:
        owned = dict(session.execute(select(column, model.owner_id).where(column.in_(ids))).all())
    names = accounts.owner_names(wb) if any(owned.values()) else {}
    for row in rows:
        owner = owned.get(row.get(key))
        row["owner"] = names.get(owner) if owner is not None else None
    return rows
