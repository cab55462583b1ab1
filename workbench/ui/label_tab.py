"""Label tab: label a pool of texts one at a time, with the keyboard, while a model in the background picks what
to ask next and suggests the answer; then hand the labels over (a training run, an export, a prediction job).

Layout and wiring only; the work is in ``workbench.services.labelling``. The functions above ``build`` turn
service results into what the components show and are called directly by the tests. Nothing is kept in this
process but the item on screen (its id and suggestion, per browser session): labels, claims and progress are
in the database, so a refresh shows the same text again (the service hands back the user's live claim).

Speed: a label's event answers with the next item only (the service's ``give_label`` returns it); the
progress, the learning curve and the job states are read by a separate timer, so the next text never waits
for them.
"""
from __future__ import annotations

import dataclasses
import html
import secrets
import tempfile
from pathlib import Path
from typing import Any, Optional

import gradio as gr

from workbench.errors import InvalidState, NotFound
from workbench.services import labelling
from workbench.services import runs as runs_service
from workbench.ui import access
from workbench.ui import format as fmt
from workbench.ui import plots
from workbench.ui.polling import POLL_SECONDS, content_key, timer_update

MAX_KEYS = 9  # labels 1–9 have a key and a button; a larger label set adds a picker for the rest
# While only labels move (no job queued or running) the progress is read this often: each reading is redrawn in
# the browser the labeller types in, and a person does not need it every 2 seconds.
LABELLING_POLL_SECONDS = 5.0
EXPORT_FORMATS = ("csv", "jsonl")
INTRO = ("Label one text at a time. Keys: **1–9** a label (multi-label: toggle it), **Enter** accept the suggestion "
         "(multi-label: save the ticked labels), **S** skip, **Z** undo. After every few labels a fast model on "
         "the default model's frozen embeddings is refitted in the background: it picks the texts it is least sure "
         "of (from different clusters) and suggests an answer. A share of the texts (10 % by default) is picked at "
         "random and marked: they give the unbiased estimate of the curve below.")

# Keys -> buttons, in the browser. Installed once per page (app.py runs it on load). Typing in a text box, a
# number, a dropdown's search or the label list is never taken for a key; a tick box keeps its own Space.
KEYS_JS = """() => {
  if (window.wbLabelKeys) return;
  window.wbLabelKeys = true;
  const typing = (t) => t && (t.isContentEditable || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' ||
    (t.tagName === 'INPUT' && !['checkbox', 'radio', 'button', 'submit', 'range'].includes(t.type)));
  document.addEventListener('keydown', (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || typing(e.target)) return;
    const view = document.getElementById('label-text');
    if (!view || !view.offsetParent) return;  // the Label tab is not the one shown
    let id = null;
    if (/^[1-9]$/.test(e.key)) id = 'label-key-' + e.key;
    else if (e.key === 'Enter') id = 'label-accept';
    else if (e.key === 's' || e.key === 'S') id = 'label-skip';
    else if (e.key === 'z' || e.key === 'Z') id = 'label-undo';
    const button = id && document.getElementById(id);
    if (!button || !button.offsetParent || button.disabled) return;
    e.preventDefault();
    window.wbLabelPressed = performance.now();  // read by bench/labelling_browser.py
    button.click();
  });
}"""


def user_of(request: Optional[gr.Request]) -> str:
    """The signed-in user's name, "" when the workbench runs without a login."""
    actor = access.acting()
    if actor is not None:
        return "" if actor.local else actor.name
    return str(getattr(request, "username", None) or "")


def project_number(value: Any) -> Optional[int]:
    """The project id a picker or a hidden field holds, or None."""
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def project_choices(wb) -> list[tuple[str, int]]:
    """The projects for the picker, newest first: what never changes (the counts are in the progress)."""
    return [(f"{p['name']} · project {p['id']} · {p['pool']:,} texts{' · multi-label' if p['multi_label'] else ''}",
             p["id"]) for p in labelling.list_projects(wb)]


def label_lines(text: str) -> list[str] | str:
    """The label set as typed: one label a line (``name: description``), or one line of names separated by
    commas (``spam, ham``)."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    if len(lines) == 1 and ":" not in lines[0] and "," in lines[0]:
        return lines[0]
    return lines


def create(wb, path: Any, labels_text: str, name: str, multi_label: bool, user: str) -> tuple[dict, str]:
    """Create a project from an uploaded file (a checked path); returns (the project, the message to show)."""
    if not path:
        raise gr.Error("Choose a file of texts first (CSV, TSV, JSONL or plain text, one text a line).")
    if not str(labels_text or "").strip():
        raise gr.Error("Give the labels, one a line (optionally `name: description`), e.g. `spam` and `ham`.")
    project = labelling.create_project(wb, Path(path), label_lines(labels_text), name=(name or "").strip() or None,
                                       multi_label=bool(multi_label), user=user, owner_id=access.owner_id())
    access.record(wb, "create", "label_project", project["id"])
    labelled = f", {project['labelled']:,} already labelled" if project["labelled"] else ""
    warnings = "".join(f"\n- {html.escape(str(w))}" for w in project.get("warnings") or [])
    message = (f"✔ Project **{project['id']}** “{html.escape(project['name'])}”: {project['pool']:,} texts"
               f"{labelled}. The pool is being embedded in the background; the first texts are chosen to cover "
               f"it once that is done (until then they come in file order).{warnings}")
    return project, message


# --------------------------------------------------------------------------------------------- the item view


def view_of(project: dict) -> dict:
    """What the page keeps of a project while labelling: its id, label names and whether it is multi-label."""
    return {"id": project["id"], "names": [c["name"] for c in project["labels"]],
            "multi": bool(project["multi_label"])}


def _suggested(item: Optional[dict]) -> list[str]:
    value = (item or {}).get("suggestion")
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def item_html(item: Optional[dict], view: Optional[dict], notice: str = "") -> str:
    """The text to label, large, with the suggestion and its calibrated confidence, and ``notice`` above it (why
    the last key did not do what it says: a label's event skips Gradio's queue, which carries its pop-ups);
    ``data-item`` names the item (the keyboard test and the benchmark wait on it)."""
    if view is None:
        return ("<div id='label-item' data-item=''><p class='wb-muted'>Pick a project above, or create one from a "
                "file of texts.</p></div>")
    if item is None:
        return ("<div id='label-item' data-item='done'><p class='wb-label-text'>Nothing left to label in this "
                "project.</p><p class='wb-muted'>Train a model from these labels below, or export them.</p></div>")
    tags = []
    if item.get("relabel"):
        current = item.get("label")
        shown = ", ".join(current) if isinstance(current, list) else (current or "none")
        tags.append(f"<span class='wb-tag wb-tag-relabel'>sent back to relabel · was {html.escape(str(shown))}"
                    "</span>")
    if item.get("random_pick"):
        tags.append("<span class='wb-tag' title='Picked at random, not by the model: these items give the "
                    "unbiased estimate of the curve.'>random pick</span>")
    suggested = _suggested(item)
    confidence = item.get("confidence")
    if suggested or (view["multi"] and item.get("suggestion") is not None):
        sure = f" · confidence {confidence:.0%}" if isinstance(confidence, (int, float)) else ""
        what = ", ".join(suggested) if suggested else "none of the labels"
        suggestion = (f"<p class='wb-suggestion' id='label-suggestion'>Suggested: <b>{html.escape(what)}</b>{sure}"
                      " <span class='wb-muted'>(Enter accepts)</span></p>")
    else:
        suggestion = ("<p class='wb-muted' id='label-suggestion'>No suggestion yet: the model is fitted after the "
                      "first few labels.</p>")
    external = html.escape(str(item.get("external_id") or ""))
    names = view["names"][:MAX_KEYS]
    keys = " ".join(str(names.index(name) + 1) for name in suggested if name in names)
    notice = f"<p class='wb-error' id='label-notice'>{html.escape(notice)}</p>" if notice else ""
    return (f"<div id='label-item' data-item='{int(item['item_id'])}' data-suggested='{keys}'>{notice}"
            f"<div class='wb-muted'>text {external} {' '.join(tags)}</div>"
            f"<div class='wb-label-text'>{html.escape(str(item['text']))}</div>{suggestion}</div>")


def key_updates(view: Optional[dict]) -> list:
    """The nine key buttons of a project: each label's name with its key; the rest hidden. (The suggested one is
    highlighted by the page's style, from the item's ``data-suggested``: a label's answer redraws no button.)"""
    names = (view or {}).get("names") or []
    return [gr.update(value=f"{i + 1} · {names[i]}", visible=True) if i < len(names) else gr.update(visible=False)
            for i in range(MAX_KEYS)]


def highlight_css() -> str:
    """The style that highlights the key of each suggested label: ``#label-item[data-suggested~="N"]`` lights
    ``#label-key-N`` (CSS ``:has``), so the highlight comes with the text in one answer; at once (the buttons'
    colour transition would show the new text beside the old highlight for a moment)."""
    return "\n".join(
        f'body:has(#label-item[data-suggested~="{i}"]) #label-key-{i} {{ background: '
        "var(--button-primary-background-fill); color: var(--button-primary-text-color); "
        "border-color: var(--button-primary-border-color); transition: none; }" for i in range(1, MAX_KEYS + 1))


def ticked(view: Optional[dict], item: Optional[dict]) -> Any:
    """The multi-label tick boxes: the project's labels, the suggestion (or the current label when the item is
    sent back to relabel) ticked."""
    if not (view or {}).get("multi"):
        return gr.update(visible=False, choices=[], value=[])
    start = item.get("label") if item and item.get("relabel") else (item or {}).get("suggestion")
    chosen = [str(v) for v in start] if isinstance(start, (list, tuple)) else []
    return gr.update(visible=True, choices=list(view["names"]), value=chosen)


def item_values(view: Optional[dict], item: Optional[dict], full: bool = True, notice: str = "") -> tuple:
    """What every event that shows an item returns: the text, the item kept for the next key, the tick boxes
    and the "other label" picker. With ``full`` off (the next item after a key) the pickers a single-label
    project without more than nine labels never shows are skipped: a label's answer stays small."""
    held = None if item is None else {"item_id": item["item_id"], "suggestion": item.get("suggestion")}
    names = (view or {}).get("names") or []
    many = len(names) > MAX_KEYS and not (view or {}).get("multi")
    rest = gr.update(visible=many, choices=names[MAX_KEYS:], value=None) if full or many else gr.skip()
    ticks = ticked(view, item) if full or (view or {}).get("multi") else gr.skip()
    return item_html(item, view, notice), held, ticks, rest


def new_claimant() -> str:
    """A name for one browser's claims when nobody signs in (kept in the browser's storage)."""
    return f"browser-{secrets.token_hex(6)}"


def open_project(wb, project_id: Any, user: str, claimant: Optional[str] = None) -> tuple:
    """Pick a project: its view and the user's next item (their live claim again after a refresh). ``claimant``
    holds the claims instead of ``user`` (with sign-in off, one name per browser: two browsers never get
    the same text, and a refresh gets its own back); the view keeps it for the keys."""
    pid = project_number(project_id)
    if pid is None:
        return (None, *item_values(None, None), *key_updates(None))
    view = {**view_of(labelling.get_project(wb, pid)), "claimant": claimant or None}
    if not access.may_create():  # a viewer looks at the project: no item is claimed in their name
        shown = ("<div id='label-item' data-item=''><p class='wb-muted'>You can look at this project; labelling "
                 "it needs an editor's role.</p></div>")
        return (view, shown, *item_values(view, None)[1:], *key_updates(view))
    item = labelling.next_item(wb, pid, user, claimant=view["claimant"])
    return (view, *item_values(view, item), *key_updates(view))


def _next_after(wb, view: dict, held: Optional[dict], user: str, act) -> tuple:
    """Run ``act`` (a label, skip or undo) and show the item it returns; an item that another labeller took
    meanwhile (its lease ran out) is reported, and the next free one shown instead."""
    try:
        result = act()
    except (InvalidState, NotFound) as exc:
        return item_values(view, labelling.next_item(wb, view["id"], user, claimant=view.get("claimant")),
                           full=False, notice=fmt.ui_message(exc))
    return item_values(view, result["next"], full=False)


def give(wb, view: Optional[dict], held: Optional[dict], label: Any, user: str) -> tuple:
    """Give ``label`` to the item on screen and show the next one."""
    if not view or not held:
        raise gr.Error("Pick a project with texts left to label first.")
    return _next_after(wb, view, held, user,
                       lambda: labelling.give_label(wb, view["id"], held["item_id"], label, user,
                                                    claimant=view.get("claimant")))


def press_key(wb, view: Optional[dict], held: Optional[dict], index: int, chosen: Any, user: str) -> tuple:
    """Key ``index + 1``: single-label, give that label; multi-label, tick or untick it (nothing is saved until
    Enter)."""
    names = (view or {}).get("names") or []
    if index >= len(names):
        return gr.skip(), gr.skip(), gr.skip(), gr.skip()
    if view["multi"]:
        chosen = list(chosen or [])
        name = names[index]
        chosen = [c for c in chosen if c != name] if name in chosen else chosen + [name]
        return gr.skip(), gr.skip(), gr.update(value=chosen), gr.skip()
    return give(wb, view, held, names[index], user)


def accept(wb, view: Optional[dict], held: Optional[dict], chosen: Any, user: str) -> tuple:
    """Enter: single-label, give the suggestion; multi-label, give the ticked labels (none ticked = none apply)."""
    if not view or not held:
        raise gr.Error("Pick a project with texts left to label first.")
    if view["multi"]:
        return give(wb, view, held, sorted(chosen or []), user)
    if held.get("suggestion") is None:  # the same text stays (the user's live claim), with why
        return item_values(view, labelling.next_item(wb, view["id"], user, claimant=view.get("claimant")),
                           full=False, notice="No suggestion for this text yet: press its label's key (1–9).")
    return give(wb, view, held, held["suggestion"], user)


def skip(wb, view: Optional[dict], held: Optional[dict], user: str) -> tuple:
    """S: put the item at the back of the queue and show the next one."""
    if not view or not held:
        raise gr.Error("Pick a project with texts left to label first.")
    return _next_after(wb, view, held, user, lambda: labelling.skip_item(wb, view["id"], held["item_id"], user,
                                                                         claimant=view.get("claimant")))


def undo(wb, view: Optional[dict], user: str) -> tuple:
    """Z: take back the user's last label or skip; its item comes back on screen."""
    if not view:
        raise gr.Error("Pick a project first.")
    try:
        result = labelling.undo_last(wb, view["id"], user, claimant=view.get("claimant"))
    except InvalidState as exc:  # nothing to undo: the text on screen stays, with why
        return item_values(view, labelling.next_item(wb, view["id"], user, claimant=view.get("claimant")),
                           full=False, notice=fmt.ui_message(exc))
    return item_values(view, result["next"])


# --------------------------------------------------------------------------------------------- progress


def _job_line(name: str, job: Optional[dict]) -> str:
    if not job:
        return ""
    status = job["status"]
    if status in ("queued", "running") and job.get("total"):
        return (f"{name}: {status}, {int(job.get('done') or 0):,} of {int(job['total']):,} "
                f"({float(job.get('progress') or 0):.0%})")
    if status == "failed":
        return f"{name}: failed — {html.escape(str(job.get('error') or 'see its log in the Runs tab'))[:300]}"
    return f"{name}: {status}"


def status_html(status: Optional[dict]) -> str:
    """Progress: labelled / pool, the count per class, labels per minute, the estimate, the stop hint and the
    background jobs."""
    if not status:
        return "<div id='label-status'></div>"
    pool, labelled = int(status["pool"]), int(status["labelled"])
    share = labelled / pool if pool else 0.0
    bar = (f"<div class='wb-progress'><div class='wb-progress-fill' style='width:{share * 100:.1f}%;"
           f"background:#93c5fd'></div><span>{labelled:,} / {pool:,} labelled ({share:.0%})</span></div>")
    per_class = " · ".join(f"{html.escape(str(name))} {count:,}" for name, count in status["per_class"].items())
    lines = [f"<p>{per_class} · <b>{status['labels_per_minute']:g}</b> labels a minute (last 10 minutes)</p>"]
    estimate = status.get("estimate")
    if estimate and estimate.get("estimate") is not None:
        interval = (f" ({estimate['low']:.2f} – {estimate['high']:.2f})" if estimate.get("low") is not None
                    and estimate.get("high") is not None else "")
        majority = (f"; always answering the most frequent label would score {estimate['majority']:.2f}"
                    if estimate.get("majority") is not None else "")
        lines.append(f"<p id='label-estimate'>Estimated {html.escape(str(estimate['metric']).replace('_', '-'))} "
                     f"<b>{estimate['estimate']:.2f}</b>{interval} at {estimate['labels']:,} labels, from "
                     f"{html.escape(str(estimate.get('source') or ''))}{majority}.</p>")
    if status.get("stop_hint"):
        lines.append(f"<p class='wb-stop-hint' id='label-stop-hint'>✋ {html.escape(status['stop_hint'])}</p>")
    jobs = status.get("jobs") or {}
    embedded = f"{int(status.get('embedded') or 0):,} of {pool:,} texts embedded"
    job_lines = [line for line in (_job_line("Embedding the pool", jobs.get("embed")),
                                   _job_line("Last refit", jobs.get("refit"))) if line]
    lines.append(f"<p class='wb-muted' id='label-jobs'>{embedded}{' · ' if job_lines else ''}"
                 f"{' · '.join(job_lines)}</p>")
    return f"<div id='label-status'>{bar}{''.join(lines)}</div>"


def jobs_active(status: Optional[dict]) -> bool:
    """Whether a job of the project (embedding, refit) is queued or running."""
    jobs = [j for j in ((status or {}).get("jobs") or {}).values() if j]
    return any(j["status"] in ("queued", "running") for j in jobs)


def progress_values(wb, project_id: Any, shown_key: str, interval: Any) -> tuple:
    """The progress and the learning curve (only when they changed since ``shown_key``), and the timer's next
    interval: every ``POLL_SECONDS`` while a job runs, ``LABELLING_POLL_SECONDS`` while only labels come in,
    slower and slower while nothing moves."""
    pid = project_number(project_id)
    status = labelling.project_status(wb, pid) if pid is not None else None
    if status is not None:
        status.pop("next_items", None)  # not shown here; it changes with every claim
    key = content_key(status)
    changed = key != shown_key
    shown = (status_html(status), plots.learning_curve_svg((status or {}).get("curve"),
                                                           (status or {}).get("majority")))
    return (*(shown if changed else (gr.skip(), gr.skip())), key,
            timer_update(interval, changed, *poll_pace(status)))


def poll_pace(status: Optional[dict]) -> tuple[bool, float]:
    """Whether the project moves, and the fastest interval to read it at: every ``POLL_SECONDS`` while the pool is
    embedded (a progress bar) or a job runs with nobody labelling; ``LABELLING_POLL_SECONDS`` while labels come in,
    refits or not: a refit every 10 labels kept the page polling every 2 s, for nothing a labeller needs that
    often, and each poll is server work beside the key presses."""
    jobs = (status or {}).get("jobs") or {}
    embedding = bool(jobs.get("embed")) and jobs["embed"]["status"] in ("queued", "running")
    labelling_now = bool((status or {}).get("labels_per_minute"))
    active = jobs_active(status)
    fast = embedding or (active and not labelling_now)
    return active or labelling_now, POLL_SECONDS if fast else LABELLING_POLL_SECONDS


# --------------------------------------------------------------------------------------------- hand-off


def finished_runs(wb) -> list[tuple[str, int]]:
    """Succeeded text-classification runs, newest first, for "label the rest with run …"."""
    rows = runs_service.list_runs(wb, status="succeeded", kind="train", limit=50)
    return [(f"#{r['id']} {r.get('name') or ''} · {fmt.model_name(r.get('model') or '')}".strip(), r["id"])
            for r in rows if r.get("task") == "text-classification"]


def train(wb, project_id: Any, user: str) -> tuple[str, int]:
    """Make a dataset version of the labels and queue a normal run; returns (the message, the run id)."""
    pid = project_number(project_id)
    if pid is None:
        raise gr.Error("Pick a project first.")
    run_id = labelling.train_from_labels(wb, pid, user, owner_id=access.owner_id())
    access.record(wb, "create", "run", run_id)
    return (f"✔ Run **#{run_id}** queued on a dataset of this project's labels (its validation part: the "
            "random picks, when there are enough of them). It shows in the Runs tab.", run_id)


def export(wb, project_id: Any, fmt_: str) -> str:
    """Write the labels to a new file for the browser to download; returns its path."""
    pid = project_number(project_id)
    if pid is None:
        raise gr.Error("Pick a project first.")
    from workbench.ui.uploads import upload_folder

    fmt_ = fmt_ if fmt_ in EXPORT_FORMATS else "csv"
    folder = Path(tempfile.mkdtemp(prefix="label-export-", dir=_export_root(upload_folder())))
    path = labelling.export_labels(wb, pid, folder / f"project-{pid}-labels.{fmt_}", fmt=fmt_)
    access.record(wb, "export", "label_project", pid)
    return str(path)


def _export_root(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def predict_rest(wb, project_id: Any, run_id: Any) -> str:
    """Queue a prediction job of the picked run over the texts still unlabelled."""
    pid, rid = project_number(project_id), project_number(run_id)
    if pid is None or rid is None:
        raise gr.Error("Pick a project and a finished run first.")
    job_id = labelling.predict_pool(wb, pid, rid, owner_id=access.owner_id())
    access.record(wb, "create", "run", job_id)
    return (f"✔ Prediction job **#{job_id}** queued: run #{rid} labels this project's unlabelled texts. Its "
            "output file shows in the Runs tab.")


# --------------------------------------------------------------------------------------------- layout


@dataclasses.dataclass
class LabelTab:
    project: gr.Dropdown
    run_id: gr.Number  # the run "Train from these labels" queued (the app opens the Runs tab on it)
    train_event: Any
    open_project: tuple  # (fn, inputs, outputs): the picked project shown again (page load, a project sent here)
    refresh_choices: tuple  # (fn, inputs, outputs): the picker's projects read again


@dataclasses.dataclass
class _Create:
    upload: gr.File
    labels: gr.Textbox
    name: gr.Textbox
    multi: gr.Checkbox
    button: gr.Button
    message: gr.Markdown


def _build_create() -> _Create:
    with gr.Accordion("New project", open=False, elem_id="label-new"):
        with gr.Row():
            upload = gr.File(label="Texts to label (CSV, TSV, JSONL or plain text, one a line)", type="filepath",
                             height=110, elem_id="label-file", scale=2)
            labels = gr.Textbox(label="Labels, one a line (optionally 'name: description', used for zero-shot "
                                "suggestions)", lines=4, placeholder="spam: unwanted advertising\nham: a real message",
                                elem_id="label-classes", scale=2)
        with gr.Row():
            name = gr.Textbox(label="Project name (default: the file's name)", elem_id="label-name", scale=2)
            multi = gr.Checkbox(label="Multi-label (a text may have several labels, or none)",
                                elem_id="label-multi-label", scale=1)
            button = gr.Button("Create project", variant="primary", elem_id="label-create", scale=1)
        message = gr.Markdown(elem_id="label-created")
    return _Create(upload, labels, name, multi, button, message)


@dataclasses.dataclass
class _Labelling:
    text: gr.HTML
    keys: list
    multi: gr.CheckboxGroup
    rest: gr.Dropdown
    accept: gr.Button
    skip: gr.Button
    undo: gr.Button


def _build_labelling() -> _Labelling:
    text = gr.HTML(item_html(None, None), elem_id="label-text")
    multi = gr.CheckboxGroup([], label="Labels of this text (keys 1–9 tick them, Enter saves)", visible=False,
                             elem_id="label-multi")
    with gr.Row(elem_id="label-keys"):
        keys = [gr.Button(str(i + 1), visible=False, elem_id=f"label-key-{i + 1}", min_width=90)
                for i in range(MAX_KEYS)]
    with gr.Row():
        rest = gr.Dropdown([], label="Another label (no key)", visible=False, elem_id="label-rest", scale=2)
        accept = gr.Button("Accept suggestion (Enter)", variant="primary", elem_id="label-accept", scale=1)
        skip_ = gr.Button("Skip (S)", elem_id="label-skip", scale=1)
        undo_ = gr.Button("Undo (Z)", elem_id="label-undo", scale=1)
    return _Labelling(text, keys, multi, rest, accept, skip_, undo_)


@dataclasses.dataclass
class _Handoff:
    train: gr.Button
    run_id: gr.Number
    export_format: gr.Radio
    export: gr.Button
    export_file: gr.File
    run: gr.Dropdown
    predict: gr.Button
    message: gr.Markdown


def _build_handoff() -> _Handoff:
    with gr.Accordion("Hand-off: train, export, label the rest", open=True, elem_id="label-handoff"):
        with gr.Row():
            train_ = gr.Button("Train a model from these labels", variant="primary", elem_id="label-train")
            export_format = gr.Radio(list(EXPORT_FORMATS), value="csv", label="Export format",
                                     elem_id="label-export-format")
            export_ = gr.Button("Export labels", elem_id="label-export")
        export_file = gr.File(label="Exported labels", interactive=False, visible=False, elem_id="label-export-file")
        with gr.Row():
            run = gr.Dropdown([], label="Label the rest with run …", elem_id="label-predict-run", scale=3)
            predict = gr.Button("Label the rest", elem_id="label-predict", scale=1)
        message = gr.Markdown(elem_id="label-handoff-message")
        run_id = gr.Number(visible=False, elem_id="label-run-id")
    return _Handoff(train_, run_id, export_format, export_, export_file, run, predict, message)


def build(wb) -> LabelTab:
    gr.Markdown(INTRO, elem_classes="wb-muted")
    with gr.Row():
        project = gr.Dropdown([], label="Project", elem_id="label-project", scale=4)
        reload_ = gr.Button("↻", size="sm", scale=0, min_width=40, elem_id="label-projects-reload")
    creating = _build_create()
    view = gr.State(None)
    held = gr.State(None)
    with gr.Row():
        with gr.Column(scale=3):
            labelling_ = _build_labelling()
        with gr.Column(scale=2):
            status = gr.HTML(status_html(None), elem_id="label-progress")
            curve = gr.HTML(plots.learning_curve_svg(None), elem_id="label-curve")
    handoff = _build_handoff()
    shown_key = gr.State("")
    timer = gr.Timer(POLL_SECONDS, active=True)

    item_outputs = [labelling_.text, held, labelling_.multi, labelling_.rest]
    opened = _wire_labelling(wb, project, view, held, labelling_, item_outputs)
    progress = _wire_progress(wb, project, status, curve, shown_key, timer)
    project.change(*opened).then(*progress)

    def refresh():
        return gr.update(choices=project_choices(wb)), gr.update(choices=finished_runs(wb))

    reload_.click(refresh, None, [project, handoff.run])

    def on_create(path, labels_text, name, multi, request: gr.Request):
        from workbench.ui.uploads import received_file

        created, message = create(wb, received_file(path), labels_text, name, multi, user_of(request))
        return message, gr.update(choices=project_choices(wb), value=created["id"])

    creating.button.click(on_create, [creating.upload, creating.labels, creating.name, creating.multi],
                          [creating.message, project])
    train_event = _wire_handoff(wb, project, handoff)
    return LabelTab(project=project, run_id=handoff.run_id, train_event=train_event, open_project=opened,
                    refresh_choices=(refresh, None, [project, handoff.run]))


def _wire_labelling(wb, project: gr.Dropdown, view: gr.State, held: gr.State, ui: _Labelling,
                    item_outputs: list) -> tuple:
    """Keys and buttons; returns the (fn, inputs, outputs) that opens the picked project."""
    # With sign-in off every browser is the user "": each holds its claims under a name of its own, kept in
    # its storage (a refresh gets its text back, a second browser another text).
    claimant = gr.BrowserState("", storage_key="wb-label-claimant")

    def on_project(project_id, stored, request: gr.Request):
        user = user_of(request)
        held_by = None if user else (str(stored or "") or new_claimant())
        return (*open_project(wb, project_id, user, held_by), held_by or gr.skip())

    opened = (on_project, [project, claimant], [view, *item_outputs, *ui.keys, claimant])
    # The item's event answers with the next item only; queue=False: it skips Gradio's queue (no wait behind
    # a slow event, one HTTP round trip), which is what keeps the next text under 200 ms.
    fast = {"show_progress": "hidden", "queue": False}

    def key_handler(index: int):
        def on_key(v, h, chosen, request: gr.Request):
            return press_key(wb, v, h, index, chosen, user_of(request))
        on_key.__name__ = f"on_key_{index + 1}"
        return on_key

    for index, button in enumerate(ui.keys):
        button.click(key_handler(index), [view, held, ui.multi], item_outputs, **fast)

    def on_accept(v, h, chosen, request: gr.Request):
        return accept(wb, v, h, chosen, user_of(request))

    def on_skip(v, h, request: gr.Request):
        return skip(wb, v, h, user_of(request))

    def on_undo(v, request: gr.Request):
        return undo(wb, v, user_of(request))

    def on_rest(v, h, label, request: gr.Request):
        if not label:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        return give(wb, v, h, label, user_of(request))

    ui.accept.click(on_accept, [view, held, ui.multi], item_outputs, **fast)
    ui.skip.click(on_skip, [view, held], item_outputs, **fast)
    ui.undo.click(on_undo, [view], item_outputs, **fast)
    ui.rest.input(on_rest, [view, held, ui.rest], item_outputs, **fast)
    return opened


def _wire_progress(wb, project: gr.Dropdown, status: gr.HTML, curve: gr.HTML, shown_key: gr.State,
                   timer: gr.Timer) -> tuple:
    """The timer reads the progress again (only what changed is sent); returns the (fn, inputs, outputs) that
    shows it at once."""
    def on_progress(project_id, key, interval):
        return progress_values(wb, project_id, key, interval)

    outputs = [status, curve, shown_key, timer]
    timer.tick(on_progress, [project, shown_key, timer], outputs, show_progress="hidden")

    def on_open(project_id):
        return progress_values(wb, project_id, "", POLL_SECONDS)

    return on_open, [project], outputs


def _wire_handoff(wb, project: gr.Dropdown, ui: _Handoff) -> Any:
    """Train, export, label the rest; returns the train event (a run exists afterwards)."""
    def on_train(project_id, request: gr.Request):
        return train(wb, project_id, user_of(request))

    event = ui.train.click(on_train, [project], [ui.message, ui.run_id])

    def on_export_labels(project_id, fmt_):
        return gr.update(value=export(wb, project_id, fmt_), visible=True)

    ui.export.click(on_export_labels, [project, ui.export_format], [ui.export_file])

    def on_label_rest(project_id, run_id):
        return predict_rest(wb, project_id, run_id)

    ui.predict.click(on_label_rest, [project, ui.run], [ui.message])
    ui.run.focus(lambda: gr.update(choices=finished_runs(wb)), None, [ui.run], show_progress="hidden")
    return event
