"""The schedule evaluator: one loop, on the one node that holds the planner seat.

A round reads job events from the ordered feed (job-status triggers) and the
registered partition feeds, fires the time triggers that are due, re-checks pending
schedule-jobs whose constraints or deadline are due, and launches the schedule-jobs in
PENDING_LAUNCH; then it sleeps until the earliest next fire or check time, at most
``schedules.poll_interval`` (schedules enabled through another node's API, and new
job events, are seen within that).

Every write is fenced by the seat's lease (:meth:`EvaluatorStore.fenced`), and the
feed's cursor is saved in the transaction that acts on what it read, so a failover in
the middle of a round neither fires anything twice nor loses it: a round cut short
is done again by the next evaluator from what was committed. A launch is the engine's
idempotent submit under the launch key fixed in PENDING_LAUNCH, so a launch retried
after a crash finds the job the first attempt made.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from sqlalchemy import Connection

from jobserver.config import SchedulesConfig
from jobserver.exceptions import TRANSIENT, FencedOff, InvalidRequest, TriggerError
from jobserver.loops import Loop
from jobserver.planner import PlannerSeat
from jobserver.schedules.firing import (Facts, Outcome, check_time, constrain, notify,
                                        schedule_of_key)
from jobserver.schedules.spec import (PartitionTrigger, ScheduleSpec, TimeTrigger, leaves,
                                     load_spec)
from jobserver.schedules.store import Draft, Due, EvaluatorStore, Evaluation, Launch
from jobserver.schedules.timing import FireTimes
from jobserver.schedules.triggers import JobEvent, Notification, matching_parts
from jobserver.spec import JobSpec, Policy, validate_job
from jobserver.store import Store
from jobserver.store.jobs import KeyedSubmit
from locks.base import Lease

log = logging.getLogger(__name__)

#: A schedule that cannot be evaluated is tried again after this long.
BROKEN_RETRY = timedelta(minutes=1)
#: What makes one schedule unevaluable, not the evaluator: anything else ends the
#: loop (a bug), and store outages are retried by the round.
SCHEDULE_ERRORS = (TriggerError, ValueError)
#: How often evaluation records older than the retention are deleted.
PRUNE_EVERY = timedelta(minutes=10)
#: How often the job-event feed's cursor moves to the head while no schedule watches
#: job events; events older than a schedule's enabling never reach it anyway.
FEED_SKIP_EVERY = timedelta(seconds=10)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class PartitionFeed(Protocol):
    """A source of new partitions for partition triggers (the datasets planner plugs
    one in): reads what was added since its own cursor, in commit order, and saves
    that cursor in ``conn`` (the evaluator's fenced transaction)."""

    def read(self, conn: Connection, limit: int) -> list[tuple[str, int]]:
        """``(dataset "namespace/name", new partitions)`` since the last read."""


class ScheduleEvaluator(Loop):
    def __init__(self, store: Store, seat: PlannerSeat, config: SchedulesConfig,
                 policy: Policy, metrics: Any = None,
                 clock: Callable[[], datetime] = utcnow,
                 stopping: threading.Event | None = None) -> None:
        super().__init__("schedules", stopping=stopping)
        self.store = EvaluatorStore(store.tx)
        self._jobs = store.jobs
        self._seat = seat
        self._config = config
        self._policy = policy
        self._metrics = metrics
        self._clock = clock
        self.wake = threading.Event()
        self.partition_feeds: list[PartitionFeed] = []
        self._specs: dict[tuple[int, int], ScheduleSpec] = {}
        self._fire_times: dict[tuple[int, int, str], FireTimes] = {}
        self._pruned_at: datetime | None = None
        self._feed_skipped_at: datetime | None = None

    def stop(self) -> None:
        super().stop()
        self.wake.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                lease = self._seat.lease(self._config.poll_interval)
                if lease is None:
                    continue
                next_due = self.evaluate(lease)
            except FencedOff as exc:
                # The lock backend has not told this node yet that its lease is gone;
                # until it does, the seat hands out the same lease: wait, not spin.
                log.warning("schedule evaluation fenced off: %s", exc)
                self._seat.release()
                self.stopping.wait(self._config.poll_interval)
                continue
            except TRANSIENT as exc:
                log.warning("schedule evaluation failed (%s: %s); will retry",
                            type(exc).__name__, exc)
                self.stopping.wait(self._config.poll_interval)
                continue
            self._sleep_until(next_due)
        self._seat.release()

    def _sleep_until(self, next_due: datetime | None) -> None:
        wait = self._config.poll_interval
        if next_due is not None:
            wait = min(wait, max(0.0, (next_due - self._clock()).total_seconds()))
        self.wake.wait(wait)
        self.wake.clear()

    # -- one round ------------------------------------------------------------------------
    def evaluate(self, lease: Lease) -> datetime | None:
        """One round under ``lease``; returns the earliest next fire or check time.

        It starts with one read of what is due, so that an idle round costs one read
        transaction and no write (on SQLite a write would take the database's one
        write lock from the engine's claims)."""
        key, fence = lease.key, lease.fence
        now = self._clock()
        work = self.store.overview()
        changed = False
        if work.watches_jobs or self.partition_feeds:
            changed = self._consume_feeds(key, fence, now)
        elif self._feed_skipped_at is None or now - self._feed_skipped_at >= FEED_SKIP_EVERY:
            self._feed_skipped_at = now
            with self.store.fenced(key, fence) as conn:
                self.store.skip_feed(conn)  # nothing watches: a new watcher starts near now
        if work.next_check is not None and work.next_check <= now:
            while True:  # each batch's launches go out before the next batch is fired
                fired = self._fire_due(key, fence, now)
                self._launch_all(key, fence)
                if fired < self._config.batch:
                    break
            while self._recheck_due(key, fence, now) >= self._config.batch:
                pass
            changed = True
        if changed:
            work = self.store.overview()
        if work.launching:
            self._launch_all(key, fence)
        self._prune(now)
        if self._metrics is not None:
            self._metrics.rounds.inc()
            self._metrics.pending.set(work.pending)
        return work.next_check

    def _fire_due(self, key: str, fence: int, now: datetime) -> int:
        """Time triggers of due schedules; returns how many schedules were due."""
        outcome = Outcome()
        with self.store.fenced(key, fence) as conn:
            dues = self.store.due_schedules(conn, now, self._config.batch)
            pending = self.store.pending_of(conn, [due.id for due in dues])
            facts = self._facts(conn)
            changes = []
            for due in dues:
                def fire(part: Outcome, due: Due = due) -> datetime | None:
                    spec = self._spec(due)
                    check = check_time(spec, due, now, part, functools.partial(self._times, due))
                    notify(spec, due, pending.get(due.id), check.notes, now, facts, part)
                    changes.append((due.id, check.trigger_state, check.next_check))
                    return check.next_check

                if not self._guarded(due, now, outcome, fire):
                    changes.append((due.id, due.trigger_state, now + BROKEN_RETRY))
            self.store.save_schedules(conn, changes)
            self._save(conn, outcome, now)
        self._count(outcome)
        return len(dues)

    def _recheck_due(self, key: str, fence: int, now: datetime) -> int:
        outcome = Outcome()
        with self.store.fenced(key, fence) as conn:
            drafts = self.store.due_pending(conn, now, self._config.batch)
            dues = {due.id: due for due in self.store.due_schedules(
                conn, now, 0, ids={draft.schedule_id for draft in drafts})}
            facts = self._facts(conn)
            for draft in drafts:
                due = dues.get(draft.schedule_id)
                if due is None or due.generation != draft.generation:
                    continue  # the API aborts those of disabled or updated schedules
                def recheck(part: Outcome, due: Due = due, draft: Draft = draft) -> None:
                    constrain(self._spec(due), due, draft, now, facts, part)

                self._guarded(due, now, outcome, recheck)
            self._save(conn, outcome, now)
        self._count(outcome)
        return len(drafts)

    def _consume_feeds(self, key: str, fence: int, now: datetime) -> bool:
        """Job events (and new partitions) to the schedules that watch them, with
        the feeds' cursors saved in the same fenced transaction; whether any
        schedule-job changed."""
        outcome = Outcome()
        with self.store.fenced(key, fence) as conn:
            notes = self._job_notes(conn, now)
            for feed in self.partition_feeds:
                for dataset, count in feed.read(conn, self._config.batch):
                    for schedule_id in self.store.watchers(
                            conn, {("dataset", dataset)}).get(("dataset", dataset), []):
                        notes.setdefault(schedule_id, []).append(("dataset", (dataset, count)))
            if notes:
                self._deliver(conn, notes, now, outcome)
            self._save(conn, outcome, now)
        self._count(outcome)
        return bool(outcome.drafts)

    def _job_notes(self, conn: Connection, now: datetime) -> dict[int, list[Any]]:
        cursor, events = self.store.read_feed(conn, self._config.batch)
        if not events:
            return {}
        self.store.save_feed(conn, events[-1].cursor)
        launched_by = {event.id: schedule_of_key(event.idempotency_key) for event in events}
        names = self.store.schedule_names(conn, {s for s in launched_by.values() if s})
        job_events = [(JobEvent(event.job_id, event.job_name, event.state,
                                names.get(launched_by[event.id] or 0)), event.at)
                      for event in events]
        watching = self.store.watchers(conn, {target for job_event, _at in job_events
                                              for target in _targets(job_event)})
        found: dict[int, list[Any]] = {}
        for job_event, at in job_events:
            for target in _targets(job_event):
                for schedule_id in watching.get(target, []):
                    found.setdefault(schedule_id, []).append(("job", (job_event, at)))
        return found

    def _deliver(self, conn: Connection, found: dict[int, list[Any]], now: datetime,
                 outcome: Outcome) -> None:
        dues = self.store.due_schedules(conn, now, 0, ids=set(found))
        pending = self.store.pending_of(conn, [due.id for due in dues])
        facts = self._facts(conn)
        for due in dues:
            def deliver(part: Outcome, due: Due = due) -> None:
                spec = self._spec(due)
                notes = self._notes(spec, due, found[due.id], now)
                notify(spec, due, pending.get(due.id), notes, now, facts, part)

            self._guarded(due, now, outcome, deliver)

    @staticmethod
    def _notes(spec: ScheduleSpec, due: Due, items: list[Any],
               now: datetime) -> list[Notification]:
        """The notifications that job events and new partitions make for ``due``."""
        notes = []
        for kind, item in items:
            if kind == "dataset":
                dataset, count = item
                notes += [Notification(part=path, kind="partition", at=now, count=count)
                          for path in _partition_parts(spec, dataset, due.namespace)]
                continue
            job_event, at = item
            if at < due.enabled_at:
                continue  # it ended before the schedule was enabled
            notes += [Notification(part=path, kind="job_status", at=now,
                                   job_id=job_event.job_id, state=job_event.state)
                      for path in matching_parts(spec.trigger, job_event, due.namespace)]
        return notes

    def _guarded(self, due: Due, now: datetime, outcome: Outcome,
                 evaluate: Callable[[Outcome], object]) -> bool:
        """Run one schedule's evaluation into ``outcome``; False if the schedule
        itself is broken (a stored spec this version cannot read, a trigger whose fire
        times run away), which is recorded as an ``error`` evaluation: one bad
        schedule must not stop the others, nor take down each node that evaluates."""
        part = Outcome()
        try:
            evaluate(part)
        except SCHEDULE_ERRORS as exc:
            log.error("schedule %s cannot be evaluated: %s", due.qualified, exc)
            outcome.evaluations.append(Evaluation(
                due.id, "error", f"cannot be evaluated: {type(exc).__name__}: {exc}",
                next_check_at=now + BROKEN_RETRY))
            return False
        outcome.absorb(part)
        return True

    def _save(self, conn: Connection, outcome: Outcome, now: datetime) -> None:
        self.store.save_drafts(conn, outcome.drafts, now)
        self.store.record(conn, outcome.evaluations, now)

    # -- launches -------------------------------------------------------------------------
    def _launch_all(self, key: str, fence: int) -> None:
        """Launch every schedule-job in PENDING_LAUNCH, a batch at a time: one bulk
        idempotent submit, then one fenced transaction that records the outcome."""
        while True:
            launches = self.store.to_launch(self._config.batch)
            if not launches:
                return
            prepared = {launch.id: self._prepare(launch) for launch in launches}
            keyed = [item for item in prepared.values() if isinstance(item, KeyedSubmit)]
            job_ids = self._jobs.submit_keyed(keyed)
            now = self._clock()
            with self.store.fenced(key, fence) as conn:
                self._settle(conn, launches, prepared, job_ids, now)
            if len(launches) < self._config.batch:
                return

    def _prepare(self, launch: Launch) -> KeyedSubmit | str:
        """The job ``launch`` submits, or why the node refuses its template."""
        template = dict(launch.spec["template"])
        template["params"] = {**template.get("params", {}),
                              **launch.spec.get("properties", {}), **launch.properties}
        try:
            job = JobSpec.model_validate_json(json.dumps(template))
            dependencies = validate_job(job, self._policy)
        except (InvalidRequest, ValueError) as exc:
            return f"template refused: {getattr(exc, 'message', exc)}"
        digest = hashlib.sha256(json.dumps(job.model_dump(mode="json"),
                                           sort_keys=True).encode()).hexdigest()
        return KeyedSubmit(job, dependencies, launch.launch_key, digest)

    def _settle(self, conn: Connection, launches: list[Launch],
                prepared: dict[int, KeyedSubmit | str], job_ids: dict[str, int],
                now: datetime) -> None:
        rows, refused = [], 0
        for launch in launches:
            item = prepared[launch.id]
            if isinstance(item, str) and self.store.abort_launch(conn, launch, item, now):
                refused += 1
                rows.append(Evaluation(launch.schedule_id, "aborted", item,
                                       fire_time=launch.fire_time))
        pairs = [(launch, job_ids[launch.launch_key]) for launch in launches
                 if launch.launch_key in job_ids]
        moved = self.store.mark_launched(conn, pairs, now)
        lags = []
        for launch, job_id in pairs:
            if launch.id not in moved:
                continue  # aborted meanwhile; the job it started is kept on the row
            lag = (now - (launch.fire_time or launch.created_at)).total_seconds()
            lags.append(lag)
            rows.append(Evaluation(
                launch.schedule_id, "launched", f"job {job_id} launched {lag:.3f} s after "
                f"{'its fire time' if launch.fire_time else 'its trigger'}",
                fire_time=launch.fire_time, details={"job_id": job_id, "lag_seconds": lag}))
        self.store.record(conn, rows, now)
        if self._metrics is not None:
            self._count(Outcome(aborted={"template": refused} if refused else {}))
            self._metrics.launched.inc(len(lags))
            for lag in lags:
                self._metrics.lag.observe(max(0.0, lag))

    # -- helpers --------------------------------------------------------------------------
    def _spec(self, due: Due) -> ScheduleSpec:
        key = (due.id, due.generation)
        spec = self._specs.get(key)
        if spec is None:
            if len(self._specs) > 50_000:
                self._specs.clear()
            spec = self._specs[key] = load_spec(due.spec)
        return spec

    def _times(self, due: Due, path: str, leaf: TimeTrigger) -> FireTimes:
        key = (due.id, due.generation, path)
        times = self._fire_times.get(key)
        if times is None:
            if len(self._fire_times) > 50_000:
                self._fire_times.clear()
            times = self._fire_times[key] = FireTimes.of(leaf, due.enabled_at)
        return times

    def _facts(self, conn: Connection) -> Facts:
        cache: dict[str, tuple[int, datetime | None]] = {}

        def facts(job_name: str) -> tuple[int, datetime | None]:
            if job_name not in cache:
                cache[job_name] = (self.store.active_runs(conn, job_name),
                                   self.store.last_success_start(conn, job_name))
            return cache[job_name]
        return facts

    def _count(self, outcome: Outcome) -> None:
        if self._metrics is None:
            return
        self._metrics.fired.inc(outcome.fired)
        for reason, count in outcome.skipped.items():
            self._metrics.skipped.labels(reason).inc(count)
        for reason, count in outcome.aborted.items():
            self._metrics.aborted.labels(reason).inc(count)

    def _prune(self, now: datetime) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        removed = self.store.prune(now - timedelta(seconds=self._config.evaluation_retention))
        if removed:
            log.info("removed %s schedule evaluation records past their retention", removed)


def _targets(event: JobEvent) -> list[tuple[str, str]]:
    """The watch targets a job event concerns: its job name, and the schedule that
    launched it."""
    return [("job", event.job_name)] + ([("schedule", event.schedule)] if event.schedule else [])


def _partition_parts(spec: ScheduleSpec, dataset: str, namespace: str) -> list[str]:
    """The partition triggers of ``spec`` on ``dataset`` ("namespace/name"; a trigger's
    bare name is in the schedule's namespace)."""
    return [path for path, leaf in leaves(spec.trigger) if isinstance(leaf, PartitionTrigger)
            and (leaf.dataset if "/" in leaf.dataset else f"{namespace}/{leaf.dataset}")
            == dataset]
