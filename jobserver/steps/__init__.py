"""Step types. Each is one function ``run(spec, ctx) -> StepOutcome``.

A step body never sees the store: it gets a :class:`StepContext` with the ids it
needs, the job's params, a ``cancelled`` event that is set when an operator pauses
or discards the job, or when this node loses the job, and
:meth:`StepContext.fence_is_current` to ask the store, before an effect outside the
job server, whether this run still holds the job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobserver.config import ShellStepConfig
from jobserver.states import State
from jobserver.store.records import StepOutcome

if TYPE_CHECKING:
    from jobserver.planners.hooks import OutputFormat
    from jobserver.steps.log import StepLog


@dataclass
class StepContext:
    job_id: int
    job_name: str
    step: str
    attempt: int
    job_attempt: int
    fence: int
    node: str
    params: dict[str, Any]
    shell: ShellStepConfig
    cancelled: threading.Event = field(default_factory=threading.Event)
    started_monotonic: float = field(default_factory=time.monotonic)
    #: What the job consumes, by the dataset as its input names it: ``{"dataset",
    #: "consumer", "partitions": [{"id", "key", "location", "metadata",
    #: "created_at", "failed_attempts"}]}`` (jobserver.datasets.working_set).
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The attempt's full log in the store; a step that streams its output writes
    #: there and closes it (shell). Others' ``output`` becomes the log at their end.
    log: StepLog | None = None
    #: This node's API for the step's own calls (``JOBSERVER_URL`` of shell steps).
    api_url: str | None = None
    #: The store's answer for this run's claim (see :meth:`fence_is_current`).
    fence_check: Callable[[], bool] | None = None
    #: How a shell step hands over what it outputs (the installed planners'; the
    #: engine adds it): None when no installed planner takes step outputs, and then a
    #: shell step gets no output file to write.
    outputs: OutputFormat | None = None

    def fence_is_current(self) -> bool:
        """Whether the job is still RUNNING under this run's claim (its ``fence`` and
        ``job_attempt``) in the store, right now: one read by the job's id.

        Call it just before an effect outside the job server and skip the effect when
        it is False: another claim runs (or will run) the job, or it was stopped. It
        narrows the window in which a stale run acts, and cannot close it; docs/jobs.md's
        "Guarding outside effects" shows how the outside system closes it. Raises
        :class:`~jobserver.exceptions.StoreError` when the store cannot answer (then
        act as if False). ``cancelled`` is this node's own, cheaper view: it is set
        within about half a second of the job being taken over.
        """
        if self.fence_check is None:  # a context made outside a node (tests, tools)
            raise RuntimeError("this step context has no claim to check")
        return self.fence_check()


StepFunction = Callable[[dict[str, Any], StepContext], StepOutcome]


@dataclass
class StepResult:
    """What a python step may return besides a dict of metrics: its metrics and the
    partitions it adds to datasets (each ``{"dataset", "key", "location",
    "metadata"}``; added by the installed planners'
    :class:`~jobserver.planners.hooks.JobOutputs`, the datasets planner's)."""

    metrics: dict[str, Any] | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)


def run_noop(spec: dict[str, Any], ctx: StepContext) -> StepOutcome:
    return StepOutcome(State.SUCCEED, wall_seconds=time.monotonic() - ctx.started_monotonic)


def run_sleep(spec: dict[str, Any], ctx: StepContext) -> StepOutcome:
    interrupted = ctx.cancelled.wait(float(spec["seconds"]))
    wall = time.monotonic() - ctx.started_monotonic
    if interrupted:
        return StepOutcome(State.STOPPED, error="cancelled while sleeping", wall_seconds=wall)
    return StepOutcome(State.SUCCEED, wall_seconds=wall)


def step_types(python_steps: Any, connections: Any = None) -> dict[str, StepFunction]:
    """The step types this node can run, by the name a job spec uses. ``connections``
    (:class:`jobserver.connections.Connections`): the databases of sql steps; without
    it a sql step fails, naming its connection as unknown."""
    from jobserver.connections import Connections
    from jobserver.steps.shell import run_shell
    from jobserver.steps.sql import SqlSteps

    sql = SqlSteps(connections if connections is not None else Connections({}))
    return {"noop": run_noop, "sleep": run_sleep, "shell": run_shell,
            "python": python_steps.run, "sql": sql.run}
