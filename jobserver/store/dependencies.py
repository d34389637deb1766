"""Dependencies between jobs (``JobSpec.after``): linking at submit, recounting on
resume and rerun, and reading what a job waits for.

A job's ``waiting_on`` counts its upstreams not yet final for their ``when``; the
claim takes only jobs at 0. After the submit, the trigger of
:mod:`jobserver.store.triggers` keeps it on every upstream state write. The submit
itself must not miss a write racing with it: it marks each upstream
``has_dependents`` by an UPDATE that returns the upstream's state. That UPDATE locks
the upstream's row, so an upstream's final write either committed before it (and
the state read counts it met) or waits for the submit to commit (and its trigger then
sees the new edges). An upstream always exists before its dependent, so the graph
cannot hold a cycle; a job naming an id that does not exist yet (its own, or a
later job's) is refused as unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.dialects import postgresql

from jobserver.exceptions import Conflict, InvalidRequest
from jobserver.spec import AfterSpec
from jobserver.states import State
from jobserver.store import pgsubmit
from jobserver.store.engine import store_now
from jobserver.store.records import Upstream
from jobserver.store.tables import AuditEvent, job_dependencies, jobs, record_events, steps

FAILED = (State.ERROR, State.DISCARDED)


def failed_message(upstream: int, state: State) -> str:
    """The error of a job whose ``succeeded`` upstream failed (the trigger writes the
    same text)."""
    return f"upstream job {upstream} ended {state.value}"


class NewJob(NamedTuple):
    """A job to insert with its upstreams: its ``jobs`` columns (bar state, claim and
    timestamps), its steps' rows, its ``after`` and the request field naming it (for
    the 422 of an unknown upstream, e.g. ``after`` or ``items[3].after``)."""

    values: dict[str, Any]
    step_rows: list[dict[str, Any]]
    after: list[AfterSpec]
    field: str


class _Link(NamedTuple):
    waiting_on: int
    failed: str | None


def insert_linked(conn: Connection, new: Sequence[NewJob],
                  skip_conflicts: bool = False) -> list[int | None]:
    """Insert READY jobs that wait for upstreams, in the caller's transaction; returns
    each one's id, None where ``skip_conflicts`` found its idempotency key taken
    (PostgreSQL: a concurrent submit of the same key). A job whose ``succeeded``
    upstream has already failed is created in ERROR at once, naming it, as it would
    have become a moment later. :class:`InvalidRequest` names every unknown upstream."""
    links = _lock_upstreams(conn, new)
    if skip_conflicts and conn.dialect.name == "postgresql":
        return _insert_keyed(conn, new, links)
    rows = [dict(job.values, state=State.READY.value, fence=0, attempt=0,
                 waiting_on=link.waiting_on)
            for job, link in zip(new, links)]
    ids = _insert_jobs(conn, rows, skip_conflicts)
    created = [(job, link, job_id) for job, link, job_id in zip(new, links, ids)
               if job_id is not None]
    if created:
        conn.execute(insert(steps), [dict(row, job_id=job_id, state=State.READY.value,
                                          attempt=0)
                                     for job, _link, job_id in created for row in job.step_rows])
        conn.execute(insert(job_dependencies), [
            {"job_id": job_id, "upstream_id": item.job, "awaits": item.when}
            for job, _link, job_id in created for item in job.after])
        record_events(conn, [AuditEvent(job_id, None, State.READY, message="submitted",
                                        actor=job.values.get("submitted_by"),
                                        actor_token_id=job.values.get("submitted_by_token_id"))
                             for job, _link, job_id in created])
        _fail(conn, [(job_id, link.failed) for _job, link, job_id in created if link.failed])
    return ids


def _insert_keyed(conn: Connection, new: Sequence[NewJob],
                  links: list[_Link]) -> list[int | None]:
    """PostgreSQL, jobs under idempotency keys (a planner's launches): the jobs, their
    steps, links and first audit rows by the one statement of ``submit_keyed``, the
    rows as one JSON document (see :mod:`jobserver.store.bulk`: no pipeline of
    per-row statements, which cost about 0.1 ms a row and hold the transaction open
    across a stopped client)."""
    rows = [dict(job.values, steps=job.step_rows, waiting_on=link.waiting_on,
                 after=[{"job": item.job, "when": item.when} for item in job.after])
            for job, link in zip(new, links)]
    created = pgsubmit.submit_keyed(conn, rows, None)
    ids = [created.get(job.values["idempotency_key"]) for job in new]
    _fail(conn, [(job_id, link.failed) for job_id, link in zip(ids, links)
                 if job_id is not None and link.failed])
    return ids


def _lock_upstreams(conn: Connection, new: Sequence[NewJob]) -> list[_Link]:
    ids = sorted({item.job for job in new for item in job.after})
    rows = conn.execute(update(jobs).where(jobs.c.id.in_(ids)).values(has_dependents=True)
                        .returning(jobs.c.id, jobs.c.state)).all()
    states = {int(job_id): State(state) for job_id, state in rows}
    problems = [{"field": f"{job.field}[{index}].job",
                 "message": f"job {item.job} does not exist"}
                for job in new for index, item in enumerate(job.after)
                if item.job not in states]
    if problems:
        raise InvalidRequest(f"{problems[0]['field']}: {problems[0]['message']}", problems)
    return [_link([Upstream(item.job, item.when, states[item.job]) for item in job.after])
            for job in new]


def _link(upstreams: list[Upstream]) -> _Link:
    failed = next((up for up in upstreams if up.when == "succeeded" and up.state in FAILED),
                  None)
    return _Link(sum(not up.met for up in upstreams),
                 None if failed is None else failed_message(failed.job, failed.state))


def _insert_jobs(conn: Connection, rows: list[dict[str, Any]],
                 skip_conflicts: bool) -> list[int | None]:
    stamps = {"created_at": store_now(), "updated_at": store_now()}
    if skip_conflicts and conn.dialect.name == "postgresql":
        statement = (postgresql.insert(jobs).values(**stamps).on_conflict_do_nothing(
            index_elements=[jobs.c.idempotency_key])
            .returning(jobs.c.id, jobs.c.idempotency_key))
        by_key = {key: int(job_id) for job_id, key in conn.execute(statement, rows)}
        return [by_key.get(row["idempotency_key"]) for row in rows]
    statement = insert(jobs).values(**stamps).returning(jobs.c.id,
                                                         sort_by_parameter_order=True)
    return [int(job_id) for job_id in conn.execute(statement, rows).scalars()]


def _fail(conn: Connection, failures: list[tuple[int, str]]) -> None:
    for job_id, message in failures:
        conn.execute(update(jobs).where(jobs.c.id == job_id)
                     .values(state=State.ERROR.value, error=message, finished_at=store_now(),
                             updated_at=store_now()))
    record_events(conn, [AuditEvent(job_id, State.READY, State.ERROR, message=message)
                         for job_id, message in failures])


def recount(conn: Connection, job_id: int) -> None:
    """Before a resume or rerun makes ``job_id`` READY again: set ``waiting_on`` from
    its upstreams' states now, in the operator's transaction (which holds the job's
    row, so a racing upstream write adds its change after this count). A
    ``succeeded`` upstream that failed makes the operation a :class:`Conflict`: the
    job could never start."""
    upstreams = upstreams_of(conn, [job_id]).get(job_id, [])
    if not upstreams:
        return
    failed = next((up for up in upstreams if up.when == "succeeded" and up.state in FAILED),
                  None)
    if failed is not None:
        raise Conflict(f"job {job_id} waits for job {failed.job} to succeed, and it ended "
                       f"{failed.state.value}: resume or rerun job {failed.job} first",
                       {"job_id": job_id, "field": "after", "upstream": failed.job})
    conn.execute(update(jobs).where(jobs.c.id == job_id)
                 .values(waiting_on=sum(not up.met for up in upstreams)))


def upstreams_of(conn: Connection, job_ids: Sequence[int]) -> dict[int, list[Upstream]]:
    """What each of ``job_ids`` waits for, with the upstreams' states now."""
    if not job_ids:
        return {}
    upstream = jobs.alias("upstream")
    rows = conn.execute(
        select(job_dependencies.c.job_id, job_dependencies.c.upstream_id,
               job_dependencies.c.awaits, upstream.c.state)
        .join(upstream, upstream.c.id == job_dependencies.c.upstream_id)
        .where(job_dependencies.c.job_id.in_(list(job_ids)))
        .order_by(job_dependencies.c.job_id, job_dependencies.c.upstream_id))
    found: dict[int, list[Upstream]] = {}
    for job_id, upstream_id, awaits, state in rows:
        found.setdefault(int(job_id), []).append(Upstream(int(upstream_id), awaits,
                                                          State(state)))
    return found
