"""Retention: old finished jobs deleted with their steps and events, a batch at a time.

Only jobs in a state retention may delete (:data:`DELETABLE`: SUCCEED, DISCARDED and,
named explicitly, ERROR) that finished before a cutoff are deleted; READY, RUNNING and
STOPPED jobs never are, nor a job whose ``finished_at`` is unset. A batch is read in
(finished_at, id) order from ``ix_jobs_finished`` (:meth:`RetentionRepository.oldest`),
then deleted in one short transaction (:meth:`RetentionRepository.delete`): its rows
are locked again with their state and age checked (PostgreSQL: ``FOR UPDATE SKIP
LOCKED``, so a job an operator is rerunning just then is skipped, never waited for),
:func:`jobserver.store.keep.kept` says which must stay, and the others go with their
steps and events. The statements name those two: they have no foreign key to
``jobs`` (migration 0016), so nothing else would delete them. The tables that do hold
one, ``job_dependencies`` and ``step_logs``, follow by ``ON DELETE CASCADE``, which
SQLite enforces: the engine turns ``foreign_keys`` on for every connection. Nothing
it writes makes a job claimable, so it wakes no scheduler.

Every table that names a job, and what retention does about it:

* ``steps``, ``job_events``: deleted with the job.
* ``job_dependencies``: a job stays while a job depending on it stays; both go
  together. Deleting a final upstream never changes a dependent's ``waiting_on``: the
  trigger (``jobserver.store.triggers``) counted the upstream met, or failed its
  ``succeeded`` dependents, when it became final, and it fires on state writes, not
  on deletes. Keeping the upstream keeps ``after`` and the recount of a resume or
  rerun (``dependencies.recount``) as they were.
* ``batch_stages.job_id``: kept. The stage's newest job is its status's source and the
  batch audit's steps. A stage's earlier runs are not referenced and go.
* ``batch_runs``: name no job.
* ``batch_stage_launches.job_id``: history; left dangling. A launch's jobs were copied
  into its row when it ended (the runtime audit reads the copy); one still running is
  its stage's newest, kept through ``batch_stages.job_id``.
* ``view_partitions.job_id``: kept (the tracker settles the partition from that job;
  a materialized or failed partition names none).
* ``view_events.job_id``: history; the id is left dangling (the listeners' feed only
  passes it on).
* ``consumer_partitions.job_id``: kept while IN_PROGRESS. A DONE row keeps the id of
  the job that consumed it until the next fill purges the row; nothing reads that job.
* ``partitions.job_id``, ``step``: left dangling. Only the producing job itself
  compares them, while it runs.
* ``schedule_jobs.job_id``: left dangling on LAUNCHED rows (the API shows the id; the
  discard of jobs launched ahead touches READY jobs only, never deleted). Pending
  schedule-jobs have no job yet.
* ``schedule_evaluations.details``: history text; dangling.
* ``schedules.spec``: a template's ``after`` job ids are kept, and so is the newest
  SUCCEED job of a template that a ``since_last_run`` constraint reads.
* ``feed_cursors`` of the final job events feed: a job whose final event a running
  reader has not read yet is kept.
* ``jobs.idempotency_key``: freed with the job; a submit retried under the key after
  its job was deleted creates a new job.

IDs are never handed out again: PostgreSQL's sequences never go back, and on SQLite
the newest job, event and step stay (see :mod:`jobserver.store.keep`), so a dangling
id never comes to name another job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, delete, func, literal, select, text, tuple_

# DEFAULT_STATES and DELETABLE live outside the store (``jobserver purge --help``
# lists them without SQLAlchemy); they stay importable from here.
from jobserver.deletable import DEFAULT_STATES, DELETABLE
from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.engine import store_now
from jobserver.store.epochs import fenced
from jobserver.store.hooks import PlannerHooks
from jobserver.store.keep import Refs, dependents_among, kept
from jobserver.store.models import FINISHED_JOBS, UTCDateTime
from jobserver.store.tables import events, jobs, steps

#: PostgreSQL: the longest a delete waits for a row lock it did not skip (a
#: ``job_dependencies`` or ``steps`` row of another writer) before it gives up; the
#: batch is tried again later. Claims never wait for a delete: it locks final rows only.
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '1s'"


@dataclass(frozen=True)
class Position:
    """A keyset position in ``ix_jobs_finished``: the last job of a batch."""

    finished_at: datetime
    id: int


@dataclass
class Tally:
    """What was deleted, or would be in a dry run."""

    jobs: int = 0
    steps: int = 0
    events: int = 0

    def add(self, other: Tally) -> None:
        self.jobs += other.jobs
        self.steps += other.steps
        self.events += other.events


@dataclass
class Deleted:
    """One batch's outcome: its tally, the candidates kept because something still
    refers to them (``kept``), those of them kept only until the jobs depending on
    them go (``blocked``), and, in a dry run, the jobs counted as deleted that depend
    on other jobs (``dependents``)."""

    tally: Tally
    kept: set[int] = field(default_factory=set)
    blocked: set[int] = field(default_factory=set)
    dependents: set[int] = field(default_factory=set)


class RetentionRepository:
    def __init__(self, tx: Transactions, hooks: PlannerHooks | None = None) -> None:
        """``hooks``: the planners' (:mod:`jobserver.store.hooks`), whose keep rules
        say which old jobs their rows still refer to; none by default."""
        self._tx = tx
        self._hooks = hooks or PlannerHooks()

    def cutoff(self, age: float) -> datetime:
        """The store's clock ``age`` seconds ago: jobs finished before it are old."""
        with self._tx.read() as conn:
            value = conn.execute(select(store_now(-age))).scalar_one()
        assert isinstance(value, datetime)
        return value

    def oldest(self, state: State, before: datetime, after: Position | None,
               limit: int) -> list[Position]:
        """Up to ``limit`` jobs in ``state`` finished before ``before``, oldest first,
        after the keyset position ``after``."""
        query = (select(jobs.c.finished_at, jobs.c.id)
                 .where(text(FINISHED_JOBS), jobs.c.state == state.value,
                        jobs.c.finished_at < before)
                 .order_by(jobs.c.finished_at, jobs.c.id).limit(limit))
        if after is not None:
            query = query.where(tuple_(jobs.c.finished_at, jobs.c.id) > tuple_(
                literal(after.finished_at, UTCDateTime()), literal(after.id)))
        with self._tx.read() as conn:
            return [Position(finished_at, int(job_id))
                    for finished_at, job_id in conn.execute(query)]

    def refs(self) -> Refs:
        """The planners' keep rules with what they read (:class:`Refs`), for the
        next few batches."""
        with self._tx.read() as conn:
            return Refs.read(conn, self._hooks.keep_rules)

    def delete(self, ids: Sequence[int], states: Iterable[State], before: datetime,
               refs: Refs, *, fence: tuple[str, int] | None = None,
               dry_run: bool = False, gone: Iterable[int] = ()) -> Deleted:
        """Delete those of ``ids`` still in ``states``, finished before ``before`` and
        not kept, with their steps and events, in one transaction; fenced by the
        lease ``fence`` (key, fence) when given. ``dry_run``: count, delete nothing."""
        with self._transaction(fence, dry_run) as conn:
            if conn.dialect.name == "postgresql" and not dry_run:
                conn.exec_driver_sql(LOCK_TIMEOUT)
            candidates = self._lock(conn, ids, states, before, dry_run)
            keep = kept(conn, candidates, refs, gone)
            going = sorted(candidates - keep.ids)
            tally = (_count(conn, going) if dry_run else _delete(conn, going))
            return Deleted(tally, keep.ids, keep.blocked,
                           dependents_among(conn, going) if dry_run else set())

    def _transaction(self, fence: tuple[str, int] | None,
                     dry_run: bool) -> AbstractContextManager[Connection]:
        if dry_run:
            return self._tx.read()
        if fence is None:
            return self._tx.write()
        return fenced(self._tx, fence[0], fence[1], "another node deletes old jobs")

    @staticmethod
    def _lock(conn: Connection, ids: Sequence[int], states: Iterable[State],
              before: datetime, dry_run: bool) -> set[int]:
        """Those of ``ids`` still deletable, locked until the commit (PostgreSQL;
        SQLite's write transaction holds the whole database)."""
        if not ids:
            return set()
        query = select(jobs.c.id).where(jobs.c.id.in_(list(ids)),
                                        jobs.c.state.in_([s.value for s in states]),
                                        jobs.c.finished_at < before)
        if not dry_run:
            query = query.with_for_update(skip_locked=True)
        return {int(job_id) for job_id in conn.execute(query).scalars()}


def _delete(conn: Connection, ids: list[int]) -> Tally:
    if not ids:
        return Tally()
    # Children first, by their job_id indexes: their counts are the statements'.
    step_count = conn.execute(delete(steps).where(steps.c.job_id.in_(ids))).rowcount
    event_count = conn.execute(delete(events).where(events.c.job_id.in_(ids))).rowcount
    job_count = conn.execute(delete(jobs).where(jobs.c.id.in_(ids))).rowcount
    return Tally(int(job_count), int(step_count), int(event_count))


def _count(conn: Connection, ids: list[int]) -> Tally:
    if not ids:
        return Tally()
    step_count = conn.execute(select(func.count()).where(steps.c.job_id.in_(ids))).scalar()
    event_count = conn.execute(select(func.count()).where(events.c.job_id.in_(ids))).scalar()
    return Tally(len(ids), int(step_count or 0), int(event_count or 0))
