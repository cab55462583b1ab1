"""A team for access tests: an admin, two editors, a viewer, and the editor's API tokens in every state.

``team(wb)`` makes the users (passwords in ``PASSWORDS``) and tokens in ``wb``'s database and returns their
actors and raw token values. Argon2id hashing costs about 0.1 s a user here: one team per test that needs it.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import update

from storage.models import ApiToken
from workbench.services import accounts
from workbench.services.access import Actor

OPERATOR = Actor(user_id=None, name="cli:test", role="admin")
PASSWORDS = {"ada": "ada-correct-horse-1", "ed": "ed-battery-staple-2", "olga": "olga-tr0ub4dor-3",
             "vic": "vic-viewer-pass-4"}


@dataclasses.dataclass(frozen=True)
class Team:
    admin: Actor
    editor: Actor
    other_editor: Actor
    viewer: Actor
    read_token: str
    write_token: str
    revoked_token: str
    expired_token: str

    PASSWORDS = PASSWORDS


def team(wb) -> Team:
    roles = {"ada": "admin", "ed": "editor", "olga": "editor", "vic": "viewer"}
    actors = {}
    for name, role in roles.items():
        accounts.add_user(wb, name, PASSWORDS[name], role, by=OPERATOR)
        actors[name] = accounts.authenticate(wb, name, PASSWORDS[name])
    editor = actors["ed"]
    read = accounts.create_token(wb, "ed", "notebook", "read", by=editor)["token"]
    write = accounts.create_token(wb, "ed", "ci", "write", by=editor)["token"]
    revoked = accounts.create_token(wb, "ed", "old", "write", by=editor)
    accounts.revoke_token(wb, revoked["id"], by=editor)
    expired = accounts.create_token(wb, "ed", "short", "write", expires_days=1, by=editor)
    with wb.db.session() as session:  # a day and a minute later
        session.execute(update(ApiToken).where(ApiToken.id == expired["id"]).values(
            expires_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(minutes=1)))
    return Team(admin=actors["ada"], editor=editor, other_editor=actors["olga"], viewer=actors["vic"],
                read_token=read, write_token=write, revoked_token=revoked["token"], expired_token=expired["token"])
