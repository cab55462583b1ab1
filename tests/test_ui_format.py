"""Pure UI helpers: config diff, durations, progress bars, table rows, plot frames."""
from __future__ import annotations

import datetime as dt
import re

import numpy as np
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
    # Bins hold [low, high): with a max length of 63 the third bin (64–95) is longer than it, whole.
    stats = {"max_length": 63, "truncated_share": 0.1176, "count": 17,
             "histogram": {"edges": [0, 32, 64, 96], "counts": [10, 5, 2]}}
    frame = plots.token_length_frame(stats)
    assert list(frame["part"]) == ["kept", "kept", "truncated"]
    assert list(frame["count"]) == [10, 5, 2]
    assert "11.8%" in plots.token_length_caption(stats)


def _red_share(frame):
    return frame.loc[frame["part"] == "truncated", "count"].sum() / frame["count"].sum()


def test_the_bar_holding_the_max_length_is_split_where_it_cuts():
    """Issue 25: "41.6 % truncated" under a chart whose red bars were 8 % of it: the bar that holds the cut at 128
    was all blue. It is split at the cut, and the red bars hold exactly the printed share."""
    from storage.datasets.stats import length_summary

    lengths = np.concatenate([np.arange(20, 60), np.repeat(np.arange(100, 140), 6), np.arange(560, 600)])
    stats = length_summary(lengths, 128, tokenizer="t", sampled=False, population=len(lengths))
    assert stats["histogram"]["edges"][1:3] == [78, 136]  # 128 is inside the second bin
    frame = plots.token_length_frame(stats)
    assert _red_share(frame) == pytest.approx(stats["truncated_share"], abs=1e-4)
    assert stats["truncated_share"] == pytest.approx(float((lengths > 128).mean()), abs=1e-4)
    assert list(frame["tokens"][:3]) == ["20–77", "78–128", "129–135"]
    assert list(frame["part"][:3]) == ["kept", "kept", "truncated"]
    assert frame.loc[1, "count"] == int(((lengths >= 78) & (lengths <= 128)).sum())
    assert frame.loc[2, "count"] == int(((lengths >= 129) & (lengths <= 135)).sum())
    assert list(frame["part"]).count("truncated") == len(frame) - list(frame["part"]).index("truncated")
    bars = plots.bar_chart_svg(frame, "tokens", "count", "Token lengths", colour_by="part",
                               colours={plots.KEPT: "#2563eb", plots.TRUNCATED: "#dc2626"})
    heights = [(c, float(h)) for h, c in re.findall(r"class='wb-bar'[^>]*height='([0-9.]+)' fill='(#[0-9a-f]+)'",
                                                       bars)]
    red = sum(h for c, h in heights if c == "#dc2626") / sum(h for _, h in heights)
    assert red == pytest.approx(stats["truncated_share"], abs=0.01)


def test_a_bin_starting_at_the_max_length_holds_a_kept_length():
    """An example of exactly max_length tokens is not truncated ("longer than", as truncated_share counts)."""
    stats = {"max_length": 128, "truncated_share": 0.25, "count": 8,
             "histogram": {"edges": [118, 128, 138], "counts": [4, 4]}}
    frame = plots.token_length_frame(stats)
    assert list(frame["tokens"]) == ["118–127", "128", "129–137"]
    assert list(frame["part"]) == ["kept", "kept", "truncated"] and list(frame["count"]) == [4, 2, 2]
    # Without the share (an older report), the bar is split in proportion to the lengths on each side.
    del stats["truncated_share"]
    assert list(plots.token_length_frame(stats)["count"]) == [4, 0, 4]


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


def _circles(svg):
    return [(float(x), float(y), float(r)) for x, y, r in
            re.findall(r"<circle[^>]* cx='([0-9.]+)' cy='([0-9.]+)' r='([0-9.]+)'", svg)]


def test_a_lone_evaluation_point_is_drawn_inside_the_chart_with_its_value():
    """Issue 25: a run evaluated once drew its eval/loss on the frame's right edge, a 2.5 px dot under its stroke."""
    curves = {"train/loss": [(step, 1.0 - step / 200) for step in range(10, 110, 10)], "eval/loss": [(100, 0.61)]}
    svg = plots.line_chart_svg(plots.curves_frame(curves, loss=True), "Loss")
    left, right = plots._L, plots._W - plots._R
    lone = re.search(r"<circle class='wb-lone-point' cx='([0-9.]+)' cy='([0-9.]+)' r='([0-9.]+)'", svg)
    assert lone, svg
    x, _, radius = map(float, lone.groups())
    assert left + 10 < x < right - 10 and radius >= 4
    assert "<text class='wb-point-label'" in svg and ">0.61</text>" in svg
    assert all(left < cx < right for cx, _, _ in _circles(svg))

    # A run with one point in all: in the middle, labelled, and the step axis shows whole steps only.
    single = plots.line_chart_svg(plots.curves_frame({"eval/accuracy": [(50, 0.8125)]}, loss=False), "Metrics")
    (cx, cy, r), = _circles(single)
    assert cx == pytest.approx((left + right) / 2) and r >= 4 and ">0.8125</text>" in single
    steps = re.findall(r"text-anchor='middle'>([0-9.]+)</text>", single)
    assert "50" in steps and all("." not in step for step in steps)


def test_curves_of_many_points_keep_their_edges_and_small_dots():
    svg = plots.line_chart_svg(plots.curves_frame({"train/loss": [(1, 0.9), (2, 0.5), (3, 0.4)]}, loss=True), "Loss")
    xs = [cx for cx, _, _ in _circles(svg)]
    assert xs[0] == plots._L and xs[-1] == plots._W - plots._R and "wb-point-label" not in svg


def test_clean_log_strips_colours_and_keeps_the_last_redraw_of_a_progress_bar():
    raw = ("\x1b[1mINFO\x1b[0m loading model\n"
           "\r  0%|          | 0/10 [00:00<?, ?it/s]\r 50%|█████     | 5/10 [00:01<00:01, 4.9it/s]"
           "\r100%|██████████| 10/10 [00:02<00:00, 5.0it/s]\n"
           "\x1b[32m{'loss': 0.41}\x1b[0m\r\n"
           "done\x1b]0;title\x07 \x1b[A\n")
    assert fmt.clean_log(raw) == ("INFO loading model\n"
                                  "100%|██████████| 10/10 [00:02<00:00, 5.0it/s]\n"
                                  "{'loss': 0.41}\n"
                                  "done \n")


def test_clean_log_collapses_redraws_a_line_reader_already_split():
    """The runs service reads the log by lines, which splits at every \\r: one redraw a line, after a blank one."""
    read = "\n".join(["epoch 1", "", "Training:   0%|   | 0/4", "Training:  50%|█▌ | 2/4",
                      "Training: 100%|███| 4/4", "{'eval_loss': 0.3}", "", "Evaluating:  50%|█▌ | 1/2",
                      "Evaluating: 100%|███| 2/2", "", "Training:  75%|██▎| 3/4", "saved", "", "kept blank line above"])
    assert fmt.clean_log(read).split("\n") == [
        "epoch 1", "Training: 100%|███| 4/4", "{'eval_loss': 0.3}", "Evaluating: 100%|███| 2/2",
        "Training:  75%|██▎| 3/4", "saved", "", "kept blank line above"]
    assert fmt.clean_log("plain\nlines\n") == "plain\nlines\n"


def test_an_export_in_progress_shows_its_phase_and_stages_not_rows():
    from workbench.ui import export_panel

    job = {"id": 9, "kind": "export", "status": "running", "phase": "checking parity", "phase_done": 24,
           "phase_total": 36, "step": 3, "total_steps": 8, "progress": 0.375, "eta_seconds": None}
    assert fmt.job_progress_text(job) == "checking parity 24/36 · stage 3 of 8"
    assert export_panel.state_text(job).endswith("running · 38 % · checking parity 24/36")
