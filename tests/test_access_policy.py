"""The role policy (workbench/services/access.py) as a table: every role and scope against every action, on
one's own work and on someone else's."""
from __future__ import annotations

import pytest

from workbench.services import access
from workbench.services.access import (ADMINISTER, CHANGE, CREATE, LOCAL, READ, SERVER_FOLDER, AccessDenied, Actor,
                                       SignInRequired)

ALICE_ADMIN = Actor(1, "alice", "admin")
ED = Actor(2, "ed", "editor")
VI = Actor(3, "vi", "viewer")
ED_READ_TOKEN = Actor(2, "ed", "editor", token="notebook", scope="read")
ED_WRITE_TOKEN = Actor(2, "ed", "editor", token="ci", scope="write")
ADMIN_READ_TOKEN = Actor(1, "alice", "admin", token="dash", scope="read")

# (actor, action, owner of the work, allowed)
TABLE = [
    (ALICE_ADMIN, READ, None, True), (ALICE_ADMIN, CREATE, None, True), (ALICE_ADMIN, CHANGE, 2, True),
    (ALICE_ADMIN, CHANGE, None, True), (ALICE_ADMIN, SERVER_FOLDER, None, True), (ALICE_ADMIN, ADMINISTER, None, True),
    (ED, READ, None, True), (ED, CREATE, None, True), (ED, CHANGE, 2, True), (ED, CHANGE, 1, False),
    (ED, CHANGE, None, False), (ED, SERVER_FOLDER, None, False), (ED, ADMINISTER, None, False),
    (VI, READ, None, True), (VI, CREATE, None, False), (VI, CHANGE, 3, False), (VI, SERVER_FOLDER, None, False),
    (VI, ADMINISTER, None, False),
    (ED_READ_TOKEN, READ, None, True), (ED_READ_TOKEN, CREATE, None, False), (ED_READ_TOKEN, CHANGE, 2, False),
    (ED_WRITE_TOKEN, CREATE, None, True), (ED_WRITE_TOKEN, CHANGE, 2, True), (ED_WRITE_TOKEN, CHANGE, 1, False),
    (ED_WRITE_TOKEN, SERVER_FOLDER, None, False),
    (ADMIN_READ_TOKEN, READ, None, True), (ADMIN_READ_TOKEN, CHANGE, 2, False),
    (ADMIN_READ_TOKEN, ADMINISTER, None, False),
    (LOCAL, CHANGE, None, True), (LOCAL, SERVER_FOLDER, None, True), (LOCAL, ADMINISTER, None, True),
    (None, READ, None, False), (None, CREATE, None, False),
]


@pytest.mark.parametrize("actor, action, owner, allowed", TABLE)
def test_the_policy_table(actor, action, owner, allowed):
    assert access.allows(actor, action, owner) is allowed
    if allowed:
        assert access.require(actor, action, owner) is actor
    else:
        with pytest.raises(SignInRequired if actor is None else AccessDenied):
            access.require(actor, action, owner)


def test_refusals_say_why():
    with pytest.raises(AccessDenied, match="ed is an editor and can change only their own work; run 7 belongs"):
        access.require(ED, CHANGE, 1, "run 7")
    with pytest.raises(AccessDenied, match=r"vi is a viewer: editors and admins can create work \(upload\)"):
        access.require(VI, CREATE, None, "upload")
    with pytest.raises(AccessDenied, match="token 'notebook' is read-only"):
        access.require(ED_READ_TOKEN, CREATE)
    with pytest.raises(SignInRequired, match="sign in first"):
        access.require(None, READ)
    assert AccessDenied("x").status == 403 and SignInRequired("x").status == 401


def test_unknown_roles_scopes_and_actions_are_errors_not_silent_denials():
    with pytest.raises(ValueError):
        Actor(1, "x", "owner")
    with pytest.raises(ValueError):
        Actor(1, "x", "viewer", scope="all")
    with pytest.raises(ValueError):
        access.allows(ED, "publish")
