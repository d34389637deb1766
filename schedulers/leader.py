"""``leader`` mode (Kylin's CuratorScheduler, improved): one elected leader assigns.

Every node runs two loops. The election loop waits to become leader. The work loop
starts the jobs assigned to this node; and while this node leads, it also assigns
READY jobs to live nodes — itself included — by free capacity, honouring each job's
``assigned_servers``; its own share it claims at once rather than assigning it to
itself. Assignments and that claim are written under the leader's fence, so a deposed
leader that has not noticed yet assigns and claims nothing. Assignments to dead nodes
go back to the pool through orphan rescue, which the leader runs.
"""

from __future__ import annotations

import logging

from jobserver.config import SchedulerMode
from jobserver.exceptions import TRANSIENT
from jobserver.loops import Loop
from locks.base import Lease
from jobserver.events import NodeEvent
from jobserver.store.records import NodeLoad
from schedulers.base import Scheduler, Ticker, presence_key

log = logging.getLogger(__name__)

ELECTION = "scheduler"
ELECTION_WAIT = 1.0


def plan_assignments(candidates: list[tuple[int, list[str] | None]],
                     free: dict[str, int]) -> dict[str, list[int]]:
    """Give each job, in order, to the eligible node with the most free slots."""
    free = {node: slots for node, slots in free.items() if slots > 0}
    plan: dict[str, list[int]] = {}
    for job_id, allowed in candidates:
        eligible = [node for node in free
                    if free[node] > 0 and (allowed is None or node in allowed)]
        if not eligible:
            continue
        node = max(sorted(eligible), key=lambda name: free[name])
        free[node] -= 1
        plan.setdefault(node, []).append(job_id)
    return plan


class LeaderScheduler(Scheduler):
    mode = SchedulerMode.LEADER

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.lease: Lease | None = None

    def planner_lease(self) -> Lease | None:
        lease = self.lease
        return lease if lease is not None and lease.is_valid() else None

    def run(self) -> None:
        election = Loop("election", self._election_loop, stopping=self.ctx.stopping)
        election.start()
        rescue = Ticker(self.ctx.config.server.heartbeat_interval)
        poll = self.ctx.config.scheduler.poll_interval
        while not self.ctx.stopping.is_set():
            election.check()  # a work loop without its election would never lead
            try:
                moved = self._round(rescue)
            except TRANSIENT:
                self.pause_after_error("scheduling")
                continue
            if not moved or self.ctx.runner.free_slots() == 0:
                self.wait_for_work(poll)
        election.join(ELECTION_WAIT * 2)

    def _round(self, rescue: Ticker) -> int:
        """One pass of the work loop: while leading, rescue orphans when due and
        assign; then start the jobs assigned to this node, unless the load the
        assignment read shows none. Returns the jobs given out or started."""
        leading = self._leading()
        if leading and rescue.due():
            self.rescue_orphans()
        assigned, waiting_here = self._assign() if leading else (0, True)
        return assigned + (self._start_assigned() if waiting_here else 0)

    def claims_due_jobs(self) -> bool:
        """Only the leader gives out jobs that become due; the others start what it
        assigns, woken by the assignment's notification."""
        return self.lease is not None and self.lease.is_valid()

    def _leading(self) -> bool:
        lease = self.lease
        self.active = lease is not None and lease.is_valid()
        return self.active and self.ctx.locks.can_claim()

    def _election_loop(self) -> None:
        while not self.ctx.stopping.is_set():
            try:
                lease = self.acquire_timed(lambda: self.ctx.locks.elect(
                    ELECTION, self.ctx.node_id, timeout=ELECTION_WAIT), "election")
            except TRANSIENT:
                self.pause_after_error("leader election")
                continue
            if lease is None:
                continue
            # A drain that began while this node waited: it must not lead (nor record
            # a fence) but let a node that serves on take over.
            if not self.ctx.stopping.is_set() and self.record_lease(lease):
                self._lead(lease)
            lease.release()
            self.lease, self.active = None, False

    def _lead(self, lease: Lease) -> None:
        log.info("node %s is the leader (fence %s)", self.ctx.node_id, lease.fence)
        lease.on_lost(lambda _lease: self.ctx.wake.set())
        self.lease = lease
        self.ctx.wake.set()  # assign at once rather than at the work loop's next poll
        self.publish(NodeEvent("became_active", self.ctx.node_id))
        self.announce("active")
        while not self.ctx.stopping.is_set() and lease.is_valid():
            self.ctx.stopping.wait(ELECTION_WAIT)
        if not lease.is_valid():
            log.error("lost leadership (fence %s)", lease.fence)
        self.announce("standby")

    def _assign(self) -> tuple[int, bool]:
        """One assignment round: the jobs given to other nodes plus those started here,
        and whether jobs assigned to this node may be waiting (by an earlier leader:
        this one never assigns to itself), so that the round can skip looking for
        them when the load it read shows none."""
        lease = self.lease
        if lease is None:
            return 0, True
        load = self.ctx.store.runs.load_by_node()
        waiting_here = load.get(self.ctx.node_id, NodeLoad(0, 0)).assigned > 0
        free = self._free_slots(load)
        total = sum(free.values())
        if total <= 0:
            return 0, waiting_here
        plan = plan_assignments(self.ctx.store.runs.unassigned(total), free)
        own = plan.pop(self.ctx.node_id, [])
        assigned = self.ctx.store.runs.assign(lease, plan) if plan else 0
        return assigned + (self._claim_own(lease, own) if own else 0), waiting_here

    def _claim_own(self, lease: Lease, job_ids: list[int]) -> int:
        """Start the leader's own share at once, under its lease. Assigning it first
        would cost every job one more write of its row, a NOTIFY and a second claim,
        for the same outcome; jobs beyond the runner's room stay unassigned."""
        with self.handover() as room:
            if room <= 0:
                return 0
            job_ids = job_ids[:room]
            return self.start(self.ctx.store.runs.claim(self.ctx.node_id, lease,
                                                        len(job_ids), job_ids=job_ids))

    def _free_slots(self, load: dict[str, NodeLoad]) -> dict[str, int]:
        dead_after = self.ctx.config.server.dead_after
        # A node whose presence lock is free is dead even while its last heartbeat is
        # fresh: assigning to it would strand the jobs until the heartbeat goes stale.
        return {server.id: server.capacity - load.get(server.id, NodeLoad(0, 0)).total
                for server in self.ctx.store.servers.list()
                if server.state == "alive" and server.heartbeat_age <= dead_after
                and (server.id == self.ctx.node_id
                     or self.ctx.locks.is_held(presence_key(server.id)) is not False)}

    def _start_assigned(self) -> int:
        # room() is 0 while SUSPENDED (ZooKeeper): a node cut off its session starts
        # nothing, not even what a leader gave it. If the session expires, the new
        # leader takes those assignments back; a job started meanwhile would run here
        # and, once rescued, on another node as well.
        with self.handover() as room:
            if room <= 0:
                return 0
            return self.start(self.ctx.store.runs.claim_assigned(self.ctx.node_id, room))
