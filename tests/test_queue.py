"""The queue on SQLite and on PostgreSQL: atomic claims, leases, cancel, retry, concurrent submissions."""
from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections import Counter

import pytest
from sqlalchemy import select

from jobs.process.fake_runner import InProcessRunner
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from storage.models import CANCELLED, CANCELLING, FAILED, QUEUED, RUNNING, SUCCEEDED, Run, utcnow
from tests.queue_support import fake_spec, qwb, second_workbench, wait_until  # noqa: F401
from workbench.errors import InvalidState, NotFound


def _status(wb, run_id):
    with wb.db.session() as session:
        return session.get(Run, run_id)


def _submit(wb, n, **kw):
    return [queue.submit(wb.db, fake_spec(wb, **kw), wb.settings.runs_dir) for _ in range(n)]


def _all_at_once(settings, target, n_threads: int) -> list[BaseException]:
    """Run ``target(wb, n)`` in ``n_threads`` threads, each with its own connections, released together
    by a barrier; returns the exceptions they raised."""
    barrier = threading.Barrier(n_threads, timeout=60)
    errors: list[BaseException] = []

    def body(n):
        wb = second_workbench(settings)
        try:
            barrier.wait()
            target(wb, n)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)
        finally:
            wb.close()

    threads = [threading.Thread(target=body, args=(n,)) for n in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def test_submit_sets_queued_and_output_dir(qwb):
    [run_id] = _submit(qwb, 1, name="first")
    run = _status(qwb, run_id)
    assert run.status == QUEUED and run.name == "first" and run.attempts == 0
    assert run.output_dir == str(qwb.settings.runs_dir / str(run_id))


def test_claim_takes_priority_then_oldest_and_counts_attempts(qwb):
    low = _submit(qwb, 2)
    high = queue.submit(qwb.db, fake_spec(qwb), qwb.settings.runs_dir, priority=5)
    order = [queue.claim(qwb.db, "w1") for _ in range(3)]
    assert [c.id for c in order] == [high, low[0], low[1]]
    assert all(c.attempt == 1 for c in order)
    assert queue.claim(qwb.db, "w1") is None
    run = _status(qwb, high)
    assert run.status == RUNNING and run.worker_id == "w1" and run.heartbeat_at is not None


def test_claim_only_among_given_runs(qwb):
    first, second = _submit(qwb, 2)
    assert queue.claim(qwb.db, "w", only=[second]).id == second
    assert queue.claim(qwb.db, "w", only=[second]) is None
    assert _status(qwb, first).status == QUEUED


def test_concurrent_claims_never_share_a_run(qwb):
    """Four claimers on their own connections race over 120 runs: every run is claimed exactly once."""
    ids = _submit(qwb, 120)
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer(wb, n):
        while (c := queue.claim(wb.db, f"w{n}")) is not None:
            with lock:
                claimed.append(c.id)

    assert _all_at_once(qwb.settings, claimer, 4) == []
    assert sorted(claimed) == sorted(ids)


def test_heartbeat_renews_only_the_owners_runs(qwb):
    [run_id] = _submit(qwb, 1)
    t0 = utcnow()
    queue.claim(qwb.db, "w1", now=t0)
    later = t0 + dt.timedelta(seconds=30)
    assert queue.heartbeat(qwb.db, "other", [run_id], later) == 0
    assert queue.heartbeat(qwb.db, "w1", [run_id], later) == 1
    assert _status(qwb, run_id).heartbeat_at == later


def test_expired_lease_goes_back_to_the_queue_then_fails_after_max_attempts(qwb):
    [run_id] = _submit(qwb, 1)
    t = utcnow()
    lease = qwb.settings.lease_seconds
    for attempt in range(1, 3):
        assert queue.claim(qwb.db, f"dead{attempt}", now=t).attempt == attempt
        assert queue.reclaim_expired(qwb.db, lease, t + dt.timedelta(seconds=lease / 2), max_attempts=3) == []
        t += dt.timedelta(seconds=lease + 1)
        assert queue.reclaim_expired(qwb.db, lease, t, max_attempts=3) == [(run_id, QUEUED)]
        assert _status(qwb, run_id).worker_id is None
    assert queue.claim(qwb.db, "dead3", now=t).attempt == 3
    t += dt.timedelta(seconds=lease + 1)
    assert queue.reclaim_expired(qwb.db, lease, t, max_attempts=3) == [(run_id, FAILED)]
    run = _status(qwb, run_id)
    assert run.status == FAILED and "stopped responding 3 times" in run.error and run.finished_at is not None


def test_expired_lease_of_a_cancelling_run_ends_cancelled(qwb):
    [run_id] = _submit(qwb, 1)
    t = utcnow()
    queue.claim(qwb.db, "dead", now=t)
    assert queue.request_cancel(qwb.db, run_id) == CANCELLING
    moved = queue.reclaim_expired(qwb.db, 1.0, t + dt.timedelta(seconds=5), qwb.settings.max_attempts)
    assert moved == [(run_id, CANCELLED)]


def test_finish_is_refused_to_a_stale_attempt(qwb):
    [run_id] = _submit(qwb, 1)
    t = utcnow()
    queue.claim(qwb.db, "old", now=t)
    queue.reclaim_expired(qwb.db, 1.0, t + dt.timedelta(seconds=5), qwb.settings.max_attempts)
    queue.claim(qwb.db, "new")
    assert not queue.finish(qwb.db, run_id, 1, SUCCEEDED)  # the first attempt lost its lease
    assert queue.finish(qwb.db, run_id, 2, SUCCEEDED)
    assert not queue.finish(qwb.db, run_id, 2, FAILED)  # already final
    assert _status(qwb, run_id).status == SUCCEEDED


def test_cancel_queued_is_immediate_and_running_is_cooperative(qwb):
    queued, running = _submit(qwb, 2)
    queue.claim(qwb.db, "w", only=[running])
    assert queue.request_cancel(qwb.db, queued) == CANCELLED
    assert queue.request_cancel(qwb.db, running) == CANCELLING
    assert queue.request_cancel(qwb.db, running) == CANCELLING  # asking twice is harmless
    run = _status(qwb, running)
    assert run.cancel_requested and run.status == CANCELLING
    with pytest.raises(InvalidState, match="it is cancelled"):
        queue.request_cancel(qwb.db, queued)
    with pytest.raises(NotFound):
        queue.request_cancel(qwb.db, 9999)


def test_requeue_resets_attempts_and_error(qwb):
    [run_id] = _submit(qwb, 1)
    claimed = queue.claim(qwb.db, "w")
    queue.finish(qwb.db, run_id, claimed.attempt, FAILED, error="boom")
    queue.requeue(qwb.db, run_id)
    run = _status(qwb, run_id)
    assert (run.status, run.attempts, run.error, run.finished_at) == (QUEUED, 0, None, None)
    queue.claim(qwb.db, "w")
    with pytest.raises(InvalidState, match="it is running"):
        queue.requeue(qwb.db, run_id)


def test_live_workers_counts_recent_heartbeats(qwb):
    t = utcnow()
    queue.register_worker(qwb.db, "a", 1, "", t - dt.timedelta(seconds=100))
    queue.register_worker(qwb.db, "b", 1, "0,1", t)
    assert queue.live_workers(qwb.db, 30, t) == 1
    queue.worker_heartbeat(qwb.db, "a", t)
    assert queue.live_workers(qwb.db, 30, t) == 2
    queue.unregister_worker(qwb.db, "b")
    assert queue.live_workers(qwb.db, 30, t) == 1


def test_200_submissions_from_8_threads(qwb):
    """Acceptance 5: none lost, none duplicated."""
    def submitter(wb, n):
        for i in range(25):
            queue.submit(wb.db, fake_spec(wb, name=f"t{n}-{i}"), wb.settings.runs_dir)

    assert _all_at_once(qwb.settings, submitter, 8) == []
    with qwb.db.session() as session:
        rows = session.execute(select(Run.id, Run.name, Run.output_dir)).all()
    names = Counter(r.name for r in rows)
    assert len(rows) == 200 and set(names) == {f"t{n}-{i}" for n in range(8) for i in range(25)}
    assert max(names.values()) == 1
    assert len({r.id for r in rows}) == 200 and len({r.output_dir for r in rows}) == 200


def test_two_workers_run_60_jobs_exactly_once(qwb, tmp_path, monkeypatch):
    """Acceptance 1: two workers (own connections, own threads) drain 60 runs; each executes once."""
    log = tmp_path / "executions.log"
    monkeypatch.setenv("FAKE_RUNNER_LOG", str(log))
    ids = _submit(qwb, 60)
    stop = threading.Event()
    # What is tested is two workers racing for the same queued runs. A lease that lapses because a starved
    # machine held a worker's thread past the fixture's 3 s (it did, at a load average of 10) is the reclaim
    # path, which runs the job again by design (test_expired_lease_goes_back_to_the_queue_...): a lease far
    # longer than the whole drain keeps it out of this test.
    settings = dataclasses.replace(qwb.settings, lease_seconds=300.0)
    workbenches = [second_workbench(settings) for _ in range(2)]
    workers = [Worker(wb, InProcessRunner(wb), max_jobs=3, gpus=[]) for wb in workbenches]

    def drive(worker):
        while not stop.is_set():
            worker.loop_once()
            stop.wait(0.01)

    threads = [threading.Thread(target=drive, args=(w,)) for w in workers]
    for t in threads:
        t.start()

    def all_done():
        with qwb.db.session() as session:
            return session.scalar(select(Run.id).where(Run.status != SUCCEEDED).limit(1)) is None

    try:
        assert wait_until(all_done, timeout=120, interval=0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for wb in workbenches:
            wb.close()
    executed = Counter(int(line) for line in log.read_text().split())
    assert sorted(executed) == sorted(ids)
    assert set(executed.values()) == {1}
    with qwb.db.session() as session:
        by_worker = Counter(session.scalars(select(Run.worker_id)))
        attempts = set(session.scalars(select(Run.attempts)))
    assert attempts == {1}
    assert len(by_worker) == 2, "both workers should have taken part"
