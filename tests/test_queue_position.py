"""Issue 25: a queued run says where it stands in the queue and when it should start."""
from __future__ import annotations

import datetime as dt
import json

from jobs.queue import table as queue
from storage.models import Run
from workbench.services import runs as runs_service
from workbench.ui import format as fmt
from workbench.ui import runs_tab

NOW = dt.datetime(2026, 12, 3, 12, 0, 0)


def _run(wb, status: str, seconds: float | None = None, priority: int = 0, kind: str = "train", **values) -> int:
    estimate = {"seconds": seconds, "low": seconds * 0.8, "high": seconds * 1.2} if seconds is not None else None
    with wb.db.session() as session:
        run = Run(name=f"{status} run", task="text-classification", model="fake:succeed", status=status, spec={},
                  estimate=estimate, priority=priority, kind=kind, **values)
        session.add(run)
        session.flush()
        return run.id


def _worker(wb, name: str = "w1", max_jobs: int = 1, short_jobs: int = 0) -> None:
    queue.register_worker(wb.db, name, max_jobs, "", NOW, short_jobs=short_jobs)


def test_queued_runs_wait_in_claim_order_behind_the_running_one(wb):
    _worker(wb)
    running = _run(wb, "running", 900.0, started_at=NOW - dt.timedelta(minutes=5), eta_seconds=600.0,
                   phase="training")
    first = _run(wb, "queued", 300.0)
    second = _run(wb, "queued", 120.0)
    urgent = _run(wb, "queued", 60.0, priority=5)  # claimed first (jobs.queue.table.claim: priority, then id)
    found = runs_service.queue_positions(wb, NOW)
    assert [found[r]["position"] for r in (urgent, first, second)] == [1, 2, 3]
    # the running run's live ETA (600 s), not its estimate less the time it ran (900 - 300 s)
    assert found[urgent] == {"position": 1, "ahead": [running], "after": running, "expected_start_seconds": 600.0,
                             "workers": 1, "unknown": None, "lane": "main"}
    assert found[first]["ahead"] == [running, urgent] and found[first]["expected_start_seconds"] == 660.0
    assert found[second]["after"] == first and found[second]["expected_start_seconds"] == 960.0
    assert fmt.queued_status(found[first]) == "◷ queued · 2nd in line · starts after run 4, in about 11 min"


def test_two_workers_share_the_queue(wb):
    _worker(wb, "w1")
    _worker(wb, "w2")
    running = _run(wb, "running", 600.0, started_at=NOW - dt.timedelta(seconds=100))  # no ETA yet: 500 s left
    a, b, c = _run(wb, "queued", 300.0), _run(wb, "queued", 400.0), _run(wb, "queued", 60.0)
    found = runs_service.queue_positions(wb, NOW)
    assert found[a]["expected_start_seconds"] == 0.0 and found[a]["after"] is None  # a slot is free
    assert fmt.queue_text(found[a]) == "1st in line · starts as soon as a worker takes it"
    assert found[b]["expected_start_seconds"] == 300.0 and found[b]["after"] == a
    assert found[c]["expected_start_seconds"] == 500.0 and found[c]["after"] == running


def test_an_unknown_time_ahead_or_no_worker_is_said_not_guessed(wb):
    _worker(wb)
    _run(wb, "running", None, started_at=NOW)  # e.g. a prediction job: no estimate, no ETA yet
    waiting = _run(wb, "queued", 300.0)
    found = runs_service.queue_position(wb, waiting, NOW)
    assert found["expected_start_seconds"] is None and found["unknown"] == "run 1 has no time estimate"
    assert fmt.queue_text(found) == "1st in line · start time unknown (run 1 has no time estimate)"
    later = NOW + dt.timedelta(days=2)  # the worker's heartbeat is long gone
    found = runs_service.queue_position(wb, waiting, later)
    assert found["workers"] == 0 and found["expected_start_seconds"] is None
    assert "no worker is running" in fmt.queue_text(found)
    assert runs_service.queue_position(wb, 1, NOW) is None  # not queued


def test_the_runs_table_and_the_run_page_show_the_queue(wb):
    queue.register_worker(wb.db, "w1", 1, "")  # now: the table reads the queue as of now
    running = _run(wb, "running", 600.0, started_at=dt.datetime.utcnow(), eta_seconds=600.0, phase="training")
    waiting = _run(wb, "queued", 300.0)
    rows, _ = runs_tab.list_page(wb)
    status = {row[0]: row[runs_tab.STATUS_COLUMN] for row in rows}
    assert status[waiting] == f"◷ queued · 1st in line · starts after run {running}, in about 10 min"
    view = runs_tab.run_view(wb, waiting)
    assert f"1st in line · starts after run {running}, in about 10 min" in view.header


def test_runs_show_json_has_the_queue(wb, cli):
    queue.register_worker(wb.db, "w1", 1, "")
    waiting = _run(wb, "queued", 300.0)
    code, out, _ = cli("runs", "show", str(waiting), "--json")
    assert code == 0
    assert json.loads(out)["queue"] == {"position": 1, "ahead": [], "after": None, "expected_start_seconds": 0.0,
                                        "workers": 1, "unknown": None, "lane": "main"}
    code, out, _ = cli("runs", "show", str(waiting))
    assert "queue: 1st in line · starts as soon as a worker takes it" in out


def test_the_train_form_says_when_a_run_started_now_would_start(wb):
    from workbench.ui import train_tab

    queue.register_worker(wb.db, "w1", 1, "")
    running = _run(wb, "running", 600.0, started_at=dt.datetime.utcnow(), eta_seconds=600.0, phase="training")
    waiting = _run(wb, "queued", 300.0)
    _run(wb, "queued", 60.0, priority=-1)  # claimed after anything of the default priority
    assert train_tab.queue_outlook(wb) == f"If started now: 2nd in line · starts after run {waiting}, in about 15 min."
    assert train_tab.submitted_text(wb, waiting) == \
        f"✔ Run #{waiting} is on the queue: 1st in line · starts after run {running}, in about 10 min."
    place = runs_service.start_if_queued_now(wb)
    assert place["ahead"] == [running, waiting] and place["position"] == 2


def test_a_run_slower_than_estimated_says_so_in_the_table_and_on_its_page(wb):
    started = dt.datetime.utcnow() - dt.timedelta(minutes=10)
    slow = _run(wb, "running", 600.0, started_at=started, eta_seconds=600.0, phase="training", step=5,
                total_steps=10)  # 10 min in, 10 min of steps left: 20 min against 8–12 min estimated
    rows, _ = runs_tab.list_page(wb)
    assert rows[0][runs_tab.ETA_COLUMN] == "10m 00s (running slower than estimated)"
    header = runs_tab.run_view(wb, slow).header
    assert "estimated 8m 00s – 12m 00s · running for 10m 0" in header
    assert "running slower than estimated: about 10 min left" in header


def test_a_short_job_waits_for_the_lane_not_for_the_training_run(wb):
    """Issue 39: with a short-job lane a prediction queued behind a 22-minute training run starts at once, and
    the training runs queued behind it do not count it (it takes the lane, not their slot)."""
    _worker(wb, short_jobs=1)
    running = _run(wb, "running", 1800.0, started_at=NOW - dt.timedelta(minutes=8), eta_seconds=1320.0,
                   phase="training")
    training = _run(wb, "queued", 600.0)
    predict = _run(wb, "queued", None, kind="predict")  # a prediction has no estimate
    evaluate = _run(wb, "queued", None, kind="evaluate")
    later = _run(wb, "queued", 300.0)
    found = runs_service.queue_positions(wb, NOW)
    assert found[predict] == {"position": 1, "ahead": [], "after": None, "expected_start_seconds": 0.0,
                              "workers": 1, "unknown": None, "lane": "short"}
    assert fmt.queue_text(found[predict]) == "1st in the short-job lane · starts as soon as a worker takes it"
    # the second short job waits for the first, whose time nobody knows: said, not guessed
    assert found[evaluate]["position"] == 2 and found[evaluate]["ahead"] == [predict]
    assert found[evaluate]["expected_start_seconds"] is None
    assert found[evaluate]["unknown"] == f"run {predict} has no time estimate"
    assert found[training]["position"] == 1 and found[training]["expected_start_seconds"] == 1320.0
    assert found[later]["position"] == 2 and found[later]["ahead"] == [running, training]
    assert found[later]["expected_start_seconds"] == 1920.0
    assert runs_service.start_if_queued_now(wb, NOW)["position"] == 3


def test_without_a_lane_a_short_job_waits_its_turn(wb):
    _worker(wb, short_jobs=0)  # WORKBENCH_SHORT_JOBS=0, or a worker older than the lane
    running = _run(wb, "running", 1800.0, started_at=NOW, eta_seconds=1320.0, phase="training")
    predict = _run(wb, "queued", None, kind="predict")
    found = runs_service.queue_positions(wb, NOW)[predict]
    assert (found["lane"], found["after"], found["expected_start_seconds"]) == ("main", running, 1320.0)
    assert fmt.queue_text(found).startswith("1st in line · starts after run 1")


def test_the_train_forms_outlook_follows_the_queue_not_the_form(wb):
    """Issue 39: "If started now: 1st in line" stayed on the form while a run ran: the line sat in the
    model facts, read only when a field changed. It has its own box, read at every tick of a timer."""
    from tests.test_ui_stale_states import block
    from workbench.ui import app

    queue.register_worker(wb.db, "w1", 1, "")
    page = app.build_ui(wb)
    outlook = block(page, "train-queue-outlook")
    (tick,) = [f for f in page.fns.values() if outlook in f.outputs and f.fn is not None
               and any(event == "tick" for _, event in f.targets)]
    assert tick.fn() == "If started now: 1st in line · starts as soon as a worker takes it."
    running = _run(wb, "running", 600.0, started_at=dt.datetime.utcnow(), eta_seconds=300.0, phase="training")
    assert tick.fn() == f"If started now: 1st in line · starts after run {running}, in about 5 min."
    with wb.db.session() as session:  # the run has moved on: 2 minutes of its steps left
        session.get(Run, running).eta_seconds = 120.0
    assert tick.fn() == f"If started now: 1st in line · starts after run {running}, in about 2 min."
