"""The workbench page: six tabs and the few events that cross between them.

``build_ui(wb)`` returns the ``gr.Blocks``; ``workbench.server.create_app`` mounts it.
Everything shown is read from the database on page load and on timer ticks, so a
refresh or a second browser shows the same state.
"""
from __future__ import annotations

from typing import Any

import gradio as gr

from storage.context import Workbench
from workbench.errors import WorkbenchError
from workbench.ui import access, account_tab, compare_tab, data_tab, label_tab, runs_tab, sweep_tab, train_tab
from workbench.ui.edge import quiet_user_errors


def keep_in_url(name: str) -> str:
    """Browser-side handler of one component: its value goes into the address as ``?NAME=value`` (removed when
    empty or not a positive number), replacing the entry, so a reload keeps it and the link can be shared."""
    return f"""(value) => {{
  const url = new URL(window.location.href);
  const text = value === null || value === undefined ? "" : String(value).trim();
  if (text === "" || (typeof value === "number" && value <= 0)) url.searchParams.delete("{name}");
  else url.searchParams.set("{name}", text);
  window.history.replaceState(null, "", url);
}}"""


# The selected run, the selected dataset and the runs picked to compare live in the address
# (?run=N&dataset=ID&compare=3,4).
KEEP_RUN_IN_URL = keep_in_url("run")
KEEP_DATASET_IN_URL = keep_in_url("dataset")
KEEP_COMPARED_IN_URL = keep_in_url("compare")
KEEP_LABEL_PROJECT_IN_URL = keep_in_url("label")


run_from_query = runs_tab.run_from_query


def compared_from_query(wb: Workbench, params) -> list[int]:
    """The runs a ``?compare=3,4`` link picks to compare, those still in the Compare picker, in the link's order."""
    listed = {value for _, value in compare_tab.run_choices(wb)}
    picks = [int(p) for p in str((params or {}).get("compare", "")).split(",") if p.strip().isdigit()]
    return [p for p in dict.fromkeys(picks) if p in listed]


def dataset_from_query(wb: Workbench, params) -> str | None:
    """The id of the stored dataset a ``?dataset=ID`` link names, or None (absent, or deleted since)."""
    from workbench.services import datasets as data_service

    value = str((params or {}).get("dataset", "")).strip()
    if not value:
        return None
    try:
        return data_service.get_dataset(wb, value).id
    except WorkbenchError:
        return None


THEME = gr.themes.Soft(primary_hue="blue", neutral_hue="slate")
CSS = """
.wb-muted { color: var(--body-text-color-subdued); font-size: 0.92em; }
.wb-progress { position: relative; height: 22px; border-radius: 6px; background: var(--neutral-200);
  overflow: hidden; margin: 6px 0; }
.wb-progress-fill { position: absolute; inset: 0 auto 0 0; }
.wb-progress span { position: relative; padding-left: 8px; font-size: 0.85em; line-height: 22px;
  color: var(--neutral-900); font-weight: 600; }
.wb-error { border-left: 4px solid #dc2626; padding: 6px 10px; margin-top: 6px; background: #fef2f2;
  color: #7f1d1d; white-space: pre-wrap; }
.wb-confusion table { border-collapse: collapse; font-size: 0.85em; }
.wb-confusion th, .wb-confusion td { border: 1px solid var(--neutral-200); padding: 4px 8px; text-align: right; }
#wb-title h1 { margin-bottom: 0; }
.wb-label-text { font-size: 1.45em; line-height: 1.5; padding: 14px 4px; white-space: pre-wrap;
  overflow-wrap: anywhere; max-height: 22em; overflow-y: auto; }
.wb-suggestion { font-size: 1.05em; }
.wb-tag { display: inline-block; padding: 0 8px; margin-left: 6px; border-radius: 10px; font-size: 0.85em;
  background: var(--neutral-200); color: var(--neutral-800); }
.wb-tag-relabel { background: #fef3c7; color: #78350f; }
.wb-stop-hint { border-left: 4px solid #16a34a; padding: 6px 10px; background: #f0fdf4; color: #14532d; }
""" + label_tab.highlight_css() + """
/* Gradio 6 draws the run's Share tab button twice once the tab is first opened (both underlined; not seen in a
   small app with the same tab): the copy is hidden. */
#run-share-button ~ #run-share-button { display: none; }
"""


def _wire_sweeps(wb, tabs, form, view, tab_item, runs, compare) -> Any:
    """Start sweep -> the Sweeps tab; top 5 -> the Compare tab (compared at once); best -> the Runs tab (returns
    that event: it opens a run)."""
    form.start_event.success(lambda sid: (gr.Tabs(selected="sweeps"), view.on_load(sid)), [form.submitted_id],
                             [tabs, view.sweep_id])
    tab_item.select(view.on_load, [view.sweep_id], [view.sweep_id], show_progress="hidden")
    view.compare_top.click(
        lambda sid: (gr.Tabs(selected="compare"),
                     gr.update(choices=compare_tab.run_choices(wb), value=sweep_tab.top_five(wb, sid))),
        [view.sweep_id], [tabs, compare["picker"]]
    # Compare's own button runs the comparison, once the picker holds the runs (the update lands first).
    ).success(None, None, None, js="() => { setTimeout(() => document.querySelector('#compare-go')?.click(), 400); }")
    return view.open_best.click(lambda sid: (gr.Tabs(selected="runs"), sweep_tab.best_of(wb, sid)),
                                [view.sweep_id], [tabs, runs.run_id])


def _wire_compared(wb, demo, picker) -> None:
    """The runs picked to compare follow the address, so a reload or a shared link picks them again."""
    picker.change(None, [picker], None, js=KEEP_COMPARED_IN_URL)

    def restore(request: gr.Request):
        picks = compared_from_query(wb, dict(request.query_params) if request else {})
        return gr.update(choices=compare_tab.run_choices(wb), value=picks) if picks else gr.skip()

    demo.load(restore, None, [picker])


def _wire_label(wb, demo, tabs, label, audit) -> None:
    """The Label tab: its keys (installed once per page), its project in the address (``?label=ID``), and a
    project an audit sent items to opened there."""
    demo.load(None, None, None, js=label_tab.KEYS_JS)
    label.project.change(None, [label.project], None, js=KEEP_LABEL_PROJECT_IN_URL)

    def restore(request: gr.Request):
        choices = label_tab.project_choices(wb)
        wanted = label_tab.project_number((dict(request.query_params) if request else {}).get("label"))
        picked = {"value": wanted} if wanted in {value for _, value in choices} else {}
        return gr.update(choices=choices, **picked), gr.update(choices=label_tab.finished_runs(wb))

    demo.load(restore, None, label.refresh_choices[2])

    def open_sent(project_id):
        return (gr.Tabs(selected="label"),
                gr.update(choices=label_tab.project_choices(wb), value=label_tab.project_number(project_id)))

    audit.relabel_event.success(open_sent, [audit.relabel_project], [tabs, label.project])


def _wire_address(wb, demo, tabs, runs, data, run_openers: list) -> None:
    """The address follows the selected run and dataset, and a page load opens the ones it names.

    Each event that opens a run (``run_openers``) or picks a dataset writes the address itself, besides the
    ``.change`` of the component (which also catches a run id typed in): that a path keeps the address then
    holds by construction, checked without a browser, whether or not Gradio reports a value set by a handler
    as a change.
    """
    keep_run = {"fn": None, "inputs": [runs.run_id], "outputs": None, "js": KEEP_RUN_IN_URL}
    runs.run_id.change(**keep_run)
    for event in run_openers:
        event.success(**keep_run)
    keep_dataset = {"fn": None, "inputs": [data.selected_dataset], "outputs": None, "js": KEEP_DATASET_IN_URL}
    data.selected_dataset.change(**keep_dataset)
    for event in data.selects:
        event.success(**keep_dataset)

    def open_links(request: gr.Request):
        params = dict(request.query_params) if request else {}
        rid, dataset_id = run_from_query(params), dataset_from_query(wb, params)
        return (gr.Tabs(selected="runs") if rid is not None else gr.update(),
                rid if rid is not None else gr.update(), dataset_id if dataset_id is not None else gr.update())

    # The restored dataset shows its latest audit at once (its panel open), as a row click does.
    demo.load(open_links, None, [tabs, runs.run_id, data.selected_dataset]).then(*data.audit.follow_dataset)


def build_ui(wb: Workbench) -> gr.Blocks:
    """The whole workbench page for ``wb``."""
    with gr.Blocks(title="BERT Workbench", analytics_enabled=False) as demo:
        gr.Markdown("# BERT Workbench\nUpload a file · start a run · watch it learn · compare · share",
                    elem_id="wb-title")
        with gr.Row(equal_height=True):
            signed_in = gr.Markdown(elem_id="wb-signed-in")
            sign_out = gr.Button("Sign out", size="sm", scale=0, min_width=90, visible=False, elem_id="wb-sign-out")
        # In the browser only: GET /logout ends the session (a link in a Markdown would open another tab).
        sign_out.click(None, None, None, js="() => { window.location.href = 'logout'; }")
        role_style = gr.HTML(elem_id="wb-role-style", padding=False)
        with gr.Tabs(selected="data") as tabs:
            with gr.Tab("Data", id="data", elem_id="tab-data"):
                data = data_tab.build(wb)
            with gr.Tab("Label", id="label", elem_id="tab-label"):
                label = label_tab.build(wb)
            with gr.Tab("Train", id="train", elem_id="tab-train") as train_tab_item:
                train = train_tab.build(wb)
                sweep_form = sweep_tab.build_form(wb, train.spec_view, train.task)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs") as runs_tab_item:
                runs = runs_tab.build(wb)
            with gr.Tab("Compare", id="compare", elem_id="tab-compare") as compare_tab_item:
                compare = compare_tab.build(wb)
            with gr.Tab("Sweeps", id="sweeps", elem_id="tab-sweeps") as sweeps_tab_item:
                sweep_view = sweep_tab.build_view(wb)
            accounts = account_tab.build(wb)

        # Submit → the Runs tab with the new run selected.
        submitted = train.submit_event.success(lambda rid: (gr.Tabs(selected="runs"), rid), [train.submitted_id],
                                               [tabs, runs.run_id])

        # Data → Train with the chosen dataset.
        def use_dataset(dataset_id, task):
            dataset_id, task = data_tab.dataset_to_train(wb, dataset_id, task)
            choices = train_tab.dataset_choices(wb, task)
            return gr.Tabs(selected="train"), task, gr.update(choices=choices, value=dataset_id)

        data.use_dataset.click(lambda: None, None, [train.clone_of])
        data.use_dataset.click(use_dataset, [data.selected_dataset, data.task], [tabs, train.task, train.dataset])
        # ... and with the corrected copy an audit just saved.
        data.audit.train_corrected.click(lambda: None, None, [train.clone_of])
        def use_corrected(dataset_id):
            from workbench.services import datasets as data_service

            return use_dataset(dataset_id, data_service.get_dataset(wb, dataset_id).task)

        data.audit.train_corrected.click(use_corrected, [data.audit.corrected_id], [tabs, train.task, train.dataset])

        # Runs → Train, pre-filled with the run's spec (clone and edit), its own estimate, no stale status.
        def clone_and_edit(rid):
            spec = runs_tab.run_spec(wb, rid)
            return (gr.Tabs(selected="train"), rid, *train.clone(wb, spec, runs_tab.selected_run(rid)))

        runs.clone.click(clone_and_edit, [runs.run_id], [tabs, train.clone_of, *train.clone_outputs])

        # Pickers are read again whenever what they list may have changed: their tab opens, a dataset is
        # imported or deleted, a run is submitted (nothing is remembered from page load).
        refresh_fn, refresh_inputs, refresh_outputs = train.refresh_datasets
        train_tab_item.select(refresh_fn, refresh_inputs, refresh_outputs, show_progress="hidden")
        for event in (data.import_event, data.delete_event, data.audit.save_event):
            event.then(refresh_fn, refresh_inputs, refresh_outputs, show_progress="hidden")
        compare_tab_item.select(compare["refresh"], compare["picker"], [compare["picker"]], show_progress="hidden")
        compare_tab_item.select(compare["refresh_test_sets"], [compare["test_set"]], [compare["test_set"]],
                                show_progress="hidden")
        train.submit_event.success(compare["refresh"], compare["picker"], [compare["picker"]],
                                   show_progress="hidden")

        demo.load(lambda: data_tab.refresh(wb), None, [data.datasets])
        demo.load(train.on_load, train.fields, [train.dataset, train.spec_view, train.facts])
        load_fn, load_inputs = runs.on_load
        demo.load(load_fn, load_inputs, runs.load_outputs)
        # Opening the tab shows fresh rows at once instead of at the next tick.
        runs_tab_item.select(*runs.refresh_rows, show_progress="hidden")
        demo.load(compare["refresh"], compare["picker"], [compare["picker"]])
        best_opened = _wire_sweeps(wb, tabs, sweep_form, sweep_view, sweeps_tab_item, runs, compare)
        # Label → Runs with the run "Train from these labels" queued.
        trained = label.train_event.success(lambda rid: (gr.Tabs(selected="runs"), rid), [label.run_id],
                                            [tabs, runs.run_id])
        _wire_label(wb, demo, tabs, label, data.audit)
        _wire_address(wb, demo, tabs, runs, data, [*runs.opens, submitted, best_opened, trained])
        _wire_compared(wb, demo, compare["picker"])

        def my_role():
            return account_tab.on_load(wb, access.acting())

        demo.load(my_role, None, [accounts.account, accounts.admin, signed_in, sign_out, role_style,
                                  accounts.tokens, accounts.users, accounts.activity])
    return quiet_user_errors(demo, authorize=lambda fn, args, kwargs: access.authorize(wb, fn, args, kwargs))
