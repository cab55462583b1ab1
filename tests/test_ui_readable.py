"""Issue 25, "Readable results": a sweep's best run published with a token, the Metrics tab in words with the
bookkeeping collapsed, a warning when compared runs trained on different datasets, the model zip in one click."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import gradio as gr
import pytest

from jobs.process.fake_runner import InProcessRunner
from jobs.queue.worker import Worker
from jobs.specs.run import DataSpec, RunSpec
from storage.models import Run
from tests.queue_support import wait_until
from tests.test_ui_sweeps import base_json
from tests.tiny_models import classification_records, write_jsonl
from workbench.services import datasets, sweeps
from workbench.services import runs as runs_service
from workbench.ui import format as fmt
from workbench.ui import compare_tab, runs_tab, sweep_tab

# What the engine records beside the scores (jobs/training/engine.py, jobs/training/attention.py): none of it is for reading.
BOOKKEEPING = {"evaluations": 0, "evaluation_seconds": 0.0, "checkpoints": 2, "processes": 1,
               "attention": "sdpa", "padding": "dynamic",
               "attention_reason": "flash-attn 2 is not installed; SDPA runs without it",
               "trainable_parameters": 22713604, "total_parameters": 22713604, "final_eval_seconds": 1.2}


def _finished_sweep(wb, tmp_path) -> int:
    spec = sweep_tab.spec_from_form(base_json(wb, tmp_path), "learning_rate: [1.0e-4, 1.0e-3]\n", 2, 2, "none",
                                    "", "", "readable")
    sweep_id = sweeps.create_sweep(wb, spec)
    worker = Worker(wb, InProcessRunner(wb), max_jobs=2, gpus=[])
    assert wait_until(lambda: sweeps.get_sweep(wb, sweep_id)["status"] == "finished", 30, worker.loop_once)
    worker.shutdown()
    return sweep_id


def test_publishing_a_sweeps_best_run_offers_the_share_tabs_token(wb, tmp_path):
    sweep_id = _finished_sweep(wb, tmp_path)
    best = sweep_tab.best_of(wb, sweep_id)
    guarded = sweep_tab.publish_best(wb, sweep_id, True)
    assert guarded.startswith(f"**Best run #{best}** — ✔ Playground published: [/play/")
    token = guarded.split("`")[1]
    assert len(token) >= 16 and f"?token={token}" in guarded and "shown only now" in guarded
    public = sweep_tab.publish_best(wb, sweep_id, False)
    assert "Anyone with the link can use it" in public and "Token" not in public
    assert [row[2] for row in runs_tab.playground_rows(wb, best)] == ["public", "token"]  # newest first
    assert sweep_tab.publish_best(wb, None, True) == "✘ Pick a sweep first."


def _run(wb, tmp_path, metrics: dict, dataset_id: str | None = None, name: str = "sms") -> int:
    data = DataSpec(dataset_id=dataset_id) if dataset_id else DataSpec(train_path="train.jsonl", name=name)
    run_id = runs_service.submit_run(wb, RunSpec(task="text-classification", data=data, name=name))
    out = tmp_path / f"out-{run_id}"
    (out / "model").mkdir(parents=True)
    (out / "model" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.progress, run.output_dir, run.metrics = "succeeded", 1.0, str(out), metrics
    return run_id


def test_the_metrics_tab_names_what_a_reader_looks_at_and_keeps_the_bookkeeping_collapsed(wb, tmp_path):
    metrics = {"accuracy": 0.9, "f1_macro": 0.85, "train_loss": 0.31, "wall_seconds": 95.0, "train_seconds": 61.5,
               "samples_per_second": 40.0, "train_records": 54, "validation_records": 6, "device": "cpu",
               "baselines": {"majority": {"accuracy": 0.5, "f1_macro": 0.33},
                             "tfidf_logreg": {"accuracy": 0.7, "f1_macro": 0.69, "seconds": 0.2}},
               "verdict": {"status": "learned", "message": "", "top_label": "ham", "top_share": 0.5},
               **BOOKKEEPING}
    run_id = _run(wb, tmp_path, metrics)
    view = runs_tab.run_view(wb, run_id)
    assert view.final_metrics == [
        ["Accuracy", "0.9000"], ["F1 (macro)", "0.8500"], ["Training loss", "0.3100"],
        ["Baseline: majority class — accuracy", "0.5000"], ["Baseline: majority class — F1 (macro)", "0.3300"],
        ["Baseline: TF-IDF + logistic regression — accuracy", "0.7000"],
        ["Baseline: TF-IDF + logistic regression — F1 (macro)", "0.6900"], ["Verdict", "beats the baselines"],
        ["Total time", "1m 35s"], ["Training time", "1m 02s"], ["Training speed (examples/s)", "40"],
        ["Training examples", "54"], ["Validation examples", "6"], ["Device", "cpu"]]
    details = dict(view.metric_details)  # each key in plain words
    assert {fmt.readable_key(key) for key in BOOKKEEPING} <= set(details) and details["Evaluations"] == "0"
    assert details["Attention reason"].startswith("flash-attn 2 is not installed")
    assert details["Baselines › TF-IDF + logistic regression › seconds"] == "0.2s"
    assert details["Verdict › top label"] == "ham"
    assert not {"Accuracy", "Wall seconds", "Baselines › majority › accuracy"} & set(details)  # shown above, once
    values = runs_tab.detail_values(wb, run_id, "")
    assert len(values) == runs_tab.DETAIL_OUTPUTS + 1 and values[-2] == view.metric_details


def test_comparing_runs_of_different_datasets_names_them_and_warns(wb, tmp_path):
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20))]
    sms = datasets.import_dataset(wb, write_jsonl(tmp_path / "sms.jsonl", records), "text-classification",
                                  name="sms-spam", tokenizer=False)
    reviews = datasets.import_dataset(wb, write_jsonl(tmp_path / "reviews.jsonl", records[:16]),
                                      "text-classification", name="reviews", tokenizer=False)
    first = _run(wb, tmp_path, {"accuracy": 0.9}, sms.id, "first")
    second = _run(wb, tmp_path, {"accuracy": 0.7}, sms.id, "second")
    other = _run(wb, tmp_path, {"accuracy": 0.95}, reviews.id, "other")
    mixed = compare_tab.compare(wb, [first, second, other])
    assert list(mixed.metrics["Dataset"]) == [f"sms-spam ({sms.id})"] * 2 + [f"reviews ({reviews.id})"]
    assert mixed.message.startswith("⚠ **These scores are not comparable: the runs trained on different datasets**")
    assert f"sms-spam ({sms.id}): #{first}, #{second}; reviews ({reviews.id}): #{other}" in mixed.message
    same = compare_tab.compare(wb, [first, second])
    assert "not comparable" not in same.message and same.message.endswith("setting(s) differ.")


def test_the_download_button_gets_the_zip_on_the_click_that_asks_for_it(wb, tmp_path):
    run_id = _run(wb, tmp_path, {"accuracy": 0.9})
    path = Path(runs_tab.download_value(wb, run_id, None))
    assert path.suffix == ".zip" and zipfile.ZipFile(path).namelist() == ["config.json"]
    made = path.stat().st_mtime_ns
    assert Path(runs_tab.download_value(wb, run_id, None)).stat().st_mtime_ns == made  # made once, then reused
    assert isinstance(runs_tab.download_value(wb, run_id, str(path)), type(gr.skip()))  # saved by this click
    with pytest.raises(gr.Error, match="Pick a run first"):
        runs_tab.download_value(wb, None, None)


def test_the_metrics_tab_draws_calibration_and_the_tuned_thresholds():
    """Issue 24: the reliability diagram and the precision-recall curve are pictures in the run details."""
    from workbench.ui import runs_tab

    assert runs_tab.score_pictures({"per_class": [{"label": "a", "f1": 0.5}]}) == ""  # nothing tuned: no picture
    bins = [{"low": 0.5, "high": 0.6, "count": 10, "confidence": 0.55, "accuracy": 0.4},
            {"low": 0.9, "high": 1.0, "count": 30, "confidence": 0.95, "accuracy": 0.8}]
    tables = {"calibration": {"bins": bins, "bins_calibrated": bins, "ece": 0.15, "ece_calibrated": 0.05,
                              "temperature": 1.7, "applied": True},
              "precision_recall": {"positive": "spam", "target": "best_f1", "threshold": 0.3,
                                   "points": [{"threshold": 0.9, "precision": 1.0, "recall": 0.2},
                                              {"threshold": 0.3, "precision": 0.9, "recall": 0.8}]},
              "per_class": [{"label": "ham", "threshold": 0.45}, {"label": "spam", "threshold": 0.3}]}
    html = runs_tab.score_pictures(tables)
    assert "Reliability diagram" in html and "temperature applied" in html and "ECE 0.15" in html
    assert "Precision-recall" in html and "threshold 0.3" in html
    assert "Decision thresholds tuned on validation: ham 0.45 · spam 0.30" in html
