"""Runs tab: the live dashboard. A paged, filterable table of runs and one run's details, polled with ``gr.Timer``.

Nothing about a run is kept in this process: each tick reads the database through
``workbench.services.runs``. The table asks for one page (``PAGE_SIZE`` rows, only
table columns); the details poll only the selected run, and the heavy parts
(curves, tables, errors) are re-sent only when its step or status changed.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
from pathlib import Path
from typing import Any, Optional

import gradio as gr
import pandas as pd

from storage.models import CANCELLING, QUEUED, RUNNING
from workbench.errors import WorkbenchError
from workbench.services import accounts
from workbench.services import runs as runs_service
from workbench.services.access import CHANGE, CREATE, READ
from workbench.services import tracking as tracking_service
from workbench.ui import format as fmt
from workbench.ui import access, export_panel, plots, polling, predict_panel

log = logging.getLogger(__name__)
PAGE_SIZE = 25
POLL_SECONDS = polling.POLL_SECONDS
MOVING = frozenset({QUEUED, RUNNING, CANCELLING})  # states that change without anyone touching the page
ALL = "all"
STATUS_FILTERS = (ALL, "queued", "running", "succeeded", "failed", "cancelled", "pruned")
STATUS_COLUMN, ETA_COLUMN = fmt.RUN_TABLE_HEADERS.index("Status"), fmt.RUN_TABLE_HEADERS.index("ETA")
METRIC_COLUMN = fmt.RUN_TABLE_HEADERS.index("Main metric")
SORTS = {"newest first": "-created_at", "oldest first": "created_at", "status": "status", "model": "model",
         "most progress": "-progress", "recently finished": "-finished_at", "grouped by sweep": "sweep"}
PER_CLASS_HEADERS = ["Class / entity / tag", "Precision", "Recall", "F1", "Support"]
# Gold, predicted and score first: they are what a reader compares; the input is truncated last.
ERROR_HEADERS = ["Gold", "Predicted", "Score", "Label quality", "Input"]
ERROR_INPUT_CHARS = 160
EMPTY_STATE = ("<div id='run-empty' class='wb-muted'><b>No run selected.</b> Click a row in the table to open a "
               "run: its curves, log, metrics, errors and spec appear here.</div>")
NO_RUN_KEY = "none"
JOB_CURVES_NOTE = ("A prediction or evaluation job trains nothing, so it has no curves: its progress counts rows "
                   "(above), and an evaluation's scores are in the Metrics tab.")
SHARE_HEADERS = ["Slug", "Link", "Access", "Created", "Served by"]
# What saves the model's zip the moment the download button receives it: the click that asked for it is the
# only click (a DownloadButton saves on click only what it already holds).
SAVE_DOWNLOAD_JS = """(file) => {
    if (file && file.url) {
        const link = document.createElement("a");
        link.href = file.url;
        link.download = file.orig_name || "model.zip";
        document.body.appendChild(link);
        link.click();
        link.remove();
    }
    return [];
}"""


def list_page(wb, status: str = ALL, search: str = "", sort: str = "newest first",
              page: int = 1) -> tuple[list[list[Any]], str]:
    """One page of the runs table and a caption. Called on page load and every timer tick."""
    page = max(int(page or 1), 1)
    result = runs_service.list_runs(wb, status=None if status in (ALL, "", None) else status,
                                    search=(search or "").strip() or None, order_by=SORTS.get(sort, "-created_at"),
                                    limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    items, total = _items_and_total(result)
    if total is None and hasattr(runs_service, "count_runs"):
        counts = runs_service.count_runs(wb)
        total = counts.get(status, 0) if status not in (ALL, "", None) else sum(counts.values())
        if search:
            total = None  # the per-status counts do not know the search
    rows = _with_intervals(items, _with_queue_and_live_eta(wb, items, _rows_with_owners(wb, items)))
    first = (page - 1) * PAGE_SIZE + 1
    if total is not None:
        caption = f"{first}–{first + len(rows) - 1} of {total} runs" if rows else f"no runs on page {page} of {total}"
    else:
        caption = f"page {page}" if rows else "no runs yet"
    return rows, caption


def _rows_with_owners(wb, items: list[Any]) -> list[list[Any]]:
    """The table rows, each ending with its owner's name ("" without accounts, or for work made before them)."""
    from workbench.services import accounts

    owners = accounts.owner_names(wb)
    rows = []
    for run in items:
        run = fmt.as_dict(run)
        owner = run.get("owner_id")
        if owners and "owner_id" not in run:
            try:
                owner = accounts.owner_of(wb, "run", run.get("id"))
            except WorkbenchError:
                owner = None
        rows.append(fmt.run_row({**run, "owner_id": owner}, owners))
    return rows


def _with_queue_and_live_eta(wb, items: list[Any], rows: list[list[Any]]) -> list[list[Any]]:
    """A queued run's status cell says where it stands in the queue and when it should start; a running
    run's ETA cell says so when its own speed puts it outside the estimate made at submit."""
    runs = [fmt.as_dict(item) for item in items]
    queue = runs_service.queue_positions(wb) if any(r.get("status") == "queued" for r in runs) else {}
    for run, row in zip(runs, rows):
        if run.get("id") in queue:
            row[STATUS_COLUMN] = fmt.queued_status(queue[run["id"]])
        verdict = fmt.live_verdict(run)
        if verdict:
            row[ETA_COLUMN] = f"{row[ETA_COLUMN]} ({verdict.split(':')[0]})"
    return rows


def _with_intervals(items: list[Any], rows: list[list[Any]]) -> list[list[Any]]:
    """The main metric of a run scored with per-example outcomes carries its 95 % interval: ``0.912 ± 0.011``."""
    for run, row in zip(map(fmt.as_dict, items), rows):
        if (run.get("metrics") or {}).get("metrics_ci"):
            row[METRIC_COLUMN] = fmt.metric_ci_cell(str(run.get("task", "")), run.get("metrics"))
    return rows


def _items_and_total(result: Any) -> tuple[list[Any], Optional[int]]:
    if isinstance(result, (list, tuple)):
        return list(result), None
    r = fmt.as_dict(result)
    return list(r.get("items") or r.get("runs") or []), r.get("total")


@dataclasses.dataclass
class RunView:
    """What the details panel shows for one run."""

    key: str  # changes when anything shown changes; the tick skips work when it does not
    header: str
    status: str
    loss: pd.DataFrame
    metrics_curves: pd.DataFrame
    log_tail: str
    final_metrics: list[list[Any]]
    per_class: list[list[Any]]
    confusion: str
    errors: list[list[Any]]
    spec: str
    metric_details: list[list[Any]] = dataclasses.field(default_factory=list)  # bookkeeping, shown collapsed
    curves_note: str = ""  # what empty curve charts say instead of "no points yet" (a job has none)


def run_header(run: dict[str, Any]) -> str:
    status = run.get("status", "")
    step, total = run.get("step") or 0, run.get("total_steps") or 0
    phase, phase_part = fmt.phase_text(run), fmt.phase_fraction(run)
    bits = [phase + (f" ({phase_part * 100:.0f}%)" if phase_part is not None else ""),
            f"step {step}/{total}" if total else "", f"epoch {run.get('epoch') or 0:.2f}" if total else "",
            f"ETA {fmt.eta_text(run)}" if status == "running" and fmt.eta_text(run) != fmt.MISSING else "",
            f"device {run['device']}" if run.get("device") else ""]
    label = f"{fmt.status_label(status)} · " + " · ".join(b for b in bits if b) if any(bits) \
        else fmt.status_label(status)
    if status == "queued" and run.get("queue"):
        label = fmt.queued_status(run["queue"])
    title = (f"<h3 id='run-title'>#{run.get('id')} {fmt.html.escape(fmt.run_name(run))}</h3>"
             f"<p class='wb-muted'>{fmt.html.escape(str(run.get('task', '')))} · model "
             f"<code>{fmt.html.escape(fmt.model_name(run.get('model')))}</code> · data "
             f"<code>{fmt.html.escape(fmt.dataset_name(run))}</code> · created "
             f"{fmt.format_time(run.get('created_at'))}</p>")
    # While it evaluates, the bar shows the evaluation's progress: training's is at 100 % by then.
    shown = 1.0 if status == "succeeded" else (phase_part if phase_part is not None else run.get("progress"))
    phase_attr = fmt.html.escape(run.get("phase") or "")
    body = (title + f"<div id='run-status' data-status='{status}' data-phase='{phase_attr}'>"
            + fmt.progress_html(shown, status, label) + "</div>")
    timing = fmt.live_estimate_line(run)
    if timing:
        body += f"<p class='wb-muted' id='run-estimate'>{fmt.html.escape(timing)}</p>"
    if run.get("group"):
        body += f"<p class='wb-muted' id='run-seed-group'>{fmt.html.escape(fmt.seed_group_text(run['group']))}</p>"
    body += mirror_html(run)
    body += score_html(run)
    body += fmt.baseline_html(run.get("metrics"))
    body += fmt.calibration_note_html(run.get("metrics"))
    if run.get("error"):
        body += f"<div class='wb-error'><b>{fmt.html.escape(str(run['error']))}</b></div>"
    return body


def mirror_html(run: dict[str, Any]) -> str:
    """The run's link to its MLflow run (when WORKBENCH_MLFLOW_UI_URL is set; ``run["mlflow_link"]``), and a badge
    while its mirror is behind (a tracker was down or slow: ``runs.mirror_warning``)."""
    parts = []
    if run.get("mlflow_link"):
        parts.append(f"<a id='run-mlflow-link' href='{fmt.html.escape(run['mlflow_link'])}' target='_blank' "
                     f"rel='noopener'>Open in MLflow ↗</a>")
    if run.get("mirror_warning"):
        why = fmt.html.escape(str(run["mirror_warning"]))
        badge = "background:#fef3c7;color:#92400e;border-radius:4px;padding:1px 6px"
        parts.append(f"<span id='run-mirror-warning' title='{why}' style='{badge}'>⚠ mirror behind</span> "
                     f"<span class='wb-muted'>({why}; <code>workbench runs mirror {run.get('id')}</code> "
                     f"completes it)</span>")
    return f"<p id='run-mirror'>{' · '.join(parts)}</p>" if parts else ""


def score_html(run: dict[str, Any]) -> str:
    """The run header's score line: the headline metric with its 95 % interval (``accuracy 0.912 ± 0.011 (95 %
    CI, n = 500)``), or the bare score of a run scored before intervals; "" before it has one."""
    metrics = run.get("metrics") or {}
    return fmt.score_line_html(str(run.get("task", "")), metrics, "Validation", metrics.get("validation_records"))


def per_class_rows(tables: dict[str, Any]) -> list[list[Any]]:
    """Per-class (classification), per-entity (NER) or per-tag (POS and other non-BIO tagging) scores."""
    per = (tables.get("per_class") or tables.get("per_entity") or tables.get("per_tag") or tables.get("per_label")
           or {})
    if isinstance(per, list):  # the engine writes [{"label" | "entity" | "tag", "precision", ...}, ...]
        per = {str(item.get("label") or item.get("entity") or item.get("tag") or item.get("name")): item
               for item in per}
    rows = []
    for label, scores in per.items():
        s = fmt.as_dict(scores)
        rows.append([label, *(fmt.format_metric(s.get(k)) for k in ("precision", "recall", "f1")),
                     s.get("support", "")])
    return rows


def score_pictures(tables: dict[str, Any]) -> str:
    """Under the confusion matrix of a classification run: its reliability diagram (the ECE before and after
    temperature scaling) and, when a positive-class threshold was tuned, the precision-recall curve with the
    tuned per-class thresholds of a multi-label run listed; "" for other tasks."""
    parts = []
    if tables.get("calibration"):
        parts.append(plots.reliability_svg(tables["calibration"]))
    if tables.get("precision_recall"):
        parts.append(plots.pr_curve_svg(tables["precision_recall"]))
    per = tables.get("per_class")
    thresholds = ({str(item.get("label")): item["threshold"] for item in per if item.get("threshold") is not None}
                  if isinstance(per, list) else {})
    if thresholds:
        listed = " · ".join(f"{fmt.html.escape(k)} {v:.2f}" for k, v in thresholds.items())
        parts.append(f"<p class='wb-muted' id='run-thresholds'>Decision thresholds tuned on validation: {listed}</p>")
    return "".join(parts)


def confusion_note(tables: dict[str, Any]) -> str:
    """Says so when the matrix shows only the most frequent tags of a large tag set."""
    confusion = tables.get("confusion_matrix")
    if not isinstance(confusion, dict) or not confusion.get("tags"):
        return ""
    labels = [label for label in confusion.get("labels") or [] if label != "other"]
    if confusion["tags"] <= len(labels):
        return ""
    return (f"<p class='wb-muted'>The {len(labels)} most frequent of {confusion['tags']} tags; "
            "every other tag is counted as <i>other</i>.</p>")


def confusion_parts(tables: dict[str, Any]) -> tuple[list[str], list[list[float]]]:
    confusion = tables.get("confusion_matrix") or tables.get("confusion") or {}
    if isinstance(confusion, dict):
        return list(confusion.get("labels") or tables.get("labels") or []), list(confusion.get("matrix") or [])
    return list(tables.get("labels") or []), list(confusion)


def errors_intro(kind: Optional[str]) -> str:
    """The Errors tab's opening line: a training run lists its validation examples, an evaluation job the test
    set it scored."""
    examples = "Test examples" if kind == "evaluate" else "Validation examples"
    return (f"{examples} the model got wrong, likeliest wrong label first: **label quality** is the model's "
            "probability for the given label. ⚑ marks a label confident learning calls suspicious (the prediction "
            "is as sure as the model usually is of that class): check the data before the model. Inputs are "
            "shortened; the full records are in the run's predictions.jsonl. The Data tab's *Find suspicious "
            "labels* checks every example.")


def run_kind(wb, run_id: Any) -> Optional[str]:
    """The selected run's kind (train, predict, evaluate, export), None when none is selected or it is gone."""
    rid = selected_run(run_id)
    if rid is None:
        return None
    try:
        return fmt.as_dict(runs_service.get_run(wb, rid)).get("kind")
    except WorkbenchError:
        return None


def error_rows(predictions: list[dict[str, Any]], limit: int = 200) -> list[list[Any]]:
    """Validation examples the model got wrong: gold, predicted, score, then the (truncated) input.

    For token tagging only the words whose tag is wrong are listed (``word: tag``), so a
    long sentence with one mistake reads as that one mistake.
    """
    rows = []
    for p in predictions:
        if p.get("correct", True):
            continue
        gold, predicted, score = p.get("gold"), p.get("predicted", p.get("prediction")), p.get("score")
        if p.get("tokens") is not None and isinstance(gold, list) and isinstance(predicted, list):
            words = p["tokens"]
            wrong = [i for i, (g, q) in enumerate(zip(gold, predicted)) if g != q]
            text = " ".join(words)
            gold = ", ".join(f"{words[i]}: {gold[i]}" for i in wrong)
            predicted = ", ".join(f"{words[i]}: {predicted[i]}" for i in wrong)
            score = None
        elif p.get("question"):
            text = f"{p['question']} ‖ {p.get('context', '')}"
        else:
            text = p.get("text") or ""
            if p.get("text_pair"):
                text = f"{text} ‖ {p['text_pair']}"
        if isinstance(score, dict):  # multi-label: the probability of each label
            score = max(score.values()) if score else None
        quality = p.get("label_quality")
        quality = (fmt.format_metric(quality) + (" ⚑ suspicious label" if p.get("suspicious") else "")
                   if isinstance(quality, (int, float)) else fmt.MISSING)
        rows.append([fmt.short_value(gold, 200), fmt.short_value(predicted, 200),
                     fmt.format_metric(score) if isinstance(score, (int, float)) else fmt.MISSING, quality,
                     fmt.short_value(text, ERROR_INPUT_CHARS)])
        if len(rows) >= limit:
            break
    return rows


def _test_set_named(wb, metrics: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """An evaluation's metrics with its test set by name (``sms-test (3f9a0c)``), not by its bare id."""
    dataset_id = (metrics or {}).get("test_set")
    if not dataset_id:
        return metrics
    from workbench.services import datasets as data_service

    try:
        name = fmt.as_dict(data_service.get_dataset(wb, str(dataset_id))).get("name")
    except WorkbenchError:  # deleted since: its id is all there is
        return metrics
    return {**metrics, "test_set": f"{name} ({dataset_id})" if name and name != dataset_id else dataset_id}


def run_view(wb, run_id: int, last_key: str = "") -> Optional[RunView]:
    """Read one run (status, curves, log tail, final tables) through the runs service.

    Returns None when the run is unchanged since ``last_key`` (one small query instead of five).
    """
    run = fmt.as_dict(runs_service.get_run(wb, int(run_id)))
    status = str(run.get("status", ""))
    if status == "queued":
        run["queue"] = runs_service.queue_position(wb, int(run_id))
    if run.get("seed_group") is not None:
        run["group"] = runs_service.group_summary(wb, run["seed_group"])
    run["mlflow_link"] = tracking_service.mlflow_link(wb, run)
    key = (f"{run_id}:{status}:{run.get('step')}:{run.get('progress')}:{run.get('heartbeat_at')}:"
           f"{run.get('phase')}:{run.get('phase_done')}:{run.get('rows_done')}:{fmt.queue_text(run.get('queue'))}:"
           f"{fmt.seed_group_text(run.get('group'))}:{run.get('mlflow_link')}:{run.get('mirror_warning')}")
    if key == last_key:
        return None
    curves = runs_service.run_curves(wb, int(run_id))
    logs = runs_service.run_logs(wb, int(run_id), tail=200)
    log_text = fmt.clean_log(logs if isinstance(logs, str) else "\n".join(map(str, logs or [])))
    tables, predictions = {}, []
    if status not in fmt.ACTIVE_STATES and run.get("output_dir"):
        tables = runs_service.read_run_tables(run["output_dir"])
        predictions = runs_service.read_run_errors(run["output_dir"])
    labels, matrix = confusion_parts(tables)
    job = fmt.is_job(run)
    header = predict_panel.job_header(run, predict_panel.output_names(wb, run)) if job else run_header(run)
    return RunView(
        key=key, header=header, status=status,
        loss=plots.curves_frame(curves, loss=True), metrics_curves=plots.curves_frame(curves, loss=False),
        log_tail=log_text or "(no log yet)",
        final_metrics=fmt.readable_metric_rows_with_ci(_test_set_named(wb, run.get("metrics"))),
        metric_details=fmt.metric_detail_rows(run.get("metrics")),
        per_class=per_class_rows(tables), confusion=confusion_note(tables) + plots.confusion_html(labels, matrix) + score_pictures(tables),
        errors=error_rows(predictions), spec=json.dumps(run.get("spec") or {}, indent=2, default=str),
        curves_note=JOB_CURVES_NOTE if job else "")


def selected_run(rid: Any) -> Optional[int]:
    """The selected run id, or None (``format.positive_id``)."""
    return fmt.positive_id(rid)


# header, loss, metric curves, log, final metrics, per class, confusion, errors, spec, metric details
DETAIL_OUTPUTS = 10


def detail_values(wb, rid: Any, last_key: str) -> tuple:
    """Values for the details panel plus the new key; ``gr.skip()`` for all of them when nothing changed."""
    rid = selected_run(rid)
    if rid is None:
        # Cleared once (a deleted run's details must not linger), then skipped on every tick.
        if last_key == NO_RUN_KEY:
            return (*[gr.skip()] * DETAIL_OUTPUTS, last_key)
        return (EMPTY_STATE, "", "", "", [], [], "", [], "", [], NO_RUN_KEY)
    try:
        view = run_view(wb, rid, last_key)
    except WorkbenchError as exc:
        return (f"<p class='wb-muted'>{fmt.html.escape(fmt.ui_message(exc))}</p>",
                *[gr.skip()] * (DETAIL_OUTPUTS - 1), "")
    if view is None:
        return (*[gr.skip()] * DETAIL_OUTPUTS, last_key)
    return (view.header, plots.line_chart_svg(view.loss, "Loss", empty=view.curves_note or "No points yet."),
            plots.line_chart_svg(view.metrics_curves, "Evaluation metrics",
                                 empty=view.curves_note or "Evaluation metrics appear after the first evaluation."),
            view.log_tail, view.final_metrics, view.per_class, view.confusion, view.errors, view.spec,
            view.metric_details, view.key)


def tick_values(wb, status: str, search: str, sort: str, page: int, rid: Any, last_key: str) -> tuple:
    """Everything one timer tick sends: the table page, its caption and the selected run's details."""
    rows, caption = list_page(wb, status, search, sort, page)
    return (rows, caption, *detail_values(wb, rid, last_key))


def load_values(wb, status: str, search: str, sort: str, page: int, rid: Any, params: dict[str, str]) -> tuple:
    """What the page's load sends: ``tick_values`` for the selected run or, on a ``?run=N`` link, for run N.

    Another load event (``app.open_links``) puts N in the run picker, and its change event sends N's details. Were
    this one to send "no run" instead, the two would race: the details' key is kept on the server and the header in
    the page, so "no run" shown last while N's key was stored last leaves the header empty and every tick finding
    N unchanged (a reload under load showed it). Both send N now, in whichever order they land.
    """
    linked = run_from_query(params) if selected_run(rid) is None else None
    return tick_values(wb, status, search, sort, page, linked or rid, "")


def run_from_query(params) -> int | None:
    """The run id of a ``?run=N`` link, or None when absent or not a positive whole number."""
    value = (params or {}).get("run", "")
    return int(value) if str(value).strip().isdigit() and int(value) > 0 else None


def poll_values(wb, status: str, search: str, sort: str, page: int, rid: Any, last_key: str, rows_key: str,
                interval: Any) -> tuple:
    """One timer tick: ``tick_values`` with the table sent only when it changed (``rows_key`` fingerprints what
    the page shows), then the new fingerprint and the timer's next interval: every 2 s while a run or job is
    queued or running or something changed, backing off to 30 s while nothing moves (``workbench.ui.polling``)."""
    rows, caption, *details = tick_values(wb, status, search, sort, page, rid, last_key)
    key = polling.content_key(rows, caption)
    changed = key != rows_key or details[-1] != last_key
    counts = runs_service.count_runs(wb)
    active = any(counts.get(state, 0) for state in MOVING)
    return (*([rows, caption] if key != rows_key else [gr.skip(), gr.skip()]), *details, key,
            polling.timer_update(interval, changed, active))


def run_spec(wb, run_id: int | None) -> dict[str, Any]:
    """The spec of a run, for clone-and-edit (``gr.Error`` when no run is selected)."""
    run_id = selected_run(run_id)
    if run_id is None:
        raise gr.Error("Pick a run first (click its row in the table).")
    try:
        return fmt.as_dict(runs_service.get_run(wb, int(run_id))).get("spec") or {}
    except WorkbenchError as exc:
        raise gr.Error(str(exc))


def _playground_service():
    if importlib.util.find_spec("workbench.playground.service") is None:
        return None
    from workbench.playground import service

    return service


def inline(action, *args) -> str:
    """Run a sharing action; a refusal becomes a "✘" line where its result would show, not a bare error badge."""
    try:
        return action(*args)
    except (WorkbenchError, gr.Error) as exc:
        message = exc.message if isinstance(exc, gr.Error) else str(exc)
        log.warning("%s refused: %s", getattr(action, "__name__", "action"), " ".join(str(message).split()))
        return f"✘ {fmt.ui_message(message)}"


def playground_rows(wb, run_id: Any) -> list[list[Any]]:
    """The selected run's published playgrounds: slug, link, access, created (newest first)."""
    service, rid = _playground_service(), selected_run(run_id)
    if service is None or rid is None:
        return []
    return [[p.slug, f"[{p.url_path}]({p.url_path})", "token" if p.has_token else "public",
             fmt.format_time(p.created_at), p.runtime] for p in service.list_playgrounds(wb, run_id=rid)]


def runtime_choices(wb, run_id: Any) -> list[tuple[str, str]]:
    """What can serve the selected run, as (label, runtime): ``pytorch`` and the variants of its newest export."""
    return predict_panel.runtime_choices(wb, selected_run(run_id))


def safe_runtime(wb, run_id: Any) -> str:
    """What "Serve it by" offers first: a variant that passed its export checks, else ``pytorch``."""
    rid = selected_run(run_id)
    if rid is None:
        return "pytorch"
    from workbench.services import predictions as predict_service

    return predict_service.safe_runtime(wb, rid)


def publish_playground(wb, run_id: Any, with_token: bool, runtime: str = "pytorch") -> str:
    """Publish the run; the message carries the link and, when asked for, the generated token (shown once)."""
    service, rid = _playground_service(), selected_run(run_id)
    if rid is None:
        raise gr.Error("Pick a run first (click its row in the table).")
    info = service.publish(wb, rid, token=service.new_token() if with_token else None, runtime=runtime or "pytorch",
                           owner_id=access.owner_id())
    access.record(wb, "publish", "playground", info.slug, {"run": rid})
    path = info.url_path
    warning = runs_service.learned_warning(wb, rid)
    caution = f"\n\n⚠ This run {warning}" if warning else ""
    if not info.token:
        return (f"✔ Playground published: [{path}]({path}) — share this link; it opens only the playground, "
                "never the workbench. Anyone with the link can use it." + caution)
    with_link = f"{path}?token={info.token}"
    return (f"✔ Playground published: [{path}]({path}), protected by an access token.{caution}\n\n"
            f"**Token (shown only now, it is not stored — copy it):** `{info.token}`\n\n"
            f"Link that opens it with the token: [{with_link}]({with_link}) · API: "
            f"`POST {info.api_path}` with `Authorization: Bearer {info.token}`")


def unpublish_playground(wb, slug: str | None) -> str:
    """Take one playground down; its page and API answer 404 from the next request on."""
    if not (slug or "").strip():
        raise gr.Error("Pick the playground to unpublish (its slug).")
    _playground_service().unpublish(wb, slug.strip())
    access.record(wb, "unpublish", "playground", slug.strip())
    return f"✔ Playground **{slug.strip()}** unpublished: its link no longer works."


def change_runtime(wb, slug: str | None, runtime: str | None) -> str:
    """Serve a playground from another runtime; its next request is answered by it."""
    if not (slug or "").strip():
        raise gr.Error("Pick the playground whose runtime to change (its slug).")
    info = _playground_service().set_runtime(wb, slug.strip(), runtime or "pytorch")
    return f"✔ Playground **{info.slug}** is now served by **{info.runtime}** (from its next request)."


def push_model(wb, run_id: Any, repo_id: str, token: str, private: bool) -> str:
    """Push the run's model to the Hugging Face Hub; offline this fails with one clear sentence."""
    rid = selected_run(run_id)
    if rid is None:
        raise gr.Error("Pick a run first (click its row in the table).")
    if not (repo_id or "").strip():
        raise gr.Error("Give the Hub repository as user-or-org/model-name.")
    url = _playground_service().push_to_hub(wb, rid, repo_id.strip(), token=(token or "").strip() or None,
                                           private=bool(private))
    access.record(wb, "export", "run", rid, {"hub": repo_id.strip()})
    return f"✔ Pushed run #{rid} to [{url}]({url})."


@dataclasses.dataclass
class RunsTab:
    run_id: gr.Number
    table: gr.Dataframe
    clone: gr.Button
    load_outputs: list
    on_load: Any
    # (fn, inputs, outputs) that read the table page again and nothing else: opening the tab must not answer
    # for the run that was selected when it was clicked (a later selection would be painted over)
    refresh_rows: tuple
    run_buttons: list  # disabled until a run is selected
    opens: list  # the events that put another run (or none) in run_id: the app keeps the address on it


@dataclasses.dataclass
class _Listing:
    """The filters, the caption and the paged runs table."""

    status: gr.Dropdown
    search: gr.Textbox
    sort: gr.Dropdown
    page: gr.Number
    caption: gr.Markdown
    table: gr.Dataframe

    @property
    def inputs(self) -> list:
        return [self.status, self.search, self.sort, self.page]


def _build_listing() -> _Listing:
    with gr.Row():
        status_filter = gr.Dropdown(list(STATUS_FILTERS), value=ALL, label="Status", min_width=120)
        search = gr.Textbox(label="Search name, model or dataset", placeholder="e.g. sms", scale=2)
        sort = gr.Dropdown(list(SORTS), value="newest first", label="Sort", min_width=140)
        page = gr.Number(1, label="Page", precision=0, minimum=1, min_width=80)
        caption = gr.Markdown(elem_id="runs-caption")
    table = gr.Dataframe(headers=fmt.RUN_TABLE_HEADERS, interactive=False, elem_id="runs-table", max_height=420,
                         column_widths=["5%", "13%", "7%", "10%", "15%", "6%", "12%", "12%", "10%", "10%"])
    return _Listing(status_filter, search, sort, page, caption, table)


@dataclasses.dataclass
class _Actions:
    """The selected run, the buttons that act on it, the delete confirmation and the actions' results."""

    run_id: gr.Number
    cancel: gr.Button
    retry: gr.Button
    clone: gr.Button
    extra_epochs: gr.Number
    continue_button: gr.Button
    delete: gr.Button
    download: gr.DownloadButton
    publish: gr.Button
    confirm_row: gr.Row
    confirm_text: gr.Markdown
    confirm_delete: gr.Button
    keep: gr.Button
    status: gr.Markdown
    seeds: gr.Number
    repeat: gr.Button

    @property
    def buttons(self) -> list:
        return [self.cancel, self.retry, self.clone, self.continue_button, self.delete, self.download, self.publish,
                self.repeat]

    @property
    def needs(self) -> list[str]:
        """What each of ``buttons`` asks of the selected run (its rule in ``workbench.ui.access.RULES``): a button
        whoever is looking may not use stays greyed out (the server refuses the call anyway)."""
        return [CHANGE, CHANGE, READ, CREATE, CHANGE, READ, CHANGE, CREATE]


def _build_actions(can_publish: bool) -> _Actions:
    with gr.Row():
        run_id = gr.Number(None, label="Selected run (click a row)", precision=0, elem_id="runs-selected",
                           min_width=120)
        # Every action needs a run: they stay disabled until one is selected.
        cancel = gr.Button("Cancel", size="sm", variant="stop", interactive=False)
        retry = gr.Button("Retry", size="sm", interactive=False)
        clone = gr.Button("Clone and edit", size="sm", interactive=False)
        extra_epochs = gr.Number(1, label="More epochs", precision=1, min_width=90)
        continue_button = gr.Button("Continue training", size="sm", interactive=False)
        seeds = gr.Number(3, label="Seeds", precision=0, minimum=runs_service.MIN_SEEDS,
                          maximum=runs_service.MAX_SEEDS, min_width=80, elem_id="runs-seeds")
        repeat = gr.Button("Repeat with N seeds", size="sm", interactive=False, elem_id="runs-repeat")
        delete = gr.Button("Delete…", size="sm", variant="stop", interactive=False)
        download = gr.DownloadButton("Download model (.zip)", size="sm", interactive=False, elem_id="runs-download")
        publish = gr.Button("Publish playground…", size="sm", variant="primary", visible=can_publish,
                            interactive=False, elem_id="runs-publish")
    with gr.Row(visible=False) as confirm_row:
        confirm_text = gr.Markdown()
        confirm_delete = gr.Button("Yes, delete it and its files", variant="stop", size="sm")
        keep = gr.Button("Keep it", size="sm")
    action_status = gr.Markdown(elem_id="runs-action-status")
    return _Actions(run_id, cancel, retry, clone, extra_epochs, continue_button, delete, download, publish,
                    confirm_row, confirm_text, confirm_delete, keep, action_status, seeds, repeat)


@dataclasses.dataclass
class _Share:
    """The Share tab: publish and unpublish playgrounds, push to the Hub."""

    token: gr.Checkbox
    runtime: gr.Dropdown
    publish: gr.Button
    status: gr.Markdown
    listing: gr.Dataframe
    slug: gr.Dropdown
    unpublish: gr.Button
    new_runtime: gr.Dropdown
    change_runtime: gr.Button
    hub_repo: gr.Textbox
    hub_token: gr.Textbox
    hub_private: gr.Checkbox
    hub_push: gr.Button
    hub_status: gr.Markdown


def _build_share() -> _Share:
    with gr.Tab("Share", id="share", elem_id="run-share"):
        gr.Markdown("A playground is a page and an API for this run's model that colleagues open from a "
                    "link; it never opens the workbench. Only succeeded runs can be published.",
                    elem_classes="wb-muted")
        with gr.Row():
            share_token = gr.Checkbox(False, label="Protect with an access token (generated now, shown once)",
                                      elem_id="share-token")
            share_runtime = gr.Dropdown(["pytorch"], value="pytorch", label="Served by", elem_id="share-runtime",
                                        info="pytorch, or an ONNX variant of the run's newest export")
            share_publish = gr.Button("Publish a new playground", variant="primary", interactive=False,
                                      elem_id="share-publish")
        share_status = gr.Markdown(elem_id="share-status")
        share_list = gr.Dataframe(headers=SHARE_HEADERS, datatype=["str", "markdown", "str", "str", "str"],
                                  interactive=False, label="This run's playgrounds", elem_id="share-list")
        with gr.Row():
            share_slug = gr.Dropdown([], label="Playground to unpublish", elem_id="share-slug", scale=3)
            share_unpublish = gr.Button("Unpublish", variant="stop", size="sm", interactive=False,
                                        elem_id="share-unpublish", scale=1)
            share_new_runtime = gr.Dropdown(["pytorch"], value="pytorch", label="Serve it by", scale=2,
                                            elem_id="share-new-runtime")
            share_change = gr.Button("Change runtime", size="sm", interactive=False,
                                     elem_id="share-change-runtime", scale=1)
        gr.Markdown("**Push to the Hugging Face Hub** — needs internet; offline, download the zip instead.")
        with gr.Row():
            hub_repo = gr.Textbox(label="Repository", placeholder="user-or-org/model-name", scale=2,
                                  elem_id="hub-repo")
            hub_token = gr.Textbox(label="Hub token (not stored)", type="password", scale=2)
            hub_private = gr.Checkbox(True, label="Private repository")
            hub_push = gr.Button("Push to the Hub", size="sm", interactive=False, elem_id="hub-push")
        hub_status = gr.Markdown(elem_id="hub-status")
    return _Share(share_token, share_runtime, share_publish, share_status, share_list, share_slug, share_unpublish,
                  share_new_runtime, share_change, hub_repo, hub_token, hub_private, hub_push, hub_status)


@dataclasses.dataclass
class _Details:
    """The selected run's header and its tabs (curves, log, metrics, errors, spec and, if it can, share)."""

    header: gr.HTML
    tabs: gr.Tabs
    loss_plot: gr.HTML
    metric_plot: gr.HTML
    log_box: gr.Code
    final_metrics: gr.Dataframe
    per_class: gr.Dataframe
    confusion: gr.HTML
    errors: gr.Dataframe
    spec: gr.Code
    metric_details: gr.Dataframe
    predict: predict_panel.PredictPanel
    export: export_panel.ExportPanel
    share: Optional[_Share]
    errors_note: gr.Markdown  # "Validation examples …", or "Test examples …" for an evaluation job

    @property
    def outputs(self) -> list:
        """In ``detail_values`` order (``DETAIL_OUTPUTS`` of them)."""
        return [self.header, self.loss_plot, self.metric_plot, self.log_box, self.final_metrics, self.per_class,
                self.confusion, self.errors, self.spec, self.metric_details]


def _build_details(can_publish: bool) -> _Details:
    header = gr.HTML(EMPTY_STATE, elem_id="run-header")
    with gr.Tabs(selected="curves") as detail_tabs:
        with gr.Tab("Curves", id="curves"):
            with gr.Row():
                loss_plot = gr.HTML(elem_id="run-loss")
                metric_plot = gr.HTML(elem_id="run-metric-curves")
        with gr.Tab("Log", id="log"):
            log_box = gr.Code(label="Log (last 200 lines)", language=None, elem_id="run-log", interactive=False,
                              max_lines=30)
        with gr.Tab("Metrics", id="metrics"):
            final_metrics = gr.Dataframe(headers=["Metric", "Value"], interactive=False, elem_id="run-metrics")
            with gr.Accordion("Details: everything else the run recorded", open=False,
                              elem_id="run-metric-details-box"):
                metric_details = gr.Dataframe(headers=["Key", "Value"], interactive=False, wrap=True,
                                              elem_id="run-metric-details")
            per_class = gr.Dataframe(headers=PER_CLASS_HEADERS, interactive=False, label="Per class / entity / tag",
                                     elem_id="run-per-class")
            confusion = gr.HTML(label="Confusion matrix", elem_id="run-confusion")
        with gr.Tab("Errors", id="errors"):
            errors_note = gr.Markdown(errors_intro("train"), elem_classes="wb-muted", elem_id="run-errors-note")
            errors = gr.Dataframe(headers=ERROR_HEADERS, interactive=False, wrap=True, max_height=420,
                                  elem_id="run-errors", column_widths=["14%", "14%", "7%", "15%", "50%"])
        with gr.Tab("Spec", id="spec"):
            spec = gr.Code(language="json", interactive=False)
        with gr.Tab("Predict", id="predict", elem_id="run-predict"):
            predict = predict_panel.build_panel()
        export = export_panel.build_panel()
        share = _build_share() if can_publish else None
    return _Details(header, detail_tabs, loss_plot, metric_plot, log_box, final_metrics, per_class, confusion,
                    errors, spec, metric_details, predict, export, share, errors_note)


def build(wb) -> RunsTab:
    listing = _build_listing()
    can_publish = _playground_service() is not None
    actions = _build_actions(can_publish)
    details = _build_details(can_publish)
    shown_key = polling.page_key("run-shown-key")
    timer = gr.Timer(POLL_SECONDS)

    run_buttons, needs = actions.buttons, actions.needs
    if details.share is not None:
        run_buttons, needs = run_buttons + [details.share.publish, details.share.hub_push], needs + [CHANGE, CHANGE]
    row_click = _wire_listing(wb, listing, actions.run_id, details.outputs, shown_key, timer)
    _wire_selection(wb, actions.run_id, details.outputs, shown_key, run_buttons, needs)
    opens = [row_click, *_wire_actions(wb, actions)]
    actions.run_id.change(lambda rid: errors_intro(run_kind(wb, rid)), [actions.run_id], [details.errors_note],
                          show_progress="hidden")
    predict_panel.wire(wb, details.predict, actions.run_id, timer)
    export_panel.wire(wb, details.export, actions.run_id, timer)
    if details.share is not None:
        _wire_share(wb, actions, details.tabs, details.share)

    def on_load(status_, search_, sort_, page_, rid, request: gr.Request):
        return load_values(wb, status_, search_, sort_, page_, rid, dict(request.query_params) if request else {})

    return RunsTab(run_id=actions.run_id, table=listing.table, clone=actions.clone,
                   load_outputs=[listing.table, listing.caption, *details.outputs, shown_key],
                   on_load=(on_load, [*listing.inputs, actions.run_id]),
                   refresh_rows=(lambda *a: list_page(wb, *a), listing.inputs, [listing.table, listing.caption]),
                   run_buttons=run_buttons, opens=opens)


def _wire_listing(wb, listing: _Listing, run_id: gr.Number, detail_outputs: list, shown_key: gr.Textbox,
                  timer: gr.Timer) -> Any:
    """Each tick reads the page and the selected run again; a filter reads the page; a row click selects its run
    (returns that event)."""
    rows_key = gr.State("")  # what the table shows, fingerprinted (polling.content_key) by the last tick

    def tick(status_, search_, sort_, page_, rid, last_key, last_rows, interval):
        return poll_values(wb, status_, search_, sort_, page_, rid, last_key, last_rows, interval)

    tick_outputs = [listing.table, listing.caption, *detail_outputs, shown_key, rows_key, timer]
    timer.tick(tick, [*listing.inputs, run_id, shown_key, rows_key, timer], tick_outputs, show_progress="hidden",
               queue=False)
    # A user's own move (a filter, a row click) is answered now and the polling speeds up again.
    for control in [*listing.inputs, run_id]:
        control.change(lambda: gr.Timer(value=polling.POLL_SECONDS), None, [timer], show_progress="hidden",
                       queue=False)
    gr.on([control.change for control in listing.inputs], lambda *a: list_page(wb, *a), listing.inputs,
          [listing.table, listing.caption], show_progress="hidden", trigger_mode="always_last")

    def on_row(evt: gr.SelectData, rows):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        return int(rows.iloc[row, 0])

    return listing.table.select(on_row, [listing.table], [run_id])


def _wire_selection(wb, run_id: gr.Number, detail_outputs: list, shown_key: gr.Textbox, run_buttons: list,
                    needs: list[str]) -> None:
    """A new selection shows its details at once and enables the buttons that need a run, those that the person
    looking may use on it: an editor's cancel, retry, delete and publish stay grey on someone else's run."""
    run_id.change(lambda rid: detail_values(wb, rid, ""), [run_id], [*detail_outputs, shown_key],
                  show_progress="hidden")

    def on_selection(rid):
        return [gr.update(interactive=enabled) for enabled in usable(wb, selected_run(rid), needs)]

    run_id.change(on_selection, [run_id], run_buttons, show_progress="hidden")


def usable(wb, run_id: Optional[int], needs: list[str]) -> list[bool]:
    """For each of ``needs``, whether the caller of the handler in progress may do it to run ``run_id`` (all False
    without a run, or for one that no longer exists)."""
    if run_id is None:
        return [False] * len(needs)
    try:
        owner = accounts.owner_of(wb, "run", run_id)
    except WorkbenchError:
        return [False] * len(needs)
    return [access.allows(need, owner) for need in needs]


def _act(action, rid, *args):
    """``action(run_id, *args)`` on the selected run; no selection and refusals become a ``gr.Error``."""
    rid = selected_run(rid)
    if rid is None:
        raise gr.Error("Pick a run first (click its row in the table).")
    try:
        return action(rid, *args)
    except WorkbenchError as exc:
        raise gr.Error(str(exc))


def repeat_text(wb, run_id: int, seeds: Any) -> str:
    """Queue the selected run again with other seeds (``runs_service.repeat_with_seeds``) and say what was queued."""
    queued = runs_service.repeat_with_seeds(wb, run_id, int(seeds or 3), owner_id=access.owner_id())
    for new_id in queued["ids"]:
        access.record(wb, "create", "run", new_id)
    return (f"Queued runs {', '.join(map(str, queued['ids']))} with seeds {', '.join(map(str, queued['seeds']))} "
            f"(group of run {queued['group']}).")


def _wire_actions(wb, actions: _Actions) -> list:
    """Cancel, retry, continue, delete (after a confirmation) and download the selected run. Returns the events
    that change the selected run: continue (the new run) and delete (none)."""
    run_id, status = actions.run_id, actions.status
    def on_cancel(rid):
        said = _act(lambda r: (runs_service.cancel_run(wb, r), f"Cancel requested for run #{r}.")[1], rid)
        access.record(wb, "cancel", "run", selected_run(rid))
        return said

    def on_retry(rid):
        return _act(lambda r: (runs_service.retry_run(wb, r), f"Run #{r} is queued again.")[1], rid)

    def on_repeat(rid, n):
        return _act(lambda r: repeat_text(wb, r, n), rid)

    actions.cancel.click(on_cancel, [run_id], [status])
    actions.retry.click(on_retry, [run_id], [status])

    def on_continue(rid, epochs):
        new_id = _act(lambda r: runs_service.continue_run(wb, r, float(epochs or 1),
                                                                  owner_id=access.owner_id()), rid)
        access.record(wb, "create", "run", new_id, {"continues": selected_run(rid)})
        return f"Run #{new_id} continues run #{rid} for {epochs} more epoch(s).", new_id

    continued = actions.continue_button.click(on_continue, [run_id, actions.extra_epochs], [status, run_id])
    actions.repeat.click(on_repeat, [run_id, actions.seeds], [status])
    actions.delete.click(lambda rid: (gr.update(visible=selected_run(rid) is not None),
                                      f"Delete run #{rid}, its model and its logs? Other runs are not affected."),
                         [run_id], [actions.confirm_row, actions.confirm_text])
    actions.keep.click(lambda: gr.update(visible=False), None, [actions.confirm_row])

    def on_delete(rid):
        _act(lambda r: runs_service.delete_run(wb, r), rid)
        access.record(wb, "delete", "run", selected_run(rid))
        return gr.update(visible=False), f"Run #{rid} deleted.", None

    deleted = actions.confirm_delete.click(on_delete, [run_id], [actions.confirm_row, status, run_id])

    def on_download(rid, held):
        return download_value(wb, rid, held)

    actions.download.click(on_download, [run_id, actions.download], [actions.download])
    # The button holds no zip until it is first asked for: the browser saves it as soon as it arrives.
    actions.download.change(None, [actions.download], None, js=SAVE_DOWNLOAD_JS)
    run_id.change(lambda _rid: None, [run_id], [actions.download], show_progress="hidden")
    return [continued, deleted]


def download_value(wb, run_id: Any, held: Optional[str]) -> Any:
    """The zip of the run's model for the download button, made (once; reused while the model folder is
    unchanged) when first asked for. A button that already holds it (``held``) saved it on this click."""
    if held:
        return gr.skip()
    path = str(_act(lambda r: _export_zip(wb, r), run_id))
    access.record(wb, "download", "run", selected_run(run_id))
    return path


def _wire_share(wb, actions: _Actions, detail_tabs: gr.Tabs, share: _Share) -> None:
    """The Share tab follows the selected run; publish, unpublish and push answer in it."""
    run_id = actions.run_id

    def share_values(rid, message=None):
        rows = playground_rows(wb, rid)
        slugs = [row[0] for row in rows]
        runtimes = runtime_choices(wb, rid)
        return (gr.skip() if message is None else message, rows,
                gr.update(choices=slugs, value=slugs[0] if slugs else None), gr.update(interactive=bool(slugs)),
                gr.update(choices=runtimes, value="pytorch"), gr.update(choices=runtimes, value=safe_runtime(wb, rid)),
                gr.update(interactive=bool(slugs)))

    share_outputs = [share.status, share.listing, share.slug, share.unpublish, share.runtime, share.new_runtime,
                     share.change_runtime]

    def before_publishing(rid):
        """Said in the Share tab before anyone publishes a run that did not beat its baselines."""
        chosen = selected_run(rid)
        warning = runs_service.learned_warning(wb, chosen) if chosen is not None else ""
        return f"⚠ Before you publish: this run {warning}" if warning else ""

    run_id.change(lambda rid: share_values(rid, inline(before_publishing, rid)), [run_id], share_outputs,
                  show_progress="hidden")
    # The action row's button opens the Share tab, where the token option and the list are.
    actions.publish.click(lambda: gr.Tabs(selected="share"), None, [detail_tabs])

    def on_publish(rid, with_token, runtime):
        return share_values(rid, inline(publish_playground, wb, rid, with_token, runtime))

    def on_change_runtime(rid, slug, runtime):
        return share_values(rid, inline(change_runtime, wb, slug, runtime))

    def on_unpublish(rid, slug):
        return share_values(rid, inline(unpublish_playground, wb, slug))

    def on_push(rid, repo, token, private):
        return inline(push_model, wb, rid, repo, token, private)

    share.publish.click(on_publish, [run_id, share.token, share.runtime], share_outputs)
    share.change_runtime.click(on_change_runtime, [run_id, share.slug, share.new_runtime], share_outputs)
    share.unpublish.click(on_unpublish, [run_id, share.slug], share_outputs)
    share.hub_push.click(on_push, [run_id, share.hub_repo, share.hub_token, share.hub_private], [share.hub_status])


def _export_zip(wb, run_id: int) -> Path:
    """The model zip, with the run's latest successful ONNX export under ``onnx/`` when it has one."""
    from workbench.services import exports

    return exports.model_zip(wb, run_id)
