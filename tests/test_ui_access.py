"""Roles on every handler of the workbench page, called in-process as Gradio calls them (a request in
``LocalContext``): every handler × {anonymous, viewer, editor on own work, editor on someone else's work, admin}.

``EXPECTED`` is the intent, written as data, one row per handler: R reads (anyone signed in), C creates
(editors and admins), A administers (admins), "O KIND PARAM" changes the KIND its argument PARAM names (its
owner, or an admin). A handler of the page without a row fails ``test_every_handler_has_a_row``. Each refused
call is made through the real wrapped handler: it raises a gr.Error, leaves the database as it was (every
table dumped before and after) and leaves one WARNING line. Allowed calls are checked at the authorization
step only (the handlers themselves are the other tests' business).
"""
from __future__ import annotations

import contextvars
import inspect
import logging

import gradio as gr
import pytest
from gradio.context import LocalContext
from sqlalchemy import select

from storage.models import Audit, Base, Dataset, Playground, Run, Sweep
from tests.access_support import team
from workbench.services import accounts
from workbench.ui import access

# The page takes sessions: an API token (any of the editor's, valid or not) sent to it as a Bearer header makes
# its caller no one, refused as anonymous (tokens are for the REST API, docs/api.md)
TOKEN_PARTIES = ("read_token", "write_token", "revoked_token", "expired_token")
PARTIES = ("anonymous", "viewer", "editor_own", "editor_other", "admin", *TOKEN_PARTIES)
_NO_TOKEN = (False,) * len(TOKEN_PARTIES)
ANSWERS = {"R": (False, True, True, True, True, *_NO_TOKEN), "C": (False, False, True, True, True, *_NO_TOKEN),
           "O": (False, False, True, False, True, *_NO_TOKEN), "A": (False, False, False, False, True, *_NO_TOKEN)}

EXPECTED = {
    "account_tab:build_admin.on_activity": "A",
    "account_tab:build_admin.on_add_user": "A",
    "account_tab:build_admin.on_disable": "A",
    "account_tab:build_admin.on_reset": "A",
    "account_tab:build_admin.on_set_role": "A",
    "account_tab:build_tokens.on_create_token": "R",
    "account_tab:build_tokens.on_revoke_token": "R",
    "account_tab:build_tokens.on_tokens": "R",
    "app:_wire_address.open_links": "R",
    "app:_wire_compared.restore": "R",
    "app:_wire_label.open_sent": "R",
    "app:_wire_label.restore": "R",
    "app:_wire_sweeps.<lambda>": "R",
    "app:build_ui.<lambda>": "R",
    "app:build_ui.clone_and_edit": "R",
    "app:build_ui.my_role": "R",
    "app:build_ui.use_corrected": "R",
    "app:build_ui.use_dataset": "R",
    "audit_panel:_shower.show": "R",
    "audit_panel:_wire_decisions.every_shown.handler": "O audit audit_id",
    "audit_panel:_wire_decisions.on_row": "R",
    "audit_panel:_wire_decisions.one.handler": "O audit audit_id",
    "audit_panel:_wire_progress.folds_action.handler": "O audit audit_id",
    "audit_panel:_wire_progress.on_tick": "R",
    "audit_panel:_wire_relabel.<lambda>": "R",
    "audit_panel:_wire_relabel.on_send_relabel": "C",
    "audit_panel:_wire_review.on_dataset": "R",
    "audit_panel:_wire_review.on_settings": "R",
    "audit_panel:_wire_review.on_start": "C",
    "audit_panel:_wire_save.on_save": "C",
    "compare_tab:_wire_runs.<lambda>": "R",
    "compare_tab:_wire_runs.on_compare": "R",
    "compare_tab:_wire_runs.on_refresh": "R",
    "compare_tab:_wire_test_sets.<lambda>": "R",
    "compare_tab:_wire_test_sets.on_evaluate_runs": "C",
    "compare_tab:_wire_test_sets.on_refresh_test_sets": "R",
    "compare_tab:_wire_test_sets.on_test_set": "R",
    "compare_tab:build.<lambda>": "R",
    "data_tab:_wire_check.<lambda>": "R",
    "data_tab:_wire_check.load_example": "R",
    "data_tab:_wire_check.on_recheck": "C",
    "data_tab:_wire_check.on_upload": "C",
    "data_tab:_wire_import.on_import": "C",
    "data_tab:_wire_stored.<lambda>": "R",
    "data_tab:_wire_stored.on_ask": "R",
    "data_tab:_wire_stored.on_delete": "O dataset dataset_id",
    "data_tab:_wire_stored.on_pick": "R",
    "data_tab:_wire_validation.on_validation": "C",
    "export_panel:wire.<lambda>": "R",
    "export_panel:wire.on_export": "C",
    "label_tab:_wire_handoff.<lambda>": "R",
    "label_tab:_wire_handoff.on_export_labels": "R",
    "label_tab:_wire_handoff.on_label_rest": "C",
    "label_tab:_wire_handoff.on_train": "C",
    "label_tab:_wire_labelling.key_handler.on_key": "C",
    "label_tab:_wire_labelling.on_accept": "C",
    "label_tab:_wire_labelling.on_project": "R",
    "label_tab:_wire_labelling.on_rest": "C",
    "label_tab:_wire_labelling.on_skip": "C",
    "label_tab:_wire_labelling.on_undo": "C",
    "label_tab:_wire_progress.on_open": "R",
    "label_tab:_wire_progress.on_progress": "R",
    "label_tab:build.on_create": "C",
    "label_tab:build.refresh": "R",
    "predict_panel:wire.<lambda>": "R",
    "predict_panel:wire.on_evaluate": "C",
    "predict_panel:wire.on_job_row": "R",
    "predict_panel:wire.on_pick": "R",
    "predict_panel:wire.on_predict": "C",
    "runs_tab:_wire_actions.<lambda>": "R",
    "runs_tab:_wire_actions.on_cancel": "O run rid",
    "runs_tab:_wire_actions.on_continue": "C",
    "runs_tab:_wire_actions.on_delete": "O run rid",
    "runs_tab:_wire_actions.on_download": "R",
    "runs_tab:_wire_actions.on_repeat": "C",
    "runs_tab:_wire_actions.on_retry": "O run rid",
    "runs_tab:_wire_listing.<lambda>": "R",
    "runs_tab:_wire_listing.on_row": "R",
    "runs_tab:_wire_listing.tick": "R",
    "runs_tab:_wire_selection.<lambda>": "R",
    "runs_tab:_wire_selection.on_selection": "R",
    "runs_tab:_wire_share.<lambda>": "R",
    "runs_tab:_wire_share.on_change_runtime": "O playground slug",
    "runs_tab:_wire_share.on_publish": "O run rid",
    "runs_tab:_wire_share.on_push": "O run rid",
    "runs_tab:_wire_share.on_unpublish": "O playground slug",
    "runs_tab:build.<lambda>": "R",
    "runs_tab:build.on_load": "R",
    "sweep_tab:build_form.<lambda>": "R",
    "sweep_tab:build_form.on_start": "C",
    "sweep_tab:build_view.<lambda>": "R",
    "sweep_tab:build_view.on_cancel": "O sweep sweep_id",
    "sweep_tab:build_view.on_confirm": "O sweep sweep_id",
    "sweep_tab:build_view.on_load": "R",
    "sweep_tab:build_view.on_publish_best": "O sweep sweep_id",
    "sweep_tab:build_view.on_tick": "R",
    "sweep_tab:build_view.show": "R",
    "sweep_tab:default_space_for": "R",
    "sweep_tab:space_yaml": "R",
    "train_tab:build.<lambda>": "R",
    "train_tab:build.on_facts": "R",
    "train_tab:build.on_load": "R",
    "train_tab:build.on_submit": "C",
    "train_tab:build.on_task": "R",
    "train_tab:build.preview": "R",
}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """(workbench, team, each party's session cookie, what each editor owns, the built page's handlers by key)."""
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.ui import edge
    from workbench.ui.app import build_ui

    limit = pytest.MonkeyPatch()  # every refusal of the matrix is logged (a page logs 20 a minute of each kind)
    limit.setattr(edge.RefusalLog.__init__, "__defaults__", (10**9, edge.RefusalLog.__init__.__defaults__[1]))
    wb = open_workbench(Settings.from_env({}, home=str(tmp_path_factory.mktemp("home"))))
    people = team(wb)
    owned = {"editor_own": _work(wb, people.editor.user_id, "ed"),
             "editor_other": _work(wb, people.other_editor.user_id, "olga")}
    sessions = {"anonymous": None, "viewer": accounts.start_session(wb, people.viewer),
                "editor_own": accounts.start_session(wb, people.editor),
                "admin": accounts.start_session(wb, people.admin)}
    sessions["editor_other"] = sessions["editor_own"]
    sessions.update({party: ("bearer", getattr(people, party)) for party in TOKEN_PARTIES})
    owned["admin"] = owned["editor_other"]  # an admin changes someone else's work
    handlers = {}
    for block_fn in build_ui(wb).fns.values():
        if block_fn.fn is not None:
            handlers.setdefault(access.handler_key(block_fn.fn), block_fn.fn)
    limit.undo()
    yield wb, people, sessions, owned, handlers
    wb.close()


def _work(wb, owner_id: int, name: str) -> dict:
    """A dataset, a run, a playground, a sweep and an audit owned by ``owner_id``."""
    with wb.db.session() as session:
        dataset = Dataset(id=f"ds-{name}", name=f"data of {name}", task="text-classification", format="csv",
                          content_hash=f"hash-{name}", path="/nonexistent", num_train=1, num_validation=0,
                          owner_id=owner_id)
        session.add(dataset)
        session.flush()
        run = Run(name=f"run of {name}", task="text-classification", model="m", spec={"model": "m"},
                  status="failed", dataset_id=dataset.id, owner_id=owner_id)
        session.add(run)
        session.flush()
        session.add(Playground(slug=f"pg-{name}", run_id=run.id, owner_id=owner_id))
        sweep = Sweep(task="text-classification", spec={}, study_name=f"study-{name}", n_trials=1, owner_id=owner_id)
        audit = Audit(dataset_id=dataset.id, task="text-classification", spec={}, folder="", owner_id=owner_id)
        session.add_all([sweep, audit])
        session.flush()
        return {"dataset": dataset.id, "run": run.id, "playground": f"pg-{name}", "sweep": sweep.id,
                "audit": audit.id}


def dump(wb) -> dict:
    with wb.db.session() as session:
        return {table.name: sorted(map(repr, session.execute(select(table)).all()))
                for table in Base.metadata.sorted_tables}


def call_args(fn, target: dict) -> tuple:
    """Positional arguments for ``fn``: None everywhere but the parameter naming the target."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return tuple(target.get(p.name) for p in params)


def as_party(session_value):
    """The request Gradio hands a handler, carrying the party's session cookie (none: anonymous), or for a token
    party, no cookie and its token as ``Authorization: Bearer``."""
    if isinstance(session_value, tuple):
        return LocalContext.request.set(gr.Request(cookies={}, headers={"authorization": f"Bearer {session_value[1]}"}))
    cookies = {access.SESSION_COOKIE: session_value} if session_value else {}
    return LocalContext.request.set(gr.Request(cookies=cookies))


def _authorize(wb, fn, args, kwargs):
    """``access.authorize`` in a context of its own, as the page's handlers run it (the actor does not outlive it)."""
    return contextvars.copy_context().run(access.authorize, wb, fn, args, kwargs)


def test_every_handler_has_a_row(page):
    *_, handlers = page
    assert set(handlers) - set(EXPECTED) == set(), "a handler without a row in EXPECTED (and access.RULES)"
    assert set(EXPECTED) - set(handlers) == set(), "a row for a handler the page no longer has"
    assert set(access.RULES) == set(EXPECTED)


def test_a_handler_without_a_rule_is_refused_to_all_but_local(page, monkeypatch):
    wb, _, sessions, _, handlers = page
    fn = handlers["runs_tab:_wire_actions.on_delete"]
    monkeypatch.delitem(access.RULES, "runs_tab:_wire_actions.on_delete")
    token = as_party(sessions["admin"])
    try:
        with pytest.raises(gr.Error, match="no access rule"):
            fn(1)
    finally:
        LocalContext.request.reset(token)


CASES = [(key, party) for key in EXPECTED for party in PARTIES]


@pytest.mark.parametrize("key,party", CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_matrix(page, key, party, caplog):
    wb, _, sessions, owned, handlers = page
    code, *target = EXPECTED[key].split()
    allowed = ANSWERS[code][PARTIES.index(party)]
    wrapped = handlers[key]
    inner = inspect.unwrap(wrapped)
    args = {}
    if target:
        kind, param = target
        args = {param: owned.get(party, owned["editor_own"])[kind]}
    values = call_args(inner, args)
    token = as_party(sessions[party])
    try:
        if allowed:
            _authorize(wb, inner, values, {})
            return
        before = dump(wb)
        caplog.clear()
        caplog.set_level(logging.WARNING)
        with pytest.raises(gr.Error) as refused:
            wrapped(*values)
        assert dump(wb) == before
    finally:
        LocalContext.request.reset(token)
    message = str(refused.value.message)
    expected = "sign in first" if party in ("anonymous", *TOKEN_PARTIES) else (
        "belongs to someone else" if code == "O" and party == "editor_other" else " can ")
    assert expected in message, message
    lines = [r for r in caplog.records if r.levelno == logging.WARNING and "refused" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]


FOLDER = "/srv/models/secret-bert"


@pytest.mark.parametrize("key,args", [
    ("train_tab:build.on_submit", lambda fn, run: (None, "text-classification", "ds-ed", FOLDER)),
    ("train_tab:build.on_facts", lambda fn, run: ("text-classification", "ds-ed", "./models/x")),
    ("audit_panel:_wire_review.on_start", lambda fn, run: ("ds-ed", 5, FOLDER, "fast")),
    ("sweep_tab:build_form.on_start", lambda fn, run: ('{"model": "%s"}' % FOLDER, "lr: [1e-5, 1e-4]", 4, 1, "", "",
                                                        "", "")),
    ("sweep_tab:build_form.on_start", lambda fn, run: ("{}", "model: [prajjwal1/bert-tiny, ~/models/x]", 4, 1, "",
                                                        "", "", "")),
    ("runs_tab:_wire_actions.on_continue", lambda fn, run: (run, 1)),
])
def test_only_an_admin_names_a_server_folder_as_a_model(page, key, args):
    wb, people, sessions, owned, handlers = page
    with wb.db.session() as session:
        run = Run(name="on a folder", task="text-classification", model=FOLDER, spec={"model": FOLDER},
                  status="succeeded", owner_id=people.editor.user_id)
        session.add(run)
        session.flush()
        run_id = run.id
    wrapped = handlers[key]
    inner = inspect.unwrap(wrapped)
    values = args(inner, run_id)
    token = as_party(sessions["editor_own"])
    try:
        before = dump(wb)
        with pytest.raises(gr.Error, match="name a folder on the server as a model"):
            wrapped(*values)
        assert dump(wb) == before
    finally:
        LocalContext.request.reset(token)
    token = as_party(sessions["admin"])
    try:
        _authorize(wb, inner, values, {})
    finally:
        LocalContext.request.reset(token)
    # a catalogue entry or a hub id is anyone's
    assert not access.names_server_folder("prajjwal1/bert-tiny")
    assert access.names_server_folder(FOLDER) and access.names_server_folder("~/x")


def test_without_accounts_everything_is_local(wb):
    from workbench.ui.app import build_ui

    handlers = {access.handler_key(f.fn): f.fn for f in build_ui(wb).fns.values() if f.fn is not None}
    assert access.request_actor(wb).local
    for key in ("runs_tab:_wire_actions.on_delete", "account_tab:build_admin.on_add_user"):
        assert _authorize(wb, inspect.unwrap(handlers[key]), (None,), {}).local
    assert access.acting() is None  # nothing outlives a call


def test_without_accounts_a_handler_without_a_rule_still_runs(wb, monkeypatch):
    from workbench.ui.app import build_ui

    handlers = {access.handler_key(f.fn): f.fn for f in build_ui(wb).fns.values() if f.fn is not None}
    monkeypatch.delitem(access.RULES, "data_tab:_wire_stored.on_ask")
    assert handlers["data_tab:_wire_stored.on_ask"]("")[2].startswith("✘ Pick a dataset first")


def test_a_viewer_opens_a_labelling_project_without_claiming_an_item(page):
    from storage.models import LabelItem

    wb, people, sessions, _, handlers = page
    from workbench.services import labelling
    import tempfile
    from pathlib import Path

    pool = Path(tempfile.mkdtemp()) / "pool.txt"
    pool.write_text("first text\nsecond text\n", encoding="utf-8")
    project = labelling.create_project(wb, pool, ["a", "b"], name="p", user="ada", owner_id=people.admin.user_id)
    opened = _as(sessions, "viewer", handlers["label_tab:_wire_labelling.on_project"], project["id"], None, None)
    assert "needs an editor" in opened[1]
    with wb.db.session() as session:
        assert not [i for i in session.scalars(select(LabelItem)) if i.claimed_by]
    opened = _as(sessions, "editor_own", handlers["label_tab:_wire_labelling.on_project"], project["id"], None, None)
    with wb.db.session() as session:
        assert [i.claimed_by for i in session.scalars(select(LabelItem)) if i.claimed_by] == ["ed"]


def _as(sessions, party, fn, *args):
    token = as_party(sessions[party])
    try:
        return fn(*args)
    finally:
        LocalContext.request.reset(token)


def test_my_tokens_panel_shows_a_value_once_and_revokes_only_mine(page):
    wb, people, sessions, _, handlers = page
    create = handlers["account_tab:build_tokens.on_create_token"]
    revoke = handlers["account_tab:build_tokens.on_revoke_token"]
    said, rows, cleared = _as(sessions, "viewer", create, "laptop", "read", 30)
    value = said.split("`")[1]
    assert value.startswith("wbt_") and cleared == ""
    assert [r[1:3] for r in rows] == [["laptop", "read"]] and value not in repr(rows)
    assert accounts.actor_for_token(wb, value).name == "vic"
    listed = _as(sessions, "viewer", handlers["account_tab:build_tokens.on_tokens"])
    assert value not in repr(listed)
    editors = [t["id"] for t in accounts.list_tokens(wb, "ed")]
    with pytest.raises(gr.Error):
        _as(sessions, "viewer", revoke, editors[0])  # someone else's token
    said, rows = _as(sessions, "viewer", revoke, rows[0][0])
    assert "revoked" in said and accounts.actor_for_token(wb, value) is None


def test_admin_page_adds_a_user_sets_a_role_and_filters_the_activity(page, caplog):
    wb, people, sessions, _, handlers = page
    caplog.set_level(logging.DEBUG)
    said, users, password = _as(sessions, "admin", handlers["account_tab:build_admin.on_add_user"], "nina",
                                "viewer", "nina-long-password-5")
    assert "nina" in said and password == "" and ["nina", "viewer"] in [u[1:3] for u in users]
    said, users, _ = _as(sessions, "admin", handlers["account_tab:build_admin.on_set_role"], "nina", "editor")
    assert ["nina", "editor"] in [u[1:3] for u in users]
    rows = _as(sessions, "admin", handlers["account_tab:build_admin.on_activity"], "", "user_add", "", 50)
    assert rows and rows[0][3] == "user_add"
    assert "nina-long-password-5" not in "\n".join(r.getMessage() for r in caplog.records)
    with pytest.raises(gr.Error, match="admins can manage users"):
        _as(sessions, "editor_own", handlers["account_tab:build_admin.on_add_user"], "eve", "admin", "x" * 20)


def test_a_creator_records_the_owner_and_the_activity(page):
    wb, people, sessions, owned, handlers = page
    delete = handlers["runs_tab:_wire_actions.on_delete"]
    run_id = owned["editor_own"]["run"]
    _as(sessions, "editor_own", delete, run_id)
    with wb.db.session() as session:
        assert session.get(Run, run_id) is None
    entry = accounts.list_activity(wb, action="delete", target_kind="run")[0]
    assert (entry["user"], entry["target_id"]) == ("ed", str(run_id))


def test_an_editor_sees_the_changing_buttons_grey_on_someone_elses_run(page):
    from workbench.services.access import CHANGE, CREATE, READ
    from workbench.ui import runs_tab

    wb, people, sessions, owned, handlers = page
    needs = [CHANGE, READ, CREATE]

    def seen(actor, run_id):
        return contextvars.copy_context().run(lambda: (access._keep(actor), runs_tab.usable(wb, run_id, needs))[1])

    with wb.db.session() as session:  # runs of this test's own: others of the module may have deleted theirs
        made = [Run(name=f"grey {who}", task="text-classification", model="m", spec={"model": "m"}, status="failed",
                    owner_id=who) for who in (people.editor.user_id, people.other_editor.user_id)]
        session.add_all(made)
        session.flush()
        mine, theirs = (run.id for run in made)
    assert seen(people.editor, mine) == [True, True, True]
    assert seen(people.editor, theirs) == [False, True, True]
    assert seen(people.viewer, mine) == [False, True, False]
    assert seen(people.admin, theirs) == [True, True, True]
    assert seen(people.admin, None) == seen(people.admin, 10**9) == [False, False, False]
    # the page's own selection handler: Cancel (first) grey, Clone and edit (third) usable, for the editor
    token = as_party(sessions["editor_own"])
    try:
        updates = handlers["runs_tab:_wire_selection.on_selection"](theirs)
    finally:
        LocalContext.request.reset(token)
    assert [u["interactive"] for u in updates[:3]] == [False, False, True]
