"""The tracker: stage jobs' ends → control-table statuses, and runs moved on.

One loop, on the node that holds the planner seat (like the schedule evaluator). A
round, in one transaction: every RUNNING stage whose engine job has ended becomes
SUCCESS (job SUCCEED) or FAILED (ERROR, DISCARDED, STOPPED; the job's error is the
message), the batches' overall statuses follow, and every run still RUNNING launches
its next item (:func:`jobserver.batches.planner.advance`).

A stage's status is derived from its job, never from the process that asked for the
run: a ``batch run`` command killed mid-stage leaves the stage to the engine, and a
node killed mid-stage is the engine's to rescue (the job is re-queued on another
node, or ends ERROR when its step is not retryable). Either way the job ends, and the
stage with it: never RUNNING for ever. Every write is a compare-and-set, so a round
cut short by a failover is done again by the next holder without launching twice.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jobserver.batches.planner import advance
from jobserver.batches.spec import BatchConfig, load_spec
from jobserver.exceptions import TRANSIENT
from jobserver.loops import Loop
from jobserver.planner import PlannerSeat
from jobserver.spec import Policy
from jobserver.store import Store

log = logging.getLogger(__name__)

#: Seconds between rounds: how long a finished stage takes to show and the next to start.
INTERVAL = 0.5


class BatchTracker(Loop):
    def __init__(self, store: Store, seat: PlannerSeat | None, policy: Policy,
                 interval: float = INTERVAL, stopping: threading.Event | None = None) -> None:
        super().__init__("batch-tracker", stopping=stopping)
        self._store = store
        self._seat = seat
        self._policy = policy
        self._interval = interval

    def run(self) -> None:
        while not self.stopping.is_set():
            if self._seat is not None and self._seat.lease(self._interval) is None:
                continue
            try:
                self.round()
            except TRANSIENT as exc:
                log.warning("batch tracker round failed (%s); will retry", exc)
            self.stopping.wait(self._interval)

    def round(self) -> int:
        """Settle finished stages and move runs on; returns the stages settled."""
        configs = self._configs()
        with self._store.batches.write() as conn:
            settled = 0
            for done in self._store.batches.finished_stages(conn):
                settled += self._store.batches.settle(conn, done)
            for run_id in self._store.batches.active_runs(conn):
                run = self._store.batches.run_in(conn, run_id)
                advance(self._store, conn, configs.get(run.system), run, self._policy)
        return settled

    def _configs(self) -> dict[str, BatchConfig]:
        found: dict[str, Any] = {}
        for record in self._store.batch_configs.list():
            config = load_spec(record.spec)
            found.update((system, config) for system in record.systems)
        return found
