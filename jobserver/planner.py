"""The planner seat: which lease a node's planner loops act under, if any.

Planner loops that act on their own (the schedule evaluator, the trackers of view and
batch jobs; :class:`PlannerLoop`) run on exactly one node at a time, and fence every write with the lease that makes it that
node: in ``single`` mode the global lock the active scheduler holds, in ``leader``
mode the leadership, in ``distributed`` mode (where every node schedules) a lock of
their own, :data:`PLANNER_LOCK`, which the seat takes and holds itself.

A draining node plans nothing: once its ``stopping`` event is set (the start of a
drain, :meth:`jobserver.node.Node.stop_claiming`) the seat hands out no lease, lets go
of the planner lock it holds, and takes it no more, so that a node serving on takes
over at once, and a node told to stop while it waited for the lock (every node of a
cluster stopped at once) never records a lease of it. A wait for the lock is cut into
slices of :data:`TAKE_SLICE` that look at the drain in between.
"""

from __future__ import annotations

import logging
import threading
import time

from jobserver.config import SchedulerMode
from jobserver.exceptions import TRANSIENT, FencedOff
from jobserver.loops import Loop
from locks.base import Lease, LockBackend
from schedulers import ACTIVE_LOCK
from schedulers.base import Scheduler

log = logging.getLogger(__name__)

#: The lock whose holder plans in ``distributed`` mode.
PLANNER_LOCK = "planner"
#: The longest one wait for the planner lock lasts before the seat looks whether
#: the node drains (seconds).
TAKE_SLICE = 0.25


def seat_key(mode: SchedulerMode) -> str:
    """The lock whose holder has the planner seat in ``mode``: the one the seat's
    lease is of (the global lock, the election, or :data:`PLANNER_LOCK`). Its newest
    holder is recorded in the store when the lease's fence is drawn, which the
    cluster view reads (``jobserver.presence.seat_holder``)."""
    return ACTIVE_LOCK.get(mode, PLANNER_LOCK)


class PlannerSeat:
    def __init__(self, scheduler: Scheduler, locks: LockBackend, stopping: threading.Event) -> None:
        self._scheduler = scheduler
        self._locks = locks
        self._stopping = stopping
        self._own: Lease | None = None  # distributed mode: the planner lock held here
        # Several planner loops (schedules, views, batches) share one seat: one takes
        # the lock.
        self._taking = threading.Lock()

    def lease(self, wait: float) -> Lease | None:
        """The lease to plan under now, or None after waiting up to ``wait`` seconds
        for one; always None once the node drains. Its fence is drawn (recorded as
        the newest of its key) already."""
        if self._scheduler.mode is not SchedulerMode.DISTRIBUTED:
            lease = self._scheduler.planner_lease()
            if lease is None or not lease.is_valid() or self._stopping.is_set():
                self._stopping.wait(wait)
                return None
            return lease
        with self._taking:
            if self._stopping.is_set():
                self._release()
                return None
            return self._take(wait)

    def _take(self, wait: float) -> Lease | None:
        if self._own is not None and self._own.is_valid():
            return self._own
        self._release()
        lease = self._acquire(wait)
        if lease is None:
            return None
        if self._stopping.is_set() or not self._scheduler.record_lease(lease):
            lease.release()  # a drain began during the last slice: no fence drawn
            return None
        log.info("this node plans (lock %s, fence %s)", PLANNER_LOCK, lease.fence)
        self._own = lease
        return lease

    def _acquire(self, wait: float) -> Lease | None:
        """The planner lock, waited for up to ``wait`` seconds in slices of at most
        :data:`TAKE_SLICE`; None once the node drains."""
        deadline = time.monotonic() + wait
        while not self._stopping.is_set():
            rest = deadline - time.monotonic()
            lease = self._locks.acquire(PLANNER_LOCK, blocking=True,
                                        timeout=max(0.0, min(rest, TAKE_SLICE)))
            if lease is not None or rest <= TAKE_SLICE:
                return lease
        return None

    def held(self) -> bool:
        """Whether this node plans now, without taking anything: for a read-only
        chore that one node should do (``jobserver.stuck``)."""
        if self._scheduler.mode is not SchedulerMode.DISTRIBUTED:
            return self._scheduler.planner_lease() is not None
        own = self._own
        return own is not None and own.is_valid()

    def release(self) -> None:
        """Let go of the planner lock, if this seat holds it."""
        with self._taking:
            self._release()

    def _release(self) -> None:
        own, self._own = self._own, None
        if own is not None:
            own.release()


class PlannerLoop(Loop):
    """A planner loop (the schedule evaluator, the trackers of view and batch jobs):
    rounds on the node holding the planner seat, each under the seat's lease.

    A round (:meth:`round`) fences its writes with the lease and returns how long to
    wait before the next one; :attr:`wake` cuts that wait short. A round refused by
    the fence lets go of the seat (the lock backend has not told this node yet that
    the lease is gone; until it does, the seat hands out the same lease: wait, not
    spin); a round that failed on a transient store error is tried again after
    ``poll_interval``. The seat is released when the loop stops.
    """

    def __init__(self, name: str, seat: PlannerSeat | None, poll_interval: float,
                 stopping: threading.Event | None = None) -> None:
        super().__init__(name, stopping=stopping)
        self._seat = seat
        self.poll_interval = poll_interval
        self.wake = threading.Event()

    def stop(self) -> None:
        super().stop()
        self.wake.set()

    def round(self, lease: Lease) -> float:
        """One round under ``lease``; the seconds to wait before the next (0: at once)."""
        raise NotImplementedError

    def run(self) -> None:
        seat = self._seat
        if seat is None:
            raise RuntimeError(f"{self.name}: a planner loop runs only with a planner seat")
        while not self.stopping.is_set():
            try:
                lease = seat.lease(self.poll_interval)
                if lease is None:
                    continue
                wait = self.round(lease)
            except FencedOff as exc:
                log.warning("%s: fenced off: %s", self.name, exc)
                seat.release()
                self.stopping.wait(self.poll_interval)
                continue
            except TRANSIENT as exc:
                log.warning("%s: a round failed (%s: %s); will retry", self.name,
                            type(exc).__name__, exc)
                self.stopping.wait(self.poll_interval)
                continue
            if wait > 0:
                self.wake.wait(wait)
                self.wake.clear()
        seat.release()
