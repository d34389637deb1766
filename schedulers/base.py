"""The scheduler interface and the claim/run core every mode shares.

A scheduler decides *when this node may claim* (holding the global lock, holding a
segment lock, or being the leader); claiming itself is always the store's atomic
compare-and-set with the lease's fence, and running is always the node's runner.

Modes are small subclasses: they implement :meth:`Scheduler.run`, a loop that ends
when ``ctx.stopping`` is set.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from jobserver.config import Config, SchedulerMode
from jobserver.events import NodeEvent, StateChange
from jobserver.exceptions import TRANSIENT, LockError, StoreUnavailable
from jobserver.logs import job_fields
from jobserver.states import State
from jobserver.runner import Runner
from jobserver.store import Store
from jobserver.store.records import JobRecord
from locks.base import Lease, LockBackend
from schedulers.prefetch import Prefetch

log = logging.getLogger(__name__)


#: Seconds past a due time to wake at: the store's clock may read a hair early (SQLite
#: keeps milliseconds), and a claim that finds the job not yet due would sleep again.
DUE_MARGIN = 0.001


def presence_key(node_id: str) -> str:
    """The lock each node holds for its lifetime; free means the node is gone."""
    return f"node/{node_id}"


@dataclass
class SchedulerContext:
    """Everything a scheduler works with; built by :class:`jobserver.node.Node`."""

    config: Config
    node_id: str
    store: Store
    locks: LockBackend
    runner: Runner
    wake: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    #: Cleared while this node's presence lock is lost (a lost session): other nodes
    #: take it for dead then and would rescue anything it claimed.
    present: threading.Event = field(default_factory=lambda: _set(threading.Event()))
    #: This node's current presence lease (None before it is taken); ``distributed``
    #: mode claims jobs without a ``lock_key`` under it.
    presence: Callable[[], Lease | None] = lambda: None


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


class Scheduler(ABC):
    mode: SchedulerMode

    def __init__(self, ctx: SchedulerContext) -> None:
        self.ctx = ctx
        self.active = False
        self.orphans_rescued = 0
        #: Whether READY jobs may be waiting for room: the last claim filled all the
        #: room it had. Only then is a freed runner slot worth waking the scheduler
        #: for; otherwise that wake costs an empty claim, and a submit's NOTIFY that
        #: arrives meanwhile waits behind it.
        self.more_ready = True
        #: Held from a claim's start until what it claimed is on the runner (see
        #: :meth:`handover`); claim-ahead's state changes only under it.
        self._handover = threading.Lock()
        settings = ctx.config.scheduler
        self.prefetch = Prefetch(ctx.store, ctx.node_id, settings.prefetch_limit(),
                                 settings.prefetch_timeout)

    @abstractmethod
    def run(self) -> None:
        """Schedule until ``ctx.stopping`` is set; release every lock before returning."""

    @property
    def role(self) -> str:
        return "active" if self.active else "standby"

    # -- the shared core -----------------------------------------------------------------
    def room(self) -> int:
        """How many jobs this node may claim now: none while its presence lock is lost
        (other nodes take it for dead and would rescue them) or while its lock
        session is uncertain (ZooKeeper SUSPENDED: claim nothing new until the session
        is known to live); otherwise its free slots, at most one claim batch."""
        if not self.ctx.present.is_set() or not self.ctx.locks.can_claim():
            return 0
        return min(self.ctx.runner.free_slots(), self.ctx.config.scheduler.claim_batch)

    @contextmanager
    def handover(self) -> Iterator[int]:
        """Spans one claim round, from the claim to the hand-over of what it claimed
        to the runner; yields the room to claim, 0 once ``ctx.stopping`` is set.

        A drain sets ``ctx.stopping`` and then waits for this (:meth:`settle_claims`)
        before it counts the running jobs: a job claimed just before the drain began
        is on the runner by then, and waited for, instead of left RUNNING in the store
        by a node about to exit (rescued, it would run twice).
        """
        with self._handover:
            yield 0 if self.ctx.stopping.is_set() else self.room()

    def settle_claims(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a claim round in progress to hand its
        jobs to the runner, then give back the jobs held ahead. Once
        ``ctx.stopping`` is set no round claims or holds anything, so after this
        returns True the runner has every job this node claimed and it holds none."""
        if not self._handover.acquire(timeout=max(0.0, timeout)):
            return False
        try:
            self.prefetch.give_back_all("the node is draining")
        finally:
            self._handover.release()
        return True

    def give_back_held(self, why: str) -> None:
        """Give back the jobs held ahead (the lease they were held under ends)."""
        with self._handover:
            self.prefetch.give_back_all(why)

    def dispatch(self, lease: Lease) -> int:
        """Claim as many READY jobs as the runner has free slots; start them."""
        with self.handover() as room:
            claimed = self.claim_round(lease, room, lambda limit: self.ctx.store.runs.claim(
                self.ctx.node_id, lease, limit))
            self.prefetch.expire()  # also while the runner is full, which is when jobs wait
        if room > 0:
            self.more_ready = claimed >= room
        return claimed

    def claim_round(self, lease: Lease, room: int,
                    claim: Callable[[int], list[JobRecord]], keyless: bool = False) -> int:
        """Fill up to ``room`` free slots under ``lease``: jobs held ahead first, then
        ``claim(limit)``; when that fills them, hold up to ``scheduler.prefetch`` more
        (only jobs without a ``lock_key`` when ``keyless``). Call within
        :meth:`handover`, and give back what waited too long there
        (:meth:`Prefetch.expire`); returns the jobs started."""
        self.prefetch.reconcile()
        started = 0
        if room > 0:
            started = self.start(self.prefetch.take(lease, room))
            if started < room:
                started += self.start(claim(room - started))
            if started >= room and self.prefetch.may_fill():
                self.prefetch.fill(lease, keyless)
        return started

    def start(self, jobs: list[JobRecord], on_done: Callable[[], None] | None = None) -> int:
        if jobs:
            self.publish(NodeEvent("claimed", self.ctx.node_id))
        for job in jobs:
            log.info("claimed job %s (%s) attempt %s", job.id, job.name, job.attempt,
                     extra=job_fields(job.id, None, job.attempt, self.ctx.node_id, job.fence))
            waited = ((job.started_at - job.created_at).total_seconds()
                      if job.attempt == 1 and job.started_at else None)
            self.publish(StateChange(job.id, job.name, State.READY, State.RUNNING,
                                     self.ctx.node_id, fence=job.fence, attempt=job.attempt,
                                     seconds=waited))
            self.ctx.runner.submit(job, on_done)
        if jobs:
            # Hand the GIL to the runner threads just woken: otherwise they wait for
            # this thread to block on its next store round trip (its bookkeeping and
            # the due-time probe hold the GIL for about a millisecond first), and every
            # claimed job's first step starts that much later.
            time.sleep(0)
        return len(jobs)

    def publish(self, event: StateChange | NodeEvent) -> None:
        self.ctx.runner.bus.publish(event)

    def publish_rescued(self, job_id: int, state: State, why: str) -> None:
        """Tell listeners and metrics that this node moved a dead owner's job out of
        RUNNING (to READY, or ERROR for a non-retryable step); best effort."""
        try:
            job = self.ctx.store.jobs.get(job_id, with_steps=False)
            name, fence, attempt = job.name, job.fence, job.attempt
        except Exception:  # noqa: BLE001 - the move is done; the event is a courtesy
            log.warning("could not read rescued job %s", job_id, exc_info=True)
            name, fence, attempt = "", None, None
        self.publish(StateChange(job_id, name, State.RUNNING, state, self.ctx.node_id,
                                 fence=fence, attempt=attempt,
                                 message=f"{why}; now {state.value}"))

    def held_locks(self) -> int:
        """Scheduling locks this node holds (for the locks-held gauge)."""
        return int(self.active)

    def planner_lease(self) -> Lease | None:
        """The lease that makes this node the cluster's one active scheduler (or
        leader), with its fence drawn; None while it is not. Planner loops fence
        their writes with it (``jobserver.planner``); ``distributed`` mode has none."""
        return None

    def acquire_timed(self, acquire: Callable[[], Lease | None], kind: str) -> Lease | None:
        started = time.monotonic()
        lease = acquire()
        if lease is not None:
            self.publish(NodeEvent("lock_acquired", self.ctx.node_id,
                                   seconds=time.monotonic() - started, detail=kind))
        return lease

    def record_lease(self, lease: Lease) -> bool:
        """Whether claims may rely on ``lease``: its fence is drawn, which records it
        in the store as the newest of its key (see :attr:`Lease.fence`), and the lease
        is still valid. False for a lease lost or superseded before that, and for one
        the store cannot record now (an outage, its sessions ended): the caller lets
        it go and takes it again, after the pause this makes, as after any store error
        of a scheduling round. A node never gives up over it."""
        try:
            lease.fence  # noqa: B018 - drawing the fence records it
        except LockError:
            return False
        except StoreUnavailable:
            self.pause_after_error(f"recording the fence of lock {lease.key}")
            return False
        return lease.is_valid()

    def announce(self, role: str) -> None:
        """Record this node's scheduling role for the cluster view; best effort."""
        try:
            self.ctx.store.servers.set_role(self.ctx.node_id, role)
        except Exception:  # noqa: BLE001 - the role is for display; scheduling goes on
            log.warning("could not record role %s", role, exc_info=True)

    def rescue_orphans(self) -> int:
        """Re-queue jobs RUNNING on dead nodes. A node is dead when its presence lock
        is free or its heartbeat (store clock) is older than ``server.dead_after``;
        which of them it was goes into the audit trail.

        Any failed read raises before anything is moved, so a store outage never
        leads to rescuing a live node's jobs. The jobs are read before the checks: a
        node found dead may be coming back, and what it claims after it took its
        presence lock again is not rescued.
        """
        owned = self.ctx.store.servers.owned_jobs()
        owned.pop(self.ctx.node_id, None)
        if not owned:
            return 0
        dead = self.ctx.store.servers.stale(set(owned), self.ctx.config.server.dead_after)
        dead |= {node: "its presence lock is free" for node in sorted(set(owned) - set(dead))
                 if self.ctx.locks.is_held(presence_key(node)) is False}
        moved = 0
        for node, why in sorted(dead.items()):
            for job_id, state in self.ctx.store.servers.requeue_orphans(
                    node, self.ctx.node_id, only=owned[node], why=why):
                log.warning("job %s was running on dead node %s (%s): now %s", job_id, node,
                            why, state, extra=job_fields(job_id, node=self.ctx.node_id))
                self.publish(NodeEvent("orphan_rescued", self.ctx.node_id, detail=node))
                self.publish_rescued(job_id, state, f"node {node} died ({why})")
                moved += 1
        self.orphans_rescued += moved
        return moved

    def wait_for_work(self, timeout: float) -> None:
        """Sleep until woken (a slot freed, a submit notified), until the earliest job
        held back by ``not_before`` is due, or ``timeout``."""
        due = self._seconds_until_due()
        if due is not None:
            timeout = min(timeout, due + DUE_MARGIN)
        expiry = self.prefetch.seconds_to_expiry()
        if expiry is not None:
            timeout = min(timeout, expiry + DUE_MARGIN)
        self.ctx.wake.wait(timeout)
        self.ctx.wake.clear()

    def claims_due_jobs(self) -> bool:
        """Whether this node itself would claim (or give out) a job that becomes due:
        a scheduler that only starts what another node assigns has no due time of its
        own to keep."""
        return True

    def _seconds_until_due(self) -> float | None:
        """The store's answer, or None when there is no such job, this node would not
        claim it, or the store cannot answer now (the poll interval bounds the wait)."""
        if not self.claims_due_jobs() or self.ctx.runner.free_slots() == 0:
            return None  # with no free slot, the slot's wake comes first anyway
        try:
            return self.ctx.store.runs.seconds_until_due(self.ctx.node_id)
        except TRANSIENT:
            return None

    def pause_after_error(self, what: str) -> None:
        log.warning("%s failed; retrying in %.1f s", what,
                    self.ctx.config.scheduler.poll_interval, exc_info=True)
        self.ctx.stopping.wait(self.ctx.config.scheduler.poll_interval)


class Ticker:
    """Says when a periodic chore is due, on the monotonic clock."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            return True
        return False
