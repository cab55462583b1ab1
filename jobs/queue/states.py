"""The run life cycle as data: which status may follow which.

    queued ──claim──> running ──> succeeded | failed | cancelled | pruned
      ^                 │  └─cancel─> cancelling ──> cancelled | failed | succeeded | pruned
      │                 └─lease expired (worker died)─┐
      └───────────────── retry / requeue ─────────────┘

Every status change in the queue and the services goes through
``check_transition`` so that an illegal move (cancel a finished run, retry a
running one) is an ``InvalidState`` error with a sentence, never a silent write.
The database stores only the status strings (``storage.models``). ``pruned`` is
a sweep trial that its pruner stopped early (see ``jobs.sweeps.driver``): final, like succeeded.
"""
from __future__ import annotations

from storage.errors import InvalidState
from storage.models import CANCELLED, CANCELLING, FAILED, PRUNED, QUEUED, RUN_STATES, RUNNING, SUCCEEDED

TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, PRUNED})
ACTIVE = frozenset({RUNNING, CANCELLING})

ALLOWED: dict[str, frozenset[str]] = {
    # queued -> cancelled: cancelling a run nobody has started needs no process to stop.
    QUEUED: frozenset({RUNNING, CANCELLED}),
    # running -> queued: the lease expired (worker died); the run is resumed from its checkpoint.
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLING, CANCELLED, QUEUED, PRUNED}),
    # A run may finish on its own (or be pruned) before it sees the cancel request.
    CANCELLING: frozenset({CANCELLED, FAILED, SUCCEEDED, PRUNED}),
    SUCCEEDED: frozenset(),
    # Like succeeded: Optuna was told, so the trial cannot run again.
    PRUNED: frozenset(),
    # retry
    FAILED: frozenset({QUEUED}),
    CANCELLED: frozenset({QUEUED}),
}

_VERBS = {
    RUNNING: "start", SUCCEEDED: "mark as succeeded", FAILED: "mark as failed",
    CANCELLING: "cancel", CANCELLED: "cancel", QUEUED: "queue again", PRUNED: "mark as pruned",
}


def can_transition(current: str, new: str) -> bool:
    return new in ALLOWED.get(current, frozenset())


def check_transition(run_id: int, current: str, new: str) -> None:
    """Raise ``InvalidState`` unless ``current -> new`` is an allowed move."""
    if new not in RUN_STATES:
        raise InvalidState(f"unknown run status {new!r}")
    if not can_transition(current, new):
        raise InvalidState(f"cannot {_VERBS.get(new, new)} run {run_id}: it is {current}")


def sources_of(new: str) -> tuple[str, ...]:
    """The statuses from which ``new`` may be reached; used in conditional UPDATEs (``WHERE status IN ...``)."""
    return tuple(sorted(s for s, targets in ALLOWED.items() if new in targets))
