"""Bulk intake: a batch of API submits (``POST /api/v1/jobs/batch``) stored at once.

Each item is a job as the single submit takes it, with its own optional idempotency
key: a key already in the store under the same request (its digest) replays that job,
under another request it is a :class:`~jobserver.exceptions.Conflict`, and then nothing
of the batch is written. Items without a key are always new jobs.

PostgreSQL: one statement for the whole batch (``submit_batch`` of ``queries.sql``)
on an autocommit connection, with one wake-up of idle schedulers. A batch with
``after`` items takes one transaction instead: its upstreams are locked and counted
first (:func:`~jobserver.store.dependencies.insert_linked`). SQLite: one transaction
(``BEGIN IMMEDIATE``), multi-row inserts. Either way the new ids ascend in request
order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, insert, select

from jobserver.exceptions import Conflict, ConstraintViolation
from jobserver.spec import JobSpec
from jobserver.states import State
from jobserver.store import WAKE_CHANNEL, Transactions, pgsubmit
from jobserver.store.dependencies import NewJob, insert_linked
from jobserver.store.engine import store_now
from jobserver.store.queries import query
from jobserver.store.records import SYSTEM, Actor
from jobserver.store.tables import AuditEvent, jobs, record_events, steps

#: The most jobs one batch may hold (the API refuses more, naming ``jobs``).
MAX_BATCH = 1000
#: How often a batch that lost a race for a new key is run again: the second run
#: finds the winner's job (a replay or a conflict), so more is never needed but for
#: a key that is raced again and again.
_RACE_RETRIES = 3


class BatchItem(NamedTuple):
    """One job of a batch: its spec, its steps' resolved dependencies, its idempotency
    key (None: always a new job), its request's digest (with a key only) and who
    submits it."""

    spec: JobSpec
    dependencies: list[list[str]]
    key: str | None
    digest: str | None
    actor: Actor = SYSTEM


#: A new job's ``jobs`` columns (bar state, claim and timestamps) and its steps' rows
#: from its spec, dependencies, key, digest and submitter (the repository's one
#: definition).
Values = Callable[[JobSpec, list[list[str]], str | None, str | None, Actor],
                  tuple[dict[str, Any], list[dict[str, Any]]]]


class Submitted(NamedTuple):
    """An item's job: its id, and whether this batch created it (False: a replay)."""

    id: int
    created: bool


def submit_batch(tx: Transactions, items: Sequence[BatchItem],
                 values: Values) -> list[Submitted]:
    """Store ``items`` (keys unique within the batch: the caller checks), all or
    nothing; returns each item's job in request order. :class:`Conflict` names each
    ``jobs[i].idempotency_key`` used before with a different request;
    :class:`~jobserver.exceptions.InvalidRequest` each unknown upstream
    (``jobs[i].after[j].job``)."""
    for attempt in range(_RACE_RETRIES):
        try:
            if tx.dialect == "postgresql" and not any(item.spec.after for item in items):
                return _in_one_statement(tx, items, values)
            return _in_one_transaction(tx, items, values)
        except ConstraintViolation:
            # A concurrent submit took one of the new keys first; nothing of this
            # batch was written. Without keys the violation is not a race: surface it.
            if attempt == _RACE_RETRIES - 1 or all(item.key is None for item in items):
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _in_one_statement(tx: Transactions, items: Sequence[BatchItem],
                      values: Values) -> list[Submitted]:
    rows = []
    for index, item in enumerate(items):
        columns, step_rows = values(item.spec, item.dependencies, item.key, item.digest,
                                    item.actor)
        rows.append(dict(columns, ord=index, steps=step_rows))
    channel = WAKE_CHANNEL if tx.notifies else None
    with tx.statement() as conn:
        found = pgsubmit.submit_batch(conn, rows, channel)
    _refuse_conflicts({index: (job_id, conflict)
                       for index, job_id, _created, conflict in found})
    by_index = {index: Submitted(job_id, created) for index, job_id, created, _c in found}
    return [by_index[index] for index in range(len(items))]


def _in_one_transaction(tx: Transactions, items: Sequence[BatchItem],
                        values: Values) -> list[Submitted]:
    with tx.write() as conn:
        found = _existing(conn, items)
        _refuse_conflicts(found)
        new = [(index, item) for index, item in enumerate(items) if index not in found]
        built = [values(item.spec, item.dependencies, item.key, item.digest, item.actor)
                 for _index, item in new]
        if any(item.spec.after for _index, item in new):
            linked = insert_linked(conn, [
                NewJob(columns, step_rows, item.spec.after, f"jobs[{index}].after")
                for (index, item), (columns, step_rows) in zip(new, built)])
            ids = [job_id for job_id in linked if job_id is not None]
            assert len(ids) == len(new)  # no conflict is skipped: a taken key raises
        else:
            ids = insert_ready(conn, built)
        if ids:
            tx.notify(conn)
    created = dict(zip((index for index, _item in new), ids))
    return [Submitted(created[index], True) if index in created
            else Submitted(found[index][0], False) for index in range(len(items))]


def _existing(conn: Connection,
              items: Sequence[BatchItem]) -> dict[int, tuple[int, bool]]:
    """``{index: (job id, conflicts)}`` of the items whose key the store holds."""
    keyed = {item.key: index for index, item in enumerate(items) if item.key is not None}
    if not keyed:
        return {}
    rows = conn.execute(select(jobs.c.idempotency_key, jobs.c.id, jobs.c.request_hash)
                        .where(jobs.c.idempotency_key.in_(list(keyed)))).all()
    return {keyed[key]: (int(job_id), digest != items[keyed[key]].digest)
            for key, job_id, digest in rows}


def _refuse_conflicts(found: dict[int, tuple[int, bool]]) -> None:
    problems = [{"field": f"jobs[{index}].idempotency_key", "job_id": job_id,
                 "message": "already used with a different request"}
                for index, (job_id, conflict) in sorted(found.items()) if conflict]
    if problems:
        raise Conflict(f"{problems[0]['field']}: the key was already used with a different "
                       f"request (job {problems[0]['job_id']}); nothing was submitted",
                       problems)


def insert_ready(conn: Connection,
                 built: Sequence[tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[int]:
    """Insert READY jobs without upstreams (each: its ``jobs`` columns and its steps'
    rows) with their steps and first audit rows, in the caller's transaction; returns
    their ids in order, ascending. SQLite: a statement each for the jobs, the steps
    and the audit rows, the rows as JSON documents (SQLAlchemy's per-row parameter
    handling would cost more than the inserts)."""
    if not built:
        return []
    if conn.dialect.name == "sqlite":
        ids = _insert_jobs_sqlite(conn, [columns for columns, _steps in built])
        document = json.dumps([dict(row, job_id=job_id)
                               for job_id, (_columns, step_rows) in zip(ids, built)
                               for row in step_rows])
        conn.exec_driver_sql(query("submit_batch_steps.sqlite"), {"rows": document})
    else:
        ids = [int(job_id) for job_id in conn.execute(
            insert(jobs).values(created_at=store_now(), updated_at=store_now())
            .returning(jobs.c.id, sort_by_parameter_order=True),
            [dict(columns, state=State.READY.value, fence=0, attempt=0)
             for columns, _steps in built]).scalars()]
        conn.execute(insert(steps), [
            dict(row, job_id=job_id, state=State.READY.value, attempt=0)
            for job_id, (_columns, step_rows) in zip(ids, built) for row in step_rows])
    record_events(conn, [AuditEvent.by(Actor(columns["submitted_by"],
                                             columns["submitted_by_token_id"]),
                                       job_id, None, State.READY, message="submitted")
                         for job_id, (columns, _steps) in zip(ids, built)])
    return ids


def _insert_jobs_sqlite(conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
    # not_before as the column type stores it; JSON columns as JSON values, which
    # json_extract hands to the table as JSON text.
    stored = jobs.c.not_before.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
    assert stored is not None
    document = json.dumps([dict(row, not_before=stored(row["not_before"])) for row in rows])
    ids = sorted(int(job_id) for job_id in conn.exec_driver_sql(
        query("submit_batch_jobs.sqlite"), {"rows": document}).scalars())
    assert len(ids) == len(rows)
    return ids
