"""Which old finished jobs retention keeps because something still refers to them.

:func:`kept` is asked, inside the delete transaction and after the candidates' rows
are locked, which of them must stay. The rules, one per kind of reference (docs/configuration.md's
Retention section and :mod:`jobserver.store.retention` say why each is a rule and
not a dangling reference):

* a job another job depends on (``job_dependencies.upstream_id``) stays while that
  dependent stays; both go in the same batch when both may;
* a job a planner's rows still refer to: each installed planner's
  :class:`~jobserver.planners.hooks.KeepRule` (its
  :meth:`~jobserver.planners.base.Planner.retention_rules`: a batch stage's job, a
  view partition's, an IN_PROGRESS consumer partition's, a job a schedule waits
  for), most of them a :class:`ReferencedBy`;
* a job whose final event a job-event feed reader (:data:`JOB_EVENT_FEEDS`) has not
  read yet, unless that reader has left events unread for :data:`FEED_ALIVE`
  (its planner is turned off);
* the newest job, the job of the newest event and the job of the newest step:
  SQLite hands out ``max(rowid) + 1``, so deleting the newest row of a table would
  give its id to the next row, and an old reference (a feed cursor's event id, a
  partition's ``job_id``) would name a new row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, literal, select, text, tuple_

from jobserver.planners.hooks import KeepRule
from jobserver.store.engine import store_now
from jobserver.store.models import FINAL_EVENTS
from jobserver.store.tables import events, feed_cursors, job_dependencies, jobs, steps

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


class ReferencedBy(KeepRule):
    """Keeps the jobs a planner's column names (``column``: a job id, with an index of
    its own), in the rows matching ``where`` only when given: one
    ``SELECT column WHERE column IN (ids)`` per batch."""

    def __init__(self, column: Any, *where: Any) -> None:
        self.column = column
        self.where = where

    def kept(self, conn: Connection, ids: Sequence[int], read: Any) -> set[int]:
        query = select(self.column).where(self.column.in_(list(ids)), *self.where)
        return {int(job_id) for job_id in conn.execute(query).scalars()}


@dataclass(frozen=True)
class Refs:
    """The installed planners' rules, each with what it read last
    (:meth:`KeepRule.read`): read once every few batches (:meth:`read`), as reading
    per batch what some rules need (every schedule's spec) would cost more than the
    batch."""

    rules: tuple[KeepRule, ...] = ()
    reads: tuple[Any, ...] = ()

    @classmethod
    def read(cls, conn: Connection, rules: Sequence[KeepRule]) -> Refs:
        return cls(tuple(rules), tuple(rule.read(conn) for rule in rules))


@dataclass
class Kept:
    """The candidates that stay: all of them (``ids``), and those that stay only
    because a job depending on them stays (``blocked``: they may go once it has)."""

    ids: set[int] = field(default_factory=set)
    blocked: set[int] = field(default_factory=set)


def kept(conn: Connection, candidates: set[int], refs: Refs,
         gone: Iterable[int] = ()) -> Kept:
    """Which of ``candidates`` (locked, final, old) must stay. ``gone``: jobs this run
    has already deleted, or counted as deleted in a dry run, whose dependency edges
    are to be taken as gone too."""
    if not candidates:
        return Kept()
    ids = list(candidates)
    keep = _newest(conn) | _referenced(conn, ids, refs) | _unread(conn, ids)
    keep &= candidates
    blocked = _depended_on(conn, candidates - keep, set(gone))
    return Kept(keep | blocked, blocked)


def _referenced(conn: Connection, ids: list[int], refs: Refs) -> set[int]:
    """Jobs the planners' rows refer to, by their rules."""
    found: set[int] = set()
    for rule, read in zip(refs.rules, refs.reads):
        found.update(rule.kept(conn, ids, read))
    return found


def _newest(conn: Connection) -> set[int]:
    newest = {conn.execute(select(func.max(jobs.c.id))).scalar()}
    for table in (events, steps):
        top = select(func.max(table.c.id)).scalar_subquery()
        newest.add(conn.execute(select(table.c.job_id).where(table.c.id == top)).scalar())
    return {int(job_id) for job_id in newest if job_id is not None}


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
