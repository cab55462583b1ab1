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
