"""The tracker of view jobs: one loop, on the node holding the planner seat.

A round, in one transaction fenced by the seat's lease:

* reads the final job events in commit order through the feed cursor ``views/jobs``
  (:mod:`jobserver.store.feed`) and, for each view job (idempotency key ``view/…``)
  still the job of its partition: SUCCEED → MATERIALIZED with the job's finished time
  as transformation timestamp and the version checksum the job ran with (its
  ``params.version_checksum``: the version that actually ran, not the one current
  now); ERROR or DISCARDED → RETRYING with a new job while fewer than
  ``views.retries`` retries were made (FAILED at once if the job can no longer be
  rendered), else FAILED;
* discards the gates of every partition it made MATERIALIZED or FAILED
  (:mod:`jobserver.views.gates`), which lets its dependents' jobs start: a RETRYING
  partition keeps them, so its dependents wait for the retry, as Schedoscope's
  dependents wait until a view is failed after its retries;
* moves partitions whose job now runs from WAITING or RETRYING to TRANSFORMING;

then hands the new ``view_events`` rows, in commit order (cursor ``views/events``), to
the view scheduling listeners. Every write is a compare-and-set through
:meth:`ViewRepository.apply`, so a materialize request racing the tracker loses
nothing: one of the two plans again. The gates are looked up after the rows'
compare-and-set, which waits for a request holding one of them: a gate that request
made is seen and discarded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, select, text

from jobserver.config import ViewsConfig
from jobserver.exceptions import JobServerError
from jobserver.planner import PlannerLoop, PlannerSeat
from jobserver.spec import validate_job
from jobserver.store import Store
from jobserver.store.jobs import KeyedSubmit
from jobserver.store.feed import Cursor, FinalEvent, final_events, horizon, load_cursor, save_cursor
from jobserver.store.models import as_utc
from jobserver.store.tables import jobs
from jobserver.views.gates import release
from jobserver.views.listeners import ViewSchedulingEvent
from jobserver.views.materialize import JOBS_FEED, VIEWS, Materializer, job_key
from jobserver.views.model import ViewState
from jobserver.views.repos import view_repository
from jobserver.views.store import CasConflict, Change, address_of
from jobserver.views.tables import view_events, view_partitions
from locks.base import Lease

log = logging.getLogger(__name__)

EVENTS_FEED = "views/events"
#: Rows read per feed and round; more are read in the next round.
BATCH = 1000
IN_FLIGHT = tuple(state.value for state in ViewState if state.in_flight)


class ViewTracker(PlannerLoop):
    def __init__(self, store: Store, seat: PlannerSeat, config: ViewsConfig,
                 materializer: Materializer,
                 publish: Callable[[ViewSchedulingEvent], None] | None = None,
                 stopping: threading.Event | None = None) -> None:
        super().__init__("views", seat, config.poll_interval, stopping=stopping)
        self._store = store
        self._repository = view_repository(store)
        self._config = config
        self._materializer = materializer
        self._publish = publish

    def round(self, lease: Lease) -> float:
        try:
            busy = self.track(lease.key, lease.fence)
        except CasConflict as exc:  # a request changed a row meanwhile: the next round
            log.warning("view tracking: %s; will retry", exc)
            return self.poll_interval
        return 0.0 if busy else self.poll_interval

    def track(self, key: str, fence: int) -> bool:
        """One round under the lease (``key``, ``fence``); True if a feed had a full
        batch (the next round follows at once)."""
        repo = self._repository
        with repo.fenced(key, fence) as conn:
            cursor = load_cursor(conn, JOBS_FEED)
            finals = [event for event in final_events(conn, cursor, BATCH)]
            self._settle(conn, [e for e in finals
                                if (e.idempotency_key or "").startswith("view/")])
            if finals:
                save_cursor(conn, JOBS_FEED, finals[-1].cursor)
            self._started(conn)
        with repo.fenced(key, fence) as conn:
            published = self._deliver(conn)
        return len(finals) >= BATCH or published >= BATCH

    # -- job events → states ----------------------------------------------------------
    def _settle(self, conn: Connection, finals: list[FinalEvent]) -> None:
        if not finals:
            return
        by_job = {event.job_id: event for event in finals}
        rows = conn.execute(select(view_partitions).where(
            view_partitions.c.job_id.in_(list(by_job)),
            view_partitions.c.state.in_(IN_FLIGHT))).mappings().all()
        params = dict(conn.execute(select(jobs.c.id, jobs.c.params).where(
            jobs.c.id.in_([row["job_id"] for row in rows]))).all())
        changes = [self._outcome(row, by_job[row["job_id"]], params.get(row["job_id"]) or {})
                   for row in rows]
        retry: dict[Any, KeyedSubmit] = {}
        if any(change.state is ViewState.RETRYING for change in changes):
            views = self._materializer.definitions()
            for index, change in enumerate(changes):
                if change.state is ViewState.RETRYING:
                    changes[index], item = self._retry(views, change, change.expected)
                    if item is not None:
                        retry[change.address] = item
        self._repository.apply(conn, changes)
        self._resubmit(conn, retry)
        settled = [c.address for c in changes
                   if c.state in (ViewState.MATERIALIZED, ViewState.FAILED)]
        if settled and release(conn, settled, VIEWS):
            self._store.tx.notify(conn)

    def _outcome(self, row: Any, event: FinalEvent, params: dict[str, Any]) -> Change:
        address = address_of(row["view"], row["values"])
        previous, version = ViewState(row["state"]), row["row_version"]
        if event.state == "SUCCEED":
            return Change(address, version, previous, ViewState.MATERIALIZED, {
                "transformed_at": event.at, "job_id": None, "retries": 0,
                "version_checksum": params.get("version_checksum")},
                f"job {event.job_id} succeeded")
        if event.state == "STOPPED":  # paused: still in flight, its job may resume
            return Change(address, version, previous, previous, {}, bump=False)
        if row["retries"] < self._config.retries:
            return Change(address, version, previous, ViewState.RETRYING,
                          {"retries": row["retries"] + 1, "job_id": None},
                          f"job {event.job_id} ended {event.state}; retry "
                          f"{row['retries'] + 1} of {self._config.retries}")
        return Change(address, version, previous, ViewState.FAILED, {"job_id": None},
                      f"job {event.job_id} ended {event.state} after "
                      f"{row['retries']} retries")

    def _retry(self, views: dict[str, Any], change: Change,
               version: int) -> tuple[Change, KeyedSubmit | None]:
        """The job retrying ``change``'s partition, keyed by its new row version; a
        partition whose job cannot be rendered any more (its view deleted, a value no
        longer fits) is FAILED instead: RETRYING with no job would hold its
        dependents for ever."""
        try:
            spec = self._materializer.rendered(views, change.address)
            return change, KeyedSubmit(spec, validate_job(spec, self._materializer.policy),
                                       job_key(change.address, version + 1), None, VIEWS)
        except JobServerError as exc:
            log.error("view %s cannot be retried: %s", change.address, exc)
            return replace(change, state=ViewState.FAILED, values={"job_id": None},
                           message=f"{change.message}: cannot be retried: {exc}"), None

    def _resubmit(self, conn: Connection, retry: dict[Any, KeyedSubmit]) -> None:
        """The new job of each partition to retry, on its row."""
        if not retry:
            return
        ids = self._store.jobs.submit_keyed(list(retry.values()), conn=conn)
        self._repository.set_jobs(conn, {a: ids[item.key] for a, item in retry.items()})

    def _started(self, conn: Connection) -> None:
        """WAITING or RETRYING partitions whose job runs now → TRANSFORMING."""
        rows = conn.execute(select(view_partitions).join(
            jobs, jobs.c.id == view_partitions.c.job_id).where(
            view_partitions.c.state.in_((ViewState.WAITING.value, ViewState.RETRYING.value)),
            jobs.c.state == "RUNNING").limit(BATCH)).mappings().all()
        self._repository.apply(conn, [
            Change(address_of(row["view"], row["values"]), row["row_version"],
                   ViewState(row["state"]), ViewState.TRANSFORMING, {},
                   f"job {row['job_id']} runs") for row in rows])

    # -- view events → listeners ------------------------------------------------------
    def _deliver(self, conn: Connection) -> int:
        cursor = load_cursor(conn, EVENTS_FEED, head=lambda _conn: Cursor(0, 0))
        rows = read_view_events(conn, cursor, BATCH)
        for row in rows:
            if self._publish is not None:
                self._publish(ViewSchedulingEvent(
                    ViewState(row["previous"]), ViewState(row["new"]),
                    address_of(row["view"], row["values"]),
                    as_utc(row["at"]), row["job_id"], row["message"]))  # type: ignore[arg-type]
        if rows:
            save_cursor(conn, EVENTS_FEED, Cursor(int(rows[-1]["txid"] or 0),
                                                  int(rows[-1]["id"])))
        return len(rows)


def read_view_events(conn: Connection, after: Cursor, limit: int) -> list[Any]:
    """``view_events`` rows after ``after`` in commit order (see jobserver.store.feed)."""
    query = select(view_events)
    if conn.dialect.name == "postgresql":
        query = query.where(
            view_events.c.txid.isnot(None),
            text("(view_events.txid, view_events.id) > (:c_txid, :c_position)").bindparams(
                c_txid=after.txid, c_position=after.position),
            view_events.c.txid < horizon(conn)).order_by(view_events.c.txid, view_events.c.id)
    else:
        query = query.where(view_events.c.id > after.position).order_by(view_events.c.id)
    return list(conn.execute(query.limit(limit)).mappings())
