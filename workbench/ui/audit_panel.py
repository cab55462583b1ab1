"""Data tab, "Find suspicious labels": start an audit of the picked dataset, watch its folds, review
the ranked suspects (keep / relabel / drop), save a corrected copy as a new dataset, or send the suspects
to a labelling project to be labelled again by a person (the Label tab).

Layout and wiring only; the work is in ``workbench.services.audits``. The functions above ``build``
turn service results into what the components show and are tested without a browser. Nothing is
kept in this process: decisions are written as they are made, and each view is read again.
"""
from __future__ import annotations

import dataclasses
import html
import logging
from typing import Any, Callable, NamedTuple, Optional

import gradio as gr
import pandas as pd

from workbench.services import baselines
from workbench.services.specs import DEFAULT_MODEL
from workbench.errors import WorkbenchError
from workbench.services import audits
from workbench.ui import access
from workbench.ui import format as fmt

log = logging.getLogger(__name__)

ISSUE_HEADERS = ["Rank", "Example", "Text", "Given", "Suggested", "Confidence", "Fold", "Decision"]
ANY = "(any)"
DECISION_FILTERS = ("all", "undecided", audits.KEEP, audits.RELABEL, audits.DROP)
MAX_ROWS = 500  # rows the table shows; the filters reach the rest
TEXT_CHARS = 240
POLL_SECONDS = 2.0
INTRO = ("Each fold is an ordinary run of the chosen model: it trains on the other folds and predicts its own, "
         "so every example is predicted once by a model that never saw it. Confident learning then lists the "
         "examples whose label disagrees with a confidently predicted other label, least likely label first. "
         "Mark each one **keep**, **relabel** or **drop**, then save a corrected copy: the original dataset is "
         "never changed. The folds show in the Runs tab; with several workers they run side by side. "
         "Review from the top: further down the list many labels are right and only hard (measured on "
         "TREC-6: accepting every suggestion left more wrong labels than before), so filter on the "
         "confidence before a bulk relabel.")


def audit_choices(wb, dataset_id: str | None) -> list[tuple[str, int]]:
    """The audits of a dataset for the picker, newest first. The labels hold only what never changes
    (the state is in the status below the picker, which follows it)."""
    if not (dataset_id or "").strip():
        return []
    return [(f"audit {a['id']} · {fmt.format_time(a['created_at'])} · {a['spec']['folds']} folds, "
             f"{a['spec']['preset']}, {fmt.model_name(a['spec']['model'])}", a["id"])
            for a in audits.list_audits(wb, dataset_id.strip())]


def status_html(record: Optional[dict[str, Any]]) -> str:
    """The audit's progress bar and one line per fold."""
    if record is None:
        return "<p class='wb-muted'>Pick a dataset (click its row above), then start an audit.</p>"
    status = {audits.FINISHED: "succeeded", audits.STOPPED: "failed"}.get(record["state"], "running")
    folds = " · ".join(f"fold {f['fold'] + 1}: {html.escape(f['status'])} (run {f['run_id']})"
                       for f in record["folds"])
    extra = ""
    summary = record.get("summary") or {}
    if record["state"] == audits.FINISHED and summary.get("held_out_accuracy") is not None:
        what = "word accuracy" if record["task"] == "token-classification" else "accuracy"
        found = summary.get("baselines") or {}
        against = " · ".join(f"{baselines.NAMES.get(k, k)} {v:.3f}" for k, v in found.items())
        if summary.get("beats_baseline") is False:
            verdict = (" — <b>no better than a baseline on the same folds: the suggestions below are guesses, "
                       "not evidence.</b> Try more folds, the standard preset, the SetFit method or more data.")
        elif summary["held_out_accuracy"] < audits.WEAK_HELD_OUT_ACCURACY:
            verdict = " — low: their suggestions are guesses; try a stronger preset or model."
        else:
            verdict = ""
        extra = (f"<p id='audit-held-out'>The fold models' held-out {what}: <b>{summary['held_out_accuracy']:.3f}</b>"
                 + (f" (baselines on the same folds: {html.escape(against)})" if against else "") + verdict + "</p>")
    if record["state"] == audits.RUNNING and "time_left_seconds" in record:
        left = record["time_left_seconds"]
        extra = ("<p class='wb-muted' id='audit-time-left'>"
                 + (f"All folds done in {fmt.rough_duration(left)} (the queue played forward on the live workers)"
                    if left is not None else "Time left unknown: a fold or a run ahead of it has no estimate")
                 + "</p>" + extra)
    return (f"<div id='audit-state' data-state='{record['state']}'>"
            f"<p><b>Audit {record['id']}</b> of {html.escape(str(record.get('dataset') or record['dataset_id']))}: "
            f"{html.escape(record['message'])}</p>"
            f"{fmt.progress_html(record['progress'], status)}<p class='wb-muted'>{folds}</p>{extra}</div>")


@dataclasses.dataclass
class Filters:
    given: str = ANY
    suggested: str = ANY
    min_confidence: float = 0.0
    decision: str = "all"

    def keep(self, row: dict[str, Any], task: str) -> bool:
        if row["confidence"] < (self.min_confidence or 0.0):
            return False
        if self.decision == "undecided" and row.get("decision"):
            return False
        if self.decision not in ("all", "undecided") and row.get("decision") != self.decision:
            return False
        if task == "token-classification":
            given = {w["given"] for w in row["words"]}
            suggested = {w["suggested"] for w in row["words"]}
        else:
            given, suggested = {row["given"]}, {row["suggested"]}
        return (self.given in (ANY, None, "") or self.given in given) and (
            self.suggested in (ANY, None, "") or self.suggested in suggested)


def filtered(rows: list[dict[str, Any]], filters: Filters, task: str) -> list[dict[str, Any]]:
    return [row for row in rows if filters.keep(row, task)]


def _decision_text(row: dict[str, Any]) -> str:
    if row.get("decision") == audits.RELABEL:
        return f"relabel → {row.get('new_label') or row['suggested']}"
    return row.get("decision") or ""


def _text(row: dict[str, Any]) -> str:
    if "tokens" in row:
        flagged = {w["word"] for w in row["words"]}
        text = " ".join(f"[{t}]" if i in flagged else t for i, t in enumerate(row["tokens"]))
    else:
        text = row["text"] + (f" ‖ {row['text_pair']}" if row.get("text_pair") else "")
    return fmt.short_value(" ".join(text.split()), TEXT_CHARS)


def issue_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The table of (filtered) issues; at most ``MAX_ROWS`` rows."""
    data = [[row["rank"], row["example"], _text(row), row["given"], row["suggested"], f"{row['confidence']:.3f}",
             row["fold"] + 1, _decision_text(row)] for row in rows[:MAX_ROWS]]
    return pd.DataFrame(data, columns=ISSUE_HEADERS)


def table_caption(shown: int, total: int) -> str:
    if not total:
        return "No suspicious labels: every example agrees with what the fold models predict confidently."
    more = f" (the first {MAX_ROWS} are listed; filter to reach the rest)" if shown > MAX_ROWS else ""
    return (f"{shown} of {total} suspicious examples shown{more}. Click a row to decide it; the buttons below "
            "the table decide every row shown at once. `[word]` marks a suspicious tag.")


def label_names(record: Optional[dict[str, Any]]) -> list[str]:
    return list(((record or {}).get("summary") or {}).get("labels") or [])


def view(wb, audit_id: Optional[int], filters: Filters) -> tuple[str, pd.DataFrame, str, list[str]]:
    """(status, table, caption, labels) of one audit as the filters show it."""
    if audit_id is None:
        return status_html(None), issue_table([]), "", []
    audit_id = audit_number(audit_id)
    record = audits.get_audit(wb, audit_id)
    if record["state"] != audits.FINISHED:
        return status_html(record), issue_table([]), "The ranking appears when every fold has finished.", []
    rows = audits.audit_issues(wb, audit_id)
    shown = filtered(rows, filters, record["task"])
    return status_html(record), issue_table(shown), table_caption(len(shown), len(rows)), label_names(record)


def audit_number(value: Any) -> int:
    """The audit id a browser sent (a picker value): a positive whole number, or a message."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(value).strip() not in (str(number), f"{number}.0"):
        raise gr.Error("Pick an audit first.")
    return number


def decide(wb, audit_id: Optional[int], examples: list[str], action: Optional[str], label: Optional[str] = None
           ) -> str:
    """Mark ``examples``; returns the message for the user."""
    audit_id = audit_number(audit_id)
    if not examples:
        raise gr.Error("Click a row of the table first (or filter the rows the bulk buttons apply to).")
    try:
        count = audits.set_decisions(wb, audit_id, [str(e) for e in examples], action, label or None)
    except WorkbenchError as exc:
        raise gr.Error(str(exc))
    what = {None: "undecided", audits.RELABEL: f"relabel{f' → {label}' if label else ' as suggested'}"}.get(
        action, action)
    return f"{count} example{'s' if count != 1 else ''} marked {what}."


def dataset_values(wb, dataset_id: str | None) -> tuple:
    """(audit picker, panel) for the picked dataset: its audits with the latest chosen, and the panel opened
    on it when there is one, so a dataset picked again (a row click, or a reload that restores it) shows its
    latest audit at once. Without an audit the panel is left as it is."""
    choices = audit_choices(wb, dataset_id)
    if not choices:
        return gr.update(choices=[], value=None), gr.skip()
    return gr.update(choices=choices, value=choices[0][1]), gr.update(open=True)


def start_estimate(wb, dataset_id: str | None, folds: Any, model: str | None, preset: str | None) -> str:
    """Before an audit starts: how long all its folds would take, as markdown ("" without a dataset or an
    estimate)."""
    if not (dataset_id or "").strip():
        return ""
    try:
        est = audits.estimate_audit(wb, dataset_id.strip(), folds=int(float(folds)), model=model or DEFAULT_MODEL,
                                    preset=preset or "quick")
    except (WorkbenchError, TypeError, ValueError):
        return ""
    if est is None:
        return ""
    fold, k = est["fold"], est["folds"]
    side = (f"{est['workers']} at a time on the live workers: done in {fmt.rough_duration(est['wall_seconds'])}"
            if est["workers"] > 1 else "one after another on one worker")
    return (f"About **{fmt.rough_duration(est['seconds'])}** for all {k} folds ({fmt.format_duration(est['low'])} – "
            f"{fmt.format_duration(est['high'])}): {k} fold runs of {fmt.estimate_range(fold)} each, training on "
            f"{k - 1}/{k} of the examples; {side}. {fmt.sentence_case(fold.get('sureness', fold['basis']))}.")


@dataclasses.dataclass
class AuditPanel:
    corrected_id: gr.Textbox  # the dataset the last save wrote (the app opens the Train tab on it)
    train_corrected: gr.Button
    save_event: Any  # a new dataset exists afterwards: other pickers follow it
    follow_dataset: "_Refresh"  # the picked dataset's audits into the picker, the latest chosen (page load)
    relabel_event: Any  # suspects sent to a labelling project (the app opens the Label tab on it)
    relabel_project: gr.Number  # the project they were sent to


@dataclasses.dataclass
class _Start:
    """How to audit: folds, model, preset, and the start button."""

    folds: gr.Slider
    model: gr.Dropdown
    preset: gr.Radio
    button: gr.Button
    estimate: gr.Markdown


def _build_start() -> _Start:
    from workbench.services import catalogue

    models = [info.name for info in catalogue.list_models()]
    with gr.Row():
        folds = gr.Slider(2, 10, value=5, step=1, label="Folds (one training run each)", elem_id="audit-folds")
        model = gr.Dropdown(models, value=DEFAULT_MODEL, allow_custom_value=True, label="Model",
                            elem_id="audit-model")
        preset = gr.Radio(list(audits.PRESETS), value="quick", label="Preset of every fold run")
    estimate = gr.Markdown(elem_id="audit-estimate", elem_classes=["wb-muted"])
    start = gr.Button("Find suspicious labels", variant="primary", elem_id="audit-start")
    return _Start(folds, model, preset, start, estimate)


@dataclasses.dataclass
class _Review:
    """The picked audit, its status, the filters and the table of suspects they leave."""

    pick: gr.Dropdown
    cancel: gr.Button
    retry: gr.Button
    status: gr.HTML
    given: gr.Dropdown
    suggested: gr.Dropdown
    min_confidence: gr.Slider
    decision: gr.Radio
    caption: gr.Markdown
    table: gr.Dataframe

    @property
    def filters(self) -> list:
        return [self.given, self.suggested, self.min_confidence, self.decision]


def _build_review() -> _Review:
    with gr.Row():
        pick = gr.Dropdown([], label="Audit of this dataset", elem_id="audit-pick", scale=3)
        cancel = gr.Button("Cancel audit", size="sm", scale=1)
        retry = gr.Button("Retry stopped folds", size="sm", scale=1)
    status = gr.HTML(status_html(None), elem_id="audit-status")
    with gr.Row():
        given = gr.Dropdown([ANY], value=ANY, label="Given label", elem_id="audit-given")
        suggested = gr.Dropdown([ANY], value=ANY, label="Suggested label", elem_id="audit-suggested")
        min_confidence = gr.Slider(0.0, 1.0, value=0.0, step=0.05, label="Confidence at least")
        decision = gr.Radio(list(DECISION_FILTERS), value="all", label="Decision")
    caption = gr.Markdown(elem_id="audit-caption")
    table = gr.Dataframe(headers=ISSUE_HEADERS, interactive=False, wrap=True, max_height=420,
                         elem_id="audit-issues",
                         column_widths=["6%", "11%", "39%", "11%", "11%", "8%", "5%", "9%"])
    return _Review(pick, cancel, retry, status, given, suggested, min_confidence, decision, caption, table)


@dataclasses.dataclass
class _Decisions:
    """Decide the clicked row, or every row shown at once."""

    example: gr.Textbox
    new_label: gr.Dropdown
    keep: gr.Button
    relabel: gr.Button
    drop: gr.Button
    undecide: gr.Button
    all_relabel: gr.Button
    all_drop: gr.Button
    all_keep: gr.Button
    decided: gr.Markdown


def _build_decisions() -> _Decisions:
    with gr.Row():
        example = gr.Textbox(label="Example", interactive=False, elem_id="audit-example", scale=1)
        new_label = gr.Dropdown([], label="Relabel as (empty: the suggestion)", allow_custom_value=False,
                                elem_id="audit-new-label", scale=1)
        keep = gr.Button("Keep", size="sm", elem_id="audit-keep")
        relabel = gr.Button("Relabel", size="sm", elem_id="audit-relabel")
        drop = gr.Button("Drop", size="sm", elem_id="audit-drop")
        undecide = gr.Button("Undecide", size="sm")
    with gr.Row():
        all_relabel = gr.Button("Relabel all shown as suggested", size="sm", elem_id="audit-all-relabel")
        all_drop = gr.Button("Drop all shown", size="sm", elem_id="audit-all-drop")
        all_keep = gr.Button("Keep all shown", size="sm")
    decided = gr.Markdown(elem_id="audit-decided")
    return _Decisions(example, new_label, keep, relabel, drop, undecide, all_relabel, all_drop, all_keep, decided)


@dataclasses.dataclass
class _Save:
    """Save the corrected copy, then train on it."""

    name: gr.Textbox
    button: gr.Button
    saved: gr.Markdown
    corrected_id: gr.Textbox
    train_corrected: gr.Button


def _build_save() -> _Save:
    with gr.Row():
        save_name = gr.Textbox(label="Name of the corrected dataset", placeholder="default: '<name> (corrected "
                               "by audit N)'", scale=3)
        save = gr.Button("Save as a new dataset", variant="primary", elem_id="audit-save", scale=1)
    saved = gr.Markdown(elem_id="audit-saved")
    with gr.Row():
        corrected_id = gr.Textbox(visible=False)
        train_corrected = gr.Button("Train on the corrected dataset", visible=False, variant="primary",
                                    elem_id="audit-train-corrected")
    return _Save(save_name, save, saved, corrected_id, train_corrected)


NEW_PROJECT = 0  # the "send to relabel" target that makes a new project of the audit's examples


def relabel_targets(wb) -> list[tuple[str, int]]:
    """Where "send to relabel" can put the suspects: a new project, or an existing one (matched by text)."""
    from workbench.services import labelling

    return [("a new labelling project", NEW_PROJECT)] + [
        (f"project {p['id']} · {p['name']}", p["id"]) for p in labelling.list_projects(wb) if not p["multi_label"]]


def send_to_relabel(wb, audit_id: Any, target: Any, user: str) -> tuple[str, int]:
    """Send the audit's suspects not marked keep or drop to a labelling project to be labelled again; returns
    (the message, the project id)."""
    from workbench.services import labelling

    audit_id = audit_number(audit_id)
    try:
        project_id = int(float(target or NEW_PROJECT))
    except (TypeError, ValueError):
        project_id = NEW_PROJECT
    result = labelling.send_to_relabel(wb, audit_id, project_id=project_id or None, user=user,
                                       owner_id=access.owner_id())
    if not project_id:
        access.record(wb, "create", "label_project", result.get("project_id"))
    missing = result.get("not_found") or []
    absent = (f" {len(missing)} were not found in that project (no item with the same text): "
              f"{', '.join(map(str, missing[:5]))}{' …' if len(missing) > 5 else ''}." if missing else "")
    return (f"✔ {result['sent']} suspicious examples sent to labelling project **{result['project_id']}** to be "
            f"labelled again: they come first in its queue (the Label tab).{absent}", result["project_id"])


@dataclasses.dataclass
class _Relabel:
    """Send the suspects to a labelling project."""

    target: gr.Dropdown
    button: gr.Button
    sent: gr.Markdown
    project: gr.Number


def _build_relabel() -> _Relabel:
    with gr.Row():
        target = gr.Dropdown([("a new labelling project", NEW_PROJECT)], value=NEW_PROJECT,
                             label="… or have a person label the suspects not marked keep or drop again, in",
                             elem_id="audit-relabel-target", scale=3)
        button = gr.Button("Send to relabel", elem_id="audit-send-relabel", scale=1)
    sent = gr.Markdown(elem_id="audit-relabel-sent")
    project = gr.Number(visible=False)
    return _Relabel(target, button, sent, project)


def _wire_relabel(wb, pick: gr.Dropdown, relabel: _Relabel) -> Any:
    """Send to relabel; returns the event (the project exists and holds the suspects afterwards)."""
    def on_send_relabel(audit_id, target, request: gr.Request):
        from workbench.ui.label_tab import user_of

        return send_to_relabel(wb, audit_id, target, user_of(request))

    relabel.target.focus(lambda: gr.update(choices=relabel_targets(wb)), None, [relabel.target],
                         show_progress="hidden")
    return relabel.button.click(on_send_relabel, [pick, relabel.target], [relabel.sent, relabel.project])


class _Refresh(NamedTuple):
    """``show`` with its inputs and outputs: what every event that changes the audit's view ends with."""

    fn: Callable
    inputs: list
    outputs: list


def build(wb, selected_dataset: gr.Textbox, datasets_table: gr.Dataframe) -> AuditPanel:
    with gr.Accordion("Find suspicious labels", open=False, elem_id="audit-panel") as panel:
        gr.Markdown(INTRO, elem_classes="wb-muted")
        start = _build_start()
        review = _build_review()
        decisions = _build_decisions()
        saving = _build_save()
        relabel = _build_relabel()
        timer = gr.Timer(POLL_SECONDS, active=False)

    refresh = _Refresh(_shower(wb), [review.pick, *review.filters],
                       [review.status, review.table, review.caption, review.given, review.suggested,
                        decisions.new_label, timer])
    follow_dataset = _wire_review(wb, selected_dataset, panel, start, review, refresh)
    _wire_progress(wb, review, timer, refresh)
    _wire_decisions(wb, review, decisions, refresh)
    save_event = _wire_save(wb, review.pick, saving, datasets_table)
    relabel_event = _wire_relabel(wb, review.pick, relabel)
    return AuditPanel(corrected_id=saving.corrected_id, train_corrected=saving.train_corrected,
                      save_event=save_event, follow_dataset=follow_dataset, relabel_event=relabel_event,
                      relabel_project=relabel.project)


def _filters_of(g, s, c, d) -> Filters:
    """The filters as the browser sent them; anything unreadable is the filter's default."""
    try:
        confidence = float(c or 0.0)
    except (TypeError, ValueError):
        confidence = 0.0
    return Filters(given=str(g or ANY), suggested=str(s or ANY), min_confidence=confidence,
                   decision=d if d in DECISION_FILTERS else "all")


def _shower(wb) -> Callable:
    """The handler that shows an audit as the filters ask (its name makes the API's ``/show``)."""
    def show(audit_id, g, s, c, d):
        try:
            status_, frame, caption_, labels = view(wb, audit_id, _filters_of(g, s, c, d))
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        running = audit_id is not None and "data-state='running'" in status_
        options = [ANY] + labels
        return (status_, frame, caption_, gr.update(choices=options), gr.update(choices=options),
                gr.update(choices=[""] + labels), gr.Timer(active=running))
    return show


def _wire_review(wb, selected_dataset: gr.Textbox, panel: gr.Accordion, start: _Start, review: _Review,
                 refresh: _Refresh) -> _Refresh:
    """A picked dataset offers its audits and opens on the latest; picking one, or a filter, shows it; start
    queues a new audit. Returns the handler that follows the picked dataset, for the page load."""
    def on_dataset(dataset_id):
        return dataset_values(wb, dataset_id)

    follow_dataset = _Refresh(on_dataset, [selected_dataset], [review.pick, panel])
    selected_dataset.change(*follow_dataset)
    review.pick.change(*refresh)
    # .input, not .change: ``show`` refreshes the filters' choices, which must not set off another show.
    for control in review.filters:
        control.input(*refresh, show_progress="hidden")

    def on_start(dataset_id, folds_, model_, preset_):
        if not (dataset_id or "").strip():
            raise gr.Error("Pick a dataset first (click its row in the table above).")
        try:
            folds_ = int(float(folds_))
        except (TypeError, ValueError):
            raise gr.Error("The number of folds must be a whole number from 2 to 20.")
        try:
            audit_id = audits.create_audit(wb, dataset_id.strip(), folds=folds_, model=model_ or DEFAULT_MODEL,
                                           preset=preset_, owner_id=access.owner_id())
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        access.record(wb, "create", "audit", audit_id)
        gr.Info(f"Audit {audit_id}: {folds_} fold runs queued.")
        return gr.update(choices=audit_choices(wb, dataset_id), value=audit_id)

    start.button.click(on_start, [selected_dataset, start.folds, start.model, start.preset], [review.pick])

    def on_settings(dataset_id, folds_, model_, preset_):
        return start_estimate(wb, dataset_id, folds_, model_, preset_)

    settings = [selected_dataset, start.folds, start.model, start.preset]
    gr.on([control.change for control in settings], on_settings, settings, [start.estimate],
          show_progress="hidden", trigger_mode="always_last")
    return follow_dataset


def _wire_progress(wb, review: _Review, timer: gr.Timer, refresh: _Refresh) -> None:
    """While folds run the timer shows the audit again; cancel and retry act on its folds."""
    def on_tick(audit_id, g, s, c, d):
        if audit_id is None:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        return refresh.fn(audit_id, g, s, c, d)

    timer.tick(on_tick, refresh.inputs, refresh.outputs, show_progress="hidden")

    def folds_action(service_call, done: str):
        def handler(audit_id):
            audit_id = audit_number(audit_id)
            try:
                service_call(wb, audit_id)
            except WorkbenchError as exc:
                raise gr.Error(str(exc))
            if service_call is audits.cancel_audit:
                access.record(wb, "cancel", "audit", audit_id)
            gr.Info(f"Audit {audit_id}: {done}")
        return handler

    on_cancel = folds_action(audits.cancel_audit, "the folds still queued or running are cancelled.")
    on_retry = folds_action(audits.retry_audit, "the stopped folds are queued again.")

    for button, fn in ((review.cancel, on_cancel), (review.retry, on_retry)):
        button.click(fn, [review.pick], None).then(*refresh)


def _wire_decisions(wb, review: _Review, decisions: _Decisions, refresh: _Refresh) -> None:
    """A row click picks its example; the buttons decide it, or every row the filters leave."""
    def on_row(evt: gr.SelectData, frame):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        return str(frame.iloc[row, 1]) if len(frame) else ""

    review.table.select(on_row, [review.table], [decisions.example])

    def one(action):
        def handler(audit_id, key, label):
            return decide(wb, audit_id, [key] if key else [], action, label if action == audits.RELABEL else None)
        return handler

    def every_shown(action):
        def handler(audit_id, g, s, c, d):
            audit_id = audit_number(audit_id)
            try:
                rows = filtered(audits.audit_issues(wb, audit_id), _filters_of(g, s, c, d),
                                audits.get_audit(wb, audit_id)["task"])
            except WorkbenchError as exc:
                raise gr.Error(str(exc))
            return decide(wb, audit_id, [r["example"] for r in rows], action)
        return handler

    for button, action in ((decisions.keep, audits.KEEP), (decisions.relabel, audits.RELABEL),
                           (decisions.drop, audits.DROP), (decisions.undecide, None)):
        button.click(one(action), [review.pick, decisions.example, decisions.new_label], [decisions.decided]).then(
            *refresh, show_progress="hidden")
    for button, action in ((decisions.all_relabel, audits.RELABEL), (decisions.all_drop, audits.DROP),
                           (decisions.all_keep, audits.KEEP)):
        button.click(every_shown(action), refresh.inputs, [decisions.decided]).then(*refresh, show_progress="hidden")


def _wire_save(wb, pick: gr.Dropdown, saving: _Save, datasets_table: gr.Dataframe) -> Any:
    """Save the corrected copy; returns the event (a new dataset exists afterwards)."""
    def on_save(audit_id, name):
        from workbench.ui import data_tab

        audit_id = audit_number(audit_id)
        try:
            result = audits.save_corrected(wb, audit_id, str(name or ""), owner_id=access.owner_id())
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        if not result.get("reused"):
            access.record(wb, "create", "dataset", result["id"])
        counts = result["counts"]
        reused = " (an identical copy was saved before: it is reused)" if result.get("reused") else ""
        message = (f"✔ Saved as dataset **{result['id']}** “{result['name']}”{reused}: {counts['relabel']} "
                   f"relabelled, {counts['drop']} dropped, {result['train']} train / {result['validation']} "
                   "validation examples. The original dataset is unchanged.")
        return message, result["id"], gr.update(visible=True), data_tab.dataset_rows(wb)

    return saving.button.click(on_save, [pick, saving.name], [saving.saved, saving.corrected_id,
                                                              saving.train_corrected, datasets_table])
