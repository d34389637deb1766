"""``distributed`` mode (Kylin's DistributedScheduler): every node schedules.

Before a node runs a job with a ``lock_key`` it takes the lock of that segment and
holds it until the job leaves READY/RUNNING, so no two jobs of one segment are ever
claimed to run at once, anywhere; the claim is the store's compare-and-set under that
segment lease's fence. A node whose segment lock is lost stops that job and puts it
back to READY. The lock service frees a lost lock at once, but the job's process dies
only a moment later (SIGTERM, then SIGKILL after the kill grace): until it has, this
node starts no other job of that segment. Another node may take the freed lock in
that moment: the exclusion is the scheduler's, and a step frozen with its node (the
whole process tree stopped) outlives the lock and runs on when it wakes, until the
runner's watcher sees the job taken over and kills it (docs/jobs.md, "Guarantees").

Jobs without a ``lock_key`` have nothing to exclude but themselves, which the claim's
compare-and-set already does (a READY row goes to one node only). They are claimed
in batches under the node's presence lease: a lock per job would cost a lock round
trip and a fence draw each, for no guarantee the claim lacks. Nothing fails over: a
dead node's locks vanish with it and any live node re-queues its jobs.
"""

from __future__ import annotations

import logging

from jobserver.config import SchedulerMode
from jobserver.exceptions import TRANSIENT
from jobserver.logs import job_fields
from jobserver.states import StopReason
from locks.base import Lease
from schedulers.base import Scheduler, SchedulerContext, Ticker

log = logging.getLogger(__name__)

#: How many more candidates than free slots to look at: some segments will be busy.
PEEK_FACTOR = 3


def segment_key(lock_key: str) -> str:
    return f"segment/{lock_key}"


class DistributedScheduler(Scheduler):
    mode = SchedulerMode.DISTRIBUTED

    def __init__(self, ctx: SchedulerContext) -> None:
        super().__init__(ctx)
        #: segments whose job this node still runs, its lease lost or not (one each): a lost
        #: lease frees the lock at once, but the job stops only a moment later
        self._busy: set[str] = set()
        #: segments a peeked job found busy on this node: when one is given back, the
        #: scheduler is woken to claim that job at once rather than at its next poll
        self._wanted: set[str] = set()

    def run(self) -> None:
        self.active = True
        rescue = Ticker(self.ctx.config.server.heartbeat_interval)
        poll = self.ctx.config.scheduler.poll_interval
        while not self.ctx.stopping.is_set():
            try:
                if rescue.due():
                    self.rescue_orphans()
                self._claim_round()
            except TRANSIENT:
                self.pause_after_error("scheduling")
                continue
            if not self.more_ready or self.ctx.runner.free_slots() == 0:
                self.wait_for_work(poll)
        self.give_back_held("the node stops scheduling")
        self.active = False

    def _claim_round(self) -> int:
        with self.handover() as room:
            started = self._claim(room) if room > 0 else 0
            self.prefetch.expire()  # also while the runner is full, which is when jobs wait
            return started

    def _claim(self, room: int) -> int:
        started = self._claim_keyless(room)
        self.more_ready = started >= room
        if started >= room:
            return started
        peeked = self.ctx.store.runs.peek(self.ctx.node_id, (room - started) * PEEK_FACTOR,
                                          keyed=True)
        self._wanted.clear()
        for job_id, lock_key in peeked:
            if started >= room or self.ctx.stopping.is_set() or not self.ctx.present.is_set():
                break
            if lock_key is not None:  # always, as peeked
                started += self._try_job(job_id, segment_key(lock_key))
        # A job left behind because its segment is busy is not "more ready": claiming
        # again at once would only find it busy again. A segment held here wakes the
        # scheduler when it is given back (see _release_segment); one held elsewhere
        # is tried again at the next poll.
        self.more_ready = started >= room
        return started

    def _claim_keyless(self, room: int) -> int:
        """Claim up to ``room`` jobs without a ``lock_key`` at once, under the presence
        lease (recorded as the newest of its key before the first claim relies on it)."""
        lease = self.ctx.presence()
        if lease is None or not self.record_lease(lease):
            return 0
        return self.claim_round(lease, room, lambda limit: self.ctx.store.runs.claim(
            self.ctx.node_id, lease, limit, keyless=True), keyless=True)

    def _try_job(self, job_id: int, key: str) -> int:
        if key in self._busy:  # this node's job of the segment runs, or is still stopping
            self._wanted.add(key)
            if key in self._busy:  # looked at again: a give-back from now on wakes us
                return 0
        lease = self.acquire_timed(lambda: self.ctx.locks.acquire(key, blocking=False),
                                   "segment")
        if lease is None:
            return 0  # another job of this segment runs somewhere
        if not self.ctx.present.is_set():
            # The acquisition waited out a lock-service outage in which this node's
            # presence lock was lost: other nodes take it for dead until it is taken
            # again, and would rescue whatever it claimed now.
            lease.release()
            return 0
        try:
            claimed = (self.ctx.store.runs.claim(self.ctx.node_id, lease, 1, job_ids=[job_id])
                       if self.record_lease(lease) else [])
        except Exception:
            lease.release()
            raise
        if not claimed:
            lease.release()  # taken by another node between peek and claim
            return 0
        self._busy.add(key)
        started = self.start(claimed, on_done=lambda: self._release_segment(lease))
        # Registered once the runner has the job, so that a loss at any moment since
        # the acquisition stops it (a callback registered after the loss runs at once).
        lease.on_lost(lambda _lease: self._segment_lost(job_id, key))
        return started

    def _release_segment(self, lease: Lease) -> None:
        lease.release()  # first, so that a claim that no longer finds it busy may take it
        self._busy.discard(lease.key)
        if lease.key in self._wanted:
            self.ctx.wake.set()

    def held_locks(self) -> int:
        return len(self._busy)  # one segment lock per running job with a lock_key

    def _segment_lost(self, job_id: int, key: str) -> None:
        if self.ctx.runner.cancel(job_id, StopReason.LOCK_LOST, f"lock {key} lost",
                                  requeue=True):
            log.error("lost the lock of %s: stopping job %s and re-queueing it", key,
                      job_id, extra=job_fields(job_id, node=self.ctx.node_id))
