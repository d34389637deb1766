"""Which old finished jobs retention keeps because something still refers to them.

:func:`kept` is asked, inside the delete transaction and after the candidates' rows
are locked, which of them must stay. The rules, one per kind of reference (the README's
Retention section and :mod:`jobserver.store.retention` say why each is a rule and
not a dangling reference):

* a job another job depends on (``job_dependencies.upstream_id``) stays while that
  dependent stays; both go in the same batch when both may;
* a batch stage's job (``batch_stages.job_id``, its newest run): the batch audit
  reads its steps;
* a view partition's job (``view_partitions.job_id``): the view tracker settles the
  partition from it;
* a consumer partition's job while the partition is IN_PROGRESS;
* a job a schedule's template names in ``after``, and the newest SUCCEED job of each
  template a ``since_last_run`` constraint reads (:class:`ScheduleRefs`);
* a job whose final event a job-event feed reader (:data:`JOB_EVENT_FEEDS`) has not
  read yet, unless that reader has left events unread for :data:`FEED_ALIVE`
  (its planner is turned off);
* the newest job, the job of the newest event and the job of the newest step:
  SQLite hands out ``max(rowid) + 1``, so deleting the newest row of a table would
  give its id to the next row, and an old reference (a feed cursor's event id, a
  partition's ``job_id``) would name a new row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, exists, func, literal, select, text, tuple_

from jobserver.batches.tables import batch_stages
from jobserver.datasets.tables import working_sets
from jobserver.schedules.tables import schedules
from jobserver.store.engine import store_now
from jobserver.store.models import FINAL_EVENTS
from jobserver.store.tables import events, feed_cursors, job_dependencies, jobs, steps
from jobserver.views.tables import view_partitions

#: The readers of the final job events feed (``jobserver.store.feed``): the schedule
#: evaluator's (``jobserver.schedules.store.FEED``) and the view tracker's
#: (``jobserver.views.tracker.JOBS_FEED``). Named here, not imported: the store does
#: not import the planners' loops.
JOB_EVENT_FEEDS = ("schedules/job_status", "views/jobs")
#: A feed reader with a final event unread for longer than this is taken for gone
#: (schedules or views turned off): a running one reads each within a second.
FEED_ALIVE = 86400.0
#: The states of the feed's final events (``models.FINAL_EVENTS``).
FEED_FINALS = ("SUCCEED", "ERROR", "DISCARDED", "STOPPED")
#: The consumer working-set state whose job is still needed.
IN_PROGRESS = "IN_PROGRESS"


@dataclass(frozen=True)
class ScheduleRefs:
    """What the schedules refer to: the job ids their templates wait for (``after``)
    and the template names whose newest successful run a ``since_last_run``
    constraint reads. Read once every few batches (:meth:`read`): parsing every
    schedule's spec per batch would cost more than the batch."""

    after: frozenset[int] = frozenset()
    last_success_of: frozenset[str] = frozenset()

    @classmethod
    def read(cls, conn: Connection) -> ScheduleRefs:
        after: set[int] = set()
        names: set[str] = set()
        for (spec,) in conn.execute(select(schedules.c.spec)):
            template = (spec or {}).get("template") or {}
            after.update(int(item["job"]) for item in template.get("after") or []
                         if isinstance(item, dict) and "job" in item)
            if any(isinstance(c, dict) and c.get("type") == "since_last_run"
                   for c in (spec or {}).get("constraints") or []):
                names.add(str(template.get("name")))
        return cls(frozenset(after), frozenset(names))


@dataclass
class Kept:
    """The candidates that stay: all of them (``ids``), and those that stay only
    because a job depending on them stays (``blocked``: they may go once it has)."""

    ids: set[int] = field(default_factory=set)
    blocked: set[int] = field(default_factory=set)


def kept(conn: Connection, candidates: set[int], refs: ScheduleRefs,
         gone: Iterable[int] = ()) -> Kept:
    """Which of ``candidates`` (locked, final, old) must stay. ``gone``: jobs this run
    has already deleted, or counted as deleted in a dry run, whose dependency edges
    are to be taken as gone too."""
    if not candidates:
        return Kept()
    ids = list(candidates)
    keep = (_newest(conn) | _referenced(conn, ids) | _named_by_schedules(conn, ids, refs)
            | _unread(conn, ids))
    keep &= candidates
    blocked = _depended_on(conn, candidates - keep, set(gone))
    return Kept(keep | blocked, blocked)


def _newest(conn: Connection) -> set[int]:
    newest = {conn.execute(select(func.max(jobs.c.id))).scalar()}
    for table in (events, steps):
        top = select(func.max(table.c.id)).scalar_subquery()
        newest.add(conn.execute(select(table.c.job_id).where(table.c.id == top)).scalar())
    return {int(job_id) for job_id in newest if job_id is not None}


def _referenced(conn: Connection, ids: list[int]) -> set[int]:
    """Jobs a batch stage or a view partition names, or an IN_PROGRESS consumer
    partition's run (each column has an index of its own)."""
    queries: list[Any] = [
        select(batch_stages.c.job_id).where(batch_stages.c.job_id.in_(ids)),
        select(view_partitions.c.job_id).where(view_partitions.c.job_id.in_(ids)),
        select(working_sets.c.job_id).where(working_sets.c.job_id.in_(ids),
                                            working_sets.c.state == IN_PROGRESS),
    ]
    return {int(job_id) for query in queries for job_id in conn.execute(query).scalars()}


def _named_by_schedules(conn: Connection, ids: list[int], refs: ScheduleRefs) -> set[int]:
    found = set(refs.after.intersection(ids))
    if refs.last_success_of:
        newer = jobs.alias("newer")
        found.update(conn.execute(select(jobs.c.id).where(
            jobs.c.id.in_(ids), jobs.c.state == "SUCCEED",
            jobs.c.name.in_(sorted(refs.last_success_of)),
            ~exists().where(newer.c.name == jobs.c.name, newer.c.state == "SUCCEED",
                            newer.c.id > jobs.c.id))).scalars())
    return found


def _unread(conn: Connection, ids: list[int]) -> set[int]:
    """Jobs with a final event after the cursor of a job-event feed reader that is
    still reading."""
    found: set[int] = set()
    cursors = conn.execute(select(feed_cursors.c.txid, feed_cursors.c.position).where(
        feed_cursors.c.name.in_(JOB_EVENT_FEEDS))).all()
    for txid, position in cursors:
        unread = _final_after(conn, int(txid), int(position))
        if _reader_gone(conn, unread):
            continue
        found.update(conn.execute(select(events.c.job_id).where(
            events.c.job_id.in_(ids), *unread)).scalars())
    return found


def _final_after(conn: Connection, txid: int, position: int) -> list[Any]:
    """SQL conditions: a final job event after the cursor (txid, position), in the
    feed's order (jobserver.store.feed): (txid, id) on PostgreSQL, id on SQLite."""
    if conn.dialect.name == "postgresql":
        return [text(FINAL_EVENTS),
                tuple_(events.c.txid, events.c.id) > tuple_(literal(txid), literal(position))]
    return [events.c.step.is_(None), events.c.to_state.in_(FEED_FINALS),
            events.c.id > position]


def _reader_gone(conn: Connection, unread: list[Any]) -> bool:
    """Whether the reader's first unread final event is older than FEED_ALIVE."""
    order = [events.c.txid, events.c.id] if conn.dialect.name == "postgresql" \
        else [events.c.id]
    first = select(events.c.at).where(*unread).order_by(*order).limit(1).subquery()
    return bool(conn.execute(select(first.c.at < store_now(-FEED_ALIVE))).scalar())


def _depended_on(conn: Connection, going: set[int], gone: set[int]) -> set[int]:
    """Those of ``going`` that a job staying depends on: a dependent that is neither
    going in this batch nor ``gone`` stays, and so does each of its upstreams, and
    theirs (a kept dependent keeps its upstreams in turn)."""
    if not going:
        return set()
    edges = conn.execute(select(job_dependencies.c.upstream_id, job_dependencies.c.job_id)
                         .where(job_dependencies.c.upstream_id.in_(list(going)))).all()
    blocked: set[int] = set()
    while True:
        newly = {int(up) for up, down in edges if up not in blocked and down not in gone
                 and (down not in going or down in blocked)}
        if not newly:
            return blocked
        blocked |= newly


def dependents_among(conn: Connection, ids: Iterable[int]) -> set[int]:
    """Those of ``ids`` that depend on another job (a dry run remembers them as gone,
    so that their upstreams are counted as going in a later batch)."""
    ids = list(ids)
    if not ids:
        return set()
    return {int(job_id) for job_id in conn.execute(
        select(job_dependencies.c.job_id).where(job_dependencies.c.job_id.in_(ids))
        .distinct()).scalars()}
