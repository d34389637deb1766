"""What the API does with jobs: submit, read, list and operator actions."""

from __future__ import annotations

import builtins
import json
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Connection, func, insert, select, update

from jobserver.exceptions import Conflict, ConstraintViolation, IllegalTransition, NotFound
from jobserver.spec import JobSpec, step_columns
from jobserver.states import Operation, State
from jobserver.store import WAKE_CHANNEL, Transactions, pgsubmit
from jobserver.store.browse import name_contains, step_progress
from jobserver.store.dependencies import NewJob, insert_linked, recount, upstreams_of
from jobserver.store.engine import store_now
from jobserver.store.hooks import PlannerHooks
from jobserver.store.intake import BatchItem, Submitted, insert_ready, submit_batch
from jobserver.store.logs import forget as forget_logs
from jobserver.store.not_running import NotRunning, count_stuck, explain
from jobserver.store.records import SYSTEM, Actor, EventRecord, JobRecord, StepRecord
from jobserver.store.tables import AuditEvent, events, jobs, record_events, steps

if TYPE_CHECKING:
    from jobserver.planners.hooks import JobInputs

MAX_PAGE = 500


class KeyedSubmit(NamedTuple):
    """One job of :meth:`JobRepository.submit_keyed`: its spec, its steps' resolved
    dependencies, its idempotency key, its request's digest and who launches it."""

    spec: JobSpec
    dependencies: list[list[str]]
    key: str
    digest: str | None
    actor: Actor = SYSTEM


class JobRepository:
    def __init__(self, tx: Transactions, hooks: PlannerHooks | None = None) -> None:
        """``hooks``: the planners' (:mod:`jobserver.store.hooks`), none by default."""
        self._tx = tx
        self._hooks = hooks or PlannerHooks()

    # -- submit ---------------------------------------------------------------------
    def submit(self, spec: JobSpec, dependencies: list[list[str]],
               idempotency_key: str | None = None, request_hash: str | None = None,
               actor: Actor = SYSTEM) -> tuple[JobRecord, bool]:
        """Insert a READY job submitted by ``actor``; return ``(job, created)``.

        A repeated ``idempotency_key`` returns the first job (``created`` False); the
        same key with a different request is a :class:`Conflict`.
        """
        values, step_rows = _insert_values(spec, dependencies, idempotency_key, request_hash,
                                           actor)
        try:
            if self._tx.dialect == "postgresql" and not spec.after:
                return self._submit_in_one_statement(values, step_rows, idempotency_key,
                                                     request_hash)
            with self._tx.write() as conn:
                existing = self._by_idempotency_key(conn, idempotency_key, request_hash)
                if existing is not None:
                    return self._get(conn, existing), False
                if spec.after:
                    [job_id] = insert_linked(conn, [NewJob(values, step_rows, spec.after,
                                                           "after")])
                    assert job_id is not None  # no conflicts skipped: a taken key raises
                    job = self._get(conn, job_id)
                else:
                    job = self._insert(conn, values, step_rows)
                self._tx.notify(conn)
                return job, True
        except ConstraintViolation:
            if idempotency_key is None:
                raise
            # A concurrent request with the same key won the insert.
            with self._tx.read() as conn:
                existing = self._by_idempotency_key(conn, idempotency_key, request_hash)
                if existing is None:  # no job holds the key: the failure was not the key's
                    raise
                return self._get(conn, existing), False

    def _submit_in_one_statement(self, values: dict[str, Any],
                                 step_rows: builtins.list[dict[str, Any]],
                                 idempotency_key: str | None,
                                 request_hash: str | None) -> tuple[JobRecord, bool]:
        """PostgreSQL: see :mod:`jobserver.store.pgsubmit`. A repeated key is found
        before the insert, or by its unique index when two requests race."""
        if idempotency_key is not None:
            with self._tx.read() as conn:
                existing = self._by_idempotency_key(conn, idempotency_key, request_hash)
                if existing is not None:
                    return self._get(conn, existing), False
        channel = WAKE_CHANNEL if self._tx.notifies else None
        with self._tx.statement() as conn:
            return pgsubmit.submit(conn, values, step_rows, channel), True

    def submit_keyed(self, items: builtins.list[KeyedSubmit],
                     conn: Connection | None = None) -> dict[str, int]:
        """Insert many READY jobs, each under its own idempotency key, at once; returns
        each key's job id. A key already used keeps its job, whatever its request:
        the caller makes keys that name one request each (a planner's launch keys).

        PostgreSQL: one statement (``submit_keyed``) and one wake-up for the batch;
        SQLite: one transaction. With ``conn``, in the caller's transaction: the jobs
        become visible, and the schedulers are woken, when it commits."""
        if not items:
            return {}
        if conn is not None:
            return self._submit_keyed(conn, items)
        linked = any(item.spec.after for item in items)
        own = (self._tx.statement() if self._tx.dialect == "postgresql" and not linked
               else self._tx.write())
        with own as conn:
            return self._submit_keyed(conn, items)

    def submit_batch(self, items: builtins.list[BatchItem]) -> builtins.list[Submitted]:
        """Insert a batch of API submits, all or nothing, each under its own optional
        idempotency key; see :mod:`jobserver.store.intake`."""
        return submit_batch(self._tx, items, _insert_values)

    def _submit_keyed(self, conn: Connection,
                      items: builtins.list[KeyedSubmit]) -> dict[str, int]:
        """Jobs without ``after`` by the set-based path; those with ``after`` by
        :func:`~jobserver.store.dependencies.insert_linked`, which may name jobs this
        transaction inserted before."""
        plain = [item for item in items if not item.spec.after]
        found = self._submit_plain(conn, plain) if plain else {}
        if len(plain) < len(items):
            found.update(self._submit_linked(conn, items))
        return {item.key: found[item.key] for item in items}

    def _submit_linked(self, conn: Connection,
                       items: builtins.list[KeyedSubmit]) -> dict[str, int]:
        linked = [(index, item) for index, item in enumerate(items) if item.spec.after]
        found: dict[str, int] = dict(conn.execute(
            select(jobs.c.idempotency_key, jobs.c.id)
            .where(jobs.c.idempotency_key.in_([item.key for _i, item in linked]))).all())
        new = list({item.key: (index, item) for index, item in linked
                    if item.key not in found}.values())
        if new:
            built = [(_insert_values(item.spec, item.dependencies, item.key, item.digest,
                                     item.actor),
                      item, index) for index, item in new]
            ids = insert_linked(conn, [NewJob(values, step_rows, item.spec.after,
                                              f"items[{index}].after")
                                       for (values, step_rows), item, index in built],
                                skip_conflicts=True)
            found.update((item.key, job_id) for (_i, item), job_id in zip(new, ids)
                         if job_id is not None)
            missing = [item.key for (_i, item), job_id in zip(new, ids) if job_id is None]
            if missing:  # a concurrent submit of the same key won
                found.update(conn.execute(select(jobs.c.idempotency_key, jobs.c.id)
                                          .where(jobs.c.idempotency_key.in_(missing))).all())
            self._tx.notify(conn)
        return found

    def _submit_plain(self, conn: Connection,
                      items: builtins.list[KeyedSubmit]) -> dict[str, int]:
        if self._tx.dialect != "postgresql":
            return self._submit_keyed_sqlite(conn, items)
        rows = []
        for item in items:
            values, step_rows = _insert_values(item.spec, item.dependencies, item.key,
                                               item.digest, item.actor)
            rows.append(dict(values, steps=step_rows))
        channel = WAKE_CHANNEL if self._tx.notifies else None
        created = pgsubmit.submit_keyed(conn, rows, channel)
        missing = [item.key for item in items if item.key not in created]
        if missing:
            created.update((key, job_id) for job_id, key in conn.execute(
                select(jobs.c.id, jobs.c.idempotency_key)
                .where(jobs.c.idempotency_key.in_(missing))).all())
        return created

    @staticmethod
    def _submit_keyed_sqlite(conn: Connection,
                             items: builtins.list[KeyedSubmit]) -> dict[str, int]:
        """The new jobs, their steps and audit rows by three multi-row inserts."""
        found: dict[str, int] = dict(conn.execute(select(jobs.c.idempotency_key, jobs.c.id)
                                                  .where(jobs.c.idempotency_key.in_(
                                                      [item.key for item in items]))).all())
        new = list({item.key: item for item in items if item.key not in found}.values())
        ids = insert_ready(conn, [_insert_values(item.spec, item.dependencies, item.key,
                                                 item.digest, item.actor) for item in new])
        found.update((item.key, job_id) for item, job_id in zip(new, ids))
        return {item.key: found[item.key] for item in items}

    @staticmethod
    def _by_idempotency_key(conn: Connection, key: str | None,
                            request_hash: str | None) -> int | None:
        if key is None:
            return None
        row = conn.execute(select(jobs.c.id, jobs.c.request_hash)
                           .where(jobs.c.idempotency_key == key)).first()
        if row is None:
            return None
        if row.request_hash != request_hash:
            raise Conflict("Idempotency-Key was already used with a different request",
                           {"field": "Idempotency-Key", "job_id": row.id})
        return row.id

    @staticmethod
    def _insert(conn: Connection, values: dict[str, Any],
                step_rows: builtins.list[dict[str, Any]]) -> JobRecord:
        """Insert the job (``values``: see :func:`_insert_values`), its steps and its
        first audit row; the rows come back from the inserts themselves (no reads:
        every round trip here delays the commit that wakes the schedulers)."""
        job_row = conn.execute(insert(jobs).values(
            **values, state=State.READY.value, fence=0, attempt=0,
            created_at=store_now(), updated_at=store_now()).returning(*jobs.c)).one()
        rows = [dict(row, job_id=job_row.id, state=State.READY.value, attempt=0)
                for row in step_rows]
        inserted = conn.execute(insert(steps).returning(*steps.c, sort_by_parameter_order=True),
                                rows).all()
        record_events(conn, [AuditEvent(job_row.id, None, State.READY, message="submitted",
                                        actor=job_row.submitted_by,
                                        actor_token_id=job_row.submitted_by_token_id)])
        records = [StepRecord.from_row(row._mapping) for row in inserted]
        return JobRecord.from_row(job_row._mapping, steps=records, steps_total=len(records),
                                  after=[])

    # -- read -----------------------------------------------------------------------
    def get(self, job_id: int, with_steps: bool = True) -> JobRecord:
        with self._tx.read() as conn:
            return self._get(conn, job_id, with_steps)

    def _get(self, conn: Connection, job_id: int, with_steps: bool = True) -> JobRecord:
        row = conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", {"job_id": job_id})
        step_rows = conn.execute(select(steps).where(steps.c.job_id == job_id)
                                 .order_by(steps.c.position)).mappings().all()
        step_records = [StepRecord.from_row(s) for s in step_rows]
        done = sum(1 for s in step_records if s.state is State.SUCCEED)
        return JobRecord.from_row(row, steps=step_records if with_steps else None,
                                  steps_done=done, steps_total=len(step_records),
                                  after=upstreams_of(conn, [job_id]).get(job_id, []))

    def list(self, state: State | None = None, name: str | None = None, limit: int = 50,
             before_id: int | None = None, name_part: str | None = None,
             ) -> tuple[list[JobRecord], int | None]:
        """Newest first; returns the page and the id to pass as ``before_id`` next.
        ``name_part``: a part of the name, any case (no index serves it: the scan goes
        on, newest first, until the page is full)."""
        limit = max(1, min(limit, MAX_PAGE))
        query = select(jobs).order_by(jobs.c.id.desc()).limit(limit + 1)
        if state is not None:
            query = query.where(jobs.c.state == state.value)
        if name is not None:
            query = query.where(jobs.c.name == name)
        if name_part is not None:
            query = query.where(name_contains(name_part))
        if before_id is not None:
            query = query.where(jobs.c.id < before_id)
        with self._tx.read() as conn:
            rows = conn.execute(query).mappings().all()
            page = rows[:limit]
            progress = step_progress(conn, [row["id"] for row in page])
        records = [JobRecord.from_row(row, steps_done=progress.get(row["id"], (0, 0))[0],
                                      steps_total=progress.get(row["id"], (0, 0))[1])
                   for row in page]
        return records, (page[-1]["id"] if len(rows) > limit else None)

    def events(self, job_id: int) -> builtins.list[EventRecord]:
        with self._tx.read() as conn:
            rows = conn.execute(select(events).where(events.c.job_id == job_id)
                                .order_by(events.c.id)).mappings().all()
        return [EventRecord.from_row(row) for row in rows]

    def not_running(self, job: JobRecord, mode: str, dead_after: float) -> NotRunning:
        """Why ``job`` (READY, as :meth:`get` read it) is not running now, in scheduler
        ``mode`` with nodes dead after ``dead_after`` seconds without a heartbeat (see
        :mod:`jobserver.store.not_running`)."""
        with self._tx.read() as conn:
            return explain(conn, job, mode, dead_after)

    def stuck(self, mode: str, dead_after: float, older_than: float) -> dict[str, int]:
        """Jobs READY for more than ``older_than`` seconds by why they do not run,
        those waiting only for a free slot left out (``jobserver_jobs_stuck``)."""
        with self._tx.read() as conn:
            return count_stuck(conn, mode, dead_after, older_than)

    def states(self, job_ids: builtins.list[int]) -> dict[int, State]:
        """The state of each job of ``job_ids`` that exists (one primary-key lookup)."""
        if not job_ids:
            return {}
        with self._tx.read() as conn:
            rows = conn.execute(select(jobs.c.id, jobs.c.state)
                                .where(jobs.c.id.in_(sorted(set(job_ids)))))
            return {int(job_id): State(state) for job_id, state in rows}

    def count_by_state(self) -> dict[str, int]:
        with self._tx.read() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            return {state: int(count) for state, count in rows}

    # -- operator actions -------------------------------------------------------------
    def apply(self, job_id: int, operation: Operation, actor: Actor = SYSTEM) -> JobRecord:
        """Pause, resume, rerun or discard, as asked by ``actor`` (recorded on the
        audit rows); :class:`IllegalTransition` names the state.

        An operation is accepted from fewer states than the transition table allows
        (:attr:`Operation.accepted_from`); the audit writer checks each change it
        records against the table as well."""
        with self._tx.write() as conn:
            return self.apply_in(conn, job_id, operation, actor)

    def apply_in(self, conn: Connection, job_id: int, operation: Operation,
                 actor: Actor = SYSTEM) -> JobRecord:
        """:meth:`apply` in the caller's transaction (a planner that changes its own
        rows with the job's: a batch stage resumed from its failed step)."""
        query = select(jobs.c.state).where(jobs.c.id == job_id)
        if self._tx.dialect == "postgresql":
            query = query.with_for_update()
        current = conn.execute(query).scalar()
        if current is None:
            raise NotFound(f"job {job_id} does not exist", {"job_id": job_id})
        current = State(current)
        if current not in operation.accepted_from:
            raise IllegalTransition(current.value, operation.target.value)
        if operation in (Operation.RESUME, Operation.RERUN):
            recount(conn, job_id)
        conn.execute(update(jobs).where(jobs.c.id == job_id)
                     .values(**_job_values(operation)))
        changed = _reset_steps(conn, job_id, operation)
        _settle_inputs(self._hooks.inputs, conn, job_id, operation)
        if operation.target is State.READY:
            self._tx.notify(conn)
        record_events(conn, [
            AuditEvent.by(actor, job_id, current, operation.target, message=operation.value)]
            + [AuditEvent.by(actor, job_id, old, new, name, message=operation.value)
               for name, old, new in changed])
        return self._get(conn, job_id)


def _insert_values(spec: JobSpec, dependencies: list[list[str]], idempotency_key: str | None,
                   request_hash: str | None,
                   actor: Actor) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A new job's ``jobs`` columns (bar state, claim and timestamps), ``actor`` as its
    submitter, and its steps'."""
    values = {"name": spec.name, "priority": spec.priority, "lock_key": spec.lock_key,
              "assigned_servers": (json.dumps(spec.assigned_servers)
                                   if spec.assigned_servers else None),
              "params": spec.params, "parallelism": spec.parallelism,
              "not_before": spec.not_before, "idempotency_key": idempotency_key,
              "request_hash": request_hash,
              "inputs": ([item.model_dump(mode="json") for item in spec.inputs]
                         if spec.inputs else None), **actor.columns("submitted_by")}
    step_rows = [{"position": index, "name": step.name, "type": step.type,
                  "spec": step_columns(step), "depends_on": deps, "retries": step.retries,
                  "retry_backoff": step.retry_backoff, "retryable": step.retryable}
                 for index, (step, deps) in enumerate(zip(spec.steps, dependencies))]
    return values, step_rows


def _settle_inputs(inputs: JobInputs | None, conn: Connection, job_id: int,
                   operation: Operation) -> None:
    """A paused or discarded run gives back what it took (a failed attempt each)."""
    if inputs is not None:
        inputs.settle(conn, [job_id], error=f"job {operation.target.value.lower()} by operator")


def _job_values(operation: Operation) -> dict[str, Any]:
    values: dict[str, Any] = {"state": operation.target.value, "updated_at": store_now()}
    if operation in (Operation.RESUME, Operation.RERUN):
        values.update(node=None, error=None, started_at=None, finished_at=None)
    if operation is Operation.DISCARD:
        values["finished_at"] = store_now()
    return values


# Which step states each operation moves, and where to. Pause leaves running steps
# alone: their runner kills them and records STOPPED with the audit of the attempt.
_STEP_RESETS: dict[Operation, tuple[frozenset[State], State]] = {
    Operation.RESUME: (frozenset({State.ERROR, State.STOPPED, State.RUNNING}), State.READY),
    Operation.RERUN: (frozenset(State) - {State.READY}, State.READY),
    Operation.DISCARD: (frozenset({State.READY, State.RUNNING, State.ERROR, State.STOPPED}),
                        State.DISCARDED),
}

_RERUN_CLEARED = {"attempt": 0, "started_at": None, "finished_at": None, "exit_code": None,
                  "output": None, "error": None, "wall_seconds": None, "cpu_seconds": None,
                  "peak_rss_kb": None, "metrics": None}


def _reset_steps(conn: Connection, job_id: int,
                 operation: Operation) -> list[tuple[str, State, State]]:
    if operation not in _STEP_RESETS:
        return []
    sources, target = _STEP_RESETS[operation]
    where = (steps.c.job_id == job_id) & steps.c.state.in_([s.value for s in sources])
    rows = conn.execute(select(steps.c.name, steps.c.state).where(where)).all()
    if rows:
        values: dict[str, Any] = {"state": target.value}
        if operation is Operation.RERUN:
            values.update(_RERUN_CLEARED)
            forget_logs(conn, job_id, [name for name, _ in rows])
        conn.execute(update(steps).where(where).values(**values))
    return [(name, State(state), target) for name, state in rows]


def discard_waiting(conn: Connection, job_ids: builtins.list[int], message: str,
                    actor: Actor = SYSTEM) -> builtins.list[int]:
    """Discard those of ``job_ids`` that are READY, unclaimed and may not start yet
    (``not_before`` later than the store's clock), with their steps and audit rows, in
    the caller's transaction, as asked by ``actor``; returns the ids discarded. A job
    whose time has come is left alone: a scheduler may be claiming it, and it runs as launched.

    A discarded job gives up its idempotency key: it never started, so the key must
    not stand for it when the same work is launched again (a schedule disabled and
    enabled again before the fire time launches that fire time anew)."""
    if not job_ids:
        return []
    found = builtins.list(conn.execute(
        update(jobs).where(jobs.c.id.in_(job_ids), jobs.c.state == State.READY.value,
                           jobs.c.node.is_(None), jobs.c.not_before > store_now())
        .values(state=State.DISCARDED.value, finished_at=store_now(), updated_at=store_now(),
                idempotency_key=None)
        .returning(jobs.c.id)).scalars())
    if not found:
        return []
    changed = conn.execute(
        update(steps).where(steps.c.job_id.in_(found), steps.c.state == State.READY.value)
        .values(state=State.DISCARDED.value).returning(steps.c.job_id, steps.c.name)).all()
    record_events(conn, [AuditEvent.by(actor, job_id, State.READY, State.DISCARDED,
                                       message=message) for job_id in found]
                  + [AuditEvent.by(actor, job_id, State.READY, State.DISCARDED, name,
                                   message=message) for job_id, name in changed])
    return [int(job_id) for job_id in found]
