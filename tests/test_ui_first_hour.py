"""Issue 11, the UI side: no CLI hints in the browser, an empty Runs tab, errors table, sharing, data-tab details.

Real SQLite through the services, no browser (the browser walks are in tests/browser/test_workbench_ui.py).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.datasets.stats import length_summary
from storage.models import Run
from tests.conftest import DATA_DIR
from workbench.errors import InvalidState, NotFound
from workbench.services import datasets as data_service
from workbench.services import runs as runs_service
from workbench.ui import data_tab, plots, runs_tab, train_tab
from workbench.ui import format as fmt


def test_ui_message_drops_cli_hints_and_keeps_what_is_wrong():
    assert fmt.ui_message("run 0 does not exist; `workbench runs list` shows the runs there are") == \
        "run 0 does not exist"
    assert fmt.ui_message("no dataset 'x'; `workbench data list` shows the stored datasets") == "no dataset 'x'"
    assert fmt.ui_message("no playground 'p'; `workbench playgrounds` lists them") == "no playground 'p'"
    plain = "cannot reach huggingface.co; pushing to the Hub needs internet — download the zip instead"
    assert fmt.ui_message(plain) == plain


def test_no_run_selected_shows_an_empty_state_once_then_skips(wb):
    for nothing in (None, "", 0, -1):
        assert runs_tab.selected_run(nothing) is None
    values = runs_tab.detail_values(wb, 0, "")  # what a fresh page sends: the empty gr.Number is 0
    assert "Click a row" in values[0] and "does not exist" not in values[0]
    assert values[-1] == runs_tab.NO_RUN_KEY
    again = runs_tab.detail_values(wb, None, values[-1])
    assert again[-1] == runs_tab.NO_RUN_KEY and len(again) == runs_tab.DETAIL_OUTPUTS + 1
    missing = runs_tab.detail_values(wb, 99, "")[0]
    assert "run 99 does not exist" in missing and "workbench" not in missing


def test_error_rows_put_gold_predicted_score_first_and_truncate_the_input():
    long_text = "word " * 200
    (row,) = runs_tab.error_rows([{"text": long_text, "gold": "pos", "predicted": "neg", "score": 0.7,
                                   "correct": False}])
    assert row[:4] == ["pos", "neg", "0.7000", "—"]  # no label quality recorded: older runs
    assert len(row[4]) == runs_tab.ERROR_INPUT_CHARS and row[4].endswith("…")
    assert runs_tab.ERROR_HEADERS[:3] == ["Gold", "Predicted", "Score"]


def _dataset(wb):
    return data_service.import_dataset(wb, DATA_DIR / "ui" / "sms_sample.csv", "text-classification",
                                       tokenizer=False)


def _spec(dataset_id: str) -> RunSpec:
    return RunSpec(task="text-classification", data=DataSpec(dataset_id=dataset_id), train=TrainSpec())


def test_a_run_on_a_deleted_dataset_is_refused_and_a_queued_run_keeps_its_dataset(wb):
    dataset = _dataset(wb)
    run_id = runs_service.submit_run(wb, _spec(dataset.id))
    with pytest.raises(InvalidState, match=rf"still needed by queued or running run\(s\) {run_id}"):
        data_service.delete_dataset(wb, dataset.id)
    runs_service.cancel_run(wb, run_id)
    data_service.delete_dataset(wb, dataset.id)
    with pytest.raises(NotFound, match="no longer exists"):
        runs_service.submit_run(wb, _spec(dataset.id))
    with pytest.raises(NotFound, match="no longer exists"):
        runs_service.retry_run(wb, run_id)
    assert runs_service.get_run(wb, run_id)["status"] == "cancelled"


def test_dataset_picker_follows_imports_and_deletes(wb):
    assert train_tab.dataset_choices(wb, "text-classification") == []
    dataset = _dataset(wb)
    assert [value for _, value in train_tab.dataset_choices(wb, "text-classification")] == [dataset.id]
    data_service.delete_dataset(wb, dataset.id)
    assert train_tab.dataset_choices(wb, "text-classification") == []


def test_a_clone_of_an_unnamed_run_is_not_called_edited():
    assert train_tab.clone_name("", 7) == "clone of run #7"
    assert train_tab.clone_name("faster lr", 7) == "faster lr (edited)"


def _succeeded_run(wb, tmp_path) -> int:
    run_id = runs_service.submit_run(wb, RunSpec(task="text-classification",
                                                 data=DataSpec(train_path="train.jsonl"), name="sms"))
    model = tmp_path / "out" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.output_dir = "succeeded", str(tmp_path / "out")
    return run_id


def test_share_publishes_with_a_token_shown_once_lists_and_unpublishes(wb, tmp_path):
    run_id = _succeeded_run(wb, tmp_path)
    public = runs_tab.publish_playground(wb, run_id, False)
    assert "/play/sms-" in public and "Token" not in public
    guarded = runs_tab.publish_playground(wb, run_id, True)
    token = guarded.split("`")[1]
    assert len(token) >= 16 and f"?token={token}" in guarded and "shown only now" in guarded
    rows = runs_tab.playground_rows(wb, run_id)
    assert [row[2] for row in rows] == ["token", "public"]  # newest first
    assert all(row[1].startswith("[/play/") for row in rows) and token not in json.dumps(rows)
    assert "unpublished" in runs_tab.unpublish_playground(wb, rows[0][0])
    assert [row[2] for row in runs_tab.playground_rows(wb, run_id)] == ["public"]
    assert runs_tab.playground_rows(wb, None) == []
    refused = runs_tab.inline(runs_tab.unpublish_playground, wb, "no-such-slug")
    assert refused.startswith("✘ no playground 'no-such-slug'") and "workbench" not in refused


def test_hub_push_offline_is_one_clear_line(wb, tmp_path):
    run_id = _succeeded_run(wb, tmp_path)
    message = runs_tab.inline(runs_tab.push_model, wb, run_id, "me/sms-model", "", True)
    assert message.startswith("✘ ") and "offline" in message and "zip" in message
    assert runs_tab.inline(runs_tab.push_model, wb, None, "me/x", "", True).startswith("✘ Pick a run first")


def test_a_tiny_file_gets_whole_number_length_bins():
    stats = length_summary(np.array([9, 9, 9]), 128, tokenizer="t", sampled=False, population=3)
    assert stats["histogram"] == {"counts": [3], "edges": [9, 10]}
    assert list(plots.token_length_frame(stats)["tokens"]) == ["9"]
    wide = length_summary(np.arange(3, 200), 128, tokenizer="t", sampled=False, population=197)
    labels = list(plots.token_length_frame(wide)["tokens"])
    assert labels[0] == "3–22" and len(labels) == 11 and len(set(labels)) == 11
    assert labels[6:8] == ["123–128", "129–142"]  # the bin holding the max length is split at it
    # numpy-style edges of datasets stored before: the last bin ends at the longest example.
    old = {"max": 40, "histogram": {"edges": [0, 20, 40], "counts": [3, 2]}}
    assert list(plots.token_length_frame(old)["tokens"]) == ["0–19", "20–40"]


def test_many_labels_become_top_n_and_other():
    labels = {f"TAG{i}": 200 - i for i in range(124)}
    frame = plots.label_distribution(labels, top=20)
    assert len(frame) == 20 and frame["label"].iloc[-1] == "other (105 labels)"
    assert frame["count"].sum() == sum(labels.values())
    assert len(plots.label_distribution({"a": 1, "b": 2}, top=20)) == 2


def test_pos_files_get_a_tagging_title_and_the_validation_file_its_own_check(wb, tmp_path):
    pos = [{"tokens": ["The", "dog"], "tags": ["DT", "NN"]}]
    ner = [{"tokens": ["John", "lives"], "tags": ["B-PER", "O"]}]
    assert data_tab.subtoken_title(pos).startswith("Tagging:")
    assert data_tab.subtoken_title(ner).startswith("NER:")
    view = data_tab.check_file(wb, str(DATA_DIR / "ui" / "sms_sample.csv"), "text-classification")
    status, problems, preview = data_tab.validation_view(view, "sms_sample.csv")
    assert status.startswith("✔ Validation file:") and len(preview) == data_tab.VALIDATION_PREVIEW_ROWS
    broken = data_tab.check_file(wb, str(DATA_DIR / "ui" / "broken.csv"), "text-classification")
    status, problems, _ = data_tab.validation_view(broken, "broken.csv")
    assert status.startswith("✘ Validation file:") and "line 4" in status and problems
    status, problems, preview = data_tab.validation_view(view, None)  # the file was removed
    assert status == "" and problems == [] and preview.empty
