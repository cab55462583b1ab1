"""Compare tab: two or more runs side by side — metrics with their intervals, whether their difference is
real, overlaid curves, config diff, per-class scores."""
from __future__ import annotations

import dataclasses
from typing import Any

import gradio as gr
import pandas as pd

from workbench.services import baselines
from workbench.errors import WorkbenchError
from workbench.services import comparisons
from workbench.services import datasets as data_service
from workbench.services import predictions as predict_service
from workbench.services import runs as runs_service
from workbench.services import sweeps as sweep_service
from workbench.ui import access, polling
from workbench.ui import format as fmt
from workbench.ui import plots
from workbench.services.runs import read_run_tables
from workbench.ui.runs_tab import _items_and_total, per_class_rows

PICKER_LIMIT = 200


def run_choices(wb) -> list[tuple[str, int]]:
    """The most recent training runs for the picker (the picker is a search box; 200 is plenty to scroll).
    Prediction, evaluation and export jobs have no curves or config of their own to compare: they are left out."""
    items, _ = _items_and_total(runs_service.list_runs(wb, order_by="-created_at", limit=PICKER_LIMIT, offset=0,
                                                       kind="train"))
    return [fmt.run_choice({**run, "name": fmt.short_run_name(run)}) for run in map(fmt.as_dict, items)]


@dataclasses.dataclass
class Comparison:
    metrics: pd.DataFrame
    diff: pd.DataFrame
    per_class: pd.DataFrame
    curves: dict[str, Any]
    curve_names: list[str]
    message: str
    significance: str = ""  # "Is the difference real?": the paired comparison, or why there is none


def compare(wb, run_ids: list[int]) -> Comparison:
    """Read the chosen runs through the runs service and line them up."""
    runs = [fmt.as_dict(runs_service.get_run(wb, int(r))) for r in run_ids]
    labels = [f"#{r['id']} {fmt.short_run_name(r)}" for r in runs]
    # None in a spec means "the engine chooses": show what it chose once the run has recorded it.
    resolved = [runs_service.read_run_hyperparameters(r.get("output_dir")) for r in runs]
    diff_rows = [[key, *[diff_cell(key, v, hp) for v, hp in zip(values, resolved)]]
                 for key, values in fmt.config_diff([r.get("spec") or {} for r in runs])]
    params = trial_parameters(wb, runs, diff_rows)
    metric_keys = quality_metrics(runs)
    metrics = pd.DataFrame([[label, *[shown[i] for shown in params.values()], r.get("status"),
                             fmt.model_name(r.get("model")), fmt.dataset_label(r),
                             *[metric_cell(r.get("metrics"), k) for k in metric_keys],
                             baselines.summary(r.get("metrics")) or fmt.MISSING,
                             baselines.verdict_cell(r.get("metrics")) or fmt.MISSING]
                            for i, (label, r) in enumerate(zip(labels, runs))],
                           columns=["Run", *params, "Status", "Model", "Dataset", *metric_keys,
                                    "Baselines (same split)", "Verdict"])
    diff = pd.DataFrame(diff_rows, columns=["Setting", *labels])
    per_class = side_by_side(labels, [per_class_rows(read_run_tables(r["output_dir"]) if r.get("output_dir") else {})
                                      for r in runs])
    curves = {label: runs_service.run_curves(wb, r["id"]) for label, r in zip(labels, runs)}
    message = f"{len(diff_rows)} setting(s) differ." if diff_rows else "The configurations are identical."
    warning = datasets_warning(runs)
    message = f"{warning}\n\n{message}" if warning else message
    return Comparison(metrics, diff, per_class, curves, plots.curve_names(curves.values()), message,
                      significance(wb, [int(r["id"]) for r in runs], labels))


def metric_cell(metrics: dict[str, Any] | None, key: str) -> str:
    """A score with its 95 % interval where the run stored one (``0.912 ± 0.011``), else as it is."""
    return fmt.metric_with_ci((metrics or {}).get(key), fmt.metric_ci(metrics, key))


SIGNIFICANCE_TITLE = "#### Is the difference real?\n"


def significance(wb, run_ids: list[int], labels: list[str] | None = None, pair: bool = True) -> str:
    """The "Is the difference real?" block: for two runs the paired comparison's verdict with its numbers, for
    more a ranking that marks the runs not distinguishable from the best. A run that cannot be compared
    (still running, scored on other examples, saved no per-example results) is said here, in words.
    ``labels`` name the runs in the ranking (``#4 lr 5e-5``), one per id; ``pair=False`` ranks two runs too
    (evaluation jobs: a verdict sentence would name them by their job ids)."""
    try:
        if pair and len(run_ids) == 2:
            return SIGNIFICANCE_TITLE + pair_markdown(comparisons.compare_runs(wb, *run_ids))
        named = dict(zip(run_ids, labels or []))
        return SIGNIFICANCE_TITLE + ranking_markdown(comparisons.rank_runs(wb, run_ids), named)
    except WorkbenchError as exc:
        return SIGNIFICANCE_TITLE + f"Cannot tell: {fmt.ui_message(exc)}"


def pair_markdown(found: dict[str, Any]) -> str:
    """``compare_runs``'s result: the verdict (the difference, its interval, its p-value) first, then each run's
    score, how the two were paired and, for an accuracy, McNemar's exact test."""
    metric, level = found["metric"], f"{found['level'] * 100:g} %"
    verdict = found["verdict"][0].upper() + found["verdict"][1:]
    scores = " · ".join(f"run {side['run']}: {fmt.metric_with_ci(side['value'], side['ci'])}"
                        for side in (found["a"], found["b"]))
    lines = [f"**{verdict}.**", "",
             f"- {metric} ({level} CI): {scores}",
             f"- the difference is a paired bootstrap: {found['resamples']:,} resamples of the same "
             f"{found['examples']:,} examples, each scored by both runs"]
    mcnemar = found.get("mcnemar")
    if mcnemar:
        lines.append(f"- McNemar's exact test: {mcnemar['only_a']} example(s) only run {found['a']['run']} got "
                     f"right, {mcnemar['only_b']} only run {found['b']['run']}; "
                     f"{fmt.p_value_text(mcnemar['p_value'])}")
    return "\n".join(lines)


def ranking_markdown(rows: list[dict[str, Any]], labels: dict[int, str] | None = None) -> str:
    """``rank_runs``' rows, best first, as a table whose last column says how each run stands against the best."""
    labels = labels or {}
    lines = ["Each run against the best on the same examples (paired bootstrap, 95 % CI):", "",
             "| Run | Score (95 % CI) | vs best |", "|---|---|---|"]
    for index, row in enumerate(rows):
        name = labels.get(row["run"], f"#{row['run']}").replace("|", "\\|")
        lines.append(f"| {name} | {fmt.metric_with_ci(row['value'], row['ci'])} | {versus_best(index, row)} |")
    return "\n".join(lines)


def versus_best(index: int, row: dict[str, Any]) -> str:
    """``best`` / ``not distinguishable`` / ``worse, p = 0.012`` for a ``rank_runs`` row (rows come best first)."""
    if index == 0:
        return "best"
    if row["with_best"]:
        return "not distinguishable"
    return "worse" + (f", {fmt.p_value_text(row['p_value'])}" if row.get("p_value") is not None else "")


def diff_cell(key: str, value: Any, resolved: dict[str, Any] | None) -> str:
    """A config diff cell: ``fmt.shown_setting`` with numbers at 3 significant digits (``3.16e-05``)."""
    def readable(v: Any) -> Any:
        return fmt.param_value(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    return fmt.shown_setting(key, readable(value), {k: readable(v) for k, v in (resolved or {}).items()})


def trial_parameters(wb, runs: list[dict[str, Any]], diff_rows: list[list[Any]]) -> dict[str, list[str]]:
    """When sweep trials are compared: the parameters their sweeps searched that differ between the runs, each
    with its config-diff cells (one per run), for columns of their own beside the run names. A searched model is
    in the Model column already."""
    sweep_ids = sorted({int(r["sweep_id"]) for r in runs if r.get("sweep_id") is not None})
    if not sweep_ids:
        return {}
    differing = {row[0]: row[1:] for row in diff_rows}
    return {name: differing[key] for name, key in sweep_service.searched_settings(wb, sweep_ids).items()
            if key in differing and name != "model"}


def _dataset_key(run: dict[str, Any]) -> tuple:
    """What decides the validation split a run was scored on: its stored dataset, else its files."""
    data = (run.get("spec") or {}).get("data") or {}
    dataset_id = run.get("dataset_id") or data.get("dataset_id")
    return ("dataset", dataset_id) if dataset_id else ("files", data.get("train_path"), data.get("validation_path"))


def datasets_warning(runs: list[dict[str, Any]]) -> str:
    """A warning when the training runs compared trained on different datasets, naming each dataset and its
    runs; "" when they share one. Each run is scored on its own dataset's validation split."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        if not fmt.is_job(run):
            groups.setdefault(_dataset_key(run), []).append(run)
    if len(groups) < 2:
        return ""
    named = "; ".join(fmt.dataset_label(group[0]) + ": " + ", ".join(f"#{run.get('id')}" for run in group)
                      for group in groups.values())
    return ("⚠ **These scores are not comparable: the runs trained on different datasets** "
            f"({named}). Each run was scored on its own dataset's validation split, so the examples differ; "
            "to compare them on the same examples, evaluate them on one test set (*On a test set*, below).")


# an evaluation's counts of its test set (rows, repeated rows, rows cut to the max length) and its model's run
# id are no scores either
HOUSEKEEPING = ("seconds", "peak_", "per_second", "params", "parameters", "runtime", "step", "epoch", "examples",
                "records", "evaluations", "checkpoints", "processes", "rows", "batch_size", "duplicates",
                "truncated", "max_length", "model_run")


def quality_metrics(runs: list[dict[str, Any]]) -> list[str]:
    """The metric keys worth comparing (scores, not timings or memory), headline metrics first."""
    keys = {k for r in runs for k, v in (r.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not any(h in k for h in HOUSEKEEPING)}
    headline = [k for task_keys in fmt.MAIN_METRICS.values() for k in task_keys]
    return sorted(keys, key=lambda k: (headline.index(k) if k in headline else len(headline), k))


def overlay_svg(curves: dict[str, Any], name: str | None) -> str:
    return plots.line_chart_svg(plots.overlaid_curves(curves, name or ""), name or "Overlaid curves",
                                empty="None of these runs has this curve.")


def side_by_side(labels: list[str], tables: list[list[list[Any]]]) -> pd.DataFrame:
    """Per-class F1 of each run in one table: one row per class, one column per run."""
    classes: dict[str, dict[str, Any]] = {}
    for label, rows in zip(labels, tables):
        for row in rows:
            classes.setdefault(str(row[0]), {})[label] = row[3]
    return pd.DataFrame([[name, *[scores.get(label, fmt.MISSING) for label in labels]]
                         for name, scores in classes.items()], columns=["Class / entity (F1)", *labels])


def test_set_choices(wb) -> list[tuple[str, str]]:
    """Every stored dataset as a test set, (label, id): those runs were evaluated on first, saying how often.
    A dataset runs trained on says which (⚠): it is no test set for them, and evaluating them there is refused."""
    counts = {str(t["dataset_id"]): int(t.get("evaluations") or 0) for t in predict_service.test_sets(wb)}
    trained = predict_service.trained_on(wb)
    stored = [fmt.as_dict(d) for d in data_service.list_datasets(wb)]
    stored.sort(key=lambda d: (-counts.get(str(d.get("id")), 0), str(d.get("name"))))
    choices = []
    for d in stored:
        done = counts.get(str(d.get("id")), 0)
        label = f"{d.get('name')} · {d.get('task')} · {done} evaluation{'s' if done != 1 else ''}"
        runs = trained.get(str(d.get("id")))
        if runs:
            label += f" · ⚠ trained on by run{'s' if len(runs) > 1 else ''} " + ", ".join(f"#{r}" for r in runs)
        choices.append((label, str(d.get("id"))))
    return choices


@dataclasses.dataclass
class TestSetComparison:
    metrics: pd.DataFrame
    per_class: pd.DataFrame
    metric_names: list[str]
    scores: dict[str, dict[str, Any]]  # run label → the evaluation's metrics, for the bar chart
    message: str


def compare_on_test_set(wb, dataset_id: str) -> TestSetComparison:
    """The runs evaluated on one test set, side by side: their scores there and their per-class F1."""
    evaluations = [fmt.as_dict(e) for e in predict_service.evaluations_on(wb, dataset_id)]
    labels = [" ".join(b for b in (f"#{e.get('run_id')}", e.get("run_name"), f"· job #{e.get('id')}") if b)
              for e in evaluations]
    keys = quality_metrics(evaluations)
    metrics = pd.DataFrame([[label, e.get("status"), fmt.model_name(e.get("model")),
                             *[metric_cell(e.get("metrics"), k) for k in keys]]
                            for label, e in zip(labels, evaluations)], columns=["Run", "Status", "Model", *keys])
    per_class = side_by_side(labels, [per_class_rows(read_run_tables(e["output_dir"]))
                                      if e.get("output_dir") and e.get("status") == "succeeded" else []
                                      for e in evaluations])
    message = (f"{len(evaluations)} evaluation(s) on this test set." if evaluations else
               "No run has been evaluated on this test set yet: pick runs above and press "
               "*Evaluate these runs on this test set*.")
    # one evaluation per run, its newest (an older copy of the same run would be ranked against itself)
    newest = {e.get("run_id"): (int(e["id"]), label) for e, label in zip(evaluations, labels)
              if e.get("status") == "succeeded"}
    finished = sorted(newest.values())
    if len(finished) >= 2:  # the same examples by construction: ranked, named by their runs
        ids, names = zip(*finished)
        message += "\n\n" + significance(wb, list(ids), list(names), pair=False)
    return TestSetComparison(metrics, per_class, keys, {label: e.get("metrics") or {}
                                                         for label, e in zip(labels, evaluations)}, message)


def metric_bars(scores: dict[str, Any], metric: str | None) -> str:
    return plots.bar_chart_svg(plots.metric_bars_frame(scores or {}, metric or ""), "run", "value",
                               metric or "Scores on the test set", y_title=metric or "",
                               empty="No finished evaluation has this metric yet.")


def evaluate_selected(wb, run_ids: list[Any], dataset_id: str | None) -> str:
    """Queue one evaluation per picked run on the picked test set."""
    if not dataset_id:
        raise gr.Error("Pick a test set first.")
    ids = [i for i in (_as_id(r) for r in run_ids or []) if i is not None]
    if not ids:
        raise gr.Error("Pick the runs to evaluate in the runs box above.")
    before = {int(e["id"]) for e in predict_service.evaluations_on(wb, dataset_id)}
    jobs = predict_service.evaluate_runs(wb, ids, dataset_id, files=False, owner_id=access.owner_id())
    queued = [j for j in jobs if j not in before]
    for job in queued:
        access.record(wb, "create", "run", job)
    kept = [f"#{run} (job #{job})" for run, job in zip(dict.fromkeys(ids), jobs) if job in before]
    said = (f"✔ Queued {len(queued)} evaluation job(s): {', '.join(f'#{j}' for j in queued)}. Their scores "
            "appear here when they finish (press ↻ to look again)." if queued else "✔ Nothing new to queue.")
    if kept:
        said += (f" Already evaluated on this test set, so not scored again: run{'s' if len(kept) > 1 else ''} "
                 f"{', '.join(kept)}.")
    return said


def refresh_runs(wb, chosen: list[Any] | None) -> Any:
    """Fresh choices. The value is left alone (a pick made while this ran must not be undone) unless a
    picked run no longer exists."""
    choices = run_choices(wb)
    ids = {value for _, value in choices}
    kept = [r for r in (chosen or []) if _as_id(r) in ids]
    if len(kept) == len(chosen or []):
        return gr.update(choices=choices)
    return gr.update(choices=choices, value=kept)


def build(wb) -> dict[str, Any]:
    runs = _build_runs()
    on_refresh = _wire_runs(wb, runs)
    test_sets = _build_test_sets()
    _wire_test_sets(wb, test_sets, runs.picker)
    return {"picker": runs.picker, "refresh": on_refresh, "test_set": test_sets.picker,
            "refresh_test_sets": lambda chosen: refresh_test_sets(wb, chosen)}


@dataclasses.dataclass
class _Runs:
    """Runs side by side: the picker, their metrics, config diff, overlaid curves and per-class scores."""

    picker: gr.Dropdown
    refresh: gr.Button
    go: gr.Button
    message: gr.Markdown
    metrics: gr.Dataframe
    verdict: gr.Markdown
    diff: gr.Dataframe
    curve: gr.Dropdown
    overlay: gr.HTML
    per_class: gr.Dataframe
    curves: gr.State


def _build_runs() -> _Runs:
    with gr.Row():
        picker = gr.Dropdown([], multiselect=True, label="Runs to compare (two or more)", elem_id="compare-runs",
                             scale=4)
        refresh = gr.Button("↻ runs", size="sm", scale=0, min_width=80)
        go = gr.Button("Compare", variant="primary", scale=1, elem_id="compare-go")
    message = gr.Markdown(elem_id="compare-message")
    # the tables stay hidden until they have rows: an empty table without columns is headed "1 2 3"
    metrics = gr.Dataframe(label="Final metrics", interactive=False, elem_id="compare-metrics", visible=False)
    verdict = gr.Markdown(elem_id="compare-significance")
    with gr.Row():
        with gr.Column():
            diff = gr.Dataframe(label="Configuration: only what differs", interactive=False, wrap=True,
                                elem_id="compare-diff", visible=False)
        with gr.Column():
            curve = gr.Dropdown([], label="Curve", elem_id="compare-curve")
            overlay = gr.HTML(elem_id="compare-plot")
    per_class = gr.Dataframe(label="Per class / entity, side by side", interactive=False, visible=False,
                             elem_id="compare-per-class")
    return _Runs(picker, refresh, go, message, metrics, verdict, diff, curve, overlay, per_class, gr.State({}))


def _wire_runs(wb, runs: _Runs):
    """Compare, pick a curve, refresh the picker; returns the refresh handler (the app calls it too)."""
    def on_compare(ids):
        if not ids or len(ids) < 2:
            raise gr.Error("Pick at least two runs.")
        try:
            result = compare(wb, [int(i) for i in ids])
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        first = result.curve_names[0] if result.curve_names else None
        return (result.message, shown_table(result.metrics), result.significance, shown_table(result.diff),
                shown_table(result.per_class),
                gr.update(choices=result.curve_names, value=first), overlay_svg(result.curves, first), result.curves)

    runs.go.click(on_compare, [runs.picker], [runs.message, runs.metrics, runs.verdict, runs.diff, runs.per_class,
                                              runs.curve, runs.overlay, runs.curves])
    runs.curve.change(lambda name, curves: overlay_svg(curves or {}, name), [runs.curve, runs.curves],
                      [runs.overlay])

    def on_refresh(chosen):
        return refresh_runs(wb, chosen)

    runs.refresh.click(on_refresh, [runs.picker], [runs.picker])
    return on_refresh


@dataclasses.dataclass
class _TestSets:
    """The test-set comparison: pick a stored dataset, see the runs evaluated on it, queue more."""

    picker: gr.Dropdown
    refresh: gr.Button
    evaluate: gr.Button
    message: gr.Markdown
    metrics: gr.Dataframe
    metric: gr.Dropdown
    bars: gr.HTML
    per_class: gr.Dataframe
    scores: gr.State


def _build_test_sets() -> _TestSets:
    gr.Markdown("### On a test set\nRuns scored on the same stored dataset, which none of them trained on. "
                "Evaluations are queued jobs; each one's details open from the Runs table.")
    with gr.Row():
        picker = gr.Dropdown([], label="Test set", elem_id="compare-test-set", scale=3)
        refresh = gr.Button("↻", size="sm", scale=0, min_width=60, elem_id="compare-test-set-refresh")
        evaluate = gr.Button("Evaluate these runs on this test set", scale=2, elem_id="compare-evaluate")
    message = gr.Markdown(elem_id="compare-test-set-message")
    metrics = gr.Dataframe(label="Scores on the test set", interactive=False, elem_id="compare-test-metrics",
                           visible=False)
    with gr.Row():
        metric = gr.Dropdown([], label="Metric", elem_id="compare-test-metric", scale=1)
        bars = gr.HTML(elem_id="compare-test-plot")
    per_class = gr.Dataframe(label="Per class / entity on the test set (F1)", interactive=False,
                             elem_id="compare-test-per-class", visible=False)
    return _TestSets(picker, refresh, evaluate, message, metrics, metric, bars, per_class, gr.State({}))


def refresh_test_sets(wb, chosen: str | None) -> Any:
    """Fresh test-set choices; the pick stays unless its dataset is gone (``polling.picker_update``)."""
    return polling.picker_update(test_set_choices(wb), chosen)


def test_set_values(wb, dataset_id: str | None) -> tuple:
    """The comparison's outputs for one test set (message, table, metric picker, bars, per class, scores)."""
    if not dataset_id:
        return "", None, gr.update(choices=[], value=None), "", None, {}
    result = compare_on_test_set(wb, dataset_id)
    first = result.metric_names[0] if result.metric_names else None
    return (result.message, result.metrics, gr.update(choices=result.metric_names, value=first),
            metric_bars(result.scores, first), result.per_class, result.scores)


def _wire_test_sets(wb, parts: _TestSets, runs_picker: gr.Dropdown) -> None:
    outputs = [parts.message, parts.metrics, parts.metric, parts.bars, parts.per_class, parts.scores]

    def shown(values: tuple) -> tuple:  # its tables (2nd and 5th) hidden while empty
        message, metrics, metric, bars, per_class, scores = values
        return message, shown_table(metrics), metric, bars, shown_table(per_class), scores

    def on_test_set(dataset_id):
        return shown(test_set_values(wb, dataset_id))

    def on_refresh_test_sets(dataset_id):
        return refresh_test_sets(wb, dataset_id), *shown(test_set_values(wb, dataset_id))

    def on_evaluate_runs(run_ids, dataset_id):
        return evaluate_selected(wb, run_ids, dataset_id), *shown(test_set_values(wb, dataset_id))[1:]

    parts.picker.input(on_test_set, [parts.picker], outputs)
    parts.refresh.click(on_refresh_test_sets, [parts.picker], [parts.picker, *outputs])
    parts.evaluate.click(on_evaluate_runs, [runs_picker, parts.picker], outputs)
    parts.metric.change(lambda name, scores: metric_bars(scores, name), [parts.metric, parts.scores], [parts.bars],
                        show_progress="hidden")


def shown_table(frame: Any) -> Any:
    """A table's update that shows it only when it has rows: an empty one without columns is headed "1 2 3"."""
    rows = 0 if frame is None else len(frame)
    return gr.update(value=frame if rows else None, visible=bool(rows))


def _as_id(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
