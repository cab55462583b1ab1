"""Label audits end to end: fold files, fold runs on the real engine with the packaged MiniLM, the ranking,
decisions and the corrected copy (workbench.services.audits), and `workbench data audit`."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from jobs.training.outputs import HELDOUT_FILE
from storage.models import QUEUED
from tests.audit_support import PRETRAINED, finish_audit  # fine-tuned folds of the packaged MiniLM (the audit's default model)
from tests.tiny_models import classification_records, distinct, ner_records, write_jsonl
from workbench.errors import ConfigError, InvalidState, NotFound
from workbench.services import audits, datasets


def _import(wb, tmp_path: Path, records: list[dict], task="text-classification", fraction=0.0):
    path = write_jsonl(tmp_path / f"{task}.jsonl", records)
    return datasets.import_dataset(wb, path, task, name="noisy", validation_fraction=fraction, tokenizer=False)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_folds_predict_every_example_once_by_a_run_that_never_trained_on_it(wb, tmp_path):
    dataset = _import(wb, tmp_path, distinct(classification_records(50)), fraction=0.2)
    audit_id = audits.create_audit(wb, dataset.id, folds=4, model="fake:succeed")
    record = audits.get_audit(wb, audit_id)
    assert record["state"] == audits.RUNNING and len(record["folds"]) == 4
    with pytest.raises(InvalidState, match="not finished"):
        audits.audit_issues(wb, audit_id)
    assert all(f["status"] == QUEUED for f in record["folds"])
    from workbench.services import runs

    held_by: dict[str, int] = {}
    for fold in record["folds"]:
        spec = runs.get_run(wb, fold["run_id"])["spec"]
        train = {r["_example"] for r in _lines(Path(spec["data"]["train_path"]))}
        heldout = {r["_example"] for r in _lines(Path(spec["data"]["predict_path"]))}
        assert spec["data"]["validation_path"] is None  # the checkpoint is picked on part of train, not heldout
        assert not train & heldout
        assert len(train) + len(heldout) == 50
        for key in heldout:
            assert key not in held_by
            held_by[key] = fold["fold"]
    assert len(held_by) == 50
    assert {k.split(":")[0] for k in held_by} == {"train", "validation"}
    # stratified: each fold holds about a quarter of each label
    assert dataset.validation == 10  # a fifth of 50 (the floor of 100 would be over a quarter)


def test_bad_audits_are_refused_before_anything_is_queued(wb, tmp_path):
    dataset = _import(wb, tmp_path, distinct(classification_records(10)))
    with pytest.raises(ConfigError, match="too few"):
        audits.create_audit(wb, dataset.id, folds=6)
    with pytest.raises(ConfigError, match="from 2 to 20"):
        audits.create_audit(wb, dataset.id, folds=1)
    with pytest.raises(ConfigError, match="preset"):
        audits.create_audit(wb, dataset.id, preset="fastest")
    with pytest.raises(NotFound):
        audits.create_audit(wb, "no-such-dataset")
    multi = write_jsonl(tmp_path / "multi.jsonl", distinct(classification_records(20, multi_label=True)))
    multi_id = datasets.import_dataset(wb, multi, "text-classification", tokenizer=False).id
    with pytest.raises(ConfigError, match="multi-label"):
        audits.create_audit(wb, multi_id)
    assert audits.list_audits(wb) == []


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_an_audit_finds_flipped_labels_and_saves_a_corrected_copy(review_audit, review_audit_wb):
    # 150 reviews, every 15th label flipped, audited in 3 folds of the packaged MiniLM (tests/audit_support.py)
    wb, flipped, audit_id = review_audit_wb, list(review_audit.flipped), review_audit.audit_id
    dataset = datasets.get_dataset(wb, review_audit.dataset_id)
    original = Path(dataset.path) / "train.jsonl"
    before = hashlib.sha256(original.read_bytes()).hexdigest()
    record = audits.get_audit(wb, audit_id)
    assert record["state"] == audits.FINISHED and len(record["folds"]) == 3
    assert record["spec"]["train"] == PRETRAINED
    # each fold's run wrote a probability for every held-out example, rows summing to 1
    from workbench.services import runs

    for fold in record["folds"]:
        out = runs.get_run(wb, fold["run_id"])["output_dir"]
        held = _lines(Path(runs.get_run(wb, fold["run_id"])["spec"]["data"]["predict_path"]))
        with np.load(Path(out) / HELDOUT_FILE) as data:
            assert data["probs"].shape == (len(held), 2)
            assert np.allclose(data["probs"].sum(axis=1), 1.0, atol=1e-4)
    issues = audits.audit_issues(wb, audit_id)
    found = {int(row["example"].split(":")[1]) for row in issues}
    assert set(flipped) <= found, (flipped, [(r["example"], r["quality"]) for r in issues])
    assert len(found) <= len(flipped) + 2, [(r["example"], r["quality"], r["confidence"]) for r in issues]
    assert [row["rank"] for row in issues] == list(range(1, len(issues) + 1))
    assert [row["quality"] for row in issues] == sorted(row["quality"] for row in issues)
    first = issues[0]
    assert first["suggested"] != first["given"] and 0.5 <= first["confidence"] <= 1.0

    # decisions: relabel the flipped ones, drop one, keep the rest
    keys = {int(r["example"].split(":")[1]): r["example"] for r in issues}
    relabel = [keys[i] for i in flipped[1:]]
    audits.set_decisions(wb, audit_id, relabel, audits.RELABEL)
    audits.set_decisions(wb, audit_id, [keys[flipped[0]]], audits.DROP)
    with pytest.raises(ConfigError, match="not one of"):
        audits.set_decisions(wb, audit_id, relabel, audits.RELABEL, label="maybe")
    with pytest.raises(NotFound, match="did not flag"):
        audits.set_decisions(wb, audit_id, ["train:0"], audits.DROP)
    saved = audits.save_corrected(wb, audit_id)
    assert saved["id"] != dataset.id and saved["counts"] == {"keep": 0, "relabel": len(flipped) - 1, "drop": 1}
    corrected = _lines(Path(saved["path"]) / "train.jsonl")
    assert len(corrected) == 149
    clean = distinct(classification_records(150))
    assert [r["label"] for r in corrected] == [r["label"] for i, r in enumerate(clean) if i != flipped[0]]
    assert "_example" not in corrected[0]
    assert hashlib.sha256(original.read_bytes()).hexdigest() == before  # the original never changes
    assert datasets.get_dataset(wb, dataset.id).train == 150
    # the decisions are kept: a second look shows them, and the same save finds the same dataset
    marked = {r["example"]: r["decision"] for r in audits.audit_issues(wb, audit_id)}
    assert marked[keys[flipped[0]]] == audits.DROP and marked[relabel[0]] == audits.RELABEL
    assert audits.save_corrected(wb, audit_id)["id"] == saved["id"]


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_token_audit_rolls_suspicious_tags_up_per_sentence(wb, tmp_path, cli):
    # Names that are also everyday words are less sure: as in real data, the mean confidence of a tag
    # (its threshold) then sits below that of its typical words, a flipped one included.
    words = ("will", "may", "june", "rose", "mark", "grace")  # names that are also everyday words
    rare = [{"tokens": ["we", "met", w, "there"], "tags": ["O", "O", "B-PER", "O"]} for w in words for _ in range(2)]
    rare += [{"tokens": ["the", w, "of", "it"], "tags": ["O", "O", "O", "O"]} for w in words for _ in range(2)]
    records = distinct(ner_records(60) + rare)
    flipped = [5, 17, 33, 48]
    for i in flipped:
        records[i]["tags"][0] = "O"  # a name tagged as no entity
    dataset = _import(wb, tmp_path, records, task="token-classification")
    audit_id = audits.create_audit(wb, dataset.id, folds=2, train={**PRETRAINED, "epochs": 5})
    code, out, err = cli("data", "audit-show", str(audit_id), "--json")
    assert code == 0 and json.loads(out)["state"] == audits.RUNNING and json.loads(out)["issues"] is None
    record = finish_audit(wb, audit_id)
    issues = audits.audit_issues(wb, audit_id)
    by_position = {row["position"]: row for row in issues}
    assert set(flipped) <= set(by_position), [(r["example"], r["given"], r["suggested"]) for r in issues]
    row = by_position[flipped[0]]
    assert row["words"][0]["word"] == 0 and row["words"][0]["given"] == "O"
    assert row["words"][0]["suggested"] == "B-PER"
    audits.set_decisions(wb, audit_id, [by_position[i]["example"] for i in flipped], audits.RELABEL)
    saved = audits.save_corrected(wb, audit_id)
    corrected = _lines(Path(saved["path"]) / "train.jsonl")
    assert [corrected[i]["tags"][0] for i in flipped] == ["B-PER"] * len(flipped)
    code, out, _ = cli("data", "audit-show", str(audit_id), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["state"] == audits.FINISHED and len(shown["issues"]) == len(issues)
    code, out, _ = cli("data", "audits")
    assert code == 0 and f"{audit_id}  finished" in out.replace("   ", " ").replace("  finished", "  finished")


def test_the_errors_view_ranks_wrong_predictions_by_the_given_labels_probability(tmp_path):
    from jobs.tasks.classification import prediction_rows
    from workbench.services.runs import read_run_errors
    from workbench.ui.runs_tab import error_rows

    names = ["ham", "spam"]
    logits = np.log(np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.05, 0.95], [0.4, 0.6], [0.1, 0.9]]))
    records = [{"text": f"m{i}", "label": label} for i, label in enumerate(["ham", "ham", "ham", "ham", "spam", "spam"])]
    rows = prediction_rows(records, logits, names, False)
    assert [r["gold_score"] for r in rows] == pytest.approx([0.9, 0.8, 0.3, 0.05, 0.6, 0.9])
    old = {"text": "old run", "gold": "ham", "predicted": "spam", "score": 0.99, "correct": False}
    write_jsonl(tmp_path / "predictions.jsonl", [old, *rows])
    ranked = read_run_errors(tmp_path)
    # wrong: m2 (p(ham) 0.3) and m3 (0.05); thresholds: ham (0.9+0.8+0.3+0.05)/4 = 0.51, spam 0.75
    assert [r["text"] for r in ranked] == ["m3", "m2", "old run"]
    assert [r["suspicious"] for r in ranked[:2]] == [True, False]  # p(spam) 0.95 ≥ 0.75; 0.7 is not
    assert "label_quality" not in ranked[2]
    shown = error_rows(ranked)
    assert shown[0][3] == "0.0500 ⚑ suspicious label" and shown[1][3] == "0.3000" and shown[2][3] == "—"
    assert read_run_errors(tmp_path, limit=1)[0]["text"] == "m3"


def test_the_errors_view_ranks_tagged_sentences_by_their_worst_wrong_word(tmp_path):
    from workbench.services.runs import read_run_errors

    rows = [
        {"tokens": ["Ann", "ran"], "gold": ["B-PER", "O"], "predicted": ["B-PER", "O"], "correct": True,
         "score": [0.9, 0.99], "gold_score": [0.9, 0.99]},
        {"tokens": ["Bo", "sat"], "gold": ["O", "O"], "predicted": ["B-PER", "O"], "correct": False,
         "score": [0.95, 0.99], "gold_score": [0.03, 0.99]},
        {"tokens": ["it", "rained"], "gold": ["B-PER", "O"], "predicted": ["O", "O"], "correct": False,
         "score": [0.6, 0.99], "gold_score": [0.4, 0.99]},
    ]
    write_jsonl(tmp_path / "predictions.jsonl", rows)
    ranked = read_run_errors(tmp_path)
    # thresholds: B-PER (0.9 + 0.4) / 2 = 0.65, O (0.99 + 0.03 + 0.99 + 0.99) / 4 = 0.75
    assert [(r["tokens"][0], r["label_quality"], r["suspicious"]) for r in ranked] == [
        ("Bo", 0.03, True), ("it", 0.4, False)]


def test_cli_audit_queues_the_folds_and_refuses_bad_input(wb, tmp_path, cli):
    dataset = _import(wb, tmp_path, distinct(classification_records(30)))
    code, out, err = cli("data", "audit", dataset.name, "--folds", "3", "--model", "fake:succeed", "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["state"] == audits.RUNNING and [f["fold"] for f in record["folds"]] == [0, 1, 2]
    assert record["spec"]["folds"] == 3 and record["spec"]["model"] == "fake:succeed"
    code, out, err = cli("data", "audit", dataset.id, "--folds", "2", "--model", "fake:succeed")
    assert code == 0 and out.strip() == str(record["id"] + 1) and "2 fold runs queued" in err
    code, out, _ = cli("data", "audits", dataset.id)
    assert code == 0 and out.count("running") == 2 and "0 of 3 folds done" in out
    code, _, err = cli("data", "audit", dataset.id, "--folds", "40")
    assert code == 2 and "from 2 to 20" in err and "Traceback" not in err
    code, _, err = cli("data", "audit", "nope")
    assert code == 3 and "no dataset 'nope'" in err
    code, _, err = cli("data", "audit-show", "999")
    assert code == 3 and "audit 999 does not exist" in err


def test_a_stopped_fold_stops_the_audit_until_it_is_retried(wb, tmp_path):
    from jobs.queue import table as queue
    from workbench.services import runs

    dataset = _import(wb, tmp_path, distinct(classification_records(20)))
    audit_id = audits.create_audit(wb, dataset.id, folds=2, model="fake:succeed")
    record = audits.cancel_audit(wb, audit_id)
    assert record["state"] == audits.STOPPED and "retry the stopped folds" in record["message"]
    assert [f["status"] for f in record["folds"]] == ["cancelled", "cancelled"]
    with pytest.raises(InvalidState, match="not finished"):
        audits.save_corrected(wb, audit_id)
    record = audits.retry_audit(wb, audit_id)
    assert record["state"] == audits.RUNNING and {f["status"] for f in record["folds"]} == {QUEUED}
    with pytest.raises(InvalidState, match="no failed or cancelled fold"):
        audits.retry_audit(wb, audit_id)
    # a deleted fold run cannot come back: the audit says to start a new one
    queue.request_cancel(wb.db, record["folds"][0]["run_id"])
    runs.delete_run(wb, record["folds"][0]["run_id"])
    assert "were deleted" in audits.get_audit(wb, audit_id)["message"]


@pytest.mark.timeout(300)
def test_cli_audit_wait_runs_the_folds_here_and_says_why_it_stopped(wb, tmp_path, cli):
    dataset = _import(wb, tmp_path, distinct(classification_records(20)))
    # "fake:succeed" is no model the real engine knows: both folds fail, the audit stops.
    code, out, err = cli("data", "audit", dataset.id, "--folds", "2", "--model", "fake:succeed", "--wait")
    assert code == 1
    assert "running the 2 folds in this process" in err
    assert "stopped" in out and "retry the stopped folds" in out and "Traceback" not in out + err


def test_the_panel_filters_rows_and_refuses_forged_audit_ids():
    import gradio as gr

    from workbench.ui import audit_panel as panel

    rows = [{"rank": 1, "example": "train:4", "text": "win cash", "given": "ham", "suggested": "spam",
             "confidence": 0.97, "quality": 0.02, "fold": 0, "decision": None, "new_label": None},
            {"rank": 2, "example": "validation:1", "text": "see you", "given": "spam", "suggested": "ham",
             "confidence": 0.6, "quality": 0.3, "fold": 2, "decision": audits.RELABEL, "new_label": "ham"}]
    keep = lambda **f: [r["example"] for r in panel.filtered(rows, panel.Filters(**f), "text-classification")]  # noqa: E731
    assert keep() == ["train:4", "validation:1"]
    assert keep(given="spam") == ["validation:1"] and keep(suggested="spam") == ["train:4"]
    assert keep(min_confidence=0.9) == ["train:4"]
    assert keep(decision="undecided") == ["train:4"] and keep(decision=audits.RELABEL) == ["validation:1"]
    table = panel.issue_table(rows)
    assert list(table.columns) == panel.ISSUE_HEADERS
    assert table.iloc[1].tolist() == [2, "validation:1", "see you", "spam", "ham", "0.600", 3, "relabel → ham"]
    tagged = [{"rank": 1, "example": "train:0", "tokens": ["bob", "sat"], "tags": ["O", "O"],
               "words": [{"word": 0, "token": "bob", "given": "O", "suggested": "B-PER", "confidence": 0.9,
                          "quality": 0.05}], "given": "bob: O", "suggested": "bob: B-PER", "confidence": 0.9,
               "quality": 0.05, "fold": 1, "decision": None, "new_label": None}]
    assert panel.issue_table(tagged).iloc[0, 2] == "[bob] sat"
    assert panel.filtered(tagged, panel.Filters(suggested="B-PER"), "token-classification") == tagged
    assert panel.audit_number(3) == 3 and panel.audit_number("3") == 3
    for forged in (None, "", "abc", "0", "-2", "3; drop table", 2.5):
        with pytest.raises(gr.Error):
            panel.audit_number(forged)


def test_a_finished_audit_of_weak_fold_models_says_their_suggestions_are_guesses(wb, tmp_path):
    from storage.models import Audit

    dataset = _import(wb, tmp_path, distinct(classification_records(20)))
    audit_id = audits.create_audit(wb, dataset.id, folds=2, model="fake:succeed")
    for accuracy, warned in ((0.26, True), (0.93, False)):
        with wb.db.session() as session:
            session.get(Audit, audit_id).summary = {"issues": 3, "examples": 20, "labels": ["neg", "pos"],
                                                    "held_out_accuracy": accuracy}
        message = audits.get_audit(wb, audit_id)["message"]
        assert message.startswith("3 suspicious of 20 examples")
        assert ("held-out accuracy is 0.26, too low to trust" in message) is warned
