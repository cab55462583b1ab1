"""Tab logic on real SQLite through the services: runs table pages, run details, train form ↔ spec."""
from __future__ import annotations

import json

from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.models import MetricPoint, Run
from workbench.services import runs as runs_service
from workbench.ui import compare_tab, runs_tab, train_tab
from workbench.ui.format import RUN_TABLE_HEADERS


def _runs(wb, n: int) -> list[int]:
    ids = []
    for i in range(n):
        spec = RunSpec(task="text-classification", data=DataSpec(train_path="train.jsonl", name="sms"),
                       train=TrainSpec(learning_rate=1e-4 if i % 2 else 5e-5), name=f"run {i}")
        ids.append(runs_service.submit_run(wb, spec))
    return ids


def test_list_page_is_paged_and_counts_runs(wb):
    _runs(wb, runs_tab.PAGE_SIZE + 3)
    rows, caption = runs_tab.list_page(wb)
    assert len(rows) == runs_tab.PAGE_SIZE and len(rows[0]) == len(RUN_TABLE_HEADERS)
    assert caption == f"1–{runs_tab.PAGE_SIZE} of {runs_tab.PAGE_SIZE + 3} runs"
    assert rows[0][1] == f"run {runs_tab.PAGE_SIZE + 2}"  # newest first
    rows, caption = runs_tab.list_page(wb, page=2)
    assert len(rows) == 3
    rows, _ = runs_tab.list_page(wb, status="failed")
    assert rows == []
    rows, _ = runs_tab.list_page(wb, search="run 7", sort="oldest first")
    assert [r[1] for r in rows] == ["run 7"]


def test_run_view_reads_curves_tables_errors_and_skips_when_unchanged(wb, tmp_path):
    run_id = _runs(wb, 1)[0]
    out = tmp_path / "out"
    out.mkdir()
    (out / "tables.json").write_text(json.dumps({
        "per_class": [{"label": "ham", "precision": 0.9, "recall": 1.0, "f1": 0.95, "support": 9},
                      {"label": "spam", "precision": 1.0, "recall": 0.5, "f1": 0.67, "support": 2}],
        "confusion_matrix": {"labels": ["ham", "spam"], "matrix": [[9, 0], [1, 1]]}}))
    (out / "predictions.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"text": "win a prize", "gold": "spam", "predicted": "ham", "correct": False, "score": 0.6},
        {"text": "hello", "gold": "ham", "predicted": "ham", "correct": True, "score": 0.9}]) + "\n")
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.progress, run.output_dir, run.metrics = "succeeded", 1.0, str(out), {"accuracy": 0.9}
        session.add_all([MetricPoint(run_id=run_id, step=s, name="train/loss", value=1 / s) for s in (1, 2, 3)]
                        + [MetricPoint(run_id=run_id, step=3, name="eval/accuracy", value=0.9)])
    view = runs_tab.run_view(wb, run_id)
    assert list(view.loss["value"]) == [1.0, 0.5, 1 / 3]
    assert list(view.metrics_curves["curve"]) == ["eval/accuracy"]
    assert view.per_class[1][:4] == ["spam", "1", "0.5000", "0.6700"]
    assert "gold \\ predicted" in view.confusion
    assert view.errors == [["spam", "ham", "0.6000", "—", "win a prize"]]  # gold, predicted, score, quality, input
    assert "data-status='succeeded'" in view.header and ["Accuracy", "0.9000"] in view.final_metrics
    assert runs_tab.run_view(wb, run_id, view.key) is None


def test_compare_lines_up_metrics_and_diffs_only_changed_settings(wb):
    first, second = _runs(wb, 2)
    result = compare_tab.compare(wb, [first, second])
    assert list(result.diff["Setting"]) == ["name", "train.learning_rate"]
    assert list(result.metrics["Run"]) == ["#1 run 0", "#2 run 1"]


def test_compare_shows_the_value_the_workbench_chose_for_automatic_settings(wb, tmp_path):
    automatic = runs_service.submit_run(wb, RunSpec(task="text-classification", data=DataSpec(train_path="t"),
                                                    name="auto"))
    explicit = runs_service.submit_run(wb, RunSpec(task="text-classification", data=DataSpec(train_path="t"),
                                                   train=TrainSpec(learning_rate=1e-4), name="set"))
    waiting = runs_service.submit_run(wb, RunSpec(task="text-classification", data=DataSpec(train_path="t"),
                                                  name="waiting"))
    out = tmp_path / "auto"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"accuracy": 0.9, "hyperparameters": {"learning_rate": 5e-05}}))
    with wb.db.session() as session:
        session.get(Run, automatic).output_dir = str(out)
    diff = compare_tab.compare(wb, [automatic, explicit, waiting]).diff
    row = diff[diff["Setting"] == "train.learning_rate"].iloc[0].tolist()
    assert row[1:] == ["5e-05 (automatic)", "1e-04", "automatic"]  # the waiting run has not chosen yet


def test_train_form_round_trips_through_the_spec():
    advanced = {key: default for key, _, default in train_tab.ADVANCED}
    advanced.update(learning_rate=3e-5, max_steps=6)
    spec = train_tab.spec_from_form("text-classification", "ds-1", "/models/tiny", "quick", " my run ", advanced,
                                    lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.05})
    assert spec.train.learning_rate == 3e-5 and spec.train.max_steps == 6 and spec.train.epochs is None
    assert spec.lora.enabled and spec.lora.r == 4 and spec.name == "my run"
    form = train_tab.form_from_spec(spec.to_dict())
    again = train_tab.spec_from_form(form["task"], form["dataset_id"], form["model"], form["preset"], form["name"],
                                     form["advanced"], form["class_weights"], form["objective"], form["lora"])
    assert again.to_dict() == spec.to_dict()


def test_data_check_reports_problems_with_lines_and_honours_a_column_mapping(wb, tmp_path):
    from tests.conftest import DATA_DIR
    from workbench.ui import data_tab

    broken = data_tab.check_file(wb, str(DATA_DIR / "ui" / "broken.csv"), "text-classification")
    assert not broken.ok and "broken.csv, line 4" in broken.status
    assert broken.problems[0][:3] == ["error", "broken.csv", 4]

    renamed = tmp_path / "renamed.csv"
    renamed.write_text("body,verdict,note\n" + "".join(
        f"message number {i},{'spam' if i % 3 == 0 else 'ham'},x\n" for i in range(12)), encoding="utf-8")
    view = data_tab.check_file(wb, str(renamed), "text-classification", text="body", label="verdict")
    assert view.ok, view.status
    assert view.mapping["text"] == "body" and view.mapping["label"] == "verdict"
    assert dict(zip(view.labels["label"], view.labels["count"])) == {"ham": 8, "spam": 4}


def test_error_rows_for_tagging_list_only_the_wrong_words():
    rows = runs_tab.error_rows([
        {"tokens": ["Paris", "is", "nice"], "gold": ["B-LOC", "O", "O"], "predicted": ["O", "O", "O"],
         "correct": False, "score": [0.4, 0.9, 0.9]},
        {"question": "Where?", "context": "In Paris.", "gold": ["Paris"], "predicted": "In", "correct": False,
         "score": 0.3}])
    assert rows[0] == ["Paris: B-LOC", "Paris: O", "—", "—", "Paris is nice"]
    assert rows[1] == ['["Paris"]', "In", "0.3000", "—", "Where? ‖ In Paris."]
    assert runs_tab.per_class_rows({"per_entity": [{"entity": "LOC", "precision": 1, "recall": 0.5, "f1": 0.667,
                                                    "support": 2}]})[0][0] == "LOC"


def test_a_run_link_names_a_positive_run_id():
    from workbench.ui.app import run_from_query

    assert run_from_query({"run": "12"}) == 12
    assert [run_from_query(q) for q in ({}, None, {"run": ""}, {"run": "0"}, {"run": "-3"}, {"run": "x1"})] == [None] * 6


def test_the_page_load_shows_a_linked_run_as_the_link_s_own_event_does(wb):
    """A reload of ``?run=N``: the runs tab's load sends N's details (the link's other load event puts N in the
    picker, whose change sends them too), whatever order they land in; a picked run wins over the link."""
    first, linked = _runs(wb, 2)
    loaded = runs_tab.load_values(wb, "all", "", "newest first", 1, None, {"run": str(linked)})
    shown = runs_tab.detail_values(wb, linked, "")
    assert f"#{linked} " in loaded[2] and loaded[2] == shown[0] and loaded[-1] == shown[-1]
    assert f"#{first} " in runs_tab.load_values(wb, "all", "", "newest first", 1, first, {"run": str(linked)})[2]
    assert runs_tab.load_values(wb, "all", "", "newest first", 1, None, {})[-1] == runs_tab.NO_RUN_KEY


def test_model_facts_show_context_languages_and_licence_of_a_new_encoder(wb):
    spec = RunSpec(task="text-classification", model="mmBERT-small", data=DataSpec(train_path="train.jsonl"))
    facts = train_tab.model_facts(wb, spec)
    assert "**mmBERT-small** (modernbert)" in facts and "22 layers" in facts and "8,192-token context" in facts
    assert "1800+ languages" in facts and "MIT" in facts and "needs a download" in facts


def test_run_header_shows_the_phase_with_evaluation_progress_and_the_estimate(wb):
    import datetime as dt

    run_id = _runs(wb, 1)[0]
    started = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(seconds=90)
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.progress, run.step, run.total_steps, run.started_at = "running", 1.0, 250, 250, started
        run.phase, run.phase_done, run.phase_total = "evaluating", 140, 560
        run.estimate = {"seconds": 100.0, "low": 90.0, "high": 120.0}
    view = runs_tab.run_view(wb, run_id)
    assert "evaluating 140/560 (25%)" in view.header and "step 250/250" in view.header
    assert "width:25.0%" in view.header  # the bar follows the evaluation, not the finished training
    assert "ETA" not in view.header and "data-phase='evaluating'" in view.header
    assert "estimated 1m 30s – 2m 00s · running for 1m 3" in view.header
    with wb.db.session() as session:
        session.get(Run, run_id).phase_done = 280
    assert runs_tab.run_view(wb, run_id, view.key) is not None  # evaluation progress refreshes the panel


def test_compare_leaves_the_timing_and_size_facts_out_of_the_metrics():
    runs = [{"metrics": {"accuracy": 0.9, "train_examples": 2000, "validation_records": 500, "evaluations": 3,
                         "checkpoints": 3, "setup_seconds": 4.0, "wall_seconds": 60.0, "f1_macro": 0.8,
                         "processes": 2}}]
    assert compare_tab.quality_metrics(runs) == ["accuracy", "f1_macro"]
    # an evaluation's counts of its test set are no scores: no column of their own in Compare
    evaluation = {"metrics": {"accuracy": 0.8, "rows": 300, "rows_per_second": 90.0, "batch_size": 64, "truncated": 5,
                              "max_length": 128, "duplicates": 3, "duplicates_dropped": 0, "model_run": 2}}
    assert compare_tab.quality_metrics([evaluation]) == ["accuracy"]


def test_the_train_form_says_what_the_defaults_chose_for_a_small_dataset(wb):
    """60 SMS messages (54 train after the split of a tenth, 2 classes: 27 a class): fine-tuning with the step
    floor and the reason by default (SetFit takes fewer than 25 a class), SetFit when asked for."""
    from pathlib import Path

    from workbench.services import datasets as data_service

    data = Path(__file__).parent / "data" / "ui" / "sms_sample.csv"
    dataset = data_service.import_dataset(wb, data, "text-classification", tokenizer=False)
    spec = RunSpec(task="text-classification", data=DataSpec(dataset_id=dataset.id), train=TrainSpec())
    facts = train_tab.model_facts(wb, spec)
    assert "What the defaults chose: 54 examples: 58 epoch(s), 406 steps" in facts
    assert "(27 examples per class: fine-tuning)" in facts
    assert "6 validation examples are too few to pick a checkpoint, so the last one is kept" in facts
    assert "- **standard**: 58 epoch(s), 406 steps on 54 training examples" in facts
    assert "(rough guess: no past run; could be half or twice this" in facts  # how sure the estimate is
    spec.train.method = "setfit"
    facts = train_tab.model_facts(wb, spec)
    assert "54 examples: SetFit, 135 steps of 16 text pairs" in facts and "- **standard**: SetFit, 135 steps" in facts
    assert train_tab.spec_from_form("text-classification", dataset.id, "all-MiniLM-L6-v2", "quick", "", {},
                                    method="setfit").train.method == "setfit"
    assert train_tab.form_from_spec(spec.to_dict())["method"] == "setfit"


def test_the_chosen_presets_line_shows_the_same_time_as_the_estimate_above_it(wb, monkeypatch):
    """The load is read once for the estimate and the presets' lines: a new walk saw "4m 03s – 18m 07s" above
    "standard … about 2m 50s – 12m 24s", two readings of a load that moved between them."""
    import itertools
    import re
    from pathlib import Path

    from workbench.services import datasets as data_service
    from workbench.services import estimates

    data = Path(__file__).parent / "data" / "ui" / "sms_sample.csv"
    dataset = data_service.import_dataset(wb, data, "text-classification", tokenizer=False)
    loads = itertools.count(1)
    monkeypatch.setattr(estimates, "current_load", lambda: dict.fromkeys(("now", "low", "high"), float(next(loads))))
    facts = train_tab.model_facts(wb, RunSpec(task="text-classification", data=DataSpec(dataset_id=dataset.id),
                                              train=TrainSpec()))
    above = re.search(r"Estimated time on this CPU: \*\*(.+?)\*\*", facts).group(1)
    chosen = re.search(r"- \*\*standard\*\*: .* — about (.+)", facts).group(1)
    assert chosen.strip() == above and next(loads) == 2  # one reading, the first


def test_run_header_and_table_put_the_baselines_beside_the_score(wb):
    run_id = _runs(wb, 1)[0]
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.progress = "succeeded", 1.0
        run.metrics = {"accuracy": 0.633, "baselines": {"majority": {"accuracy": 0.633, "f1_macro": 0.39},
                                                        "tfidf_logreg": {"accuracy": 0.71, "f1_macro": 0.7}},
                       "verdict": {"status": "did_not_learn",
                                   "message": "did not learn: predicts 'neg' for 100% of the validation examples"}}
    view = runs_tab.run_view(wb, run_id)
    assert "majority class 0.633 · TF-IDF + logistic regression 0.710" in view.header
    assert "⚠ This run did not learn: predicts &#x27;neg&#x27; for 100%" in view.header
    rows, _ = runs_tab.list_page(wb)
    assert rows[0][6] == "⚠ accuracy 0.6330 (baseline 0.710)"
    assert runs_service.learned_warning(wb, run_id).startswith("did not learn")
    table = compare_tab.compare(wb, [run_id]).metrics
    assert table["Verdict"][0].startswith("⚠ did not learn") and "TF-IDF" in table["Baselines (same split)"][0]
