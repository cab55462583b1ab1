"""The Account tab (every signed-in user: their API tokens) and the Admin tab (admins: users and the activity log).

Both are hidden until a page load says who is signed in (``visibility``); their handlers are authorized like
every other (``workbench.ui.access``: the tokens' handlers need a signed-in user and the service checks the
token is theirs, the admin's need ``ADMINISTER``). A token's value is shown once, in the answer to the click
that made it, and is never logged; a password typed here goes to the service and nowhere else.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.services import accounts
from workbench.services import access as access_policy
from workbench.services.access import ADMINISTER, CREATE, READ, ROLES, SCOPES, Actor
from workbench.ui import access

TOKEN_HEADERS = ["ID", "Name", "Scope", "Created", "Expires", "Last used", "Revoked"]
USER_HEADERS = ["ID", "Name", "Role", "Disabled", "Created", "Last sign-in"]
ACTIVITY_HEADERS = ["When", "User", "Token", "Action", "Kind", "Target", "Detail", "Address"]
ACTIVITY_ACTIONS = ["", *accounts.ACTIONS]


def _signed_in() -> Actor:
    actor = access.acting()
    if actor is None or actor.local:
        raise gr.Error("Sign-in is off (no account in the database): tokens belong to users. An admin adds the "
                       "first one with `workbench users add NAME --role admin`.")
    return actor


def _when(value: Any) -> str:
    return str(value or "")[:16].replace("T", " ")


def token_rows(wb, actor: Optional[Actor]) -> list[list[Any]]:
    if actor is None or actor.local:
        return []
    return [[t["id"], t["name"], t["scope"], _when(t.get("created_at")), _when(t.get("expires_at")) or "never",
             _when(t.get("last_used_at")), _when(t.get("revoked_at"))]
            for t in accounts.list_tokens(wb, actor.name)]


def user_rows(wb) -> list[list[Any]]:
    return [[u["id"], u["name"], u["role"], "yes" if u.get("disabled") else "", _when(u.get("created_at")),
             _when(u.get("last_sign_in_at"))] for u in accounts.list_users(wb)]


def activity_rows(wb, user: str = "", action: str = "", kind: str = "", limit: Any = 200) -> list[list[Any]]:
    try:
        limit = max(1, min(int(float(limit or 200)), 5000))
    except (TypeError, ValueError):
        limit = 200
    entries = accounts.list_activity(wb, user=(user or "").strip() or None, action=action or None,
                                     target_kind=(kind or "").strip() or None, limit=limit)
    return [[_when(e["at"]), e.get("user") or "", e.get("token") or "", e["action"], e.get("target_kind") or "",
             e.get("target_id") or "", "" if not e.get("detail") else str(e["detail"])[:200], e.get("address") or ""]
            for e in entries]


# What a viewer sees greyed out (the server refuses these calls anyway): the buttons that make or change work.
CHANGING_BUTTONS = ("data-import", "audit-start", "audit-keep", "audit-relabel", "audit-drop", "audit-all-relabel",
                    "audit-all-drop", "audit-save", "audit-send-relabel", "compare-evaluate", "run-export",
                    "label-create", "label-train", "label-predict", "label-accept", "label-skip", "label-undo",
                    "label-rest", "predict-go", "evaluate-go", "runs-repeat", "runs-publish", "hub-push", "sweep-start",
                    "sweep-cancel", "sweep-publish", "train-submit", "share-publish", "share-unpublish",
                    "share-change-runtime")


@dataclasses.dataclass
class AccountTabs:
    account: gr.Tab
    admin: gr.Tab
    tokens: gr.Dataframe
    users: gr.Dataframe
    activity: gr.Dataframe


def build_tokens(wb) -> gr.Dataframe:
    """The signed-in user's API tokens: create (the value shown once), list, revoke."""
    gr.Markdown("API tokens let a script or a notebook use the REST API (`/api/v1`) as you, with "
                "`Authorization: Bearer …`. A read token only reads; a write token does what your role may. "
                "The value is shown once, when it is made: copy it then.")
    with gr.Row():
        name = gr.Textbox(label="Token name", placeholder="e.g. notebook", elem_id="token-name")
        scope = gr.Radio(list(SCOPES), value="read", label="Scope", elem_id="token-scope")
        days = gr.Number(None, label="Expires after (days, blank: never)", precision=0, elem_id="token-days")
        create = gr.Button("Create token", variant="primary", elem_id="token-create")
    made = gr.Markdown(elem_id="token-made")
    tokens = gr.Dataframe(headers=TOKEN_HEADERS, interactive=False, elem_id="token-table")
    with gr.Row():
        token_id = gr.Number(None, label="Token ID to revoke", precision=0, elem_id="token-revoke-id")
        revoke = gr.Button("Revoke", variant="stop", elem_id="token-revoke")
        refresh = gr.Button("↻ tokens", size="sm")

    def on_tokens():
        return token_rows(wb, access.acting())

    def on_create_token(name_, scope_, days_):
        actor = _signed_in()
        try:
            made_ = accounts.create_token(wb, actor.name, str(name_ or "").strip(), scope_ or "read",
                                          float(days_) if days_ else None, by=actor)
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        return (f"✔ Token **{made_['name']}** ({made_['scope']}) made. Its value, shown only now:\n\n"
                f"`{made_['token']}`", token_rows(wb, actor), "")

    def on_revoke_token(token_id_):
        actor = _signed_in()
        if not token_id_:
            raise gr.Error("Give the ID of the token to revoke (the first column of the table).")
        try:
            revoked = accounts.revoke_token(wb, int(token_id_), by=actor)
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        return f"✔ Token **{revoked.get('name', token_id_)}** revoked.", token_rows(wb, actor)

    create.click(on_create_token, [name, scope, days], [made, tokens, name])
    revoke.click(on_revoke_token, [token_id], [made, tokens])
    refresh.click(on_tokens, None, [tokens])
    return tokens


def build_admin(wb) -> tuple[gr.Dataframe, gr.Dataframe]:
    """Users (add, set the role, disable, reset the password) and the activity log, filtered."""
    users = gr.Dataframe(headers=USER_HEADERS, interactive=False, elem_id="admin-users")
    with gr.Row():
        user = gr.Textbox(label="User name", elem_id="admin-user")
        role = gr.Dropdown(list(ROLES), value="viewer", label="Role", elem_id="admin-role")
        password = gr.Textbox(label="Password (new users, resets)", type="password", elem_id="admin-password")
    with gr.Row():
        add = gr.Button("Add user", variant="primary", elem_id="admin-add")
        set_role = gr.Button("Set role", elem_id="admin-set-role")
        reset = gr.Button("Reset password", elem_id="admin-reset")
        disable = gr.Button("Disable", variant="stop", elem_id="admin-disable")
    said = gr.Markdown(elem_id="admin-said")
    gr.Markdown("### Activity")
    with gr.Row():
        who = gr.Textbox(label="User", elem_id="activity-user")
        action = gr.Dropdown(ACTIVITY_ACTIONS, value="", label="Action", elem_id="activity-action")
        kind = gr.Textbox(label="Kind (run, dataset, user, token, …)", elem_id="activity-kind")
        limit = gr.Number(200, label="Newest", precision=0)
        show = gr.Button("Show", elem_id="activity-show")
    activity = gr.Dataframe(headers=ACTIVITY_HEADERS, interactive=False, wrap=True, elem_id="admin-activity")

    def answer(call, message):
        try:
            result = call()
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        return message(result), user_rows(wb), ""

    def on_add_user(name_, role_, password_):
        return answer(lambda: accounts.add_user(wb, str(name_ or "").strip(), str(password_ or ""), role_,
                                                by=access.acting()),
                      lambda u: f"✔ User **{u['name']}** added ({u['role']}).")

    def on_set_role(name_, role_):
        return answer(lambda: accounts.set_role(wb, str(name_ or "").strip(), role_, by=access.acting()),
                      lambda u: f"✔ **{u['name']}** is now {u['role']}.")

    def on_disable(name_):
        return answer(lambda: accounts.disable_user(wb, str(name_ or "").strip(), by=access.acting()),
                      lambda u: f"✔ **{u['name']}** is disabled: their sessions ended and their tokens stop working.")

    def on_reset(name_, password_):
        return answer(lambda: accounts.reset_password(wb, str(name_ or "").strip(), str(password_ or ""),
                                                      by=access.acting()),
                      lambda u: f"✔ Password of **{u['name']}** reset.")

    def on_activity(who_, action_, kind_, limit_):
        return activity_rows(wb, who_, action_, kind_, limit_)

    add.click(on_add_user, [user, role, password], [said, users, password])
    set_role.click(on_set_role, [user, role], [said, users, password])
    disable.click(on_disable, [user], [said, users, password])
    reset.click(on_reset, [user, password], [said, users, password])
    show.click(on_activity, [who, action, kind, limit], [activity])
    return users, activity


def build(wb) -> AccountTabs:
    """The two tabs, hidden until ``on_load`` shows the ones the signed-in user may open."""
    with gr.Tab("Account", id="account", elem_id="tab-account", visible=False) as account:
        tokens = build_tokens(wb)
    with gr.Tab("Admin", id="admin", elem_id="tab-admin", visible=False) as admin:
        users, activity = build_admin(wb)
    return AccountTabs(account=account, admin=admin, tokens=tokens, users=users, activity=activity)


def on_load(wb, actor: Optional[Actor]) -> tuple:
    """(account tab, admin tab, banner, sign-out button, style, tokens, users, activity) for ``actor``: nothing
    shown without accounts; the banner says who is signed in, the style greys out what a viewer may not do."""
    if actor is None or actor.local:
        return gr.update(visible=False), gr.update(visible=False), "", gr.update(visible=False), "", [], [], []
    admin = access_policy.allows(actor, ADMINISTER)
    viewer = not access_policy.allows(actor, CREATE)
    note = " · you can look at everything and change nothing" if viewer else ""
    banner = f"Signed in as **{actor.name}** ({actor.role}){note}"
    return (gr.update(visible=access_policy.allows(actor, READ)), gr.update(visible=admin), banner,
            gr.update(visible=True), viewer_style() if viewer else "", token_rows(wb, actor), user_rows(wb) if admin else [],
            activity_rows(wb) if admin else [])


def viewer_style() -> str:
    """CSS that greys out the buttons that make or change work."""
    selectors = ", ".join(f"#{name}" for name in CHANGING_BUTTONS)
    return f"<style>{selectors} {{ opacity: 0.45; pointer-events: none; }}</style>"
