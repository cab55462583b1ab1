"""Pure formatting helpers for the UI: durations, progress bars, table rows, config diffs.

Nothing here imports gradio, so every helper is unit-tested without a browser.
Service results arrive as dicts or dataclasses; ``as_dict`` gives one shape to both.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import html
import json
import re
from typing import Any, Iterable, Mapping, Optional, Sequence

from workbench.services import baselines
from workbench.services.baselines import too_few_to_calibrate
from workbench.services.specs import HEADLINE_METRICS

ACTIVE_STATES = ("queued", "running", "cancelling", "resuming")
STATUS_ICONS = {
    "queued": "◷", "running": "▶", "resuming": "↻", "cancelling": "■", "succeeded": "✔", "failed": "✖",
    "cancelled": "■", "pruned": "✂",
}
# The metric the Runs table shows per task, in order of preference (the keys of the training CLI contract).
MAIN_METRICS = HEADLINE_METRICS
RUN_TABLE_HEADERS = ["ID", "Name", "Kind", "Status", "Progress", "ETA", "Main metric", "Model", "Dataset",
                     "Created", "Owner"]
MISSING = "—"
# Runs of these kinds put a trained run's model to work (workbench.services.predictions); "train" trains one.
JOB_KINDS = ("predict", "evaluate")
KIND_LABELS = {"predict": "prediction job", "evaluate": "evaluation job"}


def as_dict(obj: Any) -> dict[str, Any]:
    """A service result (dict, dataclass or plain object) as a dict."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return dict(vars(obj))


def format_duration(seconds: float | None) -> str:
    """``95`` → ``1m 35s``; ``None`` or a negative value → ``—``."""
    if seconds is None or seconds != seconds or seconds < 0:
        return MISSING
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def format_time(value: Any, now: dt.datetime | None = None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM`` (UTC, as stored), or ``—``."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    return value.strftime("%Y-%m-%d %H:%M")


def progress_bar(progress: float | None, width: int = 10) -> str:
    """A text progress bar that fits in a table cell: ``▰▰▰▰▱▱▱▱▱▱ 40%``."""
    fraction = min(max(float(progress or 0.0), 0.0), 1.0)
    filled = int(round(fraction * width))
    return "▰" * filled + "▱" * (width - filled) + f" {fraction * 100:.0f}%"


def progress_html(progress: float | None, status: str, label: str = "") -> str:
    """A coloured progress bar for the run header."""
    fraction = min(max(float(progress or 0.0), 0.0), 1.0)
    colour = {"failed": "#dc2626", "cancelled": "#9ca3af", "cancelling": "#f59e0b",
              "succeeded": "#16a34a", "pruned": "#f59e0b"}.get(status, "#2563eb")
    text = html.escape(label or f"{fraction * 100:.0f}%")
    return (f'<div class="wb-progress"><div class="wb-progress-fill" style="width:{fraction * 100:.1f}%;'
            f'background:{colour}"></div><span>{text}</span></div>')


def status_label(status: str) -> str:
    return f"{STATUS_ICONS.get(status, '?')} {status}"


def main_metric(task: str, metrics: Mapping[str, Any] | None) -> tuple[str, float] | None:
    """The task's headline metric from a run's final (or latest) metrics, or None."""
    metrics = metrics or {}
    for key in MAIN_METRICS.get(task, ()):
        for candidate in (key, f"eval/{key}", f"eval_{key}"):
            value = metrics.get(candidate)
            if isinstance(value, (int, float)):
                return key, float(value)
    return None


def format_metric(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return MISSING if value is None else str(value)
    if value != value:
        return "nan"
    if abs(value) >= 1000 or value == int(value):
        return f"{value:,.0f}" if abs(value) >= 1000 else str(int(value))
    return f"{value:.4f}"


def main_metric_text(task: str, metrics: Mapping[str, Any] | None) -> str:
    found = main_metric(task, metrics)
    return f"{found[0]} {format_metric(found[1])}" if found else MISSING


def metric_cell(task: str, metrics: Mapping[str, Any] | None) -> str:
    """The Runs table's score: the main metric, the stronger baseline beside it, ⚠ when the run did not beat it."""
    text = main_metric_text(task, metrics)
    best = baselines.best(metrics)
    if text == MISSING or best is None:
        return text
    mark = "⚠ " if baselines.status(metrics) in baselines.WARNED else ""
    return f"{mark}{text} (baseline {best:.3f})"


def calibration_note_html(metrics: Mapping[str, Any] | None) -> str:
    """The run header's line when its validation split was too small to fit a temperature on (``jobs.evaluation.calibration.
    too_few_to_calibrate``): the playground and predictions then serve the model's raw scores; "" otherwise."""
    metrics = metrics or {}
    count = metrics.get("calibration_examples")
    if not isinstance(count, (int, float)) or "temperature" in metrics:
        return ""
    reason = too_few_to_calibrate(int(count))
    return f"<p class='wb-muted' id='run-calibration'>Calibration {html.escape(reason)}.</p>" if reason else ""


def baseline_html(metrics: Mapping[str, Any] | None) -> str:
    """The run header's lines: the baselines on the same split (an evaluation's: fitted on the run's training
    split, scored on the test set), and the verdict when the run did not beat them."""
    line = baselines.summary(metrics)
    if not line:
        return ""
    where = "the same test set (fitted on the run's training split)" if (metrics or {}).get("test_set") \
        else "the same validation split"
    out = f"<p class='wb-muted' id='run-baselines'>Baselines on {where}: {html.escape(line)}</p>"
    warning = baselines.warning(metrics)
    if warning:
        out += f"<div class='wb-error' id='run-verdict'><b>⚠ This run {html.escape(warning)}</b></div>"
    return out


def run_name(run: Mapping[str, Any]) -> str:
    if not run.get("name") and is_job(run):
        parent = run.get("parent_run_id")
        return f"{KIND_LABELS[run['kind']]} #{run.get('id')}" + (f" of run #{parent}" if parent else "")
    return run.get("name") or f"{run.get('task', 'run')} #{run.get('id')}"


def dataset_name(run: Mapping[str, Any]) -> str:
    dataset = run.get("dataset") or run.get("dataset_name")
    if isinstance(dataset, Mapping):
        dataset = dataset.get("name") or dataset.get("id")
    if not dataset:
        spec = run.get("spec") or {}
        data = spec.get("data", {}) if isinstance(spec, Mapping) else {}
        dataset = data.get("name") or data.get("dataset_id") or data.get("train_path")
    return str(dataset) if dataset else MISSING


def model_name(model: str | None) -> str:
    """Local folders are shown by their last two path parts; catalogue names as they are."""
    if not model:
        return MISSING
    parts = str(model).rstrip("/").split("/")
    return "/".join(parts[-2:]) if str(model).startswith(("/", ".")) else str(model)


def estimate_range(estimate: Mapping[str, Any] | None) -> str:
    """A stored time estimate as ``4m 10s – 6m 20s``; "" without one."""
    if not estimate:
        return ""
    low, high = format_duration(estimate.get("low")), format_duration(estimate.get("high"))
    return low if low == high else f"{low} – {high}"


def estimate_vs_actual(estimate: Mapping[str, Any] | None, actual: float | None, status: str,
                       load_rise: tuple[float, float] | None = None) -> str:
    """``estimated 4m 10s – 6m 20s · took 5m 02s (within the estimate)`` for the run page; a run slower than its
    estimate under a load that rose after the submit (``load_rise``: per CPU then and while it ran) says so."""
    if not estimate:
        return ""
    text = f"estimated {estimate_range(estimate)}"
    if actual is None or status in ("queued",):
        return text
    if status in ("running", "cancelling"):
        return text + f" · running for {format_duration(actual)}"
    verdict = ""
    if status == "succeeded":
        if actual < (estimate.get("low") or 0):
            verdict = " (faster than estimated)"
        elif actual > (estimate.get("high") or 0):
            rose = (f"; the machine's load rose from {load_rise[0]:.1f} per CPU at the submit to {load_rise[1]:.1f} "
                    "while it ran" if load_rise else "")
            verdict = f" ({actual / max(estimate.get('seconds') or 1, 1):.1f}× the estimate{rose})"
        else:
            verdict = " (within the estimate)"
    return text + f" · took {format_duration(actual)}{verdict}"


def estimate_line(run: Mapping[str, Any]) -> str:
    """The time estimated at submit next to the time the run took (or has been running so far)."""
    from workbench.services.estimates import actual_seconds, load_rise

    status = str(run.get("status", ""))
    finished = run.get("finished_at")
    if status in ("running", "cancelling") and not finished:
        finished = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    actual = actual_seconds({"started_at": run.get("started_at"), "finished_at": finished})
    return estimate_vs_actual(run.get("estimate"), actual, status, load_rise(run))


def phase_text(run: Mapping[str, Any]) -> str:
    """What an active run does now: ``evaluating 280/560``, ``saving model``; "" when not running or unknown."""
    phase = run.get("phase")
    if not phase or run.get("status") not in ("running", "cancelling"):
        return ""
    done, total = run.get("phase_done"), run.get("phase_total")
    if total:
        return f"{phase} {int(done or 0):,}/{int(total):,}"
    return str(phase)


def phase_fraction(run: Mapping[str, Any]) -> float | None:
    """How far the current phase is when it counts examples (evaluation), else None."""
    done, total = run.get("phase_done"), run.get("phase_total")
    if phase_text(run) and total:
        return min(max(float(done or 0) / float(total), 0.0), 1.0)
    return None


def eta_text(run: Mapping[str, Any]) -> str:
    status = run.get("status")
    if status in ("queued",):
        return "waiting"
    if status not in ACTIVE_STATES:
        return MISSING
    if run.get("phase") not in (None, "", "training"):
        return MISSING  # the ETA counts training steps; after the last one it would say 0s for minutes
    return format_duration(run.get("eta_seconds"))


def run_row(run: Any, owners: Optional[Mapping[int, str]] = None) -> list[Any]:
    """One row of the Runs table; the column order is ``RUN_TABLE_HEADERS`` (the owner's name, last, only
    with ``owners``: user id -> name; blank for work made before accounts).

    A prediction or evaluation job counts rows, not steps: its progress cell reads
    ``rows 1,200 / 10,000 · 340 rows/s · ETA 26s`` and its dataset cell names its input.
    """
    run = as_dict(run)
    job = is_job(run)
    return [
        run.get("id"),
        run_name(run),
        str(run.get("kind") or "train"),
        " · ".join(b for b in (status_label(str(run.get("status", ""))), "" if job else phase_text(run)) if b),
        job_progress_text(run) if job else progress_bar(run.get("progress")),
        job_eta_text(run) if job else eta_text(run),
        metric_cell(str(run.get("task", "")), run.get("metrics")),
        model_name(run.get("model")),
        (run.get("input_name") or dataset_name(run)) if job else dataset_name(run),
        format_time(run.get("created_at")),
    ] + ([] if owners is None else [owners.get(run.get("owner_id"), "")])


def is_job(run: Mapping[str, Any]) -> bool:
    """Whether ``run`` is a prediction or evaluation job rather than a training run."""
    return run.get("kind") in JOB_KINDS


def kind_label(run: Mapping[str, Any]) -> str:
    return KIND_LABELS.get(str(run.get("kind")), "run")


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def job_counts(run: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Rows done and rows in all of a job (a job's steps are its rows when the service gives no row keys)."""
    done = run.get("rows_done") if run.get("rows_done") is not None else run.get("step")
    total = run.get("rows_total") if run.get("rows_total") is not None else run.get("total_steps")
    return _whole(done), _whole(total) or None


def job_rate(run: Mapping[str, Any]) -> float | None:
    """Rows per second: as measured, else what the rows left and the ETA imply while it runs."""
    rate = run.get("rows_per_second")
    if isinstance(rate, (int, float)) and rate > 0:
        return float(rate)
    done, total = job_counts(run)
    eta = run.get("eta_seconds")
    if run.get("status") == "running" and total and done is not None and isinstance(eta, (int, float)) and eta > 0:
        return (total - done) / eta if total > done else None
    return None


def job_rows_text(run: Mapping[str, Any]) -> str:
    """``1,200 / 10,000`` (``1,200`` while the total is unknown, ``—`` before the first row)."""
    done, total = job_counts(run)
    if done is None and total is None:
        return MISSING
    return f"{done or 0:,} / {total:,}" if total else f"{done or 0:,}"


def rate_text(rate: float | None) -> str:
    """Rows per second: ``340``, ``1,204``; ``0.25`` for a slow job (not a misleading ``0``)."""
    if not rate:
        return MISSING
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


def job_eta_text(run: Mapping[str, Any]) -> str:
    status = run.get("status")
    if status == "queued":
        return "waiting"
    if status not in ACTIVE_STATES:
        return MISSING
    return format_duration(run.get("eta_seconds"))


def job_progress_text(run: Mapping[str, Any]) -> str:
    """A job's progress cell: ``rows 1,200 / 10,000 · 340 rows/s · ETA 26s``; an export counts stages
    (``checking parity 24/36 · stage 3 of 8``: each variant's file, each runtime's check and timing)."""
    rate, eta = (job_rate(run) if run.get("status") != "queued" else None), job_eta_text(run)
    if run.get("kind") == "export":
        done, total = job_counts(run)
        bits = [phase_text(run), f"stage {done or 0} of {total}" if total else "",
                f"ETA {eta}" if run.get("status") == "running" and eta != MISSING else ""]
        return " · ".join(b for b in bits if b)
    bits = [f"rows {job_rows_text(run)}", f"{rate_text(rate)} rows/s" if rate else "",
            f"ETA {eta}" if run.get("status") == "running" and eta != MISSING else ""]
    return " · ".join(b for b in bits if b)


def score_text(metrics: Mapping[str, Any] | None) -> str:
    """The headline metric of whichever task wrote ``metrics`` (an evaluation's score), or ``—``."""
    for task in MAIN_METRICS:
        found = main_metric(task, metrics)
        if found:
            return f"{found[0]} {format_metric(found[1])}"
    return MISSING


def test_set_facts_text(metrics: Mapping[str, Any] | None) -> str:
    """What an evaluation scored, from its metrics: ``300 rows, 3 of them duplicates, all scored · 5 rows
    longer than 128 tokens, cut to it`` (``jobs.predict.test_facts``); "" for a job that recorded neither."""
    metrics = metrics or {}
    rows, kept, dropped = (_whole(metrics.get(k)) for k in ("rows", "duplicates", "duplicates_dropped"))
    cut, limit = _whole(metrics.get("truncated")), _whole(metrics.get("max_length"))
    parts = []
    if rows is not None and kept:
        parts.append(f"{rows:,} rows, {kept:,} of them duplicate{'s' if kept > 1 else ''}, all scored")
    elif rows is not None and dropped:
        parts.append(f"{rows:,} rows scored; {dropped:,} duplicate row{'s were' if dropped > 1 else ' was'} "
                     "dropped when the dataset was stored")
    elif rows is not None and kept == 0:
        parts.append(f"{rows:,} rows, no duplicates, all scored")
    if cut is not None and limit:
        parts.append(f"{cut:,} row{'s' if cut != 1 else ''} longer than {limit:,} tokens, cut to it" if cut
                     else f"no row longer than {limit:,} tokens")
    return " · ".join(parts)


def run_choice(run: Any) -> tuple[str, int]:
    """A (label, id) pair for run pickers."""
    run = as_dict(run)
    return f"#{run.get('id')} {run_name(run)} · {run.get('status')}", int(run["id"])


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: ``{"train": {"lr": 1}}`` → ``{"train.lr": 1}``. Lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def config_diff(configs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """The keys whose values differ between ``configs``, each with its value per config.

    A key missing from one config counts as different (its value is ``None``).
    Keys come out sorted, so the diff reads the same way every time.
    """
    flats = [flatten(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    diff = []
    for key in keys:
        values = [f.get(key) for f in flats]
        if any(_canonical(v) != _canonical(values[0]) for v in values[1:]):
            diff.append((key, values))
    return diff


def shown_setting(key: str, value: Any, resolved: Mapping[str, Any] | None) -> str:
    """A spec value for the config diff. ``None`` means the workbench chose: show what it chose
    (``5e-05 (automatic)``, from the run's resolved hyper-parameters), or "automatic" before it ran."""
    if value is not None:
        return short_value(value)
    name = key.split(".", 1)[1] if key.startswith("train.") else key
    chosen = (resolved or {}).get(name)
    return f"{short_value(chosen)} (automatic)" if chosen is not None else "automatic"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def short_value(value: Any, limit: int = 60) -> str:
    text = MISSING if value is None else (value if isinstance(value, str) else json.dumps(value, default=str))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A clause that points at a command: "; `workbench runs list` shows the runs there are", "(see `workbench x`)".
_CLI_HINT = re.compile(r"\s*(?:[;:,—-]\s*[^;:()`]*`workbench[^`]*`[^;.()]*|\((?:[^()]*?)`workbench[^`]*`[^()]*\))")


def ui_message(message: Any) -> str:
    """A service message as the browser shows it: CLI hints (`` `workbench …` ``) are for the terminal, so
    the clause that carries one is dropped; what is wrong stays."""
    text = str(message)
    stripped = re.sub(r"\s{2,}", " ", _CLI_HINT.sub("", text)).strip()
    return stripped or text


def problems_rows(problems: Iterable[Any]) -> list[list[Any]]:
    """Validation problems as table rows: severity, file, line, column/record, message, hint."""
    rows = []
    for problem in problems:
        p = as_dict(problem)
        where = p.get("column") or p.get("record") or ""
        rows.append([p.get("severity", "error"), p.get("file", ""), p.get("line") if p.get("line") is not None else "",
                     where, p.get("message", ""), p.get("hint", "")])
    return rows


PROBLEM_HEADERS = ["Severity", "File", "Line", "Where", "Problem", "How to fix"]


def problems_markdown(problems: Sequence[Any], limit: int = 20) -> str:
    """The problems as a short list that names file and line first, for the status box."""
    lines = []
    for problem in list(problems)[:limit]:
        p = as_dict(problem)
        where = p.get("file", "")
        if p.get("line") is not None:
            where += f", line {p['line']}"
        if p.get("record") is not None:
            where += f" (record {p['record']})"
        if p.get("column"):
            where += f", column `{p['column']}`"
        text = f"- **{p.get('severity', 'error')}** · {html.escape(where)}: {html.escape(str(p.get('message', '')))}"
        if p.get("hint"):
            text += f" — {html.escape(str(p['hint']))}"
        lines.append(text)
    if len(problems) > limit:
        lines.append(f"- … and {len(problems) - limit} more")
    return "\n".join(lines)


def positive_id(value: Any) -> Optional[int]:
    """A run or job id from a component's value, or None: an empty ``gr.Number`` arrives as None, "" or 0
    (ids start at 1), a table cell as a string."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


# CSI sequences (colours, cursor moves: ``\x1b[1m``, ``\x1b[A``), OSC sequences (titles, links) and two-byte escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# A progress bar (tqdm's ``desc:  45%|████▌     | 45/100 [...]``): what precedes the percentage names the bar.
_PROGRESS = re.compile(r"^(?P<bar>.*?)\s*\d{1,3}%\|")


def clean_log(text: str) -> str:
    """A log as a terminal would have left it: no colour or cursor codes, one line per progress bar.

    A bar redraws itself after a ``\r``: of each line only what was written after its last ``\r``
    stays. A log read by lines (``str.splitlines`` ends a line at ``\r`` too) has each redraw on a
    line of its own, after a blank one; consecutive redraws of the same bar then keep only the last.
    """
    lines: list[str] = []
    for line in _ANSI.sub("", text).replace("\r\n", "\n").split("\n"):
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
        bar = _PROGRESS.match(line)
        if bar and lines and not lines[-1].strip():
            lines.pop()  # the blank line a bar's leading "\r" left
        previous = _PROGRESS.match(lines[-1]) if bar and lines else None
        if previous and bar.group("bar").strip() == previous.group("bar").strip():
            lines[-1] = line
        else:
            lines.append(line)
    return "\n".join(lines)


# The Metrics tab's names for what a reader looks at, in the order it shows them: the task's scores first,
# then what the run cost. Every other key a run records (the attention kernel and why, evaluations and
# checkpoints counted for the time estimates, parameter counts, ...) is bookkeeping, kept under "details".
SCORE_NAMES = {
    "accuracy": "Accuracy", "f1_macro": "F1 (macro)", "f1_micro": "F1 (micro)", "roc_auc": "ROC AUC",
    "entity_f1": "Entity F1", "entity_precision": "Entity precision", "entity_recall": "Entity recall",
    "token_accuracy": "Token accuracy", "f1": "F1 (%)", "exact_match": "Exact match (%)",
    "perplexity": "Perplexity", "perplexity_before": "Perplexity before training", "mlm_loss": "Masked-LM loss",
    "nsp_accuracy": "Next-sentence accuracy", "train_loss": "Training loss",
}
COST_NAMES = {
    "wall_seconds": "Total time", "train_seconds": "Training time",
    "samples_per_second": "Training speed (examples/s)", "train_records": "Training examples",
    "validation_records": "Validation examples", "method": "Method", "device": "Device",
    # prediction and evaluation jobs
    "test_set": "Test set", "rows": "Rows", "seconds": "Time", "rows_per_second": "Rows per second",
    "truncated": "Rows cut to the max length", "max_length": "Max length (tokens)",
    "duplicates": "Duplicate rows (kept and scored)", "duplicates_dropped": "Duplicate rows dropped when stored",
}
BASELINE_SCORES = {"accuracy": "accuracy", "f1_macro": "F1 (macro)"}


# Names for the keys the details table shows most (the rest: ``readable_key``'s plain words).
KEY_NAMES = {
    "ece": "Calibration error (ECE)", "ece_calibrated": "Calibration error, calibrated (ECE)",
    "temperature": "Temperature (calibration)", "model_run": "Model of run", "batch_size": "Batch size",
    "max_length": "Max length (tokens)", "lr": "Learning rate", "learning_rate": "Learning rate",
    "f1_macro": "F1 (macro)", "roc_auc": "ROC AUC", "p50_ms": "p50 latency (ms)", "p95_ms": "p95 latency (ms)",
    "tfidf_logreg": "TF-IDF + logistic regression", "nsp": "next-sentence prediction", "mlm": "masked LM",
}


def readable_key(key: str) -> str:
    """A recorded key as people read it: ``ece`` → ``Calibration error (ECE)``, ``verdict.top_label`` →
    ``Verdict › top label`` (underscores become spaces, the first word capitalised)."""
    parts = []
    for index, part in enumerate(str(key).split(".")):
        word = KEY_NAMES.get(part) or part.replace("_", " ")
        parts.append(word[:1].upper() + word[1:] if index == 0 else word)
    return " › ".join(parts)


def _readable_value(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return format_metric(value)
    if key.endswith("seconds"):
        return f"{value:.1f}s" if value < 10 else format_duration(value)
    if key.endswith("per_second"):  # a speed, not a score: "13", "0.25", not "13.4100"
        return rate_text(value) if value else "0"
    return format_metric(value)


def readable_metric_rows(metrics: Mapping[str, Any] | None) -> list[list[Any]]:
    """The Metrics tab's table: the task's scores, the baselines on the same validation split with the
    verdict, then the run's time and size, each under a name people read (``Accuracy``, ``Total time``)."""
    metrics = metrics or {}
    rows = [[name, _readable_value(key, metrics[key])] for key, name in SCORE_NAMES.items() if key in metrics]
    found = metrics.get("baselines")
    for name, scores in (found.items() if isinstance(found, Mapping) else ()):
        for score, score_name in BASELINE_SCORES.items():
            if isinstance(scores, Mapping) and score in scores:
                rows.append([f"Baseline: {baselines.NAMES.get(name, name)} — {score_name}",
                             format_metric(scores[score])])
    if baselines.status(metrics):
        rows.append(["Verdict", baselines.verdict_cell(metrics)])
    rows += [[name, _readable_value(key, metrics[key])] for key, name in COST_NAMES.items()
             if metrics.get(key) is not None]
    return rows


def metric_detail_rows(metrics: Mapping[str, Any] | None) -> list[list[Any]]:
    """Everything else the run recorded, under its key in plain words (``readable_key``; nested ones joined by
    ›), for the collapsed details."""
    shown = {*SCORE_NAMES, *COST_NAMES, "verdict.status", "verdict.message",
             *(f"baselines.{name}.{score}" for name in baselines.NAMES for score in BASELINE_SCORES)}
    return [[readable_key(key), short_value(value, 200) if isinstance(value, (list, str)) else
             _readable_value(key, value)]
            for key, value in sorted(flatten(metrics or {}).items()) if key not in shown]


def dataset_label(run: Mapping[str, Any]) -> str:
    """The dataset a run trained on as people read it: its name, with its id when it has one
    (``sms-spam (3f9a0c)``)."""
    name = dataset_name(run)
    spec = run.get("spec") if isinstance(run.get("spec"), Mapping) else {}
    dataset_id = run.get("dataset_id") or (spec.get("data") or {}).get("dataset_id")
    return f"{name} ({dataset_id})" if dataset_id and str(dataset_id) != name else name


def param_value(value: Any) -> str:
    """A hyper-parameter as people read it: numbers at 3 significant digits (``3.16e-05``, ``0.01``, ``0.1``),
    whole numbers whole (``16``), ``true``/``false``, text as it is, ``—`` for none."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or not isinstance(value, float):
        return str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    rounded = float(f"{value:.3g}")  # rounded first: 999.7 is 1000, not "1e+03"
    if rounded != 0 and (abs(rounded) < 1e-3 or abs(rounded) >= 1e4):
        mantissa, exponent = f"{rounded:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"
    return str(int(rounded)) if rounded.is_integer() else f"{rounded:.3g}"


def params_text(params: Mapping[str, Any]) -> str:
    """``learning_rate=3.16e-05, batch_size=16``: a trial's parameters on one line."""
    return ", ".join(f"{name}={param_value(value)}" for name, value in params.items())


def short_run_name(run: Mapping[str, Any]) -> str:
    """A run's name, with a sweep's trial as ``sweep 3 #5`` whatever it was named when queued: trials of older
    versions carried every parameter in their name, which the views now show in columns of their own."""
    from workbench.services.specs import trial_name

    if run.get("sweep_id") is not None and run.get("trial_number") is not None:
        return trial_name(int(run["sweep_id"]), int(run["trial_number"]))
    return run_name(run)


def sentence_case(text: str) -> str:
    """``text`` with its first letter made a capital and the rest left alone (``str.capitalize`` would turn
    "per CPU" into "per cpu")."""
    return text[:1].upper() + text[1:]


def rough_duration(seconds: float | None) -> str:
    """A time to plan with, not to the second: ``under a minute``, ``about 12 min``, ``about 2 h 05 min``."""
    if seconds is None or seconds != seconds or seconds < 0:
        return MISSING
    if seconds < 60:
        return "under a minute"
    minutes = int(round(seconds / 60))
    if minutes < 90:
        return f"about {minutes} min"
    return f"about {minutes // 60} h {minutes % 60:02d} min"


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def queue_text(queue: Mapping[str, Any] | None) -> str:
    """Where a queued run stands (``workbench.services.runs.queue_positions``):
    ``2nd in line · starts after run 1, in about 10 min``, ``1st in the short-job lane · …`` for a job that
    runs beside the training runs; "" without a position."""
    if not queue:
        return ""
    where = "the short-job lane" if queue.get("lane") == "short" else "line"
    line = f"{ordinal(int(queue['position']))} in {where}"
    start = queue.get("expected_start_seconds")
    if queue.get("unknown") == "no worker is running":
        return f"{line} · no worker is running (start one: workbench worker)"
    if start is None:
        return f"{line} · start time unknown ({queue.get('unknown') or 'no estimate'})"
    if start <= 0:
        return f"{line} · starts as soon as a worker takes it"
    after = f"after run {queue['after']}, " if queue.get("after") else ""
    return f"{line} · starts {after}in {rough_duration(start)}"


def queued_status(queue: Mapping[str, Any] | None) -> str:
    """The status of a queued run with its place in the queue: ``◷ queued · 2nd in line · starts …``."""
    text = queue_text(queue)
    return status_label("queued") + (f" · {text}" if text else "")


def time_left(run: Mapping[str, Any]) -> float | None:
    """Seconds a training run still needs by its own measured speed: the live ETA of its steps plus its
    final evaluation as estimated at submit; None before it has measured its speed, or after training."""
    eta = run.get("eta_seconds")
    if run.get("status") != "running" or not isinstance(eta, (int, float)) or run.get("phase") not in (
            None, "", "training"):
        return None
    estimate = run.get("estimate") or {}
    parts, evaluations = estimate.get("parts") or {}, estimate.get("evaluations") or 1
    return float(eta) + float(parts.get("evaluation") or 0.0) / max(int(evaluations), 1)


def live_verdict(run: Mapping[str, Any]) -> str:
    """``running slower than estimated: about 12 min left`` when the run's own speed puts its end outside
    the range estimated at submit (``faster``, likewise); "" while it is within it or cannot tell yet."""
    from workbench.services.estimates import actual_seconds

    estimate, left = run.get("estimate") or {}, time_left(run)
    if left is None or not estimate.get("high"):
        return ""
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    elapsed = actual_seconds({"started_at": run.get("started_at"), "finished_at": now}) or 0.0
    if elapsed + left > estimate["high"]:
        return f"running slower than estimated: {rough_duration(left)} left"
    if elapsed + left < (estimate.get("low") or 0):
        return f"running faster than estimated: {rough_duration(left)} left"
    return ""


def live_estimate_line(run: Mapping[str, Any]) -> str:
    """``estimate_line`` and, once the run's own speed says it will end outside that estimate, the verdict."""
    line, verdict = estimate_line(run), live_verdict(run)
    return " · ".join(b for b in (line, verdict) if b)


def mean_std_text(mean: float | None, std: float | None) -> str:
    """``0.912 ± 0.006`` (the spread left out below two values), ``-`` with no value."""
    if mean is None:
        return "-"
    return f"{mean:.3f}" + (f" ± {std:.3f}" if std is not None else "")


def seed_group_text(group: Mapping[str, Any] | None) -> str:
    """``seed group: accuracy mean 0.912 ± 0.006 over 3 seeds (1 still to finish)`` for a run's seed group
    (``workbench.services.runs.group_summary``); "" for a run in none."""
    if not group:
        return ""
    members = len(group.get("ids") or [])
    waiting = sum(m.get("status") in ("queued", "running", "cancelling") for m in group.get("members") or [])
    rest = f" ({waiting} still to finish)" if waiting else ""
    metric = next((m for m in group.get("metrics") or [] if m in (group.get("mean") or {})), None)
    if metric is None:
        return f"seed group: {members} seeds, {'none finished yet' if waiting else 'none succeeded'}{rest}"
    n = group.get("n") or 0
    return (f"seed group: {metric} mean {mean_std_text(group['mean'][metric], group['std'].get(metric))} "
            f"over {n} seed{'s' if n != 1 else ''}{rest}")


# --- uncertainty: a score with its 95 % bootstrap interval (jobs.evaluation.outcomes' ``metrics_ci``) -------------------

# An interval whose two sides differ by more than this share of the longer one is shown as [low, high]: a score
# near 1.0 has most of its room below it, and "± half-width" would claim room above it that it does not have.
LOPSIDED = 0.25


def interval_bounds(ci: Any) -> tuple[float, float] | None:
    """``(low, high)`` of a stored interval (``{"low", "high", ...}``) or a service's ``[low, high]``; None for
    anything else (no interval, or one with a missing or non-numeric end)."""
    if isinstance(ci, Mapping):
        ci = (ci.get("low"), ci.get("high"))
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    low, high = ci
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v == v for v in (low, high)):
        return None
    return float(low), float(high)


def interval_decimals(half_width: float) -> int:
    """Decimals that give a half-width two significant digits (``0.011`` → 3, ``1.2`` → 1, ``12`` → 0), ≤ 4."""
    if half_width <= 0:
        return 3
    exponent = int(f"{half_width:.1e}".split("e")[1])  # of the half-width rounded first: 0.0996 is 0.10
    return min(max(1 - exponent, 0), 4)


def metric_with_ci(value: Any, ci: Any) -> str:
    """``0.912 ± 0.011``: a score and the half-width of its interval, both to the interval's two significant
    digits; ``0.998 [0.994, 1.000]`` when the interval is lopsided; the value as ``format_metric`` shows it
    when there is no interval."""
    bounds = interval_bounds(ci)
    if bounds is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return format_metric(value)
    low, high = bounds
    half = (high - low) / 2
    decimals = interval_decimals(half)
    above, below = high - value, value - low
    if min(above, below) < 0 or abs(above - below) > LOPSIDED * max(above, below):
        return f"{value:.{decimals}f} [{low:.{decimals}f}, {high:.{decimals}f}]"
    return f"{value:.{decimals}f} ± {half:.{decimals}f}"


def metric_ci(metrics: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    """The stored interval of ``metrics[key]`` (``metrics["metrics_ci"][key]``), or None."""
    found = (metrics or {}).get("metrics_ci")
    interval = found.get(key) if isinstance(found, Mapping) else None
    return interval if interval_bounds(interval) is not None else None


def score_line_html(task: str, metrics: Mapping[str, Any] | None, split: str, examples: Any = None) -> str:
    """A header's score line: ``<split> accuracy: 0.912 ± 0.011 (95 % CI, n = 500)`` (the bare score of a run
    scored before intervals); "" before there is a score."""
    found = main_metric(task, metrics)
    if found is None:
        return ""
    ci = metric_ci(metrics, found[0])
    note = f" <span class='wb-muted'>({ci_note(ci, examples)})</span>" if ci else ""
    return (f"<p id='run-score'>{html.escape(split)} {html.escape(found[0])}: "
            f"<b>{html.escape(metric_with_ci(found[1], ci))}</b>{note}</p>")


def ci_note(ci: Mapping[str, Any] | None, examples: Any = None) -> str:
    """What an interval is: ``95 % CI, n = 500`` (the level stored with it; n when known)."""
    level = (ci or {}).get("level") or 0.95
    n = _whole(examples)
    return f"{level * 100:g} % CI" + (f", n = {n:,}" if n else "")


def main_metric_ci_text(task: str, metrics: Mapping[str, Any] | None) -> str:
    """``accuracy 0.912 ± 0.011``: the headline metric with its interval when the run has one."""
    found = main_metric(task, metrics)
    return f"{found[0]} {metric_with_ci(found[1], metric_ci(metrics, found[0]))}" if found else MISSING


def metric_ci_cell(task: str, metrics: Mapping[str, Any] | None) -> str:
    """``metric_cell`` with the headline metric's interval: ``accuracy 0.912 ± 0.011 (baseline 0.850)``."""
    return metric_cell(task, metrics).replace(main_metric_text(task, metrics), main_metric_ci_text(task, metrics), 1)


def readable_metric_rows_with_ci(metrics: Mapping[str, Any] | None) -> list[list[Any]]:
    """``readable_metric_rows`` with each score that has an interval shown with it (``0.912 ± 0.011``)."""
    metrics = metrics or {}
    with_ci = {SCORE_NAMES[key]: key for key in SCORE_NAMES if key in metrics and metric_ci(metrics, key)}
    return [[name, metric_with_ci(metrics[with_ci[name]], metric_ci(metrics, with_ci[name]))]
            if name in with_ci else [name, value] for name, value in readable_metric_rows(metrics)]


def p_value_text(p: float) -> str:
    """``p = 0.012``, ``p < 0.001`` (as the verdict sentences write it)."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
