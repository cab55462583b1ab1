"""The run page's Export tab: write a succeeded run's model as ONNX and read how the variants compare.

"Export to ONNX" queues an export job (``workbench.services.exports``); below it, the newest export's state
and, once it has a report, one row per runtime, PyTorch first: parity (label agreement, the task's metric)
and speed (p50/p95 latency at batch 1, rows/s at batch 32, file size). A selected export job shows its own
report. The run page's timer refreshes the tab, but it reads the report only when the export's state
changed (``exports.export_key``); nothing else is kept between ticks.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.services import exports as export_service
from workbench.services import runs as runs_service
from workbench.ui import access, polling
from workbench.ui import format as fmt

log = logging.getLogger(__name__)
EXPORT_HEADERS = ["Runtime", "Status", "Agreement", "Metric", "p50 ms", "p95 ms", "Rows/s", "Size MB"]
NO_RUN_NOTE = "Pick a run first (click its row in the Runs table): a succeeded run's model can be exported here."
ABOUT = ("Exports the model to ONNX (fp32, and dynamic int8 when ticked; fp16 too on a GPU), checks each variant "
         "against PyTorch on the run's validation split and measures its speed. The files are in the model zip "
         "(Download model) under <code>onnx/</code>, and playgrounds and prediction jobs can serve them.")


@dataclasses.dataclass
class ExportValues:
    """What the tab shows for the selected run (``ExportPanel.values`` order, less the key)."""

    note: str
    can_export: bool
    state: str
    rows: list[list[Any]]
    key: str


def _cell(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else fmt.MISSING


def report_rows(report: dict[str, Any]) -> list[list[Any]]:
    """One row per runtime of an export report, PyTorch (the reference) first, in ``EXPORT_HEADERS`` order."""
    reference = [{**report["pytorch"], "status": "reference"}] if isinstance(report.get("pytorch"), dict) else []
    rows = []
    for row in reference + list(report.get("variants") or []):
        size = row["bytes"] / 1e6 if isinstance(row.get("bytes"), (int, float)) else None
        # the status alone: a reason is a sentence, and in the cell it pushed the speed columns out of sight
        # (``report_notes`` says it under the table)
        rows.append([row.get("name") or "?", str(row.get("status") or ""),
                     fmt.MISSING if row.get("name") == "pytorch" else _cell(row.get("agreement"), ".2%"),
                     _cell(row.get("metric"), ".4f"), _cell(row.get("p50_ms"), ".2f"), _cell(row.get("p95_ms"), ".2f"),
                     _cell(row.get("rows_per_s"), ",.1f"), _cell(size, ".1f")])
    return rows


def report_notes(report: dict[str, Any] | None) -> str:
    """Why a variant is marked ``check before use`` or ``failed``, one line each (HTML), for under the table."""
    lines = [f"<b>{fmt.html.escape(str(row.get('name') or '?'))}</b> — {fmt.html.escape(str(row.get('status')))}: "
             f"{fmt.html.escape(str(row['reason']))}"
             for row in (report or {}).get("variants") or [] if isinstance(row, dict) and row.get("reason")]
    return "<br>".join(lines)


def state_text(job: Optional[dict[str, Any]]) -> str:
    """The export's state in one line: queued, its current phase, or how it ended (with the error)."""
    if job is None:
        return "This run has not been exported yet."
    status = str(job.get("status"))
    phase = fmt.phase_text(job)
    if phase and job.get("total_steps"):  # stages done of all: see jobs.export.job.Stages
        phase = f"{float(job.get('progress') or 0) * 100:.0f} % · {phase}"
    line = f"Export job #{job['id']}: {fmt.status_label(status)}" + (f" · {phase}" if phase else "")
    report = job.get("report") or {}
    if report.get("metric"):
        line += (f" · {fmt.html.escape(str(report['metric']))} on {report.get('validation_rows')} validation rows, "
                 f"timed on {fmt.html.escape(str(report.get('device')))}")
    if status == "succeeded" and job.get("onnx_dir"):
        line += f" · files in <code>{fmt.html.escape(str(job['onnx_dir']))}</code>"
    if job.get("error"):
        line += f"<br><b>{fmt.html.escape(fmt.ui_message(job['error']))}</b>"
    return line


def export_values(wb, rid: Any) -> ExportValues:
    """Everything the tab shows: for a training run its newest export (exportable once it succeeded), for an
    export job that job."""
    rid = fmt.positive_id(rid)
    if rid is None:
        return ExportValues(NO_RUN_NOTE, False, "", [], "none")
    key = export_service.export_key(wb, rid)
    try:
        run = fmt.as_dict(runs_service.get_run(wb, rid))
    except WorkbenchError as exc:
        return ExportValues(fmt.ui_message(exc), False, "", [], key)
    if run["kind"] == "export":
        job = export_service.get_export(wb, rid)
        note = f"This is export job #{rid} of run #{job['run_id']}. Open run #{job['run_id']} to export it again."
        return ExportValues(note, False, _with_notes(state_text(job), job), report_rows(job["report"]), key)
    if run["kind"] != "train":
        return ExportValues(f"Run #{rid} is a {run['kind']} job: export the training run whose model it used.",
                            False, "", [], key)
    job = export_service.latest_export(wb, rid)
    rows = report_rows(job["report"]) if job else []
    if run["status"] != "succeeded":
        return ExportValues(f"Run #{rid} is {run['status']}: only a succeeded training run has a model to export.",
                            False, state_text(job) if job else "", rows, key)
    pending = job is not None and job["status"] in export_service.PENDING  # one export of a run at a time
    return ExportValues(ABOUT, not pending, _with_notes(state_text(job), job), rows, key)


def _with_notes(state: str, job: Optional[dict[str, Any]]) -> str:
    notes = report_notes(job.get("report")) if job else ""
    return f"{state}<p class='wb-muted' id='run-export-notes'>{notes}</p>" if notes else state


def queue_export(wb, rid: Any, int8: bool) -> str:
    """Queue an export of the selected run; the message names the job (a refusal becomes a "✘" line)."""
    rid = fmt.positive_id(rid)
    if rid is None:
        return f"✘ {NO_RUN_NOTE}"
    try:
        job_id = export_service.queue_export(wb, rid, int8=bool(int8), owner_id=access.owner_id())
    except WorkbenchError as exc:
        log.warning("export of run %s refused: %s", rid, exc)
        return f"✘ {fmt.ui_message(exc)}"
    access.record(wb, "export", "run", rid, {"job": job_id})
    variants = "fp32 and int8" if int8 else "fp32"
    return (f"✔ Queued export job #{job_id} of run #{rid} ({variants}): its state and, when it is done, its "
            "parity and speed report appear below.")


@dataclasses.dataclass
class ExportPanel:
    """The Export tab's components."""

    note: gr.Markdown
    int8: gr.Checkbox
    button: gr.Button
    status: gr.Markdown
    state: gr.HTML
    table: gr.Dataframe
    shown_key: gr.Textbox  # polling.page_key

    @property
    def values(self) -> list:
        """The outputs ``on_run`` fills, in its order."""
        return [self.note, self.button, self.state, self.table, self.shown_key]


def build_panel() -> ExportPanel:
    """The tab (inside the run details' Tabs)."""
    with gr.Tab("Export", id="export", elem_id="run-export-tab"):
        note = gr.Markdown(NO_RUN_NOTE, elem_id="run-export-note", elem_classes="wb-muted")
        with gr.Row():
            int8 = gr.Checkbox(True, label="Also write the int8 variant (smaller and faster on CPU)",
                               elem_id="run-export-int8")
            button = gr.Button("Export to ONNX", variant="primary", interactive=False, elem_id="run-export")
        status = gr.Markdown(elem_id="run-export-status")
        state = gr.HTML(elem_id="run-export-state")
        table = gr.Dataframe(headers=EXPORT_HEADERS, interactive=False, label="Runtimes compared on the validation "
                             "split (PyTorch first)", elem_id="run-export-table")
        shown_key = polling.page_key("export-shown-key")
    return ExportPanel(note, int8, button, status, state, table, shown_key)


def on_run(wb, rid: Any) -> tuple:
    """The tab's values for a newly selected run (``ExportPanel.values`` order)."""
    v = export_values(wb, rid)
    return v.note, gr.update(interactive=v.can_export), v.state, v.rows, v.key


def on_tick(wb, rid: Any, last_key: str) -> tuple:
    """Everything again when the export's (or the run's) state changed; skipped otherwise (one narrow query)."""
    rid_ = fmt.positive_id(rid)
    key = "none" if rid_ is None else export_service.export_key(wb, rid_)
    if key == last_key:
        return (*[gr.skip()] * 4, last_key)
    return on_run(wb, rid)


def wire(wb, panel: ExportPanel, run_id: gr.Number, timer: gr.Timer) -> None:
    """Follow the selected run; queue an export; refresh on the run page's timer when something changed."""
    run_id.change(lambda rid: on_run(wb, rid), [run_id], panel.values, show_progress="hidden")
    timer.tick(lambda rid, key: on_tick(wb, rid, key), [run_id, panel.shown_key], panel.values,
               show_progress="hidden", queue=False)

    def on_export(rid, int8):
        return (queue_export(wb, rid, int8), *on_run(wb, rid))

    panel.button.click(on_export, [run_id, panel.int8], [panel.status, *panel.values])
