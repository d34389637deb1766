"""Kylin's job state machine, kept in one place.

Jobs and steps share the same six states and one transition table. Every state change
written from Python (the API's operations, the runner's step and job writes, drain
releases, orphan rescue, and every write on SQLite) is recorded through the store's
one audit writer, which refuses an illegal move with :func:`check_transition` and so
rolls the change back. The PostgreSQL one-statement paths (claim, group commit,
submit) write their audit rows in SQL; they make only READY -> RUNNING, RUNNING -> a
step's or job's outcome and (none) -> READY, each guarded by its source state in the
statement, and the property tests check their audit trail against the table.
"""

from __future__ import annotations

import enum

from jobserver.exceptions import IllegalTransition


class State(str, enum.Enum):
    READY = "READY"
    RUNNING = "RUNNING"
    SUCCEED = "SUCCEED"
    ERROR = "ERROR"
    STOPPED = "STOPPED"
    DISCARDED = "DISCARDED"

    @property
    def is_final(self) -> bool:
        """SUCCEED and DISCARDED are final in Kylin's sense (SUCCEED may still be rerun)."""
        return self in (State.SUCCEED, State.DISCARDED)

    def __str__(self) -> str:
        return self.value


_LEGAL: dict[State, frozenset[State]] = {
    State.READY: frozenset({State.RUNNING, State.ERROR, State.DISCARDED, State.STOPPED}),
    State.RUNNING: frozenset(
        {State.READY, State.SUCCEED, State.ERROR, State.DISCARDED, State.STOPPED}
    ),
    State.STOPPED: frozenset({State.READY, State.DISCARDED}),
    State.ERROR: frozenset({State.READY, State.DISCARDED}),
    State.SUCCEED: frozenset({State.READY}),
    State.DISCARDED: frozenset(),
}

def can_transition(current: State, target: State) -> bool:
    return target in _LEGAL[current]


def check_transition(current: State | str, target: State | str, what: str = "job") -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is legal."""
    current, target = State(current), State(target)
    if not can_transition(current, target):
        raise IllegalTransition(current.value, target.value, what)


class Operation(str, enum.Enum):
    """Operator actions on a job and the states each one accepts."""

    PAUSE = "pause"
    RESUME = "resume"
    RERUN = "rerun"
    DISCARD = "discard"

    @property
    def target(self) -> State:
        return _OPERATION_TARGET[self]

    @property
    def accepted_from(self) -> frozenset[State]:
        return _OPERATION_SOURCES[self]


_OPERATION_TARGET = {
    Operation.PAUSE: State.STOPPED,
    Operation.RESUME: State.READY,
    Operation.RERUN: State.READY,
    Operation.DISCARD: State.DISCARDED,
}

# Narrower than the transition table on purpose: resuming a finished job or rerunning
# a running one is legal for the state machine (RUNNING->READY is how orphans are
# re-queued) but is never what an operator means.
_OPERATION_SOURCES = {
    Operation.PAUSE: frozenset({State.READY, State.RUNNING}),
    Operation.RESUME: frozenset({State.ERROR, State.STOPPED}),
    Operation.RERUN: frozenset({State.SUCCEED, State.ERROR, State.STOPPED}),
    Operation.DISCARD: frozenset({State.READY, State.RUNNING, State.ERROR, State.STOPPED}),
}

