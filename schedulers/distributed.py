"""``distributed`` mode (Kylin's DistributedScheduler): every node schedules.

Before a node runs a job it takes the lock of the job's segment (``lock_key``, or the
job id when there is none) and holds it until the job leaves READY/RUNNING, so two
jobs of one segment never run at once, anywhere. The claim itself is the store's
compare-and-set under that segment lease's fence. Nothing fails over: a dead node's
locks vanish with it and any live node re-queues its jobs. A node whose segment lock
is lost stops that job and puts it back to READY.
"""

from __future__ import annotations

import logging

from jobserver.config import SchedulerMode
from jobserver.logs import job_fields
from schedulers.base import Scheduler, Ticker

log = logging.getLogger(__name__)

#: How many more candidates than free slots to look at: some segments will be busy.
PEEK_FACTOR = 3


def segment_key(job_id: int, lock_key: str | None) -> str:
    return f"segment/{lock_key}" if lock_key else f"segment/job-{job_id}"


class DistributedScheduler(Scheduler):
    mode = SchedulerMode.DISTRIBUTED

    def run(self) -> None:
        self.active = True
        rescue = Ticker(self.ctx.config.server.heartbeat_interval)
        poll = self.ctx.config.scheduler.poll_interval
        while not self.ctx.stopping.is_set():
            try:
                if rescue.due():
                    self.rescue_orphans()
                started = self._claim_round() if self.ctx.locks.can_claim() else 0
            except Exception:
                self.pause_after_error("scheduling")
                continue
            if started == 0 or self.ctx.runner.free_slots() == 0:
                self.wait_for_work(poll)
        self.active = False

    def _claim_round(self) -> int:
        room = self.room()
        if room <= 0:
            return 0
        started = 0
        for job_id, lock_key in self.ctx.store.runs.peek(self.ctx.node_id, room * PEEK_FACTOR):
            if started >= room or self.ctx.stopping.is_set():
                break
            started += self._try_job(job_id, segment_key(job_id, lock_key))
        return started

    def _try_job(self, job_id: int, key: str) -> int:
        lease = self.acquire_timed(lambda: self.ctx.locks.acquire(key, blocking=False),
                                   "segment")
        if lease is None:
            return 0  # another job of this segment runs somewhere
        try:
            claimed = (self.ctx.store.runs.claim(self.ctx.node_id, lease, 1, job_ids=[job_id])
                       if self.record_lease(lease) else [])
        except Exception:
            lease.release()
            raise
        if not claimed:
            lease.release()  # taken by another node between peek and claim
            return 0
        lease.on_lost(lambda _lease: self._segment_lost(job_id, key))
        return self.start(claimed, on_done=lease.release)

    def held_locks(self) -> int:
        return self.ctx.runner.running_count()  # one segment lock per running job

    def _segment_lost(self, job_id: int, key: str) -> None:
        log.error("lost the lock of %s: stopping job %s and re-queueing it", key, job_id,
                  extra=job_fields(job_id, node=self.ctx.node_id))
        self.ctx.runner.cancel(job_id, f"lock {key} lost", requeue=True)
