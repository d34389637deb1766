"""Retention's driver: one run over the old finished jobs (:class:`Purge`), shared by
``jobserver purge`` and the loop that keeps the store from growing for ever
(:class:`RetentionLoop`). What is deleted and what is kept is
:mod:`jobserver.store.retention`'s business.

The loop is a planner loop: it runs on the node holding the planner seat (the active
scheduler in ``single`` mode, the leader in ``leader`` mode, the planner lock's holder in
``distributed`` mode) and fences every delete transaction with the seat's lease. A
round deletes up to :data:`ROUND_BATCHES` batches of ``retention.batch_size`` jobs with
``retention.pause`` between two, so that claims and completions get the database
in between (SQLite has one writer at a time); while old jobs are left the next round
follows after the pause, otherwise after ``retention.interval``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobserver.config import RetentionConfig
from jobserver.planner import PlannerLoop, PlannerSeat
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.keep import Refs
from jobserver.store.retention import DEFAULT_STATES, Position, RetentionRepository, Tally
from locks.base import Lease

log = logging.getLogger(__name__)

#: Batches per round of the loop: the seat's lease is checked again between rounds.
ROUND_BATCHES = 20
#: After a batch the loop waits at least this many times as long as the batch took
#: (and at least ``retention.pause``): it works at most a quarter of the time, in the
#: node whose claims share its process and its database.
PACING = 3.0
#: Batches between two reads of what the planners' keep rules read (the schedules'
#: references: :meth:`~jobserver.planners.hooks.KeepRule.read`).
REFS_EVERY = 20


class Purge:
    """One run over the jobs in ``states`` finished before ``before``, a batch at a
    time (:meth:`step`).

    First each state's jobs in (finished_at, id) order, once. A job kept only because
    a job depending on it stayed (``blocked``) is met before that dependent, which
    finishes after it; so the blocked jobs are tried again in sweeps once the scan
    is over, until a sweep deletes none of them. A dry run deletes nothing: it
    remembers the dependents it counted (``gone``) and treats their edges as gone.
    """

    def __init__(self, repo: RetentionRepository, states: Iterable[State], before: datetime,
                 batch_size: int, dry_run: bool = False) -> None:
        self._repo = repo
        self.states = tuple(states)
        self.before = before
        self._batch_size = batch_size
        self._dry_run = dry_run
        self._scanning = list(self.states)
        self._positions: dict[State, Position] = {}
        self._blocked: set[int] = set()
        self._retry: list[int] = []
        self._sweeps = 0
        self._sweep_deleted = 0
        self._gone: set[int] = set()
        self._refs: Refs | None = None
        self._batches = 0
        #: Everything deleted so far, and the jobs kept because they are referenced.
        self.tally = Tally()
        self.kept: set[int] = set()

    def step(self, fence: tuple[str, int] | None = None) -> Tally | None:
        """Delete (or count) one batch, fenced by the lease ``fence`` when given; its
        tally, or None once the run is over."""
        ids = self._next()
        if ids is None:
            return None
        if self._refs is None or self._batches % REFS_EVERY == 0:
            self._refs = self._repo.refs()
        self._batches += 1
        done = self._repo.delete(ids, self.states, self.before, self._refs, fence=fence,
                                 dry_run=self._dry_run, gone=self._gone)
        self.kept.difference_update(ids)
        self.kept |= done.kept
        self._blocked.difference_update(ids)
        self._blocked |= done.blocked
        self._gone |= done.dependents
        self._sweep_deleted += done.tally.jobs
        self.tally.add(done.tally)
        return done.tally

    def _next(self) -> list[int] | None:
        while self._scanning:
            state = self._scanning[0]
            found = self._repo.oldest(state, self.before, self._positions.get(state),
                                      self._batch_size)
            if len(found) < self._batch_size:
                self._scanning.pop(0)
            if found:
                self._positions[state] = found[-1]
                return [position.id for position in found]
        if not self._retry:
            if not self._blocked or (self._sweeps and not self._sweep_deleted):
                return None
            self._retry, self._sweeps, self._sweep_deleted = sorted(self._blocked), \
                self._sweeps + 1, 0
        ids, self._retry = self._retry[:self._batch_size], self._retry[self._batch_size:]
        return ids


class RetentionLoop(PlannerLoop):
    """Deletes SUCCEED and DISCARDED jobs older than ``retention.finished_jobs``, then
    rows of the change history older than ``retention.changes``, on the node holding
    the planner seat (a duration of 0 keeps them). ``deleted``: the counter of jobs it
    adds to."""

    def __init__(self, store: Store, seat: PlannerSeat | None, config: RetentionConfig,
                 deleted: Any = None, stopping: threading.Event | None = None) -> None:
        super().__init__("retention", seat, config.interval, stopping=stopping)
        self._store = store
        self._config = config
        self._deleted = deleted
        self._purge: Purge | None = None

    def round(self, lease: Lease) -> float:
        """Old jobs first; once none is left, old rows of the change history."""
        wait = self._delete_jobs(lease) if self._config.finished_jobs else self.poll_interval
        if self._purge is None and self._config.changes and not self.stopping.is_set():
            if self._delete_changes(lease):
                wait = min(wait, self._config.pause)
        return wait

    def _delete_changes(self, lease: Lease) -> bool:
        """Up to :data:`ROUND_BATCHES` batches of change rows older than
        ``retention.changes``; whether more are left."""
        before = self._store.retention.cutoff(self._config.changes)
        size, deleted, batches, gone = self._config.batch_size, 0, 0, 0
        while batches < ROUND_BATCHES and not self.stopping.is_set():
            if batches:
                self.stopping.wait(self._config.pause)
            gone = self._store.changes.delete_before(before, size, (lease.key, lease.fence))
            deleted, batches = deleted + gone, batches + 1
            if gone < size:
                break
        if deleted:
            log.info("retention: deleted %d rows of the change history recorded before %s",
                     deleted, before.isoformat(timespec="seconds"))
        return gone == size

    def _delete_jobs(self, lease: Lease) -> float:
        purge = self._purge
        if purge is None:
            before = self._store.retention.cutoff(self._config.finished_jobs)
            purge = self._purge = Purge(self._store.retention, DEFAULT_STATES, before,
                                        self._config.batch_size)
        tally, batches, began, rest = Tally(), 0, time.monotonic(), self._config.pause
        while batches < ROUND_BATCHES and not self.stopping.is_set():
            if batches:
                self.stopping.wait(rest)
            started = time.monotonic()
            done = purge.step((lease.key, lease.fence))
            rest = max(self._config.pause, PACING * (time.monotonic() - started))
            if done is None:
                self._purge = None
                break
            batches += 1
            tally.add(done)
            if self._deleted is not None and done.jobs:
                self._deleted.inc(done.jobs)
        if tally.jobs:
            log.info("retention: deleted %d jobs (%d steps, %d events) finished before %s "
                     "in %d batches, %.1f s; %d kept so far, still referenced", tally.jobs,
                     tally.steps, tally.events, purge.before.isoformat(timespec="seconds"),
                     batches, time.monotonic() - began, len(purge.kept))
        return rest if self._purge is not None else self.poll_interval
