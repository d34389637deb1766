"""The schedule evaluator: one loop, on the one node that holds the planner seat.

A round reads job events from the ordered feed (job-status triggers) and the registered
partition feeds, fires the time triggers that are due, re-checks pending schedule-jobs
whose constraints or deadline are due, and launches what those decided
(:mod:`jobserver.schedules.launcher`) in the same transactions; then it sleeps until the
earliest next fire or check time, at most ``schedules.poll_interval`` (schedules enabled
through another node's API, and new job events, are seen within that).

Every write is fenced by the seat's lease (:meth:`EvaluatorStore.fenced`), and the
feed's cursor is saved in the transaction that acts on what it read, so a failover in
the middle of a round neither fires anything twice nor loses it: a round cut short is
done again by the next evaluator from what was committed. A launch is the engine's
idempotent submit under a launch key fixed by the decision, so a launch retried after a
crash finds the job the first attempt made, if that one committed.

A firing that depends on the clock alone is decided ``schedules.lead_time`` before its
fire time and its job launched with ``not_before`` at that time; at the fire time the
evaluator wakes the schedulers (``release``), which would otherwise see the job at their
next poll.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection

from jobserver.config import SchedulesConfig
from jobserver.exceptions import TriggerError
from jobserver.planner import PlannerLoop, PlannerSeat
from jobserver.schedules.firing import (Facts, Outcome, check_time, constrain,
                                        launches_ahead, notify, schedule_of_key)
from jobserver.schedules.launcher import Budget, Launcher
from jobserver.schedules.partitions import PartitionCounter, PartitionFeed, start_feeds
from jobserver.schedules.spec import ScheduleSpec, TimeTrigger, load_spec
from jobserver.schedules.store import Draft, Due, EvaluatorStore, Evaluation
from jobserver.schedules.timing import FireTimes
from jobserver.schedules.triggers import JobEvent, Notification, matching_parts
from jobserver.spec import Policy
from jobserver.store import Store
from locks.base import Lease

log = logging.getLogger(__name__)

#: A schedule that cannot be evaluated is tried again after this long.
BROKEN_RETRY = timedelta(minutes=1)
#: What makes one schedule unevaluable, not the evaluator: anything else ends the
#: loop (a bug), and store outages are retried by the round.
SCHEDULE_ERRORS = (TriggerError, ValueError)
#: The longest the evaluator launches ahead of a fire time, however long firing takes.
MAX_LEAD = timedelta(seconds=60)
#: How long the time a firing took counts towards the lead (seconds).
LEAD_MEMORY = 600.0
#: New partitions read per dataset and round; more are read in the next round.
PARTITION_READ = 5000
#: How often evaluation records older than the retention are deleted.
PRUNE_EVERY = timedelta(minutes=10)
#: How often the job-event feed's cursor moves to the head while no schedule watches
#: job events; events older than a schedule's enabling never reach it anyway.
FEED_SKIP_EVERY = timedelta(seconds=10)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class ScheduleEvaluator(PlannerLoop):
    def __init__(self, store: Store, seat: PlannerSeat, config: SchedulesConfig,
                 policy: Policy, metrics: Any = None,
                 clock: Callable[[], datetime] = utcnow,
                 stopping: threading.Event | None = None,
                 release: Callable[[], None] | None = None,
                 budget: Budget | None = None) -> None:
        super().__init__("schedules", seat, config.poll_interval, stopping=stopping)
        self.store = EvaluatorStore(store.tx)
        self._launcher = Launcher(self.store, store.jobs, policy, metrics, clock, budget)
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self.partition_feeds: list[PartitionFeed] = []
        self._partitions = PartitionCounter()
        self._specs: dict[tuple[int, int], ScheduleSpec] = {}
        self._fire_times: dict[tuple[int, int, str], FireTimes] = {}
        self._lead = timedelta(seconds=config.lead_time)
        #: The lead in use: lead_time, or longer when firing what was due took long.
        self.ahead = self._lead
        self._firings: deque[tuple[float, float]] = deque()  # (monotonic, seconds)
        #: Fire times of jobs launched ahead: the schedulers are woken at each.
        self._releases: set[datetime] = set()
        self._release = release
        self._pruned_at: datetime | None = None
        self._feed_skipped_at: datetime | None = None

    def round(self, lease: Lease) -> float:
        """Evaluate under ``lease``; sleep until the earliest next fire or check time,
        at most ``poll_interval``."""
        next_due = self.evaluate(lease)
        wait = self._config.poll_interval
        if next_due is not None:
            wait = min(wait, max(0.0, (next_due - self._clock()).total_seconds()))
        return wait

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
        if work.watches_jobs or (work.watches_datasets and self.partition_feeds):
            changed = self._consume_feeds(key, fence, now)
        elif self._feed_skipped_at is None or now - self._feed_skipped_at >= FEED_SKIP_EVERY:
            self._feed_skipped_at = now
            with self.store.fenced(key, fence) as conn:
                self.store.skip_feed(conn)  # unless a watcher came since the overview
        if work.next_check is not None and work.next_check <= now:
            started, fired = time.monotonic(), self._config.batch
            while fired >= self._config.batch:
                fired = self._fire_due(key, fence, now)
                # Each batch's next fire times are set with the lead known so far:
                # the later batches of a long firing move their next one earlier.
                self._adapt_lead(time.monotonic() - started)
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
        return min([t for t in (work.next_check, self._release_due(self._clock()))
                    if t is not None], default=None)

    def _adapt_lead(self, took: float) -> None:
        """Launch ahead by twice the longest time firing the due schedules took (so
        far, in a firing under way) in the last ``LEAD_MEMORY``, when that is longer
        than ``schedules.lead_time`` (at most ``MAX_LEAD``): on a busy machine, many
        schedules due at once still have their jobs in the store at their fire time.
        A lead time of 0 stays 0."""
        if not self._lead:
            return
        clock = time.monotonic()
        self._firings.append((clock, took))
        while self._firings[0][0] < clock - LEAD_MEMORY:
            self._firings.popleft()
        longest = max(seconds for _at, seconds in self._firings)
        self.ahead = max(self._lead, min(MAX_LEAD, timedelta(seconds=2 * longest)))

    def _release_due(self, now: datetime) -> datetime | None:
        """Wake the schedulers if a fire time of jobs launched ahead has come (they
        would otherwise see those jobs at their next poll); the next such time."""
        due = {fire_time for fire_time in self._releases if fire_time <= now}
        if due:
            self._releases -= due
            if self._release is not None:
                self._release()
        return min(self._releases, default=None)

    def _fire_due(self, key: str, fence: int, now: datetime) -> int:
        """Time triggers of due schedules, and the launches they decide, in one
        transaction; returns how many schedules were due."""
        outcome = Outcome()
        with self.store.fenced(key, fence) as conn:
            dues = self.store.due_schedules(conn, now, self._config.batch)
            pending = self.store.pending_of(conn, [due.id for due in dues])
            facts = self._facts(conn)
            changes = []
            for due in dues:
                def fire(part: Outcome, due: Due = due) -> datetime | None:
                    spec = self._spec(due)
                    ahead = self.ahead if launches_ahead(spec) else timedelta(0)
                    check = check_time(spec, due, now, part,
                                       functools.partial(self._times, due), ahead)
                    notify(spec, due, pending.get(due.id), check.notes, now, facts, part)
                    changes.append((due.id, check.trigger_state, check.next_check))
                    return check.next_check

                if not self._guarded(due, now, outcome, fire):
                    changes.append((due.id, due.trigger_state, now + BROKEN_RETRY))
            self.store.save_schedules(conn, changes)
            self._save(conn, outcome, now, {due.id: due for due in dues})
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
            self._save(conn, outcome, now, dues)
        self._count(outcome)
        return len(drafts)

    def _consume_feeds(self, key: str, fence: int, now: datetime) -> bool:
        """Job events (and new partitions) to the schedules that watch them, with
        the feeds' cursors saved in the same fenced transaction; whether any
        schedule-job changed."""
        outcome = Outcome()
        with self.store.fenced(key, fence) as conn:
            notes = self._job_notes(conn, now)
            self._partition_notes(conn, notes)
            dues = self._deliver(conn, notes, now, outcome) if notes else {}
            self._save(conn, outcome, now, dues)
        self._count(outcome)
        return bool(outcome.drafts)

    def _partition_notes(self, conn: Connection, notes: dict[int, list[Any]]) -> None:
        """New partitions of the watched datasets, to each schedule watching one.

        A partition committed after a schedule's enabling reaches it, whatever this
        evaluator was doing then: a dataset's cursor starts at or before the earliest
        start of its schedules (:func:`start_feeds`), and the schedules a batch goes to
        are read *after* the partitions. A schedule whose enabling committed before
        that read is found (and counts what came after its start, :class:`Since`); one
        whose enabling committed later was enabled after every partition of the batch
        had been committed (on PostgreSQL the feed reads only transactions ended
        before its read began; SQLite's writers are serialised), so the cursor may
        move past them."""
        if not self.partition_feeds:
            return
        watched = set(self.store.dataset_watchers(conn))
        if not watched:
            return
        start_feeds(conn, watched)
        batches = [batch for feed in self.partition_feeds
                   for batch in feed.read(conn, PARTITION_READ, watched)]
        watching = self.store.dataset_watchers(conn) if batches else {}
        for batch in batches:
            for schedule_id in watching.get(batch.dataset.full_name, []):
                notes.setdefault(schedule_id, []).append(("dataset", batch))

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
                 outcome: Outcome) -> dict[int, Due]:
        """Notify the schedules in ``found``; returns them."""
        dues = self.store.due_schedules(conn, now, 0, ids=set(found))
        pending = self.store.pending_of(conn, [due.id for due in dues])
        facts = self._facts(conn)
        for due in dues:
            def deliver(part: Outcome, due: Due = due) -> None:
                spec = self._spec(due)
                notes = self._notes(conn, spec, due, found[due.id], now)
                notify(spec, due, pending.get(due.id), notes, now, facts, part)

            self._guarded(due, now, outcome, deliver)
        return {due.id: due for due in dues}

    def _notes(self, conn: Connection, spec: ScheduleSpec, due: Due, items: list[Any],
               now: datetime) -> list[Notification]:
        """The notifications that job events and new partitions make for ``due``."""
        notes = []
        for kind, item in items:
            if kind == "dataset":
                notes += self._partitions.notes(conn, spec, due, item, now)
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

    def _save(self, conn: Connection, outcome: Outcome, now: datetime,
              dues: dict[int, Due]) -> None:
        """Launch what ``outcome`` decided to launch, then save it all, in ``conn``."""
        self._releases.update(self._launcher.launch_decided(conn, outcome, dues))
        self.store.save_drafts(conn, outcome.drafts, now)
        self.store.record(conn, outcome.evaluations, now)

    # -- launches -------------------------------------------------------------------------
    def _launch_all(self, key: str, fence: int) -> None:
        """Launch the schedule-jobs found in PENDING_LAUNCH in the store (left by a
        node of an older version, which launched after deciding), a batch at a time."""
        while True:
            launches = self.store.to_launch(self._config.batch)
            if not launches:
                return
            with self.store.fenced(key, fence) as conn:
                self._releases.update(self._launcher.launch(conn, launches))
            if len(launches) < self._config.batch or self._launcher.deferred:
                return  # the rest wait for their owners' budgets: the next round

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
        return Facts(lambda job_name: (self.store.active_runs(conn, job_name),
                                       self.store.last_success_start(conn, job_name)))

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
