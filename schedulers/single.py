"""``single`` mode (Kylin's DefaultScheduler): one global lock, one active scheduler.

Every node runs this loop. The one holding the global job-engine lock claims and runs
jobs; the others serve the API and wait on the lock, taking over as soon as the
backend frees it (holder's process died, session expired, or it stopped). Unlike
Kylin, a standby does not fail to start: it waits.
"""

from __future__ import annotations

import logging

from jobserver.config import SchedulerMode
from jobserver.exceptions import TRANSIENT
from locks.base import Lease
from jobserver.events import NodeEvent
from schedulers.base import Scheduler, Ticker

log = logging.getLogger(__name__)

#: The lock whose holder is the active scheduler.
GLOBAL_LOCK = "scheduler/global"
LOCK_WAIT = 1.0


class SingleScheduler(Scheduler):
    mode = SchedulerMode.SINGLE

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._lease: Lease | None = None  # the global lock, while this node is active

    def planner_lease(self) -> Lease | None:
        lease = self._lease
        return lease if self.active and lease is not None and lease.is_valid() else None

    def run(self) -> None:
        while not self.ctx.stopping.is_set():
            try:
                lease = self.acquire_timed(lambda: self.ctx.locks.acquire(
                    GLOBAL_LOCK, blocking=True, timeout=LOCK_WAIT), "global")
            except TRANSIENT:
                self.pause_after_error("acquiring the global lock")
                continue
            if lease is None:
                continue
            try:
                self._schedule(lease)
            finally:
                self.active, self._lease = False, None
                self.give_back_held("the global lock was given up")
                lease.release()
                log.info("released the global lock: %r", lease)

    def _schedule(self, lease: Lease) -> None:
        if not self.record_lease(lease):
            log.warning("the global lock was lost or superseded before its first claim; "
                        "letting go")
            return
        log.info("node %s is the active scheduler (fence %s)", self.ctx.node_id, lease.fence)
        lease.on_lost(lambda _lease: self.ctx.wake.set())
        self.prefetch.forget_others()  # held by an earlier active scheduler, now fenced off
        self.active, self._lease = True, lease
        self.publish(NodeEvent("became_active", self.ctx.node_id))
        self.announce("active")
        rescue = Ticker(self.ctx.config.server.heartbeat_interval)
        poll = self.ctx.config.scheduler.poll_interval
        while not self.ctx.stopping.is_set() and lease.is_valid():
            try:
                if rescue.due():
                    self.rescue_orphans()
                self.dispatch(lease)
            except TRANSIENT:
                self.pause_after_error("scheduling")
                continue
            if not self.more_ready or self.ctx.runner.free_slots() == 0:
                self.wait_for_work(poll)
        if not lease.is_valid():
            log.error("lost the global lock (fence %s): stopped claiming", lease.fence)
