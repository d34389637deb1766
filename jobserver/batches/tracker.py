"""The tracker: stage jobs' ends → control-table statuses, and runs moved on.

One loop, on the node that holds the planner seat (like the schedule evaluator). A
round, in one transaction: every RUNNING stage whose engine job has ended becomes
SUCCESS (job SUCCEED) or FAILED (ERROR, DISCARDED, STOPPED; the job's error is the
message) and its launch's runtime-audit row is closed with the job's steps copied
(:mod:`jobserver.batches.launches`), the batches' overall statuses follow, and every run still RUNNING launches
its next item (:func:`jobserver.batches.planner.advance`).

A stage's status is derived from its job, never from the process that asked for the
run: a ``batch run`` command killed mid-stage leaves the stage to the engine, and a
node killed mid-stage is the engine's to rescue (the job is re-queued on another
node, or ends ERROR when its step is not retryable). Either way the job ends, and the
stage with it: never RUNNING for ever. A round's transaction is fenced by the planner
seat's lease, and every write in it is a compare-and-set, so a round cut short by a
failover is done again by the next holder without launching twice.
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection

from jobserver.batches.planner import advance
from jobserver.batches.repos import batch_config_catalog, batch_store
from jobserver.batches.spec import BatchConfig, load_spec
from jobserver.planner import PlannerLoop, PlannerSeat
from jobserver.spec import Policy
from jobserver.store import Store
from jobserver.store.epochs import fenced
from locks.base import Lease

log = logging.getLogger(__name__)

#: Seconds between rounds: how long a finished stage takes to show and the next to start.
INTERVAL = 0.5


class BatchTracker(PlannerLoop):
    def __init__(self, store: Store, seat: PlannerSeat | None, policy: Policy,
                 interval: float = INTERVAL, stopping: threading.Event | None = None) -> None:
        super().__init__("batch-tracker", seat, interval, stopping=stopping)
        self._store = store
        self._batches = batch_store(store)
        self._catalog = batch_config_catalog(store)
        self._policy = policy

    def round(self, lease: Lease) -> float:
        self.settle(lease.key, lease.fence)
        return self.poll_interval

    def settle(self, key: str | None = None, fence: int | None = None) -> int:
        """Settle finished stages and move runs on, in one transaction fenced by the
        lease (``key``, ``fence``) when given; returns the stages settled."""
        configs = self._configs()
        with self._transaction(key, fence) as conn:
            settled = 0
            for done in self._batches.finished_stages(conn):
                settled += self._batches.settle(conn, done)
            for run_id in self._batches.active_runs(conn):
                run = self._batches.run_in(conn, run_id)
                advance(self._store, conn, configs.get(run.system), run, self._policy)
        return settled

    def _transaction(self, key: str | None,
                     fence: int | None) -> AbstractContextManager[Connection]:
        if key is None or fence is None:  # driven by hand (tests), not from a seat
            return self._batches.write()
        return fenced(self._store.tx, key, fence, "another node tracking batches")

    def _configs(self) -> dict[str, BatchConfig]:
        found: dict[str, Any] = {}
        for record in self._catalog.list():
            config = load_spec(record.spec)
            found.update((system, config) for system in record.systems)
        return found
