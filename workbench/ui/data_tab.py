"""Data tab: upload → detected format, column mapping, preview, problems with line numbers, plots, import;
the stored datasets, and finding their suspicious labels (``workbench.ui.audit_panel``).

Layout and event wiring only; the work is done by ``workbench.services.datasets``.
``check_file`` and ``import_file`` are plain functions (tested without a browser)
that turn a service result into the values the components show.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Optional

import gradio as gr
import pandas as pd

from workbench.services.specs import TASKS
from workbench.errors import DataValidationError, WorkbenchError
from workbench.services import datasets as data_service
from workbench.ui import access, audit_panel
from workbench.ui import format as fmt
from workbench.ui import plots
from workbench.ui.uploads import received_file

log = logging.getLogger(__name__)
AUTO = "auto-detect"
FORMATS = (AUTO, "csv", "tsv", "jsonl", "conll", "squad", "text")
DATASET_HEADERS = ["ID", "Name", "Task", "Format", "Train", "Validation", "Labels", "Created", "Owner"]
SUBTOKEN_HEADERS = ["Example", "Word", "Sub-tokens", "Label given to each sub-token"]
# More bars than this are a smear (a POS tag set has 50–150 tags): the rest are summed into one "other" bar.
LABEL_BARS = 20
VALIDATION_PREVIEW_ROWS = 5


@dataclasses.dataclass
class DataView:
    """Everything the Data tab shows about one checked file."""

    status: str
    problems: list[list[Any]]
    preview: pd.DataFrame
    labels: pd.DataFrame
    lengths: pd.DataFrame
    lengths_caption: str
    subtokens: list[list[Any]]
    columns: list[str]
    mapping: dict[str, Optional[str]]
    ok: bool
    subtokens_title: str = ""
    label_count: int = 0  # labels in the file; the chart shows at most LABEL_BARS bars
    lengths_title: str = plots.LENGTH_TITLE  # says so when the histogram stops at p99


def _columns_arg(text: str, pair: str, label: str, separator: str) -> Any:
    values = {"text": text or None, "text_pair": pair or None, "label": label or None,
              "label_separator": separator or None}
    if not any(values.values()):
        return None
    mapping_type = getattr(data_service, "ColumnMapping", None)
    return mapping_type(**values) if mapping_type else values


def _report_mapping(report: dict[str, Any]) -> tuple[list[str], dict[str, Optional[str]]]:
    """Column names to offer and the mapping the service chose (``report["columns"]``)."""
    columns = fmt.as_dict(report.get("columns") or {})
    mapping = fmt.as_dict(columns.get("mapping") or columns)
    mapping = {k: mapping.get(k) for k in ("text", "text_pair", "label", "label_separator")}
    details = fmt.as_dict(report.get("details") or {})
    detected = list(details.get("header") or columns.get("detected") or [])
    detected += [v for k, v in mapping.items() if v and k != "label_separator" and v not in detected]
    return detected, mapping


def _token_stats(report: dict[str, Any]) -> dict[str, Any]:
    for key in ("token_lengths", "token_stats", "lengths"):
        if report.get(key):
            return fmt.as_dict(report[key])
    return {}


def _summary(report: dict[str, Any], name: str) -> str:
    labels = report.get("labels") or {}
    parts = [f"**{name}** · task `{report.get('task')}` · format **{report.get('format')}** (detected)",
             f"**{report.get('examples', 0):,}** examples"]
    if labels:
        parts.append(f"{len(labels)} labels")
    warnings = report.get("warnings") or []
    status = "✔ " + " · ".join(parts)
    if warnings:
        status += f" · ⚠ {len(warnings)} warning(s), repaired on import (listed below with their lines)"
    return status


def check_file(wb, path: str | None, task: str, file_format: str = AUTO, text: str = "", pair: str = "",
               label: str = "", separator: str = "", max_length: int = 128) -> DataView:
    """Inspect an uploaded file with the dataset service; problems become rows, not exceptions."""
    empty = pd.DataFrame()
    if not path:
        return DataView("Upload a file, or try an example.", [], empty, plots.label_distribution({}),
                        plots.token_length_frame({}), "", [], [], {}, False)
    name = Path(path).name
    try:
        report = data_service.validate_file(
            wb, Path(path), task, format=None if file_format in (AUTO, "", None) else file_format,
            columns=_columns_arg(text, pair, label, separator), max_length=int(max_length))
    except DataValidationError as exc:
        status = (f"✘ **{name}** cannot be used: {len(exc.problems)} problem(s). Fix them and upload again.\n\n"
                  + fmt.problems_markdown(exc.problems))
        return DataView(status, fmt.problems_rows(exc.problems), empty, plots.label_distribution({}),
                        plots.token_length_frame({}), "", [], [], {}, False)
    except WorkbenchError as exc:
        return DataView(f"✘ {exc}", [], empty, plots.label_distribution({}), plots.token_length_frame({}), "",
                        [], [], {}, False)
    report = fmt.as_dict(report)
    detected, mapping = _report_mapping(report)
    stats = _token_stats(report)
    preview_rows = [fmt.as_dict(r) for r in (report.get("preview") or [])][:20]
    preview = pd.DataFrame([{k: fmt.short_value(v, 110) for k, v in row.items()} for row in preview_rows])
    subtokens = subtoken_rows(preview_rows[:3]) if task == "token-classification" else []
    return DataView(_summary(report, name), fmt.problems_rows(report.get("warnings") or []), preview,
                    plots.label_distribution(report.get("labels"), top=LABEL_BARS), plots.token_length_frame(stats),
                    plots.token_length_caption(stats), subtokens, detected, mapping, True,
                    subtoken_title(preview_rows) if subtokens else "", len(report.get("labels") or {}),
                    plots.token_length_title(stats))


def validation_view(view: DataView, path: str | None) -> tuple[str, list[list[Any]], pd.DataFrame]:
    """The validation file's check as (status, problems, a short preview) — the same check as the training file."""
    if not path:
        return "", [], pd.DataFrame()
    status = view.status.replace("✔ ", "✔ Validation file: ", 1) if view.ok else view.status.replace(
        "✘ ", "✘ Validation file: ", 1)
    return status, view.problems, view.preview.head(VALIDATION_PREVIEW_ROWS)


def subtoken_title(records: list[dict[str, Any]]) -> str:
    """The sub-token table's title: "NER" only when the tags are BIO entity tags, else tagging (POS, chunks)."""
    tags = {str(t) for r in records for t in (r.get("tags") or [])}
    bio = bool(tags) and all(t == "O" or t[:2] in ("B-", "I-") for t in tags)
    kind = "NER" if bio else "Tagging"
    return f"{kind}: how sub-tokens get labels (the first sub-token of a word carries its tag)"


def subtoken_rows(records: list[dict[str, Any]], tokenizer: Any = None) -> list[list[Any]]:
    """How words become sub-tokens and which sub-token carries the label (first one; the rest are ignored).

    Shown for NER so a user sees why ``entity_f1`` counts words, not word pieces.
    """
    try:
        tokenizer = tokenizer or data_service.default_tokenizer()
    except Exception as exc:  # no tokenizer offline: the preview is optional
        log.warning("sub-token preview unavailable: %s", exc)
        return []
    rows = []
    for number, record in enumerate(records, 1):
        words, tags = record.get("tokens") or [], record.get("tags") or []
        encoding = tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=64)
        pieces: dict[int, list[str]] = {}
        for token, word in zip(encoding.tokens(), encoding.word_ids()):
            if word is not None:
                pieces.setdefault(word, []).append(token)
        for index, word in enumerate(words[:12]):
            subs = pieces.get(index, [])
            tag = tags[index] if index < len(tags) else "?"
            given = " ".join([tag] + ["(ignored)"] * (len(subs) - 1)) if subs else "(truncated)"
            rows.append([number, word, " ".join(subs), given])
    return rows


def dataset_rows(wb) -> list[list[Any]]:
    from workbench.services import accounts

    owners, rows = accounts.owner_names(wb), []
    for item in data_service.list_datasets(wb):
        d = fmt.as_dict(item)
        labels = d.get("labels") or {}
        rows.append([d.get("id"), d.get("name"), d.get("task"), d.get("format"), d.get("train", d.get("num_train")),
                     d.get("validation", d.get("num_validation")), ", ".join(list(map(str, labels))[:8]),
                     fmt.format_time(d.get("created_at")), _owner_name(wb, owners, d.get("id"))])
    return rows


def _owner_name(wb, owners: dict, dataset_id: Any) -> str:
    """Who made a dataset ("" without accounts, or for one made before them)."""
    if not owners:
        return ""
    from workbench.services import accounts

    try:
        return owners.get(accounts.owner_of(wb, "dataset", dataset_id), "")
    except WorkbenchError:
        return ""


def import_file(wb, path: str | None, task: str, file_format: str, text: str, pair: str, label: str,
                separator: str, name: str, validation_file: str | None, fraction: float, seed: int) -> tuple[str, str]:
    """Import the checked file; returns a status line and the stored dataset's id (problems raise, ``on_import``
    shows them)."""
    if not path:
        raise gr.Error("Upload a file first.")
    summary = data_service.import_dataset(
        wb, Path(path), task, name=name or None, format=None if file_format in (AUTO, "", None) else file_format,
        columns=_columns_arg(text, pair, label, separator),
        validation_path=Path(validation_file) if validation_file else None,
        validation_fraction=float(fraction), seed=int(seed), owner_id=access.owner_id())
    s = fmt.as_dict(summary)
    if not s.get("reused"):
        access.record(wb, "create", "dataset", s.get("id"))
    verb = "Already stored as" if s.get("reused") else "Imported as"
    return (f"✔ {verb} **{s.get('name')}** (`{s.get('id')}`): {s.get('train')} train / "
            f"{s.get('validation')} validation examples. Next: **Train on this dataset** below.", str(s.get("id")))


def dataset_to_train(wb, selected: str | None, task: str) -> tuple[str, str]:
    """(dataset id, task) for **Train on this dataset**: the selected dataset, else the only stored one (nothing
    to choose between); with several and none selected, a ``gr.Error`` asks for a click."""
    if (selected or "").strip():
        return selected.strip(), task
    stored = data_service.list_datasets(wb)
    if len(stored) == 1:
        only = fmt.as_dict(stored[0])
        return str(only["id"]), str(only.get("task") or task)
    raise gr.Error("Pick a dataset first (click its row).")


def example_choices() -> dict[str, Path]:
    """The shipped example datasets, one per task, by task name (missing files are left out)."""
    examples = {}
    for task in getattr(data_service, "EXAMPLES", {}):
        path = data_service.example_path(task)
        if path.is_file():
            examples[task] = path
    return examples


@dataclasses.dataclass
class DataTab:
    datasets: gr.Dataframe
    use_dataset: gr.Button
    selected_dataset: gr.Textbox
    task: gr.Dropdown
    import_event: Any  # the events that change the stored datasets (other tabs' pickers follow them)
    delete_event: Any
    audit: audit_panel.AuditPanel  # "Find suspicious labels"; its save is a third such event
    selects: list  # the events that change the selected dataset (a row click, a delete, an import): the address follows


@dataclasses.dataclass
class _Source:
    """The training file, its task, format and max length, the examples and the column mapping."""

    task: gr.Dropdown
    file_format: gr.Dropdown
    max_length: gr.Slider
    upload: gr.File
    examples: dict[str, Path]
    example_buttons: dict[str, gr.Button]
    mapping_box: gr.Accordion
    text_col: gr.Dropdown
    pair_col: gr.Dropdown
    label_col: gr.Dropdown
    separator: gr.Textbox
    recheck: gr.Button

    @property
    def inputs(self) -> list:
        """What ``check_file`` reads, in its order (the file first)."""
        return [self.upload, self.task, self.file_format, self.text_col, self.pair_col, self.label_col,
                self.separator, self.max_length]


def _build_source() -> _Source:
    gr.Markdown("Upload a labelled file. It is checked as soon as it arrives; nothing is stored until you "
                "press **Import**.", elem_classes="wb-muted")
    with gr.Row():
        with gr.Column(scale=2):
            with gr.Row():
                task = gr.Dropdown(list(TASKS), value=TASKS[0], label="Task", elem_id="data-task")
                file_format = gr.Dropdown(list(FORMATS), value=AUTO, label="Format")
                max_length = gr.Slider(16, 512, value=128, step=16, label="Max length (tokens)")
            upload = gr.File(label="Training file (CSV, TSV, JSONL, CoNLL, SQuAD JSON, text)", type="filepath",
                             elem_id="data-upload")
            examples = example_choices()
            if examples:
                with gr.Row():
                    gr.Markdown("**Try an example:**")
                    example_buttons = {t: gr.Button(t, size="sm", variant="secondary", min_width=120,
                                                    elem_id=f"example-{t}") for t in examples}
            else:
                example_buttons = {}
        with gr.Column(scale=1):
            with gr.Accordion("Column mapping", open=True) as mapping_box:
                text_col = gr.Dropdown([], label="Text column", allow_custom_value=True)
                pair_col = gr.Dropdown([], label="Second text column (pairs)", allow_custom_value=True)
                label_col = gr.Dropdown([], label="Label column", allow_custom_value=True)
                separator = gr.Textbox(label="Multi-label separator", placeholder="e.g. | (empty: one label)")
                recheck = gr.Button("Check again with this mapping", size="sm")
    return _Source(task, file_format, max_length, upload, examples, example_buttons, mapping_box, text_col,
                   pair_col, label_col, separator, recheck)


@dataclasses.dataclass
class _Check:
    """What the check of the training file shows: status, problems, preview, plots, sub-tokens."""

    status: gr.Markdown
    problems: gr.Dataframe
    preview: gr.Dataframe
    label_plot: gr.HTML
    length_plot: gr.HTML
    length_caption: gr.Markdown
    subtokens: gr.Dataframe


def _build_check() -> _Check:
    status = gr.Markdown(elem_id="data-status")
    problems = gr.Dataframe(headers=fmt.PROBLEM_HEADERS, label="Problems and warnings", interactive=False,
                            visible=False, wrap=True, elem_id="data-problems",
                            column_widths=["9%", "14%", "6%", "9%", "31%", "31%"])
    # hidden until a file is checked: an empty table without columns is headed "1 2 3"
    preview = gr.Dataframe(label="Preview (first 20 records, as the trainer will read them)", interactive=False,
                           wrap=True, max_height=360, elem_id="data-preview", visible=False)
    with gr.Row():
        label_plot = gr.HTML(elem_id="data-labels")
        length_plot = gr.HTML(elem_id="data-lengths")
    length_caption = gr.Markdown()
    subtokens = gr.Dataframe(headers=SUBTOKEN_HEADERS, label="How sub-tokens get labels", visible=False,
                             interactive=False, elem_id="data-subtokens", max_height=300)
    return _Check(status, problems, preview, label_plot, length_plot, length_caption, subtokens)


@dataclasses.dataclass
class _Import:
    """The import accordion: the dataset's name, its validation file or split, and the import button."""

    name: gr.Textbox
    validation_file: gr.File
    fraction: gr.Slider
    seed: gr.Number
    validation_status: gr.Markdown
    validation_problems: gr.Dataframe
    validation_preview: gr.Dataframe
    button: gr.Button
    status: gr.Markdown


def _build_import() -> _Import:
    with gr.Accordion("Import: name and validation split", open=True):
        with gr.Row():
            name = gr.Textbox(label="Dataset name", placeholder="defaults to the file name")
            validation_file = gr.File(label="Validation file (optional)", type="filepath", height=150,
                                      elem_id="data-validation")
            fraction = gr.Slider(0.02, 0.5, value=0.1, step=0.01, label="Validation share (when no file)")
            seed = gr.Number(13, label="Split seed", precision=0)
        validation_status = gr.Markdown(elem_id="data-validation-status")
        validation_problems = gr.Dataframe(headers=fmt.PROBLEM_HEADERS, label="Validation file: problems and warnings",
                                           interactive=False, visible=False, wrap=True,
                                           elem_id="data-validation-problems")
        validation_preview = gr.Dataframe(label="Validation file: first records", interactive=False, wrap=True,
                                          visible=False, max_height=240, elem_id="data-validation-preview")
        import_button = gr.Button("Import dataset", variant="primary", elem_id="data-import")
        import_status = gr.Markdown(elem_id="data-import-status")
    return _Import(name, validation_file, fraction, seed, validation_status, validation_problems,
                   validation_preview, import_button, import_status)


@dataclasses.dataclass
class _Stored:
    """The stored datasets: the table, the picked one, train on it or delete it (after a confirmation)."""

    selected: gr.Textbox
    use: gr.Button
    delete: gr.Button
    confirm_row: gr.Row
    confirm_text: gr.Markdown
    confirm_delete: gr.Button
    keep: gr.Button
    status: gr.Markdown  # what the last delete did, or why it was refused (stays until the next one)
    table: gr.Dataframe


def _build_stored() -> _Stored:
    gr.Markdown("### Stored datasets")
    with gr.Row():
        selected_dataset = gr.Textbox(label="Dataset ID", placeholder="click a row", scale=2,
                                      elem_id="data-selected")
        use_dataset = gr.Button("Train on this dataset", variant="primary", scale=1)
        delete_dataset = gr.Button("Delete dataset…", variant="stop", scale=1)
    with gr.Row(visible=False) as confirm_row:
        confirm_text = gr.Markdown()
        confirm_delete = gr.Button("Yes, delete the dataset", variant="stop", size="sm")
        keep_dataset = gr.Button("Keep the dataset", size="sm")
    delete_status = gr.Markdown(elem_id="data-delete-status")
    datasets = gr.Dataframe(headers=DATASET_HEADERS, interactive=False, elem_id="data-datasets", max_height=300)
    return _Stored(selected_dataset, use_dataset, delete_dataset, confirm_row, confirm_text, confirm_delete,
                   keep_dataset, delete_status, datasets)


def build(wb) -> DataTab:
    source = _build_source()
    check = _build_check()
    imports = _build_import()
    stored = _build_stored()
    audit = audit_panel.build(wb, stored.selected, stored.table)

    check_outputs = [check.status, check.problems, check.preview, check.label_plot, check.length_plot,
                     check.length_caption, check.subtokens, source.text_col, source.pair_col, source.label_col]
    _wire_check(wb, source, check_outputs)
    _wire_validation(wb, source, imports)
    import_event = _wire_import(wb, source, imports, stored)
    row_click, delete_event = _wire_stored(wb, stored)
    return DataTab(datasets=stored.table, use_dataset=stored.use, selected_dataset=stored.selected,
                   task=source.task, import_event=import_event, delete_event=delete_event, audit=audit,
                   selects=[row_click, delete_event, import_event])


def _check_values(view: DataView, keep_mapping: bool) -> tuple:
    """What the check's outputs show for ``view``; ``keep_mapping`` keeps the pickers' values (a recheck)."""
    choices = view.columns
    mapping = view.mapping

    def picker(key):
        if keep_mapping or not choices:
            return gr.update(choices=choices or None) if choices else gr.update()
        return gr.update(choices=[""] + choices, value=mapping.get(key) or "")
    return (view.status, gr.update(value=view.problems, visible=bool(view.problems)),
            gr.update(value=view.preview, visible=bool(len(view.preview))),
            plots.bar_chart_svg(view.labels, "label", "count", label_chart_title(view), x_title="label",
                                empty="Upload a file to see its labels."),
            plots.bar_chart_svg(view.lengths, "tokens", "count", view.lengths_title,
                                colour_by="part", x_title="tokens per example",
                                colours={plots.KEPT: "#2563eb", plots.TRUNCATED: "#dc2626"},
                                empty="Token lengths appear here."),
            view.lengths_caption,
            gr.update(value=view.subtokens, visible=bool(view.subtokens),
                      label=view.subtokens_title or "How sub-tokens get labels"),
            picker("text"), picker("text_pair"), picker("label"))


def _wire_check(wb, source: _Source, check_outputs: list) -> None:
    """Upload, clear, recheck, a new max length and the example buttons all check the training file."""
    check_inputs = source.inputs

    # Paths from the browser are checked at this edge (received_file); examples are ours and are not.
    def on_upload(path, task_, fmt_, _t, _p, _l, _s, length):
        return _check_values(check_file(wb, received_file(path), task_, fmt_, max_length=length), keep_mapping=False)

    def on_recheck(path, task_, fmt_, t, p, l, s, length):
        return _check_values(check_file(wb, received_file(path), task_, fmt_, t, p, l, s, length), keep_mapping=True)

    # QA contexts are long: its default window is 384 tokens, the other tasks' 128 (as in the engine).
    source.task.change(lambda t: (384 if t == "question-answering" else 128,
                                  gr.update(visible=t == "text-classification")),
                       [source.task], [source.max_length, source.mapping_box])
    source.upload.upload(on_upload, check_inputs, check_outputs)
    source.upload.clear(on_upload, check_inputs, check_outputs)
    source.recheck.click(on_recheck, check_inputs, check_outputs)
    source.max_length.release(on_recheck, check_inputs, check_outputs)
    examples = source.examples
    for example_task, button in source.example_buttons.items():
        def load_example(_fmt, length, _task=example_task):
            path = str(examples[_task])
            return (path, _task, *_check_values(check_file(wb, path, _task, AUTO, max_length=length),
                                                keep_mapping=False))
        button.click(load_example, [source.file_format, source.max_length], [source.upload, source.task,
                                                                             *check_outputs])


def _wire_validation(wb, source: _Source, imports: _Import) -> None:
    """The validation file gets the training file's check (same function, same mapping) and a preview."""
    def on_validation(path, task_, fmt_, t, p, l, s, length):
        path = received_file(path, "validation file")
        status, rows, head = validation_view(check_file(wb, path, task_, fmt_, t, p, l, s, length), path)
        return (status, gr.update(value=rows, visible=bool(rows)), gr.update(value=head, visible=bool(len(head))))

    validation_inputs = [imports.validation_file, *source.inputs[1:]]
    validation_outputs = [imports.validation_status, imports.validation_problems, imports.validation_preview]
    imports.validation_file.upload(on_validation, validation_inputs, validation_outputs)
    imports.validation_file.clear(on_validation, validation_inputs, validation_outputs)


def _wire_import(wb, source: _Source, imports: _Import, stored: _Stored) -> Any:
    """The import button; returns its event (the stored datasets change after it, and the new one is selected, so
    **Train on this dataset** takes it at once)."""
    def on_import(path, task_, fmt_, t, p, l, s, name_, validation, fraction_, seed_):
        """Import; a refusal is shown in the import status with its problems, the stored table and the selection
        stay as they are."""
        path = received_file(path, "training file")
        validation = received_file(validation, "validation file")
        try:
            status, dataset_id = import_file(wb, path, task_, fmt_, t, p, l, s, name_, validation, fraction_, seed_)
            return status, dataset_rows(wb), dataset_id
        except DataValidationError as exc:
            message = "Nothing was imported. " + "; ".join(str(p) for p in exc.problems[:5])
            detail = fmt.problems_markdown(exc.problems)
        except gr.Error as exc:
            message, detail = exc.message, ""
        except WorkbenchError as exc:
            message, detail = str(exc), ""
        log.warning("import refused: %s", " ".join(message.split()))
        if detail:
            return f"✘ Nothing was imported: fix these problems and import again.\n\n{detail}", gr.skip(), gr.skip()
        return f"✘ Nothing was imported: {fmt.ui_message(message)}", gr.skip(), gr.skip()

    return imports.button.click(on_import, [source.upload, source.task, source.file_format, source.text_col,
                                            source.pair_col, source.label_col, source.separator, imports.name,
                                            imports.validation_file, imports.fraction, imports.seed],
                                [imports.status, stored.table, stored.selected])


def _wire_stored(wb, stored: _Stored) -> tuple[Any, Any]:
    """Pick a stored dataset by its row; delete it after a confirmation. Returns the row click and the delete."""
    def on_pick(evt: gr.SelectData, rows):
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        return str(rows.iloc[row, 0]) if len(rows) else ""

    row_click = stored.table.select(on_pick, [stored.table], [stored.selected])

    def on_ask(dataset_id):
        if not (dataset_id or "").strip():
            log.warning("ask refused: Pick a dataset first (click its row).")
            return gr.skip(), gr.skip(), "✘ Pick a dataset first (click its row)."
        return (gr.update(visible=True),
                f"Delete dataset **{dataset_id.strip()}** and its stored files? "
                "Runs trained on it keep their models and results.", "")

    def on_delete(dataset_id):
        return delete_values(wb, dataset_id)

    stored.delete.click(on_ask, [stored.selected], [stored.confirm_row, stored.confirm_text, stored.status])
    stored.keep.click(lambda: gr.update(visible=False), None, [stored.confirm_row])
    return row_click, stored.confirm_delete.click(on_delete, [stored.selected],
                                                  [stored.confirm_row, stored.status, stored.selected, stored.table])


def delete_values(wb, dataset_id: str | None) -> tuple:
    """(confirmation row, status, selected dataset, table) after "Yes, delete the dataset".

    A refusal (a queued or running run still needs the dataset) is said in the status, which stays on the
    page; the selection and the table are left exactly as they were (``gr.skip()``), not turned into error
    badges by a ``gr.Error``.
    """
    dataset_id = (dataset_id or "").strip()
    try:
        data_service.delete_dataset(wb, dataset_id)
        access.record(wb, "delete", "dataset", dataset_id)
    except WorkbenchError as exc:
        log.warning("delete refused: %s", " ".join(str(exc).split()))
        return (gr.update(visible=False), f"✘ Dataset **{dataset_id}** was not deleted: {fmt.ui_message(exc)}.",
                gr.skip(), gr.skip())
    return (gr.update(visible=False), f"✔ Dataset **{dataset_id}** deleted; runs that used it keep their results.",
            "", dataset_rows(wb))


def label_chart_title(view: DataView) -> str:
    """"Label distribution", saying so when the rarest labels are summed into one "other" bar."""
    if view.label_count > len(view.labels):
        return f"Label distribution (top {len(view.labels) - 1} of {view.label_count} labels, the rest as other)"
    return "Label distribution"


def refresh(wb) -> list[list[Any]]:
    """Rows of the stored-datasets table (page load)."""
    return dataset_rows(wb)
