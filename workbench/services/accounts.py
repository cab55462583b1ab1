"""Accounts: users with Argon2id passwords, browser sessions, API tokens, owners of work and the activity log.

Who may do what is ``workbench.services.access``; this module is who someone is. Passwords are hashed with
Argon2id at argon2-cffi's RFC 9106 low-memory profile (m = 64 MiB, t = 3, p = 4; OWASP's minimum is m = 19 MiB,
t = 2, p = 1) and rehashed at the next sign-in when the parameters change. Session cookies and API tokens are
random 256-bit values: only their sha256 is stored (a fast hash is right for values no one chose and no one can
guess; a password needs the slow one). No password and no token value is ever logged, stored in the activity log
or put in an exception.

With no user in the database the workbench is the single-user tool it always was: ``resolve`` answers
``access.LOCAL``. The first admin created owns all the work made before (its ``owner_id`` was NULL).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
from typing import Any, Optional

from sqlalchemy import func, select, update

from storage.context import Workbench
from storage.errors import ConfigError, InvalidState, NotFound
from storage.models import (Activity, ApiToken, Audit, Dataset, LabelProject, Playground, Run, Sweep, User,
                            WebSession, utcnow)
from workbench.services import access
from workbench.services.access import ADMIN, ADMINISTER, ROLES, SCOPES, Actor, AccessDenied

log = logging.getLogger(__name__)

TOKEN_PREFIX = "wbt_"
MAX_NAME = 120
MAX_PASSWORD = 4096  # argon2 takes any length; this bounds the work one sign-in can ask for
OWNED = {"dataset": Dataset, "run": Run, "sweep": Sweep, "audit": Audit, "label_project": LabelProject,
         "playground": Playground}
ACTIONS = ("sign_in", "sign_in_failed", "sign_in_locked", "sign_out", "create", "delete", "cancel", "publish",
           "unpublish", "token_create", "token_revoke", "token_use", "role_change", "user_add", "user_disable",
           "password_reset", "export", "download")
TOKEN_USE_EVERY_S = 60  # a token's use is logged at most once a minute (and its last_used_at kept to the minute)


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()  # argon2-cffi's default: RFC 9106 low-memory Argon2id


def hash_password(password: str) -> str:
    return _hasher().hash(password)


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME or any(c.isspace() or not c.isprintable() for c in name) or ":" in name:
        raise ConfigError(f"a user name is 1 to {MAX_NAME} printable characters without spaces or ':', "
                          f"got {name[:MAX_NAME]!r}")
    return name


def _check_password(password: str) -> str:
    if not password:
        raise ConfigError("the password is empty: every user has a password (or is disabled)")
    if len(password) > MAX_PASSWORD:
        raise ConfigError(f"the password is longer than {MAX_PASSWORD} characters")
    return password


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    return role


def _user_dict(user: User) -> dict[str, Any]:
    return {"id": user.id, "name": user.name, "role": user.role, "disabled": bool(user.disabled),
            "created_at": user.created_at.isoformat() if user.created_at else None,
            "last_sign_in_at": user.last_sign_in_at.isoformat() if user.last_sign_in_at else None}


def _actor(user: User, token: Optional[ApiToken] = None) -> Actor:
    return Actor(user_id=user.id, name=user.name, role=user.role, token=token.name if token else None,
                 scope=token.scope if token else access.WRITE_SCOPE)


def _get_user(session, name: str) -> User:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"no user named {name!r}; `workbench users list` shows them")
    return user


# --- users ---------------------------------------------------------------------------------------------------

def has_accounts(wb: Workbench) -> bool:
    with wb.db.session() as session:
        return session.scalar(select(User.id).limit(1)) is not None


def add_user(wb: Workbench, name: str, password: str, role: str, *, by: Actor) -> dict[str, Any]:
    """A new user. The first admin ever created also becomes the owner of all work made before accounts."""
    access.require(by, ADMINISTER, what="add a user")
    name, role = _check_name(name), _check_role(role)
    encoded = hash_password(_check_password(password))
    with wb.db.session() as session:
        if session.scalar(select(User.id).where(User.name == name)) is not None:
            raise InvalidState(f"a user named {name!r} exists already")
        first_admin = role == ADMIN and session.scalar(select(User.id).where(User.role == ADMIN).limit(1)) is None
        user = User(name=name, password_hash=encoded, role=role)
        session.add(user)
        session.flush()
        adopted = {}
        if first_admin:
            for kind, model in OWNED.items():
                result = session.execute(update(model).where(model.owner_id.is_(None)).values(owner_id=user.id))
                adopted[kind] = result.rowcount or 0
        record_in(session, by, "user_add", "user", user.name, {"role": role, **({"adopted": adopted}
                                                                                 if first_admin else {})})
        out = _user_dict(user)
    if first_admin and any(adopted.values()):
        log.info("first admin %s owns the work made before accounts: %s", name, adopted)
    return out


def list_users(wb: Workbench) -> list[dict[str, Any]]:
    with wb.db.session() as session:
        return [_user_dict(u) for u in session.scalars(select(User).order_by(User.name))]


def _last_admin_guard(session, user: User, new_role: Optional[str], disable: bool) -> None:
    if user.role != ADMIN or user.disabled:
        return
    if (new_role is None or new_role == ADMIN) and not disable:
        return
    others = session.scalar(select(func.count(User.id)).where(User.role == ADMIN, User.disabled.is_(False),
                                                               User.id != user.id))
    if not others:
        raise InvalidState(f"{user.name} is the last active admin: make another admin first")


def set_role(wb: Workbench, name: str, role: str, *, by: Actor) -> dict[str, Any]:
    access.require(by, ADMINISTER, what="change a role")
    role = _check_role(role)
    with wb.db.session() as session:
        user = _get_user(session, name)
        _last_admin_guard(session, user, role, False)
        before, user.role = user.role, role
        record_in(session, by, "role_change", "user", user.name, {"from": before, "to": role})
        return _user_dict(user)


def disable_user(wb: Workbench, name: str, *, by: Actor) -> dict[str, Any]:
    """The user can no longer sign in; their sessions end now and their tokens stop working."""
    access.require(by, ADMINISTER, what="disable a user")
    with wb.db.session() as session:
        user = _get_user(session, name)
        _last_admin_guard(session, user, None, True)
        user.disabled = True
        session.execute(WebSession.__table__.delete().where(WebSession.user_id == user.id))
        record_in(session, by, "user_disable", "user", user.name)
        return _user_dict(user)


def reset_password(wb: Workbench, name: str, password: str, *, by: Actor) -> dict[str, Any]:
    """A new password (an admin's, or the user's own); their other sessions end. Re-enables a disabled user."""
    own = by is not None and by.name == name and not by.local and by.token is None
    if not own:
        access.require(by, ADMINISTER, what="reset another user's password")
    encoded = hash_password(_check_password(password))
    with wb.db.session() as session:
        user = _get_user(session, name)
        user.password_hash, user.disabled = encoded, False
        session.execute(WebSession.__table__.delete().where(WebSession.user_id == user.id))
        record_in(session, by, "password_reset", "user", user.name)
        return _user_dict(user)


# --- signing in: passwords and sessions ----------------------------------------------------------------------

_DUMMY_HASH: Optional[str] = None


def authenticate(wb: Workbench, name: str, password: str, *, address: str = "") -> Optional[Actor]:
    """The user's actor when ``password`` is theirs and they are not disabled; None otherwise (the same time is
    spent for an unknown name). Records the sign-in or the failure; rehashes when the parameters changed."""
    from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

    global _DUMMY_HASH
    hasher = _hasher()
    name = (name or "").strip()[:MAX_NAME]
    password = (password or "")[:MAX_PASSWORD]
    with wb.db.session() as session:
        user = session.scalar(select(User).where(User.name == name)) if name else None
        encoded = user.password_hash if user is not None else (_DUMMY_HASH or "")
        if user is None and _DUMMY_HASH is None:
            _DUMMY_HASH = encoded = hasher.hash(secrets.token_hex(16))
        try:
            ok = bool(password) and hasher.verify(encoded, password) and user is not None and not user.disabled
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            ok = False
        if not ok:
            # an unknown name is not kept: a password typed into the name box would otherwise be in the log
            known = user is not None
            record_in(session, None, "sign_in_failed", "user", name if known else None,
                      {"reason": "disabled" if known and user.disabled else
                       "wrong password" if known else "unknown user name"}, address,
                      user_name=name if known else "")
            return None
        if hasher.check_needs_rehash(user.password_hash):
            user.password_hash = hasher.hash(password)
        user.last_sign_in_at = utcnow()
        actor = _actor(user)
        record_in(session, actor, "sign_in", "user", user.name, None, address)
        return actor


def start_session(wb: Workbench, actor: Actor, *, address: str = "") -> str:
    """A new browser session for a signed-in ``actor``: the raw value for the cookie (only its sha256 is kept);
    it ends after ``settings.session_hours``, at sign-out, or when the user is disabled."""
    if actor.user_id is None:
        raise InvalidState("only a user with an account has a session")
    raw = secrets.token_urlsafe(32)
    hours = float(getattr(wb.settings, "session_hours", 12.0))
    with wb.db.session() as session:
        session.execute(WebSession.__table__.delete().where(WebSession.expires_at < utcnow()))
        session.add(WebSession(token_hash=_digest(raw), user_id=actor.user_id, address=address[:64],
                               expires_at=utcnow() + dt.timedelta(hours=hours)))
    return raw


def _held_by(session, model, raw: str):
    """(the ``WebSession`` or ``ApiToken`` row whose hash is ``raw``'s, its user), or None."""
    return session.execute(select(model, User).join(User, User.id == model.user_id)
                           .where(model.token_hash == _digest(raw))).first()


def actor_for_session(wb: Workbench, raw: Optional[str]) -> Optional[Actor]:
    if not raw or len(raw) > 200:
        return None
    with wb.db.session() as session:
        row = _held_by(session, WebSession, raw)
        if row is None:
            return None
        web_session, user = row
        if web_session.expires_at <= utcnow() or user.disabled:
            return None
        return _actor(user)


def end_session(wb: Workbench, raw: Optional[str], *, address: str = "") -> None:
    """Sign-out: the session is gone (a later request with its cookie is anonymous)."""
    if not raw or len(raw) > 200:
        return
    with wb.db.session() as session:
        row = _held_by(session, WebSession, raw)
        if row is None:
            return
        session.delete(row[0])
        record_in(session, _actor(row[1]), "sign_out", "user", row[1].name, None, address)


# --- API tokens ----------------------------------------------------------------------------------------------

def _token_dict(token: ApiToken, user_name: str) -> dict[str, Any]:
    iso = lambda t: t.isoformat() if t else None  # noqa: E731
    return {"id": token.id, "name": token.name, "user": user_name, "scope": token.scope,
            "created_at": iso(token.created_at), "expires_at": iso(token.expires_at),
            "last_used_at": iso(token.last_used_at), "revoked_at": iso(token.revoked_at)}


def create_token(wb: Workbench, user_name: str, name: str, scope: str, expires_days: Optional[float] = None, *,
                 by: Actor) -> dict[str, Any]:
    """A new API token for ``user_name`` (made by that user or an admin). The value is in the answer once
    (``"token"``) and never again: only its sha256 is kept."""
    if scope not in SCOPES:
        raise ConfigError(f"unknown scope {scope!r}; choose one of {', '.join(SCOPES)}")
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME:
        raise ConfigError(f"a token's name is 1 to {MAX_NAME} characters")
    if expires_days is not None and not 0 < float(expires_days) <= 3650:
        raise ConfigError(f"--expires is a number of days from 1 to 3650, got {expires_days}")
    if by is None or by.name != user_name or by.local:
        access.require(by, ADMINISTER, what="make a token for another user")
    elif by.token is not None and by.scope != access.WRITE_SCOPE:
        raise AccessDenied(f"token {by.token!r} is read-only: it cannot make tokens")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with wb.db.session() as session:
        user = _get_user(session, user_name)
        if user.disabled:
            raise InvalidState(f"{user_name} is disabled: a token would not work")
        expires = utcnow() + dt.timedelta(days=float(expires_days)) if expires_days else None
        token = ApiToken(user_id=user.id, name=name, scope=scope, token_hash=_digest(raw), expires_at=expires)
        session.add(token)
        session.flush()
        record_in(session, by, "token_create", "token", str(token.id),
                  {"name": name, "user": user_name, "scope": scope, "expires_at": expires.isoformat()
                   if expires else None})
        return {"token": raw, **_token_dict(token, user_name)}


def list_tokens(wb: Workbench, user_name: Optional[str] = None) -> list[dict[str, Any]]:
    with wb.db.session() as session:
        query = select(ApiToken, User.name).join(User, User.id == ApiToken.user_id).order_by(ApiToken.id)
        if user_name is not None:
            query = query.where(User.name == user_name)
        return [_token_dict(t, n) for t, n in session.execute(query)]


def revoke_token(wb: Workbench, token_id: int, *, by: Actor) -> dict[str, Any]:
    with wb.db.session() as session:
        row = session.execute(select(ApiToken, User.name).join(User, User.id == ApiToken.user_id)
                              .where(ApiToken.id == int(token_id))).first()
        if row is None:
            raise NotFound(f"no token {token_id}; `workbench tokens list` shows them")
        token, user_name = row
        if by is None or by.user_id != token.user_id or by.local:
            access.require(by, ADMINISTER, what="revoke another user's token")
        elif by.token is not None and by.scope != access.WRITE_SCOPE:
            raise AccessDenied(f"token {by.token!r} is read-only: it cannot revoke tokens")
        if token.revoked_at is None:
            token.revoked_at = utcnow()
            record_in(session, by, "token_revoke", "token", str(token.id), {"name": token.name, "user": user_name})
        return _token_dict(token, user_name)


def actor_for_token(wb: Workbench, raw: Optional[str], *, address: str = "") -> Optional[Actor]:
    """The actor of a ``Bearer`` value: its user's role capped by its scope; None when the token is unknown,
    revoked or expired, or its user is disabled. Its use is recorded (at most once a minute a token)."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    now = utcnow()
    with wb.db.session() as session:
        row = _held_by(session, ApiToken, raw)
        if row is None:
            return None
        token, user = row
        if token.revoked_at is not None or (token.expires_at is not None and token.expires_at <= now) \
                or user.disabled:
            return None
        actor = _actor(user, token)
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() >= TOKEN_USE_EVERY_S:
            token.last_used_at = now
            record_in(session, actor, "token_use", "token", str(token.id), {"name": token.name}, address)
        return actor


def resolve(wb: Workbench, *, session: Optional[str] = None, bearer: Optional[str] = None,
            address: str = "") -> Optional[Actor]:
    """Who a request acts as: ``LOCAL`` while there is no account; else the bearer token's user, else the
    session's; None (anonymous) when neither is valid. A bearer value that is not valid is not replaced by the
    session: a script with a revoked token is anonymous."""
    if not has_accounts(wb):
        return access.LOCAL
    if bearer:
        return actor_for_token(wb, bearer, address=address)
    return actor_for_session(wb, session)


# --- owners --------------------------------------------------------------------------------------------------

def owner_of(wb: Workbench, kind: str, target_id: Any) -> Optional[int]:
    """The user id owning a dataset, run, sweep, audit, labelling project or playground (a playground by its id or
    its slug); None when it was made before accounts. ``NotFound`` when it does not exist."""
    model = OWNED.get(kind)
    if model is None:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(OWNED)}")
    with wb.db.session() as session:
        if model is Playground and not str(target_id).isdigit():
            row = session.execute(select(Playground.id, Playground.owner_id)
                                  .where(Playground.slug == str(target_id))).first()
        elif model is Dataset:
            row = session.execute(select(Dataset.id, Dataset.owner_id).where(
                (Dataset.id == str(target_id)) | (Dataset.name == str(target_id))).limit(1)).first()
        else:
            try:
                key = int(target_id)
            except (TypeError, ValueError):
                raise NotFound(f"no {kind.replace('_', ' ')} {target_id!r}") from None
            row = session.execute(select(model.id, model.owner_id).where(model.id == key)).first()
        if row is None:
            raise NotFound(f"no {kind.replace('_', ' ')} {target_id!r}")
        return row[1]


def owner_names(wb: Workbench) -> dict[int, str]:
    with wb.db.session() as session:
        return dict(session.execute(select(User.id, User.name)).all())


# --- the activity log ----------------------------------------------------------------------------------------

def record_in(session, actor: Optional[Actor], action: str, target_kind: Optional[str] = None,
              target_id: Any = None, detail: Optional[dict] = None, address: str = "", *,
              user_name: Optional[str] = None) -> None:
    """One activity row in an open database session (committed with the change it records)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown activity {action!r}")
    session.add(Activity(user_id=actor.user_id if actor else None,
                         user_name=(actor.name if actor else (user_name or ""))[:MAX_NAME],
                         token_name=actor.token if actor else None, action=action, target_kind=target_kind,
                         target_id=None if target_id is None else str(target_id)[:120], detail=detail,
                         address=(address or "")[:64]))


def record(wb: Workbench, actor: Optional[Actor], action: str, target_kind: Optional[str] = None,
           target_id: Any = None, detail: Optional[dict] = None, address: str = "") -> None:
    """Append who did ``action`` on what to the activity log (never a password or a token value)."""
    with wb.db.session() as session:
        record_in(session, actor, action, target_kind, target_id, detail, address)


def list_activity(wb: Workbench, *, user: Optional[str] = None, action: Optional[str] = None,
                  target_kind: Optional[str] = None, since: Optional[dt.datetime] = None,
                  limit: int = 200) -> list[dict[str, Any]]:
    """The newest entries first, filtered."""
    query = select(Activity).order_by(Activity.id.desc()).limit(max(1, min(int(limit), 10_000)))
    if user:
        query = query.where(Activity.user_name == user)
    if action:
        query = query.where(Activity.action == action)
    if target_kind:
        query = query.where(Activity.target_kind == target_kind)
    if since is not None:
        query = query.where(Activity.at >= since)
    with wb.db.session() as session:
        return [{"id": a.id, "at": a.at.isoformat(), "user": a.user_name, "user_id": a.user_id,
                 "token": a.token_name, "action": a.action, "target_kind": a.target_kind, "target_id": a.target_id,
                 "detail": a.detail, "address": a.address} for a in session.scalars(query)]
