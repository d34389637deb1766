"""What schedulers and runners do with jobs: claim, run steps, finish, rescue.

Every write after the claim is a compare-and-set on the claim token
(node, fence, attempt). When it updates nothing, :meth:`_refusal` tells why: the job
moved to another owner (:class:`FencedOff`) or an operator changed it (the write is
simply dropped and the caller stops).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import (ColumnElement, Connection, Select, and_, exists, func, or_, select,
                        text, update)

from jobserver.exceptions import FencedOff
from jobserver.states import State, StopReason
from jobserver.store import Transactions, batch, pgclaim
from jobserver.store.engine import store_now
from jobserver.store.epochs import is_current
from jobserver.store.models import DUE_JOBS
from jobserver.store.pgclaim import ClaimKind
from jobserver.store.records import (ClaimToken, Completion, JobRecord, NodeLoad,
                                     StepOutcome, StepRecord, first_runnable)
from jobserver.store.hooks import PlannerHooks
from jobserver.store.tables import AuditEvent, jobs, record_events, steps

if TYPE_CHECKING:
    from jobserver.planners.hooks import JobInputs

#: What a step's new attempt starts without: the figures and output shown for a
#: RUNNING step are its current attempt's own, empty until that attempt reports. An
#: earlier attempt is kept in the job's events and its own log (``step_logs``). The
#: claim statements in ``queries.sql`` clear the same columns.
ATTEMPT_CLEARED: dict[str, None] = dict.fromkeys((
    "finished_at", "exit_code", "error", "output", "wall_seconds", "cpu_seconds",
    "peak_rss_kb", "metrics"))


def _owned(token: ClaimToken) -> ColumnElement[bool]:
    return and_(jobs.c.id == token.job_id, jobs.c.node == token.node,
                jobs.c.fence == token.fence, jobs.c.attempt == token.attempt)


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class LeaseRef(Protocol):
    """What the store needs of a lease: its key and fence."""

    # Read-only: a lock backend's lease computes its fence.
    @property
    def key(self) -> str: ...

    @property
    def fence(self) -> int: ...


def _allowed_pattern(node: str) -> str:
    """The LIKE pattern of a job's ``assigned_servers`` (a JSON list) that names ``node``."""
    return "%" + _like_escape(json.dumps(node)) + "%"


def open_claim_params(node: str, lease: LeaseRef, limit: int,
                      job_ids: list[int] | None = None, keyless: bool = False
                      ) -> dict[str, Any]:
    """The parameters of PostgreSQL's claim of unassigned jobs (see
    :mod:`jobserver.store.pgclaim`) by ``node`` under ``lease``."""
    return pgclaim.params(ClaimKind.OPEN, node, limit, key=lease.key, fence=lease.fence,
                          pattern=_allowed_pattern(node), job_ids=job_ids, keyless=keyless)


def _waiting() -> ColumnElement[bool]:
    """READY, unassigned, due and not waiting for upstream jobs: a job no node holds
    or has been given, which may start now."""
    return and_(jobs.c.state == State.READY.value, jobs.c.node.is_(None),
                jobs.c.waiting_on == 0,
                or_(jobs.c.not_before.is_(None), jobs.c.not_before <= store_now()))


def claimable(node: str) -> ColumnElement[bool]:
    """What ``node`` may claim: waiting (READY, unassigned, due) and allowed on
    ``node`` by the job's ``assigned_servers``. The portable form of the rule the
    PostgreSQL ``claim`` statement spells in SQL."""
    return and_(_waiting(), or_(jobs.c.assigned_servers.is_(None),
                                jobs.c.assigned_servers.like(_allowed_pattern(node),
                                                             escape="\\")))


def _in_claim_order(query: Select[Any], limit: int) -> Select[Any]:
    # ix_jobs_queue's order, ``node`` and ``waiting_on`` first (constant within a
    # claim; see the index).
    return query.order_by(jobs.c.node, jobs.c.waiting_on, jobs.c.priority.desc(),
                          jobs.c.id).limit(limit)


def ready_candidates(node: str, limit: int, job_ids: list[int] | None = None,
                     keyed: bool | None = None) -> Select[Any]:
    """The ids ``node`` may claim next (:func:`claimable`), in claim order; only
    ``job_ids`` when given; only jobs with a ``lock_key`` (``keyed``), only jobs
    without one (not ``keyed``) or both (None)."""
    query = _in_claim_order(select(jobs.c.id).where(claimable(node)), limit)
    if job_ids is not None:
        query = query.where(jobs.c.id.in_(job_ids))
    if keyed is not None:
        query = query.where(jobs.c.lock_key.is_not(None) if keyed else jobs.c.lock_key.is_(None))
    return query


class RunRepository:
    def __init__(self, tx: Transactions, keyed_tx: Transactions | None = None,
                 hooks: PlannerHooks | None = None) -> None:
        """``keyed_tx``: where the group commit runs (``Store.keyed_engine``);
        ``hooks``: the planners' (:mod:`jobserver.store.hooks`), none by default."""
        self._tx = tx
        self._keyed_tx = keyed_tx or tx
        self._hooks = hooks or PlannerHooks()

    # -- claim ------------------------------------------------------------------------
    def claim(self, node: str, lease: LeaseRef, limit: int,
              job_ids: list[int] | None = None, keyless: bool = False) -> list[JobRecord]:
        """Atomically move up to ``limit`` runnable READY jobs to RUNNING on ``node``.

        Highest priority first, then oldest; only ``job_ids`` when given, only jobs
        without a ``lock_key`` when ``keyless``. One UPDATE,
        which only matches while ``lease`` is the newest lease of its key; on
        PostgreSQL the candidate rows are locked with SKIP LOCKED so that concurrent
        claimers never wait on each other.
        """
        if self._tx.dialect == "postgresql":
            return self.claim_postgresql(open_claim_params(node, lease, limit, job_ids,
                                                            keyless))
        candidates = ready_candidates(node, limit, job_ids, keyed=False if keyless else None)
        return self.start_where(node, [jobs.c.id.in_(candidates),
                                       is_current(lease.key, lease.fence)],
                                fence=lease.fence)

    def assign(self, lease: LeaseRef, assignments: dict[str, list[int]]) -> int:
        """Leader mode: give READY unassigned jobs to nodes (still READY, now with a
        node and the leader's fence). Matches only while ``lease`` is the newest."""
        assigned = 0
        with self._tx.write() as conn:
            for node, job_ids in assignments.items():
                assigned += conn.execute(update(jobs).where(
                    jobs.c.id.in_(job_ids), jobs.c.state == State.READY.value,
                    jobs.c.node.is_(None), jobs.c.waiting_on == 0,
                    is_current(lease.key, lease.fence))
                    .values(node=node, fence=lease.fence, updated_at=store_now())).rowcount
            if assigned:
                self._tx.notify(conn)
        return assigned

    def claim_assigned(self, node: str, limit: int) -> list[JobRecord]:
        """Leader mode: start READY jobs the leader assigned to ``node``."""
        if self._tx.dialect == "postgresql":
            return self.claim_postgresql(pgclaim.params(ClaimKind.ASSIGNED, node, limit))
        candidates = _in_claim_order(select(jobs.c.id).where(
            jobs.c.state == State.READY.value, jobs.c.node == node, jobs.c.waiting_on == 0),
            limit)
        return self.start_where(node, [jobs.c.id.in_(candidates), jobs.c.node == node])

    def claim_postgresql(self, params: dict[str, Any]) -> list[JobRecord]:
        with self._tx.statement() as conn:
            return pgclaim.claim(conn, params)

    def start_where(self, node: str, conditions: list[ColumnElement[bool]],
                    **values: Any) -> list[JobRecord]:
        """Start the READY jobs that meet ``conditions`` on ``node`` as a claim does
        (the portable path; ``values``: columns to set besides the start's): the
        claimed jobs with their steps, first steps started, audit rows written."""
        statement = update(jobs).where(jobs.c.state == State.READY.value, *conditions).values(
            state=State.RUNNING.value, node=node, attempt=jobs.c.attempt + 1, error=None,
            started_at=store_now(), finished_at=None, updated_at=store_now(), **values)
        with self._tx.write() as conn:
            rows = conn.execute(statement.returning(*jobs.c)).all()
            if not rows:
                return []
            claimed = self._with_steps(conn, rows)
            events = [AuditEvent.of_run(job.token(), State.READY, State.RUNNING)
                      for job in claimed]
            record_events(conn, events + _start_first_steps(conn, claimed))
        return claimed

    def unassigned(self, limit: int) -> list[tuple[int, list[str] | None]]:
        """Leader mode: the next READY, due, unassigned jobs with their allowed nodes."""
        query = _in_claim_order(select(jobs.c.id, jobs.c.assigned_servers).where(_waiting()),
                                limit)
        with self._tx.read() as conn:
            return [(row.id, json.loads(row.assigned_servers) if row.assigned_servers else None)
                    for row in conn.execute(query)]

    def load_by_node(self) -> dict[str, NodeLoad]:
        """Jobs each node holds: started (RUNNING) and assigned to it (READY)."""
        query = (select(jobs.c.node,
                        func.count().filter(jobs.c.state == State.RUNNING.value),
                        func.count().filter(jobs.c.state == State.READY.value))
                 .where(jobs.c.state.in_([State.READY.value, State.RUNNING.value]),
                        jobs.c.node.is_not(None)).group_by(jobs.c.node))
        with self._tx.read() as conn:
            return {node: NodeLoad(int(running), int(assigned))
                    for node, running, assigned in conn.execute(query)}

    def seconds_until_due(self, node: str) -> float | None:
        """Seconds on the store's clock until the earliest READY job held back by
        ``not_before`` that ``node`` might claim becomes due; None if there is none.

        One probe of ``ix_jobs_due`` from the store's now: jobs already due are
        past the range, so a due job that waits for a slot never reads as "due now"
        (which would make an idle scheduler spin).
        """
        query = select(func.min(jobs.c.not_before), store_now()).where(
            text(DUE_JOBS), jobs.c.not_before > store_now(), jobs.c.waiting_on == 0,
            or_(jobs.c.node.is_(None), jobs.c.node == node))
        with self._tx.read() as conn:
            due, now = conn.execute(query).one()
        return None if due is None else max(0.0, (due - now).total_seconds())

    def peek(self, node: str, limit: int, keyed: bool | None = None
             ) -> list[tuple[int, str | None]]:
        """Distributed mode: the next ``(job_id, lock_key)`` pairs ``node`` could claim
        (``keyed``: as in :func:`ready_candidates`)."""
        query = ready_candidates(node, limit, keyed=keyed)
        query = query.with_only_columns(jobs.c.id, jobs.c.lock_key)
        with self._tx.read() as conn:
            return [(row.id, row.lock_key) for row in conn.execute(query)]

    @staticmethod
    def _with_steps(conn: Connection, rows: Sequence[Any]) -> list[JobRecord]:
        by_job: dict[int, list[StepRecord]] = {row.id: [] for row in rows}
        for step in batch.steps_of(conn, list(by_job)):
            by_job[step.job_id].append(StepRecord.from_row(step._mapping))
        records = [JobRecord.from_row(row._mapping, steps=by_job[row.id]) for row in rows]
        return sorted(records, key=lambda job: (-job.priority, job.id))

    # -- steps ------------------------------------------------------------------------
    def start_step(self, token: ClaimToken, step: StepRecord) -> int | None:
        """READY -> RUNNING for one step; return its attempt number.

        Returns None when an operator stopped the job; raises :class:`FencedOff` when
        the job has another owner.
        """
        job_running = exists().where(_owned(token), jobs.c.state == State.RUNNING.value)
        with self._tx.write() as conn:
            attempt = conn.execute(
                update(steps)
                .where(steps.c.id == step.id, steps.c.state == State.READY.value, job_running)
                .values(state=State.RUNNING.value, attempt=steps.c.attempt + 1,
                        started_at=store_now(), **ATTEMPT_CLEARED)
                .returning(steps.c.attempt)).scalar()
            if attempt is None:
                self._refusal(conn, token)
                return None
            record_events(conn, [AuditEvent.of_run(token, State.READY, State.RUNNING,
                                                   step.name, attempt)])
            return int(attempt)

    def finish_step(self, token: ClaimToken, step: StepRecord, attempt: int,
                    outcome: StepOutcome, message: str | None = None) -> bool:
        """Record how a RUNNING step ended (READY when it will be retried).

        Returns False when an operator already moved the step (discard); raises
        :class:`FencedOff` when the job has another owner.
        """
        with self._tx.write() as conn:
            result = conn.execute(
                update(steps)
                .where(steps.c.id == step.id, steps.c.state == State.RUNNING.value,
                       exists().where(_owned(token)))
                .values(finished_at=store_now(), **outcome.columns()))
            if result.rowcount == 0:
                self._refusal(conn, token)
                return False
            record_events(conn, [AuditEvent.of_run(token, State.RUNNING, outcome.state,
                                                   step.name, attempt,
                                                   message or outcome.error)])
            return True

    # -- jobs -------------------------------------------------------------------------
    def finish_job(self, token: ClaimToken, state: State, error: str | None = None) -> bool:
        """RUNNING -> SUCCEED/ERROR. False when an operator changed the job meanwhile."""
        with self._tx.write() as conn:
            result = conn.execute(
                update(jobs).where(_owned(token), jobs.c.state == State.RUNNING.value)
                .values(state=state.value, error=error, finished_at=store_now(),
                        updated_at=store_now()))
            if result.rowcount == 0:
                self._refusal(conn, token)
                return False
            _settle_inputs(self._hooks.inputs, conn, token, state is State.SUCCEED)
            record_events(conn, [AuditEvent.of_run(token, State.RUNNING, state,
                                                   message=error)])
            return True

    def release(self, token: ClaimToken, message: str) -> bool:
        """RUNNING -> READY for a job this node claimed but gives up (shutdown, lost
        segment lock); its started steps go back to READY with it."""
        with self._tx.write() as conn:
            result = conn.execute(
                update(jobs).where(_owned(token), jobs.c.state == State.RUNNING.value)
                .values(state=State.READY.value, node=None, updated_at=store_now()))
            if not result.rowcount:
                return False
            inputs = self._hooks.inputs
            if inputs is not None:
                inputs.settle(conn, [token.job_id], error=message, count=False)
            names = conn.execute(
                update(steps).where(steps.c.job_id == token.job_id,
                                    steps.c.state == State.RUNNING.value)
                .values(state=State.READY.value).returning(steps.c.name)).scalars().all()
            record_events(conn, [AuditEvent.of_run(token, State.RUNNING, State.READY,
                                                   message=message)]
                          + [AuditEvent.of_run(token, State.RUNNING, State.READY, name,
                                               message=message) for name in names])
            return True

    def running_on(self, node: str) -> list[ClaimToken]:
        """The claim tokens of the jobs the store has RUNNING on ``node``."""
        with self._tx.read() as conn:
            rows = conn.execute(select(jobs.c.id, jobs.c.node, jobs.c.fence, jobs.c.attempt)
                                .where(jobs.c.state == State.RUNNING.value,
                                       jobs.c.node == node))
            return [ClaimToken(row.id, row.node, row.fence, row.attempt) for row in rows]

    def watch(self, tokens: Iterable[ClaimToken]) -> dict[int, StopReason]:
        """For jobs this node runs, say which must stop and why.

        Returns ``{job_id: reason}``: ``FENCED`` when another owner holds the job now,
        ``DELETED`` when its row is gone, else the reason its state in the store gives
        (:meth:`StopReason.for_state`). Jobs that are still ours and RUNNING are absent.
        """
        by_id = {token.job_id: token for token in tokens}
        if not by_id:
            return {}
        with self._tx.read() as conn:
            rows = conn.execute(select(jobs.c.id, jobs.c.state, jobs.c.node, jobs.c.fence,
                                       jobs.c.attempt).where(jobs.c.id.in_(list(by_id))))
            found = {row.id: row for row in rows}
        verdicts: dict[int, StopReason] = {}
        for job_id, token in by_id.items():
            row = found.get(job_id)
            if row is None:
                verdicts[job_id] = StopReason.DELETED
            elif (row.node, row.fence, row.attempt) != (token.node, token.fence, token.attempt):
                verdicts[job_id] = StopReason.FENCED
            elif row.state != State.RUNNING.value:
                verdicts[job_id] = StopReason.for_state(State(row.state))
        return verdicts

    def complete(self, completions: list[Completion]) -> list[bool | FencedOff]:
        """Group commit: the final writes of many step attempts in one transaction.

        Each is the same compare-and-set as :meth:`finish_step` (then
        :meth:`finish_job` when ``job_state`` is set), written set-based (see
        :mod:`jobserver.store.batch`). Per completion the result is True, False (an
        operator moved the step or job first) or the :class:`FencedOff` to raise in
        its execution.
        """
        if not completions:
            return []
        # PostgreSQL writes the batch in one statement: it needs no transaction of its
        # own, and the COMMIT round trip is saved.
        single = self._tx.dialect == "postgresql"
        with (self._keyed_tx.statement() if single else self._tx.write()) as conn:
            written = batch.complete(conn, completions, self._hooks.inputs)
            results: list[bool | FencedOff] = []
            for index, completion in enumerate(completions):
                done = index in (written.jobs if completion.job_state else written.steps)
                results.append(True if done else
                               (_refusal_error(conn, completion.token) or False))
        return results

    @staticmethod
    def _refusal(conn: Connection, token: ClaimToken) -> None:
        error = _refusal_error(conn, token)
        if error is not None:
            raise error


def holds(conn: Connection, token: ClaimToken) -> bool:
    """Whether the run ``token`` names still has its job RUNNING, in the caller's
    write transaction (the job's row is then held until it ends, on PostgreSQL); False
    when an operator stopped it; :class:`FencedOff` when it has another owner."""
    query = select(jobs.c.id).where(_owned(token), jobs.c.state == State.RUNNING.value)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(read=True)
    if conn.execute(query).first() is not None:
        return True
    error = _refusal_error(conn, token)
    if error is not None:
        raise error
    return False


def _settle_inputs(inputs: JobInputs | None, conn: Connection, token: ClaimToken,
                   succeeded: bool) -> None:
    """What the run took (its job's declared inputs), as its end decides, in the
    transaction writing the end (:class:`~jobserver.planners.hooks.JobInputs`)."""
    if inputs is None:
        return
    if succeeded:
        inputs.consumed(conn, [(token.job_id, token.attempt)])
    else:
        inputs.settle(conn, [token.job_id])


def _refusal_error(conn: Connection, token: ClaimToken) -> FencedOff | None:
    """Why a compare-and-set on ``token`` matched nothing: another owner, or None when
    the job is still ours (an operator changed it)."""
    row = conn.execute(select(jobs.c.node, jobs.c.fence, jobs.c.attempt, jobs.c.state)
                       .where(jobs.c.id == token.job_id)).first()
    if row is not None and (row.node, row.fence, row.attempt) == (
            token.node, token.fence, token.attempt):
        return None
    owner = "nobody" if row is None or row.node is None else (
        f"node {row.node} (fence {row.fence}, attempt {row.attempt})")
    return FencedOff(f"job {token.job_id}: write under fence {token.fence} refused; "
                     f"the job now belongs to {owner}")


def _start_first_steps(conn: Connection, claimed: list[JobRecord]) -> list[AuditEvent]:
    """Start each claimed job's first runnable step in the claim's own transaction,
    saving the runner one write per job. Updates the records in place."""
    first: dict[int, tuple[JobRecord, StepRecord]] = {}
    for job in claimed:
        step = first_runnable(job.steps or [])
        if step is not None:
            first[step.id] = (job, step)
    if not first:
        return []
    started = batch.start_steps(conn, list(first))
    events = []
    for step_id, attempt, started_at in started:
        job, step = first[step_id]
        step.state, step.attempt, step.started_at = State.RUNNING, attempt, started_at
        for column in ATTEMPT_CLEARED:
            setattr(step, column, None)
        events.append(AuditEvent.of_run(job.token(), State.READY, State.RUNNING, step.name,
                                        attempt))
    return events
