"""Plain records passed between the store and the rest of jobserver.

Nothing outside ``jobserver.store`` sees a SQLAlchemy row or session.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from jobserver.states import State


@functools.cache
def _init_fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


def _from_mapping(cls: type, mapping: Any, **extra: Any) -> Any:
    # Built for every claimed job and step: iterate the row once rather than probing
    # it for each field.
    names = _init_fields(cls)
    values = {name: value for name, value in mapping.items() if name in names}
    values.update(extra)
    return cls(**values)


class Actor(NamedTuple):
    """Who asked for a submit or an operator action: an API token's ``name`` and
    ``token_id`` (None for a token of the config, which has no id), or a planner
    ("schedule ns/name", "views", "batch SYSTEM/LOCATION"), or :data:`SYSTEM`."""

    name: str
    token_id: int | None = None

    def columns(self, prefix: str) -> dict[str, Any]:
        """``{prefix: name, prefix_token_id: token_id}``: the two columns that store it
        (``submitted_by`` on jobs, ``actor`` on job events)."""
        return {prefix: self.name, f"{prefix}_token_id": self.token_id}


#: The actor of work nothing more specific asked for.
SYSTEM = Actor("system")


def actor_of(name: str | None, token_id: int | None) -> Actor | None:
    """The actor two stored columns hold; None where nobody is recorded (the engine's
    own events, and jobs submitted before actors were)."""
    return None if name is None else Actor(name, token_id)


class NodeLoad(NamedTuple):
    """The jobs one node holds: RUNNING there, and READY but assigned to it (leader
    mode's assignments, which the node has not started yet)."""

    running: int
    assigned: int

    @property
    def total(self) -> int:
        return self.running + self.assigned


@dataclass(frozen=True)
class ClaimToken:
    """What a node proves on every write of a job it runs.

    ``fence`` is the lease's fence token; ``attempt`` tells this run from a later one
    of the same job (after resume or rescue). A write whose token no longer matches
    the job row is refused (:class:`~jobserver.exceptions.FencedOff`).
    """

    job_id: int
    node: str
    fence: int
    attempt: int


@dataclass
class StepRecord:
    id: int
    job_id: int
    position: int
    name: str
    type: str
    spec: dict[str, Any]
    depends_on: list[str]
    retries: int
    retry_backoff: float
    retryable: bool
    state: State
    attempt: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    output: str | None = None
    error: str | None = None
    wall_seconds: float | None = None
    cpu_seconds: float | None = None
    peak_rss_kb: int | None = None
    metrics: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, mapping: Any) -> StepRecord:
        return _from_mapping(cls, mapping, state=State(mapping["state"]))


def runnable_steps(steps: Iterable[StepRecord], done: Collection[str]) -> list[StepRecord]:
    """Of ``steps`` (in position order), those whose ``depends_on`` have all succeeded
    (``done``: the names of the job's SUCCEED steps), in the same order.

    The one rule for what may start next: the runner starts these as slots allow, and
    a claim starts the first of them (see :func:`first_runnable`).
    """
    return [step for step in steps if all(dep in done for dep in step.depends_on)]


def first_runnable(steps: Sequence[StepRecord]) -> StepRecord | None:
    """The step a claim starts with the job: the lowest-positioned READY step whose
    dependencies have all succeeded, or None. ``steps``: all of the job's, in position
    order. The PostgreSQL claim spells the same rule in SQL (``queries.sql``, the
    ``first`` CTE of ``claim``); the property tests hold the two to the same answer."""
    done = {step.name for step in steps if step.state is State.SUCCEED}
    ready = [step for step in steps if step.state is State.READY]
    return next(iter(runnable_steps(ready, done)), None)


@dataclass(frozen=True)
class Upstream:
    """A job another waits for (``JobSpec.after``): its id, what the dependent waits
    for (``done`` or ``succeeded``) and the upstream's state now."""

    job: int
    when: str
    state: State

    @property
    def met(self) -> bool:
        """Whether this upstream no longer holds its dependent back."""
        return self.state is State.SUCCEED or (
            self.when == "done" and self.state in (State.ERROR, State.DISCARDED))


@dataclass
class JobRecord:
    id: int
    name: str
    state: State
    priority: int
    lock_key: str | None
    assigned_servers: list[str] | None
    params: dict[str, Any]
    parallelism: int
    not_before: datetime | None
    node: str | None
    fence: int
    attempt: int
    error: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # The datasets the job consumes: JobSpec.inputs as JSON, None for none.
    inputs: list[dict[str, Any]] | None = None
    # How many upstreams (``after``) are not yet final for their ``when``: a job is
    # claimable only at 0.
    waiting_on: int = 0
    # Who submitted the job (see :class:`Actor`); None for jobs older than the record.
    submitted_by: str | None = None
    submitted_by_token_id: int | None = None
    # The upstreams with their current states; None where not read (job lists).
    after: list[Upstream] | None = None
    steps_done: int = 0
    steps_total: int = 0
    steps: list[StepRecord] | None = None

    @classmethod
    def from_row(cls, mapping: Any, **extra: Any) -> JobRecord:
        import json

        assigned = mapping["assigned_servers"]
        return _from_mapping(cls, mapping, state=State(mapping["state"]),
                             assigned_servers=json.loads(assigned) if assigned else None,
                             **extra)

    def token(self) -> ClaimToken:
        assert self.node is not None, "only a claimed job has a claim token"
        return ClaimToken(self.id, self.node, self.fence, self.attempt)


@dataclass
class StepOutcome:
    """How one attempt of a step ended, with its runtime audit."""

    state: State
    exit_code: int | None = None
    output: str | None = None
    error: str | None = None
    wall_seconds: float | None = None
    cpu_seconds: float | None = None
    peak_rss_kb: int | None = None
    metrics: dict[str, Any] | None = None
    retryable: bool = True
    # Partitions the step's output adds (jobserver.datasets.outputs): not a column,
    # added before the step's SUCCEED is written.
    partitions: list[Any] | None = None

    def columns(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (
            "exit_code", "output", "error", "wall_seconds", "cpu_seconds", "peak_rss_kb",
            "metrics")} | {"state": self.state.value}


@dataclass
class Completion:
    """The last write of a step attempt, fused with the job's final state when the
    step ends the job (``job_state``) or with the start of the steps it lets run
    (``start_next``), as queued for a group commit."""

    token: ClaimToken
    step: StepRecord
    attempt: int
    outcome: StepOutcome
    job_state: State | None = None
    job_error: str | None = None
    note: str | None = None
    #: Steps to start (READY -> RUNNING) in the same write: a chain's next steps once
    #: this one succeeded. With any, the whole write needs the job still RUNNING under
    #: the token, so the step's end and its successors' start land together or not at
    #: all (then the caller records the step alone, as :meth:`finish_step` does).
    start_next: tuple[StepRecord, ...] = ()


@dataclass
class ServerRecord:
    id: str
    host: str
    pid: int
    mode: str
    role: str
    state: str
    capacity: int
    running: int
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: float
    tags: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, mapping: Any) -> ServerRecord:
        return _from_mapping(cls, mapping, heartbeat_age=float(mapping["heartbeat_age"]))


@dataclass
class EventRecord:
    id: int
    job_id: int
    step: str | None
    from_state: str | None
    to_state: str
    node: str | None
    fence: int | None
    attempt: int | None
    message: str | None
    at: datetime
    # Who asked for the change (see :class:`Actor`); None for the engine's own.
    actor: str | None = None
    actor_token_id: int | None = None

    @classmethod
    def from_row(cls, mapping: Any) -> EventRecord:
        return _from_mapping(cls, mapping)
