"""Issue 39, item 5: rough edges a new user met in the browser, tested where their logic lives.

Real SQLite through the services, no browser (the browser side is in tests/browser/test_rough_edges_browser.py).
"""
from __future__ import annotations

import gradio as gr
import pytest

from tests.conftest import DATA_DIR
from workbench.services import datasets as data_service
from workbench.ui import data_tab


def test_an_import_selects_the_new_dataset_and_train_takes_the_only_one(wb):
    status, dataset_id = data_tab.import_file(wb, str(DATA_DIR / "ui" / "sms_sample.csv"), "text-classification",
                                              data_tab.AUTO, "", "", "", "", "sms", None, 0.1, 13)
    assert status.startswith("✔ Imported as **sms**") and dataset_id == data_service.list_datasets(wb)[0].id
    # Nothing selected (the page was reloaded) and one stored dataset: that one, with its own task.
    assert data_tab.dataset_to_train(wb, "", "masked-lm") == (dataset_id, "text-classification")
    assert data_tab.dataset_to_train(wb, f" {dataset_id} ", "text-classification") == (dataset_id,
                                                                                          "text-classification")
    data_service.import_dataset(wb, DATA_DIR / "ui" / "sms_sample.csv", "text-classification", tokenizer=False,
                                validation_fraction=0.2)
    with pytest.raises(gr.Error, match="Pick a dataset first"):  # two: the user says which
        data_tab.dataset_to_train(wb, "", "text-classification")


def test_a_picker_refresh_that_lands_late_keeps_the_pick_made_meanwhile(wb, tmp_path):
    # The browser suite on a busy machine: the Train tab's refresh, asked with the old pick, answered after the
    # user had picked another dataset and set the picker back, so the run was queued on the wrong dataset.
    from workbench.ui import compare_tab, train_tab

    sms = data_service.import_dataset(wb, DATA_DIR / "ui" / "sms_sample.csv", "text-classification",
                                      tokenizer=False, name="sms")
    notes_file = tmp_path / "notes.csv"
    notes_file.write_text("text,label\n" + "".join(f"note {i} for the weekend,{'x' if i % 3 else 'y'}\n"
                                                   for i in range(30)), encoding="utf-8")
    notes = data_service.import_dataset(wb, notes_file, "text-classification", tokenizer=False, name="notes")
    update = train_tab.refreshed_datasets(wb, "text-classification", sms.id)  # asked while sms was picked
    assert "value" not in update and [v for _, v in update["choices"]] == [notes.id, sms.id]
    # nothing picked (page load), or the pick is gone or of another task: the newest is preselected
    assert train_tab.refreshed_datasets(wb, "text-classification", None)["value"] == notes.id
    assert train_tab.refreshed_datasets(wb, "token-classification", sms.id)["value"] is None
    data_service.delete_dataset(wb, notes.id)
    assert train_tab.refreshed_datasets(wb, "text-classification", notes.id)["value"] == sms.id
    # the test-set picker of the Compare tab likewise
    assert compare_tab.refresh_test_sets(wb, "ds-gone")["value"] is None


def _run(wb, kind: str = "train", status: str = "succeeded", **fields) -> int:
    from storage.models import Run

    with wb.db.session() as session:
        run = Run(name=f"a {kind} run", task="text-classification", model="m", status=status, spec={}, kind=kind,
                  **fields)
        session.add(run)
        session.flush()
        return run.id


def test_the_compare_picker_lists_training_runs_only(wb):
    from workbench.ui import compare_tab

    trained = _run(wb)
    jobs = [_run(wb, kind, parent_run_id=trained) for kind in ("predict", "evaluate", "export")]
    assert [value for _, value in compare_tab.run_choices(wb)] == [trained]
    # a picked job (from before) is dropped from the value; a picked training run is kept as it is
    assert compare_tab.refresh_runs(wb, [trained, jobs[0]])["value"] == [trained]
    assert "value" not in compare_tab.refresh_runs(wb, [trained])
    # a ?compare= link picks the training runs it names that still exist, once each, in its order
    from workbench.ui.app import compared_from_query

    other = _run(wb)
    assert compared_from_query(wb, {"compare": f"{other},{trained},{jobs[0]},999,{other},x"}) == [other, trained]
    assert compared_from_query(wb, {}) == []


def test_an_idle_page_polls_less_and_less_and_at_once_again_when_something_moves():
    from workbench.ui import polling

    assert [polling.next_interval(i, changed=False, active=False) for i in (2.0, 4.0, 8.0, 16.0, 30.0)] == [
        4.0, 8.0, 16.0, 30.0, 30.0]
    assert polling.next_interval(30.0, changed=True, active=False) == 2.0
    assert polling.next_interval(30.0, changed=False, active=True) == 2.0
    assert polling.next_interval(None, changed=False, active=False) == 4.0
    assert polling.timer_update(2.0, changed=True, active=False) == gr.skip()  # unchanged: not reset
    assert polling.timer_update(2.0, changed=False, active=False).value == 4.0


def test_a_runs_tick_sends_the_table_only_when_it_changed_and_backs_off_while_nothing_runs(wb):
    from sqlalchemy import update

    from storage.models import Run
    from workbench.ui import runs_tab

    run_id = _run(wb)
    args = (runs_tab.ALL, "", "newest first", 1, None)
    first = runs_tab.poll_values(wb, *args, "", "", 2.0)
    rows, caption, *details, shown_key, rows_key, timer = first
    assert rows[0][0] == run_id and caption == "1–1 of 1 runs" and timer == gr.skip()  # the first look changed it
    second = runs_tab.poll_values(wb, *args, shown_key, rows_key, 2.0)
    assert second[0] == second[1] == gr.skip() and second[-2] == rows_key and second[-1].value == 4.0
    assert runs_tab.poll_values(wb, *args, shown_key, rows_key, 16.0)[-1].value == 30.0
    with wb.db.session() as session:  # a run starts (the CLI, another tab): the table is sent, polling speeds up
        session.execute(update(Run).where(Run.id == run_id).values(status="running", progress=0.5))
    moved = runs_tab.poll_values(wb, *args, shown_key, rows_key, 30.0)
    assert moved[0] != gr.skip() and moved[-1].value == 2.0
    # while it runs the tab keeps its 2 s, even when a tick finds nothing new
    assert runs_tab.poll_values(wb, *args, shown_key, moved[-2], 2.0)[-1] == gr.skip()


def test_the_errors_tab_of_an_evaluation_job_speaks_of_test_examples(wb):
    from workbench.ui import runs_tab

    trained = _run(wb)
    evaluation = _run(wb, "evaluate", parent_run_id=trained)
    assert runs_tab.errors_intro(runs_tab.run_kind(wb, trained)).startswith("Validation examples the model got wrong")
    assert runs_tab.errors_intro(runs_tab.run_kind(wb, evaluation)).startswith("Test examples the model got wrong")
    assert runs_tab.run_kind(wb, None) is None and runs_tab.run_kind(wb, 999) is None


def test_workbench_serve_home_picks_the_folder_of_its_database(cli, monkeypatch, tmp_path):
    import uvicorn

    import workbench.server

    homes = []
    monkeypatch.setattr(workbench.server, "create_app", lambda wb, worker=True: homes.append(wb.settings.home))
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    code, out, _ = cli("serve", "--no-worker", "--home", str(tmp_path / "elsewhere"), "--port", "7999")
    assert code == 0 and homes == [(tmp_path / "elsewhere").resolve()] and ":7999/" in out
    assert (tmp_path / "elsewhere" / "workbench.db").is_file()


def test_one_very_long_text_does_not_stretch_the_length_histogram_and_many_cuts_offer_a_longer_max_length():
    import numpy as np

    from storage.datasets.stats import length_summary
    from workbench.ui import plots

    # 300 e-mails of 40–339 tokens and one of 15,685
    lengths = np.append(np.arange(40, 340), 15_685)
    stats = length_summary(lengths, 128, tokenizer="t", sampled=False, population=len(lengths))
    # ten whole-number bins up to p99 (337: they end at 339), then one bar for the e-mail, not 10 bins of
    # 1,565 tokens with every other example in the first
    assert stats["p99"] == 337 and stats["clipped_at"] == 340 and stats["histogram"]["edges"][-1] == 15_686
    assert stats["histogram"]["counts"] == [30] * 10 + [1]
    frame = plots.token_length_frame(stats)
    assert list(frame["tokens"])[-1] == "340–15685" and list(frame["count"])[-1] == 1
    assert plots.token_length_title(stats).endswith("clipped at p99: the last bar holds every example of 340+ tokens")
    caption = plots.token_length_caption(stats)
    assert "the chart stops at p99 (337)" in caption
    # 70 % of them are cut at 128: 384 keeps 95 % whole (p95 is 325)
    assert stats["truncated_share"] >= 0.2 and plots.longer_max_length(stats) == 384
    assert "a **max length of 384** would keep 95 % of them whole" in caption
    # a dataset that fits is drawn as before and offered nothing
    short = length_summary(np.arange(5, 60), 128, tokenizer="t", sampled=False, population=55)
    assert short["clipped_at"] is None and plots.token_length_title(short) == plots.LENGTH_TITLE
    assert plots.longer_max_length(short) is None and "max length of" not in plots.token_length_caption(short)
    assert plots.longer_max_length({**stats, "max_length": 512}) is None  # nothing longer to offer


def test_recorded_keys_read_as_words_and_speeds_as_speeds():
    from workbench.ui import format as fmt

    details = dict(fmt.metric_detail_rows({"ece": 0.0412, "model_run": 7, "batch_size": 32, "test_set": "x",
                                           "calibration": {"temperature": 1.25}}))
    assert details == {"Calibration error (ECE)": "0.0412", "Model of run": "7", "Batch size": "32",
                       "Calibration › Temperature (calibration)": "1.2500"}
    shown = dict(fmt.readable_metric_rows({"rows_per_second": 13.41, "rows": 200, "seconds": 14.9}))
    assert shown == {"Rows per second": "13", "Rows": "200", "Time": "15s"}  # was "13.4100"
    assert dict(fmt.readable_metric_rows({"rows_per_second": 0.25}))["Rows per second"] == "0.25"


def test_an_evaluation_names_its_test_set_and_a_queued_prediction_its_dataset(wb, tmp_path):
    from workbench.ui import predict_panel, runs_tab

    test_set = data_service.import_dataset(wb, DATA_DIR / "ui" / "sms_sample.csv", "text-classification",
                                           tokenizer=False, name="sms-test")
    trained = _run(wb)
    evaluation = _run(wb, "evaluate", parent_run_id=trained, output_dir=str(tmp_path),
                      metrics={"accuracy": 0.9, "test_set": test_set.id, "rows": 10})
    shown = dict(runs_tab.run_view(wb, evaluation).final_metrics)
    assert shown["Test set"] == f"sms-test ({test_set.id})"
    assert predict_panel._dataset_text(wb, test_set.id) == f"**sms-test** ({test_set.id})"
    assert predict_panel._dataset_text(wb, "gone") == "gone"


def test_attention_tick_labels_are_big_enough_to_read():
    import numpy as np

    from workbench.playground.attention import AttentionMaps, plot_head, tick_font_size

    tokens = ["[CLS]", "the", "quick", "brown", "fox", "[SEP]"]
    figure = plot_head(AttentionMaps(tokens, np.full((1, 1, 6, 6), 1 / 6)), layer=0, head=0)
    labels = figure.axes[0].get_xticklabels()
    assert [t.get_text() for t in labels] == tokens and min(t.get_fontsize() for t in labels) == 13  # was 8
    assert tick_font_size(64) == tick_font_size(512) == 9 and 9 < tick_font_size(40) < 13
