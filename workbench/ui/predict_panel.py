"""The run page's Predict tab: put a succeeded run's model to work on whole files.

"Predict a file" queues a prediction job over an uploaded file and "Evaluate on a test set" an evaluation on
a stored dataset or a labelled upload. Below them, the run's past jobs (refreshed by the run page's timer)
and the output files of the one picked, to download. Jobs are runs of another kind on the same queue
(``workbench.services.predictions``): the Runs table lists them too, and their own details show them.
Nothing is remembered here between ticks but a key that says whether the job table changed.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Callable, Optional

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.services import datasets as data_service
from workbench.services import predictions as predict_service
from workbench.services import runs as runs_service
from workbench.ui import access, polling
from workbench.ui import format as fmt
from workbench.ui.uploads import received_file

log = logging.getLogger(__name__)
JOB_HEADERS = ["Job", "Kind", "Status", "Rows", "Rows/s", "ETA", "Score", "Created"]
OUTPUT_FORMATS = ("csv", "jsonl", "parquet")
AUTO = "auto-detect"
INPUT_FORMATS = (AUTO, "csv", "tsv", "jsonl", "txt", "conll", "squad")
NO_RUN_NOTE = "Pick a run first (click its row in the Runs table): a succeeded run's model labels whole files here."


def model_run(wb, rid: Any) -> tuple[Optional[dict[str, Any]], str]:
    """The run whose model this tab puts to work (a job's own model run when a job is selected), and the note
    that says why it cannot predict now ("" when it can)."""
    rid = fmt.positive_id(rid)
    if rid is None:
        return None, NO_RUN_NOTE
    try:
        run = fmt.as_dict(runs_service.get_run(wb, rid))
    except WorkbenchError as exc:
        return None, fmt.ui_message(exc)
    if fmt.is_job(run):
        parent = fmt.positive_id(run.get("parent_run_id"))
        note = (f"This is {fmt.kind_label(run)} #{rid} of run #{parent}: its files are below. "
                f"Open run #{parent} to label or score another file.")
        return (fmt.as_dict(runs_service.get_run(wb, parent)) if parent else None), note
    if run.get("status") != "succeeded":
        return run, (f"Run #{rid} is {run.get('status')}: only a succeeded training run has a model that can "
                     "label files.")
    return run, ""


def test_set_choices(wb, task: str) -> list[tuple[str, str]]:
    """The stored datasets of ``task`` as (label, id): any of them can be a test set."""
    return [(f"{d.name} · {d.id}", str(d.id)) for d in data_service.list_datasets(wb, task=task)]


def job_row(job: dict[str, Any]) -> list[Any]:
    """One row of the job table, in ``JOB_HEADERS`` order."""
    return [job.get("id"), job.get("kind"), fmt.status_label(str(job.get("status", ""))), fmt.job_rows_text(job),
            fmt.rate_text(fmt.job_rate(job)), fmt.job_eta_text(job), fmt.score_text(job.get("metrics")),
            fmt.format_time(job.get("created_at"))]


def finished_choices(jobs: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The jobs whose files can be downloaded: (label, job id), newest first."""
    return [(f"#{job['id']} {job.get('kind')} · {job.get('input_name') or job.get('dataset_id') or ''}".strip(),
             int(job["id"])) for job in jobs if job.get("status") == "succeeded"]


def job_table(wb, model_run_id: Optional[int]) -> tuple[list[list[Any]], list[tuple[str, int]], str]:
    """The jobs of the model run: table rows, download choices, and a key that changes with any of them."""
    if model_run_id is None:
        return [], [], "none"
    jobs = [fmt.as_dict(j) for j in predict_service.list_jobs(wb, run_id=model_run_id)]
    rows = [job_row(job) for job in jobs]
    return rows, finished_choices(jobs), json.dumps([model_run_id, rows], default=str)


def job_header(run: dict[str, Any], outputs: list[str]) -> str:
    """The details header of a prediction or evaluation job: what it reads, how far it is, what it wrote."""
    spec = run.get("spec") or {}
    parent = run.get("parent_run_id")
    source = (f"test set <code>{fmt.html.escape(str(run.get('dataset') or spec.get('dataset_id') or ''))}</code>"
              if run.get("kind") == "evaluate" else
              f"input <code>{fmt.html.escape(str(run.get('input_name') or spec.get('input_name') or ''))}</code>")
    reads = spec.get("reads") or (run.get("metrics") or {}).get("columns") or {}
    if run.get("kind") == "predict" and isinstance(reads, dict) and reads:
        source += " · reads " + fmt.html.escape(predict_service.reads_text(reads))
    title = (f"<h3 id='run-title'>#{run.get('id')} {fmt.html.escape(fmt.run_name(run))}</h3>"
             f"<p class='wb-muted' id='job-facts'>{fmt.kind_label(run)} with the model of run #{parent} "
             f"(<code>{fmt.html.escape(fmt.model_name(run.get('model')))}</code>) · {source} · created "
             f"{fmt.format_time(run.get('created_at'))}</p>")
    status = str(run.get("status", ""))
    done, total = fmt.job_counts(run)
    shown = 1.0 if status == "succeeded" else (done / total if total and done is not None else run.get("progress"))
    label = f"{fmt.status_label(status)} · {fmt.job_progress_text(run)}"
    body = (title + f"<div id='run-status' data-status='{status}' data-kind='{run.get('kind')}'>"
            + fmt.progress_html(shown, status, label) + "</div>")
    if run.get("kind") == "evaluate" and status == "succeeded":  # the test-set score, with its interval
        metrics = run.get("metrics") or {}
        body += fmt.score_line_html(str(run.get("task", "")), metrics, "Test-set", metrics.get("rows"))
        facts = fmt.test_set_facts_text(metrics)
        if facts:  # what was scored: repeated rows kept or dropped, rows cut to the max length
            body += f"<p class='wb-muted' id='job-test-set'>{fmt.html.escape(facts)}</p>"
        body += fmt.baseline_html(metrics)  # fitted on the run's training split, scored on this test set
    if outputs:
        names = ", ".join(f"<code>{fmt.html.escape(name)}</code>" for name in outputs)
        body += f"<p id='job-outputs'>Output: {names} — download from the Predict tab.</p>"
    if run.get("error"):
        body += f"<div class='wb-error'><b>{fmt.html.escape(str(run['error']))}</b></div>"
    return body


def output_names(wb, run: dict[str, Any]) -> list[str]:
    """The file names a finished job wrote (none before it succeeded)."""
    if run.get("status") != "succeeded":
        return []
    return [Path(path).name for path in predict_service.job_outputs(wb, int(run["id"]))]


def _key(note: str, jobs_key: str) -> str:
    """What the tab shows, in one string: the note (the run's state) and the job table."""
    return json.dumps([note, jobs_key])


@dataclasses.dataclass
class PanelValues:
    """What the tab shows for the selected run (``outputs`` order of ``PredictPanel.values``)."""

    note: str
    can_predict: bool
    test_sets: list[tuple[str, str]]
    rows: list[list[Any]]
    choices: list[tuple[str, int]]
    picked: Optional[int]
    key: str


def panel_values(wb, rid: Any) -> PanelValues:
    """Everything the tab shows when a run is selected; a selected job is picked for download at once."""
    run, note = model_run(wb, rid)
    model_id = fmt.positive_id((run or {}).get("id"))
    rows, choices, jobs_key = job_table(wb, model_id)
    key = _key(note, jobs_key)
    can = run is not None and not note
    test_sets = test_set_choices(wb, str(run.get("task"))) if can else []
    return PanelValues(note, can, test_sets, rows, choices, _pick(choices, fmt.positive_id(rid)), key)


def _pick(choices: list[tuple[str, int]], wanted: Any) -> Optional[int]:
    """The job to offer for download: ``wanted`` when it is finished, else the newest finished job."""
    values = [value for _, value in choices]
    wanted = fmt.positive_id(wanted)
    return wanted if wanted in values else (values[0] if values else None)


def said(action: Callable[..., str], *args: Any) -> str:
    """``action(*args)``'s message, or its refusal as a "✘" line where the message shows (never a bare badge)."""
    try:
        return action(*args)
    except (WorkbenchError, gr.Error) as exc:
        message = exc.message if isinstance(exc, gr.Error) else str(exc)
        log.warning("%s refused: %s", getattr(action, "__name__", "action"), " ".join(str(message).split()))
        return f"✘ {fmt.ui_message(message)}"


def _columns(text: str, pair: str) -> Optional[dict[str, str]]:
    """The column mapping the user typed (``ColumnMapping.to_dict()`` keys), or None to detect it."""
    given = {"text": (text or "").strip(), "text_pair": (pair or "").strip()}
    return {key: value for key, value in given.items() if value} or None


def _format(value: Optional[str]) -> Optional[str]:
    return None if value in (None, "", AUTO) else value


def runtime_choices(wb, rid: Any) -> list[tuple[str, str]]:
    """What can predict for the selected run, as (label, runtime): ``pytorch`` and the variants of its newest
    ONNX export (one marked "check before use" says so)."""
    run_id = fmt.positive_id(rid)
    return predict_service.runtime_options(wb, run_id) if run_id is not None else [("pytorch", "pytorch")]


def runtime_update(wb, rid: Any, current: Optional[str] = None):
    """The runtime dropdown for the selected run, keeping ``current`` while it is still a choice."""
    choices = runtime_choices(wb, rid)
    return gr.update(choices=choices, value=current if current in [v for _, v in choices] else "pytorch")


def _dataset_text(wb, dataset_id: str) -> str:
    """``**sms-test** (3f9a0c)``: a stored dataset by its name, its id beside it."""
    try:
        name = fmt.as_dict(data_service.get_dataset(wb, dataset_id)).get("name")
    except WorkbenchError:
        return dataset_id
    return f"**{name}** ({dataset_id})" if name else dataset_id


def queue_prediction(wb, rid: Any, upload: Any, input_format: str, text: str, pair: str, output_format: str,
                     dataset_id: Optional[str] = None, runtime: Optional[str] = None) -> str:
    """Queue a prediction job over the uploaded file (else the picked stored dataset) with the selected run's model
    (``runtime``: PyTorch, or an ONNX variant of the run's newest export)."""
    run, note = model_run(wb, rid)
    if note:
        raise gr.Error(note)
    runtime = runtime or "pytorch"
    path = received_file(upload, "file to label")
    if path is None and (dataset_id or "").strip():  # a pick from the list: a stored dataset, never a server path
        job_id = predict_service.submit_dataset_prediction(wb, int(run["id"]), dataset_id.strip(),
                                                           output_format=output_format or "csv", runtime=runtime,
                                                           owner_id=access.owner_id())
        access.record(wb, "create", "run", job_id, {"predicts_with": int(run["id"])})
        return (f"✔ Queued prediction job #{job_id} for dataset {_dataset_text(wb, dataset_id.strip())}: it appears "
                "in the table below, and its file can be downloaded there once it has succeeded.")
    if path is None:
        raise gr.Error("Upload the file to label first (CSV, TSV, JSONL, text, CoNLL or SQuAD JSON), or pick a "
                       "stored dataset.")
    name = path.name  # Gradio keeps the browser's file name in its upload folder
    job_id = predict_service.submit_prediction(wb, int(run["id"]), path, input_name=name,
                                               input_format=_format(input_format), columns=_columns(text, pair),
                                               output_format=output_format or "csv", runtime=runtime,
                                               owner_id=access.owner_id())
    access.record(wb, "create", "run", job_id, {"predicts_with": int(run["id"])})
    reads = predict_service.get_job(wb, job_id)["reads"]
    return (f"✔ Queued prediction job #{job_id} for {name}" + (f", reading the {predict_service.reads_text(reads)}"
                                                                 if reads else "")
            + ": it appears in the table below, and its file can be downloaded there once it has succeeded.")


def queue_evaluation(wb, rid: Any, dataset_id: Optional[str], upload: Any, text: str, pair: str) -> str:
    """Queue an evaluation of the selected run on a stored test set or an uploaded labelled file."""
    run, note = model_run(wb, rid)
    if note:
        raise gr.Error(note)
    path = received_file(upload, "labelled file")
    if path is None and not (dataset_id or "").strip():
        raise gr.Error("Pick a stored test set or upload a labelled file.")
    if path is not None:
        job_id = predict_service.submit_evaluation(wb, int(run["id"]), str(path), columns=_columns(text, pair),
                                                   owner_id=access.owner_id())
    else:  # a pick from the list: a stored dataset, never a path on the server
        job_id = predict_service.submit_evaluation(wb, int(run["id"]), dataset_id.strip(), files=False,
                                                   owner_id=access.owner_id())
    access.record(wb, "create", "run", job_id, {"evaluates": int(run["id"])})
    what = path.name if path is not None else f"dataset {dataset_id.strip()}"
    return (f"✔ Queued evaluation job #{job_id} on {what}: its scores appear in the table below, and its details "
            "(metrics, per-class table, confusion matrix, errors) open from the Runs table.")


def job_files(wb, job_id: Any) -> list[str]:
    """The output files of a finished job, for the download box."""
    job_id = fmt.positive_id(job_id)
    if job_id is None:
        return []
    return [str(path) for path in predict_service.job_outputs(wb, job_id)]


@dataclasses.dataclass
class PredictPanel:
    """The Predict tab's components."""

    note: gr.Markdown
    forms: gr.Column
    upload: gr.File
    dataset: gr.Dropdown
    input_format: gr.Dropdown
    text_column: gr.Textbox
    pair_column: gr.Textbox
    output_format: gr.Radio
    runtime: gr.Dropdown
    predict: gr.Button
    predict_status: gr.Markdown
    test_set: gr.Dropdown
    labelled: gr.File
    evaluate: gr.Button
    evaluate_status: gr.Markdown
    jobs: gr.Dataframe
    pick: gr.Dropdown
    files: gr.File
    shown_key: gr.Textbox  # polling.page_key

    @property
    def values(self) -> list:
        """The outputs ``on_run`` fills, in its order."""
        return [self.note, self.forms, self.dataset, self.test_set, self.jobs, self.pick, self.shown_key]


def _build_predict() -> tuple:
    with gr.Group():
        gr.Markdown("**Predict a file** — every row labelled by this run's model; the output is the file's own "
                    "columns plus the predictions.")
        with gr.Row():
            upload = gr.File(label="File to label (CSV, TSV, JSONL, text, CoNLL, SQuAD JSON)", type="filepath",
                             elem_id="predict-upload", scale=2)
            dataset = gr.Dropdown([], label="… or a stored dataset (its records, training then validation split)",
                                  elem_id="predict-dataset", scale=2)
        with gr.Row():
            input_format = gr.Dropdown(list(INPUT_FORMATS), value=AUTO, label="Format", min_width=120)
            text_column = gr.Textbox(label="Text column (empty: detected)", elem_id="predict-text-column")
            pair_column = gr.Textbox(label="Second text column (pairs)", elem_id="predict-pair-column")
            output_format = gr.Radio(list(OUTPUT_FORMATS), value="csv", label="Output format",
                                     elem_id="predict-output-format")
            runtime = gr.Dropdown(["pytorch"], value="pytorch", label="Runtime", elem_id="predict-runtime",
                                  min_width=140, info="pytorch, or an ONNX variant of the run's newest export")
        predict = gr.Button("Predict this file", variant="primary", elem_id="predict-go")
        predict_status = gr.Markdown(elem_id="predict-status")
    return (upload, dataset, input_format, text_column, pair_column, output_format, runtime, predict,
            predict_status)


def _build_evaluate() -> tuple:
    with gr.Group():
        gr.Markdown("**Evaluate on a test set** — the run's task metrics, per-class table, confusion matrix and "
                    "errors on a labelled file it never saw.")
        with gr.Row():
            test_set = gr.Dropdown([], label="Stored test set", elem_id="evaluate-test-set", scale=2)
            labelled = gr.File(label="… or upload a labelled file", type="filepath", elem_id="evaluate-upload",
                               scale=2)
        evaluate = gr.Button("Evaluate", elem_id="evaluate-go")
        evaluate_status = gr.Markdown(elem_id="evaluate-status")
    return test_set, labelled, evaluate, evaluate_status


def build_panel() -> PredictPanel:
    """The tab's components (inside the run details' Tabs)."""
    note = gr.Markdown(NO_RUN_NOTE, elem_id="predict-note", elem_classes="wb-muted")
    with gr.Column(visible=False) as forms:
        predict_parts = _build_predict()
        test_set, labelled, evaluate, evaluate_status = _build_evaluate()
    jobs = gr.Dataframe(headers=JOB_HEADERS, interactive=False, label="This run's prediction and evaluation jobs",
                        elem_id="predict-jobs", max_height=300)
    with gr.Row():
        pick = gr.Dropdown([], label="Finished job to download", elem_id="predict-pick", scale=1)
        files = gr.File(label="Its output files", file_count="multiple", interactive=False,
                        elem_id="predict-download", scale=2)
    return PredictPanel(note, forms, *predict_parts, test_set, labelled, evaluate, evaluate_status, jobs, pick,
                        files, polling.page_key("predict-shown-key"))


def on_run(wb, rid: Any) -> tuple:
    """The tab's values for a newly selected run (``PredictPanel.values`` order)."""
    v = panel_values(wb, rid)
    return (v.note, gr.update(visible=v.can_predict), gr.update(choices=v.test_sets, value=None),
            gr.update(choices=v.test_sets, value=None), v.rows, gr.update(choices=v.choices, value=v.picked), v.key)


def on_tick(wb, rid: Any, last_key: str, picked: Any = None) -> tuple:
    """The job table again (skipped when unchanged); everything again when the run's state changed, as when
    the selected run has just finished training and can now predict. A job that has just finished is
    offered for download unless another finished one is picked."""
    run, note = model_run(wb, rid)
    rows, choices, jobs_key = job_table(wb, fmt.positive_id((run or {}).get("id")))
    key = _key(note, jobs_key)
    if key == last_key:
        return (*[gr.skip()] * 6, last_key)
    if not last_key or json.loads(last_key)[0] != note:
        return on_run(wb, rid)
    pick = polling.picker_update(choices, fmt.positive_id(picked), _pick(choices, picked))
    return gr.skip(), gr.skip(), gr.skip(), gr.skip(), rows, pick, key


def wire(wb, panel: PredictPanel, run_id: gr.Number, timer: gr.Timer) -> None:
    """Follow the selected run; queue jobs; refresh the table on the run page's timer; show a job's files."""
    run_id.change(lambda rid: on_run(wb, rid), [run_id], panel.values, show_progress="hidden")
    timer.tick(lambda rid, key, picked: on_tick(wb, rid, key, picked), [run_id, panel.shown_key, panel.pick],
               panel.values, show_progress="hidden", queue=False)

    def on_predict(rid, upload, dataset_id, input_format, text, pair, output_format, runtime):
        return said(queue_prediction, wb, rid, upload, input_format, text, pair, output_format, dataset_id, runtime)

    # the choices follow the selected run, and are read again on focus: an export may have finished since
    run_id.change(lambda rid: runtime_update(wb, rid), [run_id], [panel.runtime], show_progress="hidden")
    panel.runtime.focus(lambda rid, current: runtime_update(wb, rid, current), [run_id, panel.runtime],
                        [panel.runtime], show_progress="hidden")

    def on_evaluate(rid, dataset_id, upload, text, pair):
        return said(queue_evaluation, wb, rid, dataset_id, upload, text, pair)

    panel.predict.click(on_predict, [run_id, panel.upload, panel.dataset, panel.input_format, panel.text_column,
                                     panel.pair_column, panel.output_format, panel.runtime], [panel.predict_status])
    panel.evaluate.click(on_evaluate, [run_id, panel.test_set, panel.labelled, panel.text_column,
                                       panel.pair_column], [panel.evaluate_status])

    def on_pick(job_id):
        return gr.update(value=job_files(wb, job_id) or None)

    panel.pick.change(on_pick, [panel.pick], [panel.files], show_progress="hidden")

    def on_job_row(evt: gr.SelectData, rows):
        """A finished job's row picks it for download (the others have nothing to download yet)."""
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        finished = "succeeded" in str(rows.iloc[row, 2])
        return gr.update(value=int(rows.iloc[row, 0])) if finished else gr.skip()

    panel.jobs.select(on_job_row, [panel.jobs], [panel.pick])
