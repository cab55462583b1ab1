"""Issue 24 in Chromium: Compare shows each run's score with its 95 % interval and says whether the difference
between two runs is real; the Runs table shows the interval too.

The two runs are finished rows added to the server's database, each with the per-example outcomes its final
evaluation would have written (``jobs.evaluation.outcomes``): nothing is trained here.
"""
from __future__ import annotations

import pytest

from jobs.evaluation import outcomes
from storage.models import Run, utcnow
from tests.browser.conftest import goto_ready, screenshot
from tests.browser.test_workbench_ui import _service_workbench, choose, open_tab, wait_text
from workbench.ui import format as fmt

pytestmark = pytest.mark.browser
LABELS = ["ham", "spam"]


def _scored_run(wb, folder, name: str, right: int, total: int = 200) -> int:
    """A succeeded run that got the first ``right`` of ``total`` validation messages right."""
    gold = [LABELS[i % 2] for i in range(total)]
    rows = [{"text": f"message {i}", "gold": g, "predicted": g if i < right else LABELS[1 - i % 2]}
            for i, g in enumerate(gold)]
    found = outcomes.outcomes_from_rows(rows, {"per_class": [{"label": label} for label in LABELS]})
    metrics = {"accuracy": right / total, "validation_records": total, "metrics_ci": outcomes.intervals(found)}
    with wb.db.session() as session:
        run = Run(name=name, task="text-classification", model="tiny-bert", status="succeeded", progress=1.0,
                  spec={"task": "text-classification", "data": {"train_path": "train.jsonl",
                                                                "validation_path": "dev.jsonl", "name": "sms"}},
                  metrics=metrics, started_at=utcnow(), finished_at=utcnow())
        session.add(run)
        session.flush()
        run_id = run.id
    out = folder / f"run-{run_id}"
    out.mkdir()
    outcomes.write_outcomes(out / outcomes.OUTCOMES_FILE, found)
    with wb.db.session() as session:
        session.get(Run, run_id).output_dir = str(out)
    return run_id


def test_compare_shows_intervals_and_whether_the_difference_is_real(server, page, tmp_path_factory):
    folder = tmp_path_factory.mktemp("intervals")
    wb = _service_workbench(server)
    try:
        weaker = _scored_run(wb, folder, "interval lr 1e-5", 140)
        stronger = _scored_run(wb, folder, "interval lr 5e-5", 180)
        shown = {run_id: outcomes.intervals(outcomes.read_outcomes(folder / f"run-{run_id}" / outcomes.OUTCOMES_FILE))
                 for run_id in (weaker, stronger)}
    finally:
        wb.close()
    goto_ready(page, server.url)
    open_tab(page, "Runs")
    wait_text(page, "#runs-table", "accuracy 0.700 ±")
    open_tab(page, "Compare")
    for run_id, name in ((weaker, "interval lr 1e-5"), (stronger, "interval lr 5e-5")):
        choose(page, "compare-runs", f"#{run_id} {name}")
    page.locator("#compare-go").click()
    wait_text(page, "#compare-significance", "Is the difference real?")
    metrics = page.locator("#compare-metrics").inner_text()
    for run_id, value in ((weaker, 0.7), (stronger, 0.9)):
        assert fmt.metric_with_ci(value, shown[run_id]["accuracy"]) in metrics, metrics
    assert metrics.count("±") == 2, metrics  # "0.700 ± 0.062": symmetric intervals at these scores
    verdict = page.locator("#compare-significance").inner_text()
    assert f"Run {stronger} is better than run {weaker} by 20.00 points of accuracy (95 % CI" in verdict, verdict
    assert f"0 example(s) only run {weaker} got right, 40 only run {stronger}" in verdict
    assert page.locator("[data-testid='status-tracker'] span.error").count() == 0
    screenshot(page, "compare-intervals")
