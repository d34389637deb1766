"""The engine's hooks a planner may fill: what the core asks a planner in the middle
of its own work, as opposed to the parts a planner declares (:mod:`jobserver.planners.base`).

The store, the steps and retention import these protocols and nothing else of the
planners: a job's inputs taken and settled with its run (:class:`JobInputs`), the
outputs a successful step adds (:class:`JobOutputs`), the old jobs retention must
keep (:class:`KeepRule`) and the deletions another planner refuses
(:class:`DeletionGuard`). Each runs inside a transaction of the engine's or in one of
its own, as its docstring says, and costs nothing for a job that has nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jobserver.exceptions import JobServerError

if TYPE_CHECKING:
    from pathlib import Path

    from sqlalchemy import Connection

    from jobserver.store.records import ClaimToken


class InputsTaken(Protocol):
    """What a run took at its start (:meth:`JobInputs.take`): ``outcome`` is ``run``
    (``inputs``: per input, by position, what its steps are handed), ``succeeded``
    or ``waiting`` (nothing to consume: the job is SUCCEED, or READY again, as
    ``message`` says), ``stopped`` (the run no longer holds the job) or ``failed``
    (the job is ERROR: ``error`` says why). ``count``: how many items the run took."""

    @property
    def outcome(self) -> str: ...

    @property
    def inputs(self) -> list[dict[str, Any]]: ...

    @property
    def error(self) -> str | None: ...

    @property
    def message(self) -> str | None: ...

    @property
    def count(self) -> int: ...


class JobInputs(Protocol):
    """The engine's calls for the inputs a job declares (``JobSpec.inputs``, the
    datasets planner's consumer partitions): taken when a run starts, and given
    back or consumed as the run ends, whatever ends it.

    Invariants: :meth:`consumed` and :meth:`settle` run inside the engine's own
    write transaction, the one that writes the run's end (a SUCCEED, an operator's
    pause or discard, a release, a rescue after a node died), after that write; they
    must not commit, open another transaction or take a lock the engine would wait
    on. The engine calls them wherever a run ends, for jobs with and without inputs,
    so each must cost one indexed statement at most and nothing more for a job
    without inputs (they touch no row of it)."""

    def take(self, token: ClaimToken, inputs: list[dict[str, Any]]) -> InputsTaken:
        """The start of a run that declares ``inputs``, before its first step, in
        transactions of its own fenced by the run's claim ``token``."""
        ...

    def consumed(self, conn: Connection, runs: Sequence[tuple[int, int]]) -> None:
        """Runs (``(job_id, attempt)``) that just SUCCEEDed: what they took is used up."""
        ...

    def settle(self, conn: Connection, job_ids: Sequence[int], *, error: str | None = None,
               count: bool = True) -> int:
        """What the runs of ``job_ids`` took and that are no longer RUNNING goes back
        (``count``: as a failed attempt; ``error``: the reason it keeps, when the
        job has none). Returns how many items went back."""
        ...

    def check(self, inputs: list[Any]) -> None:
        """A submitted job's ``inputs`` (``JobSpec.inputs``, not empty) against the
        store, before the job is stored: what they name must exist and fit, else an
        :class:`~jobserver.exceptions.InvalidRequest` naming ``inputs[i].<field>``.
        Reads only, in a transaction of its own."""
        ...


class OutputRefused(JobServerError):
    """A step's output that cannot be added (:meth:`JobOutputs.add`,
    :meth:`OutputFormat.read`); the message says which item and why. The step fails,
    and is not retried: the same output would be refused again."""


class OutputFormat(Protocol):
    """How a shell step hands over what it outputs: it writes a file, one JSON value a
    line, at the path the environment variable :attr:`env` names. A step sees only
    this part of :class:`JobOutputs`; it never writes to the store."""

    @property
    def env(self) -> str:
        """The name of the variable (``JOBSERVER_PARTITIONS_OUT``)."""
        ...

    def read(self, path: Path) -> list[Any]:
        """What a step wrote to ``path``, none if it wrote no file;
        :class:`OutputRefused` for a file that cannot be read as the format says."""
        ...


class JobOutputs(OutputFormat, Protocol):
    """The engine's call for what a successful step outputs (a shell step's file, a
    python step's ``StepResult.partitions``; the datasets planner's partitions).

    Invariants: :meth:`add` runs after the step succeeded and before its SUCCEED is
    written, in one write transaction of its own that first checks the run still holds
    its job (a run fenced off adds nothing); it adds all the items or none. Adding the
    same items for the same job's same step again is not an error (a step run again
    after its node died finds its own). The engine retries it while the store is
    unreachable; a step with no output costs nothing."""

    def add(self, token: ClaimToken, step: str, items: list[Any]) -> int:
        """Add the items ``step`` of the run of ``token`` output; returns how many
        were new. :class:`OutputRefused` when they cannot be (nothing is added)."""
        ...


class KeepRule:
    """One reason retention keeps an old finished job: a planner's rows still refer
    to it (a batch stage's job, a view partition's, a job a schedule waits for).

    Retention (:mod:`jobserver.store.keep`) asks every installed planner's rules,
    inside its delete transaction and after the candidates' rows are locked, which
    candidates must stay. Invariants: :meth:`kept` only reads, in the caller's
    transaction, and never commits; it costs a bounded number of statements per
    batch, whatever the number of candidates (``IN (ids)`` on an indexed column).
    """

    def read(self, conn: Connection) -> Any:
        """What the rule reads once every few batches, in a read transaction of its
        own, rather than per batch (parsing every schedule's spec): handed back to
        :meth:`kept`. Nothing by default."""
        return None

    def kept(self, conn: Connection, ids: Sequence[int], read: Any) -> Iterable[int]:
        """Those of ``ids`` (old, final, locked) that must stay; ``read``: what
        :meth:`read` returned last."""
        raise NotImplementedError


@dataclass(frozen=True)
class Deletion:
    """A resource about to be deleted, as its owner names it to the deletion guards:
    its ``kind`` (``dataset``, ``consumer``), ``namespace`` and ``name``, and for a
    resource that lives inside another (a consumer inside its dataset) the name of that
    ``parent``, in the same namespace."""

    kind: str
    namespace: str
    name: str
    parent: str | None = None


class DeletionGuard:
    """One planner's say over deleting another's resource that its rows name (the
    schedules planner's: a dataset or consumer a schedule names).

    The owner asks every guard (``PlannerHooks.refuse_deletion``) in its deleting
    transaction, after locking the resource's row exclusively; a planner saving a row
    that names the resource reads that row in share mode, so a save and a delete
    running together cannot both pass. :meth:`refuse` only reads, in the caller's
    transaction, never commits, and costs nothing for a ``kind`` it does not guard."""

    def refuse(self, conn: Connection, deletion: Deletion) -> None:
        """Raise :class:`~jobserver.exceptions.Conflict` (409) naming each of the
        planner's rows that name ``deletion``'s resource; return when none does."""
        raise NotImplementedError
