"""The run life cycle: allowed and refused moves."""
import pytest

from jobs.queue.states import ALLOWED, TERMINAL, can_transition, check_transition, sources_of
from storage.models import CANCELLED, CANCELLING, FAILED, PRUNED, QUEUED, RUN_STATES, RUNNING, SUCCEEDED
from workbench.errors import InvalidState


def test_every_state_has_a_rule_and_targets_are_states():
    assert set(ALLOWED) == set(RUN_STATES)
    for targets in ALLOWED.values():
        assert targets <= set(RUN_STATES)


@pytest.mark.parametrize("current,new", [
    (QUEUED, RUNNING), (QUEUED, CANCELLED), (RUNNING, SUCCEEDED), (RUNNING, FAILED), (RUNNING, CANCELLING),
    (RUNNING, QUEUED), (CANCELLING, CANCELLED), (CANCELLING, SUCCEEDED), (FAILED, QUEUED), (CANCELLED, QUEUED),
    (RUNNING, PRUNED), (CANCELLING, PRUNED)])
def test_allowed_moves(current, new):
    check_transition(1, current, new)
    assert can_transition(current, new)


@pytest.mark.parametrize("current,new", [
    (SUCCEEDED, QUEUED), (SUCCEEDED, CANCELLING), (FAILED, RUNNING), (CANCELLED, CANCELLING),
    (QUEUED, SUCCEEDED), (QUEUED, FAILED), (CANCELLING, RUNNING), (CANCELLING, QUEUED),
    (QUEUED, PRUNED), (PRUNED, QUEUED)])
def test_refused_moves_say_why(current, new):
    with pytest.raises(InvalidState, match=f"run 7: it is {current}"):
        check_transition(7, current, new)


def test_unknown_status_is_refused():
    with pytest.raises(InvalidState, match="unknown run status"):
        check_transition(1, RUNNING, "paused")


def test_terminal_states_have_no_way_forward_except_retry():
    assert ALLOWED[SUCCEEDED] == frozenset()
    # A pruned trial was told to its sweep's study: final like a success.
    assert ALLOWED[PRUNED] == frozenset()
    for state in TERMINAL - {SUCCEEDED, PRUNED}:
        assert ALLOWED[state] == {QUEUED}


def test_sources_of():
    assert sources_of(CANCELLED) == (CANCELLING, QUEUED, RUNNING)
    assert sources_of(RUNNING) == (QUEUED,)
