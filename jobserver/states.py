"""Kylin's job state machine, kept in one place, and why an execution stops.

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


class StopReason(str, enum.Enum):
    """Why a job's execution on this node stops before the job is over.

    A switch, not a message: what the execution does next depends on it (publish an
    operator's stop, re-queue, nothing). Where a log line or audit message needs more
    words, a free-text detail travels beside it.
    """

    #: An operator paused the job (its row is STOPPED now).
    PAUSED = "STOPPED"
    #: An operator discarded the job.
    DISCARDED = "DISCARDED"
    #: The job was found no longer RUNNING when a step was to start; which operator
    #: action moved it is read from the store.
    OPERATOR = "stopped by operator"
    #: The job has another owner now (rescued, re-claimed); this node's writes are refused.
    FENCED = "fenced"
    #: The job's row is gone.
    DELETED = "deleted"
    #: The job ended (by this node's own final write) while its execution was winding up.
    ENDED = "ended"
    #: This node gives up without draining (a required loop died) and gives the job back.
    NODE_STOPPING = "node stopping"
    #: This node drained (a SIGTERM) and the job still ran at the end of
    #: ``server.drain_timeout``: it is given back, to run again on a node that serves on.
    DRAINED = "drained"
    #: The job's segment lock was lost; the job is given back.
    LOCK_LOST = "lock lost"
    #: The execution failed inside the runner.
    INTERNAL_ERROR = "internal error"

    @classmethod
    def for_state(cls, state: State) -> StopReason:
        """Why a job this node still owns must stop, given its state in the store."""
        return _STOP_FOR_STATE.get(state, cls.ENDED)

    @property
    def by_operator(self) -> bool:
        """An operator's action stopped the job: the node publishes what it observed."""
        return self in (StopReason.PAUSED, StopReason.DISCARDED, StopReason.OPERATOR)

    @property
    def operator_state(self) -> State | None:
        """The state an operator's stop moved the job to; None when not known here."""
        return _STATE_FOR_STOP.get(self)

    def __str__(self) -> str:
        return self.value


_STOP_FOR_STATE = {State.STOPPED: StopReason.PAUSED, State.DISCARDED: StopReason.DISCARDED}
_STATE_FOR_STOP = {stop: state for state, stop in _STOP_FOR_STATE.items()}
