"""Kylin's job state machine: every pair of states, and the operator actions."""

from __future__ import annotations

import itertools

import pytest

from jobserver.exceptions import IllegalTransition
from jobserver.states import Operation, State, can_transition, check_transition

LEGAL = {
    ("READY", "RUNNING"), ("READY", "ERROR"), ("READY", "DISCARDED"), ("READY", "STOPPED"),
    ("RUNNING", "READY"), ("RUNNING", "SUCCEED"), ("RUNNING", "ERROR"),
    ("RUNNING", "DISCARDED"), ("RUNNING", "STOPPED"),
    ("STOPPED", "READY"), ("STOPPED", "DISCARDED"),
    ("ERROR", "READY"), ("ERROR", "DISCARDED"),
    ("SUCCEED", "READY"),
}


@pytest.mark.parametrize("current,target", list(itertools.product(State, State)))
def test_every_pair_follows_kylin(current: State, target: State) -> None:
    expected = (current.value, target.value) in LEGAL
    assert can_transition(current, target) is expected
    if expected:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition(current, target)
        assert info.value.details == {"current_state": current.value,
                                      "target_state": target.value}


def test_final_states() -> None:
    assert {s for s in State if s.is_final} == {State.SUCCEED, State.DISCARDED}


@pytest.mark.parametrize("operation", list(Operation))
def test_operations_only_from_legal_sources(operation: Operation) -> None:
    for source in operation.accepted_from:
        assert can_transition(source, operation.target)


def test_operator_rules() -> None:
    assert Operation.RESUME.accepted_from == {State.ERROR, State.STOPPED}
    assert State.SUCCEED in Operation.RERUN.accepted_from
    assert State.RUNNING not in Operation.RERUN.accepted_from
    assert State.DISCARDED not in Operation.DISCARD.accepted_from
