"""Pure UI helpers: config diff, durations, progress bars, table rows, plot frames."""
from __future__ import annotations

import datetime as dt

import pytest

from workbench.ui import format as fmt
from workbench.ui import plots


def test_config_diff_keeps_only_differing_keys_with_dotted_names():
    a = {"task": "text-classification", "model": "m1", "train": {"learning_rate": 5e-5, "epochs": 1, "seed": 42},
         "lora": {"enabled": False, "r": 8}}
    b = {"task": "text-classification", "model": "m2", "train": {"learning_rate": 1e-4, "epochs": 1, "seed": 42},
         "lora": {"enabled": True, "r": 8}}
    assert fmt.config_diff([a, b]) == [
        ("lora.enabled", [False, True]),
        ("model", ["m1", "m2"]),
        ("train.learning_rate", [5e-5, 1e-4]),
    ]


def test_config_diff_missing_key_counts_as_different_and_three_way():
    a = {"train": {"max_steps": None, "epochs": 1}}
    b = {"train": {"epochs": 1}}
    c = {"train": {"max_steps": 10, "epochs": 1}}
    assert fmt.config_diff([a, b]) == []  # None and missing read the same
    assert fmt.config_diff([a, b, c]) == [("train.max_steps", [None, None, 10])]


def test_config_diff_compares_lists_by_value():
    a = {"lora": {"target_modules": ["query", "value"]}}
    b = {"lora": {"target_modules": ["query", "value"]}}
    c = {"lora": {"target_modules": ["query"]}}
    assert fmt.config_diff([a, b]) == []
    assert fmt.config_diff([a, c]) == [("lora.target_modules", [["query", "value"], ["query"]])]


def test_format_duration():
    assert fmt.format_duration(None) == "—"
    assert fmt.format_duration(-1) == "—"
    assert fmt.format_duration(4.4) == "4s"
    assert fmt.format_duration(95) == "1m 35s"
    assert fmt.format_duration(3 * 3600 + 4 * 60) == "3h 04m"
    assert fmt.format_duration(50 * 3600) == "2d 02h"


def test_progress_bar_clamps_and_rounds():
    assert fmt.progress_bar(0.4) == "▰▰▰▰▱▱▱▱▱▱ 40%"
    assert fmt.progress_bar(None) == "▱" * 10 + " 0%"
    assert fmt.progress_bar(1.7) == "▰" * 10 + " 100%"
    assert "width:50.0%" in fmt.progress_html(0.5, "running")


def test_main_metric_per_task_and_fallbacks():
    assert fmt.main_metric("text-classification", {"accuracy": 0.9, "f1_macro": 0.8}) == ("accuracy", 0.9)
    assert fmt.main_metric("token-classification", {"token_accuracy": 0.7}) == ("token_accuracy", 0.7)
    assert fmt.main_metric("question-answering", {"eval/f1": 55.0}) == ("f1", 55.0)
    assert fmt.main_metric("masked-lm", {}) is None
    assert fmt.main_metric_text("masked-lm", {"perplexity": 12.345678}) == "perplexity 12.3457"


def test_run_row_from_dict_and_dataclass():
    import dataclasses

    @dataclasses.dataclass
    class Row:
        id: int
        name: str
        task: str
        status: str
        progress: float
        eta_seconds: float | None
        metrics: dict
        model: str
        dataset: str
        created_at: dt.datetime

    row = Row(7, "", "text-classification", "running", 0.25, 130, {}, "/tmp/x/models/tiny-bert", "sms",
              dt.datetime(2026, 11, 30, 9, 5))
    assert fmt.run_row(row) == [7, "text-classification #7", "train", "▶ running", "▰▰▱▱▱▱▱▱▱▱ 25%", "2m 10s",
                                "—", "models/tiny-bert", "sms", "2026-11-30 09:05"]
    done = fmt.run_row({"id": 8, "name": "best", "task": "text-classification", "status": "succeeded",
                        "progress": 1.0, "metrics": {"accuracy": 0.99}, "model": "all-MiniLM-L6-v2",
                        "spec": {"data": {"name": "sms-spam"}}, "created_at": "2026-11-30T10:00:00"})
    assert done[5] == "—" and done[6] == "accuracy 0.9900" and done[8] == "sms-spam"


def test_problems_markdown_names_file_and_line():
    problems = [{"severity": "error", "file": "broken.csv", "line": 4, "message": "row has 3 fields, expected 2",
                 "hint": "quote fields that contain commas"}] * 3
    text = fmt.problems_markdown(problems, limit=2)
    assert "broken.csv, line 4" in text and "quote fields" in text and "1 more" in text
    assert fmt.problems_rows(problems[:1]) == [["error", "broken.csv", 4, "", "row has 3 fields, expected 2",
                                               "quote fields that contain commas"]]


def test_token_length_frame_marks_bins_beyond_max_length():
    stats = {"max_length": 64, "truncated_share": 0.05,
             "histogram": {"edges": [0, 32, 64, 96], "counts": [10, 5, 2]}}
    frame = plots.token_length_frame(stats)
    assert list(frame["part"]) == ["kept", "kept", "truncated"]
    assert list(frame["count"]) == [10, 5, 2]
    assert "5.0%" in plots.token_length_caption(stats)


def test_curves_frame_splits_loss_from_metrics_and_drops_learning_rate():
    curves = {"train/loss": [(1, 0.9), (2, 0.5)], "eval/accuracy": [{"step": 2, "value": 0.8}],
              "train/learning_rate": [(1, 1e-4)]}
    loss = plots.curves_frame(curves, loss=True)
    metric = plots.curves_frame(curves, loss=False)
    assert list(loss["curve"]) == ["train/loss", "train/loss"]
    assert list(metric["value"]) == [0.8]
    overlay = plots.overlaid_curves({"#1": curves, "#2": {"eval/accuracy": [(2, 0.9)]}}, "eval/accuracy")
    assert list(overlay["curve"]) == ["#1", "#2"]
    assert plots.curve_names([curves]) == ["eval/accuracy", "train/loss"]


def test_label_distribution_sorted_and_confusion_html():
    frame = plots.label_distribution({"ham": 3, "spam": 7})
    assert list(frame["label"]) == ["spam", "ham"]
    table = plots.confusion_html(["ham", "spam"], [[5, 1], [0, 4]])
    assert table.count("<tr>") == 3 and "gold \\ predicted" in table


def test_svg_charts_draw_one_line_per_curve_and_bars_from_zero():
    frame = plots.curves_frame({"train/loss": [(1, 0.9), (2, 0.5), (3, 0.4)], "eval/loss": [(3, 0.6)]}, loss=True)
    svg = plots.line_chart_svg(frame, "Loss")
    assert svg.count("<polyline") == 2 and "train/loss" in svg and "eval/loss" in svg
    assert "No points yet" in plots.line_chart_svg(plots.curves_frame({}, loss=True), "Loss")
    bars = plots.bar_chart_svg(plots.label_distribution({"ham": 40, "spam": 20}), "label", "count", "Labels")
    heights = [float(h) for h in __import__("re").findall(r"class='wb-bar'[^>]*height='([0-9.]+)'", bars)]
    assert len(heights) == 2 and heights[0] == 2 * heights[1]  # the axis starts at zero
    assert plots._ticks(0, 1.05) == [0, 0.5, 1.0]
    assert plots._ticks(0, 40) == [0, 10, 20, 30, 40]


def test_curves_frame_keeps_the_last_value_logged_at_a_step():
    frame = plots.curves_frame({"eval/accuracy": [(8, 0.5), (8, 0.7)]}, loss=False)
    assert list(frame["value"]) == [0.7]


def test_a_running_run_shows_its_phase_in_the_table_and_no_stale_eta():
    run = {"id": 3, "task": "text-classification", "status": "running", "progress": 1.0, "eta_seconds": 0.0,
           "phase": "evaluating", "phase_done": 280, "phase_total": 1144}
    row = fmt.run_row(run)
    assert row[3] == "▶ running · evaluating 280/1,144" and row[5] == "—"
    assert fmt.phase_fraction(run) == pytest.approx(280 / 1144)
    assert fmt.run_row({**run, "phase": "saving model", "phase_done": None, "phase_total": None})[3] == \
        "▶ running · saving model"
    assert fmt.run_row({**run, "phase": "training", "phase_done": None, "phase_total": None})[5] == "0s"
    assert fmt.phase_text({**run, "status": "succeeded"}) == ""  # a finished run is in no phase
