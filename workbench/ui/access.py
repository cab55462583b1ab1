"""Who may call each handler of the workbench page: one rule per handler, checked on the server, deny by default.

``RULES`` is data: for each handler (``handler_key``: its module and name), the action it does
(``workbench.services.access``) and, for a change, where its arguments name the thing changed, so the
owner is looked up (``accounts.owner_of``); a handler that names a model says where, so only an admin
names a folder on the server. ``workbench.ui.edge`` calls ``authorize`` before each handler runs: the
actor is the session of the request Gradio is serving (its cookie), ``LOCAL`` when the database has no
account. A handler with no rule is refused to everyone but ``LOCAL`` (and tests/test_ui_access.py fails).

Lambdas are keyed by the function they are written in; every lambda of the page only reads (a handler that
changes something is a named function with its own row).
"""
from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
import logging
from pathlib import Path
from typing import Any, Callable, Optional

from workbench.errors import NotFound
from workbench.services import access, accounts
from workbench.services.access import ADMINISTER, CHANGE, CREATE, READ, SERVER_FOLDER, Actor

SESSION_COOKIE = "workbench_session"
_acting: contextvars.ContextVar[Optional[Actor]] = contextvars.ContextVar("workbench_ui_actor", default=None)

Arguments = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Rule:
    """``action`` on the thing of ``kind`` that ``target(arguments)`` names (for ``CHANGE``); ``models(wb,
    arguments)`` lists the models the call names (a server folder among them needs ``SERVER_FOLDER``)."""

    action: str
    kind: Optional[str] = None
    target: Optional[Callable[[Arguments], Any]] = None
    models: Optional[Callable[[Any, Arguments], list]] = None


def arg(name: str, index: Optional[int] = None) -> Callable[[Arguments], Any]:
    """The argument ``name`` (of ``*name``: its ``index``-th value) of a call."""
    def value(arguments: Arguments) -> Any:
        found = arguments.get(name)
        if index is None:
            return found
        return found[index] if isinstance(found, (list, tuple)) and len(found) > index else None
    return value


def model_arg(name: str, index: Optional[int] = None) -> Callable[[Any, Arguments], list]:
    return lambda wb, arguments: [arg(name, index)(arguments)]


def run_model(name: str) -> Callable[[Any, Arguments], list]:
    """The model of the run a call names: continuing or repeating a run loads it again."""
    def models(wb, arguments: Arguments) -> list:
        from workbench.services import runs as runs_service

        rid = _number(arguments.get(name))
        if not isinstance(rid, int):
            return []
        try:
            return [((runs_service.get_run(wb, rid).get("spec") or {}).get("model"))]
        except Exception:  # noqa: BLE001 - no such run: the handler says so
            return []
    return models


def sweep_models(wb, arguments: Arguments) -> list:
    """The base spec's model and every model the search space names."""
    found: list = []
    try:
        found.append((json.loads(arguments.get("base_json") or "{}") or {}).get("model"))
    except (ValueError, AttributeError):
        pass
    try:
        import yaml

        space = yaml.safe_load(arguments.get("space_text") or "") or {}
        models = space.get("model") if isinstance(space, dict) else None
        found.extend(_strings(models))
    except Exception:  # noqa: BLE001 - a space that does not parse is refused by the service
        pass
    return found


def _strings(value: Any) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _r(action: str = READ, **kw: Any) -> Rule:
    return Rule(action, **kw)


def _change(kind: str, target: Callable[[Arguments], Any], **kw: Any) -> Rule:
    return Rule(CHANGE, kind, target, **kw)


R, C = _r(READ), _r(CREATE)
TRAIN_MODEL = model_arg("values", 2)  # the form's fields: task, dataset, model, ...

# One row per handler of the page: "module:function" (nested functions by their path, without <locals>).
RULES: dict[str, Rule] = {
    # app: wiring between tabs, all reads (what they fill in is checked when it is used)
    "app:_wire_address.open_links": R, "app:_wire_compared.restore": R, "app:_wire_label.open_sent": R,
    "app:_wire_label.restore": R, "app:_wire_sweeps.<lambda>": R, "app:build_ui.<lambda>": R,
    "app:build_ui.clone_and_edit": R, "app:build_ui.use_corrected": R, "app:build_ui.use_dataset": R,
    "app:build_ui.my_role": R,
    # data tab
    "data_tab:_wire_check.<lambda>": R, "data_tab:_wire_check.load_example": R,
    "data_tab:_wire_check.on_recheck": C, "data_tab:_wire_check.on_upload": C, "data_tab:_wire_import.on_import": C,
    "data_tab:_wire_validation.on_validation": C, "data_tab:_wire_stored.<lambda>": R,
    "data_tab:_wire_stored.on_ask": R, "data_tab:_wire_stored.on_pick": R,
    "data_tab:_wire_stored.on_delete": _change("dataset", arg("dataset_id")),
    # audits (in the data tab)
    "audit_panel:_shower.show": R, "audit_panel:_wire_decisions.on_row": R, "audit_panel:_wire_progress.on_tick": R,
    "audit_panel:_wire_relabel.<lambda>": R, "audit_panel:_wire_review.on_dataset": R,
    "audit_panel:_wire_review.on_settings": _r(READ, models=model_arg("model_")),
    "audit_panel:_wire_review.on_start": _r(CREATE, models=model_arg("model_")),
    "audit_panel:_wire_decisions.one.handler": _change("audit", arg("audit_id")),
    "audit_panel:_wire_decisions.every_shown.handler": _change("audit", arg("audit_id")),
    "audit_panel:_wire_progress.folds_action.handler": _change("audit", arg("audit_id")),
    "audit_panel:_wire_relabel.on_send_relabel": C, "audit_panel:_wire_save.on_save": C,
    # label tab: labelling is contributed work (any editor labels any project)
    "label_tab:_wire_handoff.<lambda>": R, "label_tab:_wire_handoff.on_export_labels": R,
    "label_tab:_wire_handoff.on_label_rest": C, "label_tab:_wire_handoff.on_train": C,
    "label_tab:_wire_labelling.key_handler.on_key": C, "label_tab:_wire_labelling.on_accept": C,
    "label_tab:_wire_labelling.on_rest": C, "label_tab:_wire_labelling.on_skip": C,
    "label_tab:_wire_labelling.on_undo": C, "label_tab:_wire_labelling.on_project": R,
    "label_tab:_wire_progress.on_open": R, "label_tab:_wire_progress.on_progress": R, "label_tab:build.on_create": C,
    "label_tab:build.refresh": R,
    # train tab: a model named by a folder on the server is an admin's
    "train_tab:build.<lambda>": R, "train_tab:build.on_task": R,
    "train_tab:build.on_facts": _r(READ, models=TRAIN_MODEL), "train_tab:build.on_load": _r(READ, models=TRAIN_MODEL),
    "train_tab:build.preview": _r(READ, models=TRAIN_MODEL),
    "train_tab:build.on_submit": _r(CREATE, models=TRAIN_MODEL),
    # sweeps
    "sweep_tab:build_form.<lambda>": R, "sweep_tab:default_space_for": R, "sweep_tab:space_yaml": R,
    "sweep_tab:build_form.on_start": _r(CREATE, models=sweep_models),
    "sweep_tab:build_view.<lambda>": R, "sweep_tab:build_view.on_load": R, "sweep_tab:build_view.on_tick": R,
    "sweep_tab:build_view.show": R,
    "sweep_tab:build_view.on_cancel": _change("sweep", arg("sweep_id")),
    "sweep_tab:build_view.on_confirm": _change("sweep", arg("sweep_id")),
    "sweep_tab:build_view.on_publish_best": _change("sweep", arg("sweep_id")),
    # runs tab
    "runs_tab:_wire_actions.<lambda>": R, "runs_tab:_wire_listing.<lambda>": R, "runs_tab:_wire_listing.on_row": R,
    "runs_tab:_wire_listing.tick": R, "runs_tab:_wire_selection.<lambda>": R, "runs_tab:_wire_selection.on_selection": R,
    "runs_tab:_wire_share.<lambda>": R, "runs_tab:build.<lambda>": R, "runs_tab:build.on_load": R,
    "runs_tab:_wire_actions.on_download": R,
    "runs_tab:_wire_actions.on_cancel": _change("run", arg("rid")),
    "runs_tab:_wire_actions.on_retry": _change("run", arg("rid")),
    "runs_tab:_wire_actions.on_delete": _change("run", arg("rid")),
    "runs_tab:_wire_actions.on_continue": _r(CREATE, models=run_model("rid")),
    "runs_tab:_wire_actions.on_repeat": _r(CREATE, models=run_model("rid")),
    # sharing a model outside the workbench is its owner's call
    "runs_tab:_wire_share.on_publish": _change("run", arg("rid")),
    "runs_tab:_wire_share.on_push": _change("run", arg("rid")),
    "runs_tab:_wire_share.on_unpublish": _change("playground", arg("slug")),
    "runs_tab:_wire_share.on_change_runtime": _change("playground", arg("slug")),
    # predictions, evaluations and exports of any run are new work of the caller's
    "predict_panel:wire.<lambda>": R, "predict_panel:wire.on_job_row": R, "predict_panel:wire.on_pick": R,
    "predict_panel:wire.on_predict": C, "predict_panel:wire.on_evaluate": C,
    "export_panel:wire.<lambda>": R, "export_panel:wire.on_export": C,
    # compare tab
    "compare_tab:_wire_runs.<lambda>": R, "compare_tab:_wire_runs.on_compare": R, "compare_tab:_wire_runs.on_refresh": R,
    "compare_tab:_wire_test_sets.<lambda>": R, "compare_tab:_wire_test_sets.on_refresh_test_sets": R,
    "compare_tab:_wire_test_sets.on_test_set": R, "compare_tab:build.<lambda>": R,
    "compare_tab:_wire_test_sets.on_evaluate_runs": C,
    # the signed-in user's own tokens (the service checks they are theirs), and the admin page
    "account_tab:build_tokens.on_tokens": R, "account_tab:build_tokens.on_create_token": R,
    "account_tab:build_tokens.on_revoke_token": R,
    "account_tab:build_admin.on_add_user": _r(ADMINISTER),
    "account_tab:build_admin.on_set_role": _r(ADMINISTER), "account_tab:build_admin.on_disable": _r(ADMINISTER),
    "account_tab:build_admin.on_reset": _r(ADMINISTER), "account_tab:build_admin.on_activity": _r(ADMINISTER),
}


def handler_key(fn: Callable) -> str:
    """``module:function`` of a handler, nested functions by their path: ``runs_tab:_wire_actions.on_delete``."""
    fn = inspect.unwrap(fn)
    module = (getattr(fn, "__module__", None) or "").rsplit(".", 1)[-1]
    return f"{module}:{getattr(fn, '__qualname__', repr(fn)).replace('.<locals>', '')}"


def request_actor(wb) -> Optional[Actor]:
    """Whoever the request Gradio is serving acts as: its session's user, ``LOCAL`` without accounts, else None."""
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    cookies = getattr(request, "cookies", None) or {} if request is not None else {}
    return accounts.resolve(wb, session=cookies.get(SESSION_COOKIE) or None)


def acting() -> Optional[Actor]:
    """The actor of the handler call in progress (set by ``authorize``)."""
    return _acting.get()


def owner_id() -> Optional[int]:
    """What creators record as the owner of the work a handler makes: the caller's user id (None for LOCAL)."""
    actor = _acting.get()
    return actor.user_id if actor is not None else None


class _Unreadable:
    """A target value that is no id at all: only an admin's call goes on (and the handler refuses it)."""


def _number(value: Any) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        try:
            number = int(float(value))
        except (TypeError, ValueError, OverflowError):
            return _Unreadable()
    return number if number > 0 else None


def _target(kind: str, value: Any) -> Any:
    if kind in ("dataset", "playground"):
        if value is None or not str(value).strip():
            return None
        return str(value).strip()
    return _number(value)


def names_server_folder(name: Any) -> bool:
    """Whether a model name is a folder on this server (not a catalogue entry or a hub id): what
    ``catalogue.resolve_model`` would load from disk, or anything written as a path."""
    if not isinstance(name, str) or not name.strip():
        return False
    name = name.strip()
    from workbench.services import catalogue

    if any(name in (info.name, info.source) for info in catalogue.list_models()):
        return False
    if name.startswith(("/", "~", ".", "\\")) or "\\" in name or ":" in name:
        return True
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):
        return True


def authorize(wb, fn: Callable, args: tuple, kwargs: dict) -> Actor:
    """The caller's actor when the rule of ``fn`` lets them make this call; else ``SignInRequired`` or
    ``AccessDenied`` (before anything is read or changed). The actor is kept for ``acting``/``owner_id``."""
    actor = request_actor(wb)
    key = handler_key(fn)
    rule = RULES.get(key)
    if rule is None:
        if actor is not None and actor.local:
            return _keep(actor)
        access.require(actor, READ)  # no actor: sign in first
        raise access.AccessDenied(f"{key} has no access rule, so it is refused (deny by default)")
    arguments = _arguments(fn, args, kwargs)
    if rule.action == CHANGE:
        _require_change(wb, actor, rule, arguments)
    else:
        access.require(actor, rule.action)
    if rule.models is not None and not access.allows(actor, SERVER_FOLDER):
        folders = [m for m in rule.models(wb, arguments) if names_server_folder(m)]
        if folders:
            access.require(actor, SERVER_FOLDER, what=f"model {str(folders[0])[:200]!r}")
    return _keep(actor)


def _keep(actor: Actor) -> Actor:
    _acting.set(actor)
    return actor


def _arguments(fn: Callable, args: tuple, kwargs: dict) -> Arguments:
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    return dict(bound.arguments)


def _require_change(wb, actor: Optional[Actor], rule: Rule, arguments: Arguments) -> None:
    value = _target(rule.kind, rule.target(arguments) if rule.target else None)
    what = f"{rule.kind.replace('_', ' ')} {value}" if value is not None and not isinstance(value, _Unreadable) \
        else rule.kind.replace("_", " ")
    if value is None:  # nothing picked: the handler says so; still only a role that may change work gets there
        access.require(actor, CREATE)
        return
    if isinstance(value, _Unreadable):
        access.require(actor, CHANGE, None, what=what)
        return
    access.require(actor, READ)
    try:
        owner = accounts.owner_of(wb, rule.kind, value)
    except NotFound:  # no such thing: the handler says so, to whoever may change work
        access.require(actor, CREATE)
        return
    access.require(actor, CHANGE, owner, what=what)


def may_create() -> bool:
    """Whether the handler call in progress may make work (True outside a handler call: what to show, never an
    authorization, which ``authorize`` did already)."""
    actor = _acting.get()
    return actor is None or access.allows(actor, CREATE)


def allows(action: str, owner: Optional[int] = None) -> bool:
    """For greying out a button: whether the actor of the call in progress may do ``action``."""
    return access.allows(_acting.get(), action, owner)


def record(wb, action: str, kind: Optional[str] = None, target: Any = None, detail: Optional[dict] = None) -> None:
    """One activity entry for what the handler in progress just did (nothing for ``LOCAL``: without accounts
    there is nobody to tell apart). Never fails the handler: the work is done."""
    actor = _acting.get()
    if actor is None or actor.local:
        return
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    client = getattr(request, "client", None) if request is not None else None
    try:
        accounts.record(wb, actor, action, kind, target, detail, address=getattr(client, "host", "") or "")
    except Exception:  # noqa: BLE001 - logged; the user's work stands
        logging.getLogger(__name__).exception("could not record %s %s %s in the activity log", action, kind, target)
