"""Issue 24 in the browser's views: scores with their 95 % intervals (Runs table, run header, Metrics tab, Compare,
the playground card) and Compare's "Is the difference real?" from real per-example outcomes."""
from __future__ import annotations

import numpy as np
import pytest

from jobs.evaluation import outcomes
from jobs.specs.run import DataSpec, RunSpec
from storage.models import KIND_EVALUATE, Run
from workbench.playground.page import card_markdown
from workbench.services import comparisons, datasets
from workbench.services import runs as runs_service
from workbench.ui import compare_tab, runs_tab
from workbench.ui import format as fmt
from tests.tiny_models import classification_records, write_jsonl

LABELS = ["ham", "spam"]
INTERVAL = {"low": 0.86, "high": 0.94, "resamples": 1000, "level": 0.95}


# --- the format -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, ci, shown", [
    (0.912, {"low": 0.901, "high": 0.923, "resamples": 1000, "level": 0.95}, "0.912 ± 0.011"),
    (0.912, [0.901, 0.923], "0.912 ± 0.011"),  # a service's [low, high]
    (85.31, [84.1, 86.5], "85.3 ± 1.2"),  # QA's F1 on 0..100: two significant digits of the half-width
    (61.0, [48.7, 73.3], "61 ± 12"),
    (0.9123, [0.9089, 0.9157], "0.9123 ± 0.0034"),
    (0.998, [0.994, 1.0], "0.9980 [0.9940, 1.0000]"),  # lopsided near the ceiling: both ends, not "±"
    (0.5, [0.52, 0.6], "0.500 [0.520, 0.600]"),  # a value outside its interval is never written as "±"
    (1.0, [1.0, 1.0], "1.000 ± 0.000"),
    (0.9, None, "0.9000"),  # no interval: the value as format_metric shows it
    (0.9, {"low": None, "high": 0.95}, "0.9000"),
    (None, [0.1, 0.2], fmt.MISSING),
])
def test_metric_with_ci(value, ci, shown):
    assert fmt.metric_with_ci(value, ci) == shown


def test_interval_helpers():
    assert [fmt.interval_decimals(h) for h in (0.011, 0.0034, 0.0996, 1.2, 12.0, 0.00001, 0.0)] == [
        3, 4, 2, 1, 0, 4, 3]
    metrics = {"accuracy": 0.9, "metrics_ci": {"accuracy": INTERVAL, "f1_macro": {"low": "x"}}}
    assert fmt.metric_ci(metrics, "accuracy") == INTERVAL
    assert fmt.metric_ci(metrics, "f1_macro") is None and fmt.metric_ci({"accuracy": 0.9}, "accuracy") is None
    assert fmt.ci_note(INTERVAL, 1500) == "95 % CI, n = 1,500" and fmt.ci_note({"level": 0.9}) == "90 % CI"
    assert fmt.p_value_text(0.0004) == "p < 0.001" and fmt.p_value_text(0.0123) == "p = 0.012"


# --- fake finished runs ------------------------------------------------------------------------------------------

def _run(wb, tmp_path, name: str, metrics: dict, validation: str = "dev.jsonl") -> int:
    run_id = runs_service.submit_run(wb, RunSpec(task="text-classification", name=name, data=DataSpec(
        train_path="train.jsonl", validation_path=validation, name="sms")))
    out = tmp_path / f"out-{run_id}"
    out.mkdir()
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.progress, run.output_dir, run.metrics = "succeeded", 1.0, str(out), metrics
    return run_id


def _outcomes(correct: list[bool], texts: str = "message") -> dict:
    """The outcomes of an evaluation that got right the examples ``correct`` marks (``jobs.evaluation.outcomes``' arrays,
    from the rows an evaluation writes)."""
    gold = [LABELS[i % 2] for i in range(len(correct))]
    rows = [{"text": f"{texts} {i}", "gold": g, "predicted": g if right else LABELS[1 - LABELS.index(g)]}
            for i, (g, right) in enumerate(zip(gold, correct))]
    return outcomes.outcomes_from_rows(rows, {"per_class": [{"label": label} for label in LABELS]})


def _scored_metrics(correct: list[bool], found: dict) -> dict:
    return {"accuracy": float(np.mean(correct)), "validation_records": len(correct),
            "metrics_ci": outcomes.intervals(found)}


def _scored_run(wb, tmp_path, name: str, correct: list[bool], texts: str = "message") -> int:
    """A finished run whose outcomes.npz says which of the validation examples it got right (written with
    jobs.evaluation.outcomes, as the final evaluation writes it), with the metrics and intervals that come with them."""
    found = _outcomes(correct, texts)
    run_id = _run(wb, tmp_path, name, _scored_metrics(correct, found),
                  validation="dev.jsonl" if texts == "message" else f"{texts}.jsonl")
    outcomes.write_outcomes(tmp_path / f"out-{run_id}" / outcomes.OUTCOMES_FILE, found)
    return run_id


def _correct(n: int, right: int) -> list[bool]:
    return [i < right for i in range(n)]


# --- Runs table, run header, Metrics tab -----------------------------------------------------------------------

def test_runs_table_header_and_metrics_tab_show_the_interval(wb, tmp_path):
    baselines = {"majority": {"accuracy": 0.5, "f1_macro": 0.33}, "tfidf_logreg": {"accuracy": 0.7, "f1_macro": 0.69}}
    plain = _run(wb, tmp_path, "plain", {"accuracy": 0.9})
    interval = _run(wb, tmp_path, "interval", {"accuracy": 0.9, "f1_macro": 0.85, "validation_records": 200,
                                               "baselines": baselines, "metrics_ci": {"accuracy": INTERVAL}})
    rows = {row[0]: row for row in runs_tab.list_page(wb)[0]}
    assert rows[interval][runs_tab.METRIC_COLUMN] == "accuracy 0.900 ± 0.040 (baseline 0.700)"
    assert rows[plain][runs_tab.METRIC_COLUMN] == "accuracy 0.9000"  # scored before intervals: as before

    view = runs_tab.run_view(wb, interval)
    assert ("<p id='run-score'>Validation accuracy: <b>0.900 ± 0.040</b> "
            "<span class='wb-muted'>(95 % CI, n = 200)</span></p>") in view.header
    assert view.final_metrics[:2] == [["Accuracy", "0.900 ± 0.040"], ["F1 (macro)", "0.8500"]]
    assert "Validation accuracy: <b>0.9000</b></p>" in runs_tab.run_view(wb, plain).header
    queued = runs_service.submit_run(wb, RunSpec(task="text-classification", data=DataSpec(train_path="t")))
    assert "run-score" not in runs_tab.run_view(wb, queued).header  # no score yet, no line


# --- Compare ------------------------------------------------------------------------------------------------------

def test_compare_two_runs_shows_intervals_and_whether_the_difference_is_real(wb, tmp_path):
    a = _scored_run(wb, tmp_path, "lr 1e-5", _correct(200, 140))
    b = _scored_run(wb, tmp_path, "lr 5e-5", _correct(200, 180))
    result = compare_tab.compare(wb, [a, b])
    shown = list(result.metrics["accuracy"])
    for run_id, cell in zip((a, b), shown):
        ci = runs_service.get_run(wb, run_id)["metrics"]["metrics_ci"]["accuracy"]
        assert cell == fmt.metric_with_ci(runs_service.get_run(wb, run_id)["metrics"]["accuracy"], ci)
        assert "±" in cell or "[" in cell
    found = comparisons.compare_runs(wb, a, b)
    assert found["verdict"].startswith(f"run {b} is better than run {a} by 20.00 points of accuracy")
    block = result.significance
    assert block.startswith("#### Is the difference real?\n**Run " + found["verdict"][4:] + ".**")
    assert f"run {a}: {fmt.metric_with_ci(found['a']['value'], found['a']['ci'])}" in block
    assert "1,000 resamples of the same 200 examples" in block
    # run B got right every example run A did, and 40 more
    assert f"McNemar's exact test: 0 example(s) only run {a} got right, 40 only run {b}; p < 0.001" in block

    same = compare_tab.compare(wb, [a, _scored_run(wb, tmp_path, "lr 1e-5 again", _correct(200, 141))])
    assert "**No detectable difference in accuracy" in same.significance


def test_compare_of_more_runs_marks_those_not_distinguishable_from_the_best(wb, tmp_path):
    worse = _scored_run(wb, tmp_path, "worse", _correct(200, 140))
    best = _scored_run(wb, tmp_path, "best", _correct(200, 180))
    close = _scored_run(wb, tmp_path, "close", _correct(200, 179))
    block = compare_tab.compare(wb, [worse, best, close]).significance
    table = block.split("|---|---|---|\n")[1].splitlines()
    assert table[0].startswith(f"| #{best} best | ") and table[0].endswith(" | best |")
    assert table[1].startswith(f"| #{close} close | ") and table[1].endswith(" | not distinguishable |")
    assert table[2].startswith(f"| #{worse} worse | 0.700 ± 0.0") and table[2].endswith(" | worse, p = 0.002 |")
    rows = comparisons.rank_runs(wb, [worse, best, close])
    assert [row["p_value"] is None for row in rows] == [True, False, False] and rows[2]["p_value"] < 0.05


def test_compare_says_why_it_cannot_tell_instead_of_failing(wb, tmp_path):
    scored = _scored_run(wb, tmp_path, "scored", _correct(100, 80))
    unscored = _run(wb, tmp_path, "older", {"accuracy": 0.8})
    result = compare_tab.compare(wb, [scored, unscored])
    assert list(result.metrics["Run"]) == [f"#{scored} scored", f"#{unscored} older"]  # the rest still shows
    assert result.significance == ("#### Is the difference real?\nCannot tell: run "
                                   f"{unscored} was trained before per-example results were saved; retry it")
    elsewhere = _scored_run(wb, tmp_path, "other examples", _correct(100, 80), texts="other")
    assert (f"Cannot tell: runs {scored} and {elsewhere} were not evaluated on the same examples"
            in compare_tab.compare(wb, [scored, elsewhere]).significance)
    queued = runs_service.submit_run(wb, RunSpec(task="text-classification", data=DataSpec(train_path="t")))
    assert (f"Cannot tell: run {queued} is queued; only a finished run can be compared"
            in compare_tab.compare(wb, [scored, queued, unscored]).significance)


def _evaluation(wb, tmp_path, run_id: int, dataset_id: str, correct: list[bool]) -> int:
    """A finished evaluation job of ``run_id`` on a test set, with its outcomes."""
    found = _outcomes(correct, "test")
    with wb.db.session() as session:
        job = Run(kind=KIND_EVALUATE, parent_run_id=run_id, dataset_id=dataset_id, task="text-classification",
                  model="m", status="succeeded", spec={}, metrics=_scored_metrics(correct, found))
        session.add(job)
        session.flush()
        job_id = job.id
    out = tmp_path / f"evaluation-{job_id}"
    out.mkdir()
    outcomes.write_outcomes(out / outcomes.OUTCOMES_FILE, found)
    with wb.db.session() as session:
        session.get(Run, job_id).output_dir = str(out)
    return job_id


def test_scores_on_a_test_set_carry_their_intervals_and_are_ranked(wb, tmp_path):
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20))]
    test_set = datasets.import_dataset(wb, write_jsonl(tmp_path / "test.jsonl", records), "text-classification",
                                       name="held-out", tokenizer=False)
    weaker, stronger = _run(wb, tmp_path, "weaker", {"accuracy": 0.7}), _run(wb, tmp_path, "stronger", {})
    first = _evaluation(wb, tmp_path, weaker, test_set.id, _correct(200, 140))
    second = _evaluation(wb, tmp_path, stronger, test_set.id, _correct(200, 180))
    result = compare_tab.compare_on_test_set(wb, test_set.id)
    assert list(result.metrics["accuracy"]) == ["0.700 ± 0.062", "0.900 ± 0.045"]
    # two evaluations are ranked, named by their runs: a verdict sentence would call the jobs "run 3"
    assert result.message.startswith("2 evaluation(s) on this test set.\n\n#### Is the difference real?\n")
    assert f"| #{stronger} stronger · job #{second} | 0.900 ± 0.045 | best |" in result.message
    assert f"| #{weaker} weaker · job #{first} | 0.700 ± 0.062 | worse, p = 0.002 |" in result.message


# --- the playground card ---------------------------------------------------------------------------------------

CARD = {"title": "Reviews", "base_model": "all-MiniLM-L6-v2", "dataset": "sms", "train_examples": 1935,
        "validation_examples": 516, "date": "2026-12-01 12:00 UTC",
        "metrics": {"accuracy": 0.98924, "f1_macro": 0.9712}}


def test_the_playground_card_gives_validation_scores_with_their_intervals():
    card = {**CARD, "metrics_ci": {"accuracy": {"low": 0.978, "high": 1.0, "resamples": 1000, "level": 0.95},
                                   "f1_macro": {"low": 0.955, "high": 0.985, "resamples": 1000, "level": 0.95}}}
    text = card_markdown(card, "text-classification")
    assert ("Validation scores: accuracy **0.989 ± 0.011** · macro F1 **0.971 ± 0.015** (95 % CI, n = 516)"
            in text)
    assert "accuracy **0.989** · macro F1 **0.971**\n" in card_markdown({**CARD, "metrics_ci": {}},
                                                                       "text-classification") + "\n"
    assert "CI" not in card_markdown(CARD, "text-classification")  # a card of an older run


def test_get_card_carries_the_runs_intervals(wb, tmp_path):
    import transformers as tf

    from tests import playground_support as ps
    from workbench.playground import service

    tokenizer = ps.tokenizer()
    model_dir = tmp_path / "model"
    tf.BertForSequenceClassification(ps.tiny_config(tokenizer, num_labels=2)).save_pretrained(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    run_id = ps.add_run(wb, "text-classification", model_dir)
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.metrics = {**run.metrics, "metrics_ci": {"accuracy": {**INTERVAL, "low": 0.70, "high": 0.80}}}
    card = service.get_card(wb, service.publish(wb, run_id).slug)
    assert card["metrics_ci"] == {"accuracy": {**INTERVAL, "low": 0.70, "high": 0.80}}
    text = card_markdown(card, "text-classification")
    assert "accuracy **0.750 ± 0.050** · macro F1 **0.700** (95 % CI, n = 4)" in text
