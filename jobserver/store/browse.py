"""What the dashboard reads about jobs in bulk, each read bounded whatever the number
of jobs in the store.

* :meth:`JobBrowser.counts` counts each state up to a cap, by ``ix_jobs_state_id``:
  a state holding more says so (``capped``) instead of reading every row.
* :meth:`JobBrowser.finished_per_minute` counts the jobs finished per minute over
  the last hour, or its last few minutes, by ``ix_jobs_finished``: an index-only
  range scan of those minutes' finished jobs, per state (the cluster page keeps the
  minutes that are over and asks only for the newest).
* :meth:`JobBrowser.page` lists jobs newest first under filters. The filter an index
  serves (``name`` by ``ix_jobs_name_id``, else ``state`` by ``ix_jobs_state_id``, both
  ordered by id) bounds the scan by the page's size. The others (``node``, a second
  of the two, a part of the name, a time range's exact edges) are checked within a window of at most
  :data:`SCAN_WINDOW` jobs of that scan: a page that finds fewer matches there ends
  early, with a cursor to go on from where the window stopped. A time range becomes
  an id range first, by a binary search over the primary key (ids ascend with
  ``created_at``: each job is inserted at the store's clock), about 40 index probes
  however many jobs there are.
* :meth:`JobBrowser.recent_events` reads a job's newest events by
  ``ix_job_events_job_id_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Connection, RowMapping, Select, case, func, literal, select, text
from sqlalchemy.sql.elements import ColumnElement

from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.engine import epoch_minute, store_now
from jobserver.store.models import FINISHED_JOBS
from jobserver.store.records import EventRecord, JobRecord
from jobserver.store.tables import events, jobs, steps

#: A state's count stops here (see :class:`StateCounts`).
COUNT_CAP = 100_000
#: The most jobs one page examines for the filters no index serves.
SCAN_WINDOW = 5_000
#: The states a job ends a run in, drawn in the throughput chart.
THROUGHPUT_STATES = (State.SUCCEED, State.ERROR, State.DISCARDED)


@dataclass(frozen=True)
class StateCounts:
    """Jobs per state; a state in ``capped`` holds at least its count (the cap)."""

    counts: dict[str, int]
    capped: frozenset[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class FinishedMinutes:
    """Jobs finished per minute (minutes since the epoch on the store's clock) and
    state, from minute ``first`` to ``now`` (the store's minute when read)."""

    now: int
    first: int
    counts: dict[int, dict[str, int]]


@dataclass(frozen=True)
class Throughput:
    """Jobs finished in each of the last ``minutes`` minutes, oldest first, by state:
    ``per_minute[state][i]`` is the minute that ended ``minutes - i - 1`` minutes ago."""

    minutes: int
    per_minute: dict[str, list[int]]

    @classmethod
    def of(cls, now: int, counts: dict[int, dict[str, int]], minutes: int = 60) -> Throughput:
        """The last ``minutes`` minutes up to minute ``now`` of ``counts``."""
        return cls(minutes, {state.value: [counts.get(now - minutes + 1 + i, {}).get(
            state.value, 0) for i in range(minutes)] for state in THROUGHPUT_STATES})

    @property
    def total(self) -> int:
        return sum(sum(counts) for counts in self.per_minute.values())


@dataclass(frozen=True)
class JobFilter:
    """What the jobs page asks for; every field optional. ``since`` and ``until``
    bound ``created_at`` (``since`` included, ``until`` not); ``name_contains`` is a
    part of the name, any case (checked within the scan window, as ``node`` is)."""

    state: State | None = None
    name: str | None = None
    node: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    name_contains: str | None = None

    @property
    def residual(self) -> bool:
        """Whether any filter is left after the one an index serves."""
        return (self.node is not None or self.since is not None or self.until is not None
                or self.name_contains is not None
                or (self.state is not None and self.name is not None))


@dataclass(frozen=True)
class JobPage:
    """One page, newest first. ``next_before``: the cursor of the next page (None: no
    more); ``window_ended``: the page stopped at :data:`SCAN_WINDOW` jobs examined,
    not at its size (there may be more matches further on)."""

    jobs: list[JobRecord]
    next_before: int | None
    window_ended: bool = False


class JobBrowser:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def counts(self, cap: int = COUNT_CAP) -> StateCounts:
        """Each state's jobs, counted up to ``cap``: one index range scan of at most
        ``cap`` entries per state."""
        found: dict[str, int] = {}
        with self._tx.read() as conn:
            for state in State:
                capped = (select(literal(1)).select_from(jobs)
                          .where(jobs.c.state == state.value).limit(cap).subquery())
                count = int(conn.execute(select(func.count()).select_from(capped)).scalar_one())
                if count:
                    found[state.value] = count
        return StateCounts(found, frozenset(s for s, n in found.items() if n >= cap))

    def finished_per_minute(self, minutes: int = 60,
                            first: int | None = None) -> FinishedMinutes:
        """Jobs that finished (SUCCEED, ERROR, DISCARDED) in each of the last
        ``minutes`` minutes of the store's clock, or only from minute ``first`` on
        (minutes since the epoch), by ``ix_jobs_finished``; the partial index's
        predicate is spelled as it is, so that SQLite uses it too."""
        minute = epoch_minute(jobs.c.finished_at).label("minute")
        with self._tx.read() as conn:
            now = int(conn.execute(select(epoch_minute(store_now()))).scalar_one())
            first = max(now - minutes + 1, first if first is not None else now - minutes + 1)
            # The bound as a value, not as the store's clock in the statement: PostgreSQL
            # ranges an index only by a stable value, and clock_timestamp() is volatile.
            start = datetime.fromtimestamp(first * 60, timezone.utc)
            counts: dict[int, dict[str, int]] = {}
            # One state at a time: the index leads with the state, and PostgreSQL 15
            # would scan all of it for the partial predicate's IN list.
            for state in THROUGHPUT_STATES:
                query = (select(minute, func.count())
                         .where(text(FINISHED_JOBS), jobs.c.state == state.value,
                                jobs.c.finished_at >= start)
                         .group_by(minute))
                for at, count in conn.execute(query):
                    counts.setdefault(int(at), {})[state.value] = int(count)
        return FinishedMinutes(now, first, counts)

    def page(self, wanted: JobFilter, limit: int, before: int | None = None) -> JobPage:
        """Up to ``limit`` jobs matching ``wanted`` with ids below ``before``, newest
        first (see the module's docstring for what bounds the reads)."""
        with self._tx.read() as conn:
            low, high = _id_range(conn, wanted, before)
            if high is not None and low is not None and low >= high:
                return JobPage([], None)
            scan = _indexed_scan(wanted, low, high)
            if not wanted.residual:
                rows = conn.execute(scan.limit(limit + 1)).mappings().all()
                return self._records(conn, rows, limit, None)
            # The window first (an index-only range scan), then the matches within its
            # id range: two range scans, whatever the planner would make of one join.
            window = scan.with_only_columns(jobs.c.id).limit(SCAN_WINDOW).subquery()
            examined, window_low = conn.execute(
                select(func.count(), func.min(window.c.id))).one()
            full = examined >= SCAN_WINDOW
            matches = _indexed_scan(wanted, int(window_low) if full else low, high)
            for condition in _residual_conditions(wanted):
                matches = matches.where(condition)
            rows = conn.execute(matches.limit(limit + 1)).mappings().all()
            return self._records(conn, rows, limit, int(window_low) if full else None)

    @staticmethod
    def _records(conn: Connection, rows: Sequence[RowMapping], limit: int,
                 window_ended_at: int | None) -> JobPage:
        page = rows[:limit]
        progress = step_progress(conn, [row["id"] for row in page])
        records = [JobRecord.from_row(row, steps_done=progress.get(row["id"], (0, 0))[0],
                                      steps_total=progress.get(row["id"], (0, 0))[1])
                   for row in page]
        if len(rows) > limit:
            return JobPage(records, int(page[-1]["id"]))
        return JobPage(records, window_ended_at, window_ended_at is not None)

    def recent_events(self, job_id: int, limit: int = 500) -> list[EventRecord]:
        """The job's newest ``limit`` events, oldest first."""
        query = (select(events).where(events.c.job_id == job_id)
                 .order_by(events.c.id.desc()).limit(limit))
        with self._tx.read() as conn:
            rows = conn.execute(query).mappings().all()
        return [EventRecord.from_row(row) for row in reversed(rows)]


def step_progress(conn: Connection, job_ids: list[int]) -> dict[int, tuple[int, int]]:
    """Steps succeeded and steps in all, of each job of ``job_ids``."""
    if not job_ids:
        return {}
    done = func.sum(case((steps.c.state == State.SUCCEED.value, 1), else_=0))
    rows = conn.execute(select(steps.c.job_id, done, func.count())
                        .where(steps.c.job_id.in_(job_ids)).group_by(steps.c.job_id))
    return {job_id: (int(d or 0), int(total)) for job_id, d, total in rows}


def _indexed_scan(wanted: JobFilter, low: int | None, high: int | None) -> Select:
    """Jobs newest first in the id range, by the filter an index serves."""
    query = select(jobs).order_by(jobs.c.id.desc())
    if wanted.name is not None:
        query = query.where(jobs.c.name == wanted.name)
    elif wanted.state is not None:
        query = query.where(jobs.c.state == wanted.state.value)
    if low is not None:
        query = query.where(jobs.c.id >= low)
    if high is not None:
        query = query.where(jobs.c.id < high)
    return query


def name_contains(part: str) -> ColumnElement[bool]:
    """Jobs whose name holds ``part``, any case, on both stores: LIKE with ``%``,
    ``_`` and the escape character of ``part`` escaped (SQLite's LIKE ignores ASCII
    case and PostgreSQL's does not, so both sides are lowered)."""
    return func.lower(jobs.c.name).contains(part.lower(), autoescape=True)


def _residual_conditions(wanted: JobFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if wanted.name is not None and wanted.state is not None:
        conditions.append(jobs.c.state == wanted.state.value)
    if wanted.node is not None:
        conditions.append(jobs.c.node == wanted.node)
    if wanted.name_contains is not None:
        conditions.append(name_contains(wanted.name_contains))
    if wanted.since is not None:
        conditions.append(jobs.c.created_at >= wanted.since)
    if wanted.until is not None:
        conditions.append(jobs.c.created_at < wanted.until)
    return conditions


def _id_range(conn: Connection, wanted: JobFilter,
              before: int | None) -> tuple[int | None, int | None]:
    """``[low, high)``: the ids a page may hold, from its cursor and time range."""
    high = before
    low = None
    if wanted.since is not None or wanted.until is not None:
        first, last = conn.execute(select(func.min(jobs.c.id), func.max(jobs.c.id))).one()
        if first is None:
            return 0, 0
        if wanted.since is not None:
            low = _first_id_at(conn, wanted.since, int(first), int(last))
        if wanted.until is not None:
            until = _first_id_at(conn, wanted.until, int(first), int(last))
            high = until if high is None else min(high, until)
    return low, high


def _first_id_at(conn: Connection, moment: datetime, first: int, last: int) -> int:
    """The lowest id created at or after ``moment`` (``last + 1`` if none), by binary
    search over the primary key: each probe reads the first job at or above an id."""
    low, high = first, last + 1
    while low < high:
        middle = (low + high) // 2
        row = conn.execute(select(jobs.c.id, jobs.c.created_at).where(jobs.c.id >= middle)
                           .order_by(jobs.c.id).limit(1)).first()
        if row is None or row.id >= high:
            high = middle  # nothing in [middle, high)
        elif row.created_at >= moment:
            high = row.id
        else:
            low = row.id + 1
    return high
