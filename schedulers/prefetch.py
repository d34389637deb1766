"""Claim-ahead (``scheduler.prefetch``): jobs held for the slots about to free.

A slot that frees is otherwise refilled only by a claim that begins after it freed,
so with few slots and short jobs the slots wait for claims more than they run. A
scheduler whose claim round just filled the runner therefore claims up to
``prefetch`` more jobs *ahead*: they stay READY in the store, held by this node
(:mod:`jobserver.store.holds`), and when a slot frees they start by id, which skips
the claim's search. Holding is not starting: a held job has no attempt, no start time
and no running step, and its start is a compare-and-set under the lease it was held
with, so one paused, discarded, rescued or fenced off meanwhile never runs.

Invariants, each kept here:

* at most ``limit`` jobs are held by this node at once;
* a job held longer than ``timeout`` seconds goes back to any claimer (READY, no
  node) with no attempt consumed; only a claim round that fills the runner holds
  more (:meth:`fill`), so a node whose slots are busy with long jobs does not take
  the same jobs back and forth;
* every held job this node forgets about (started, expired, given back at a drain or
  when its lease is lost) is given back in the store, or, if the store could not be
  written, at the next round that can (:meth:`Prefetch.reconcile`).

Not thread-safe: the scheduler calls it from its claim rounds, under its hand-over
lock (see :meth:`schedulers.base.Scheduler.handover`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from jobserver.store import Store
from jobserver.store.records import JobRecord
from locks.base import Lease

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Held:
    """One held job: the fence it was held under and when (monotonic seconds)."""

    fence: int
    since: float


class Prefetch:
    def __init__(self, store: Store, node_id: str, limit: int, timeout: float) -> None:
        self._store = store
        self._node_id = node_id
        self.limit = limit
        self.timeout = timeout
        #: Held jobs in claim order (highest priority first).
        self._held: dict[int, Held] = {}
        #: Whose holds the store may have that this node does not know of: this
        #: node's (a give-back failed, or an earlier process of this node held some),
        #: every node's (a new active scheduler in single mode), or none.
        self._stale: str | None = "mine" if limit > 0 else None

    def __len__(self) -> int:
        return len(self._held)

    def take(self, lease: Lease, room: int) -> list[JobRecord]:
        """Start up to ``room`` held jobs under ``lease``; the started jobs, for the
        runner. Held jobs this start did not take (paused, discarded, rescued, held
        under an older lease) are given back: this node forgets them."""
        if not self._held:
            return []
        fence = lease.fence
        ids = [job_id for job_id, held in self._held.items() if held.fence == fence][:room]
        if not ids:
            return []
        started = self._store.holds.start_held(self._node_id, lease, ids)
        for job_id in ids:
            del self._held[job_id]
        missed = set(ids) - {job.id for job in started}
        if missed:
            self._give_back(sorted(missed), fence, "not startable any more")
        return started

    def fill(self, lease: Lease, keyless: bool = False) -> int:
        """Hold as many jobs as the limit leaves room for, under ``lease``; called by a
        claim round that filled the runner. Returns how many were held."""
        want = self.limit - len(self._held)
        if want <= 0:
            return 0
        fence = lease.fence
        ids = self._store.holds.hold(self._node_id, lease, want, keyless=keyless)
        now = time.monotonic()
        for job_id in ids:
            self._held[job_id] = Held(fence, now)
        return len(ids)

    def seconds_to_expiry(self) -> float | None:
        """Seconds until the oldest held job has waited ``timeout``; None if none held."""
        held = list(self._held.values())  # read outside the claim rounds' lock
        if not held:
            return None
        oldest = min(entry.since for entry in held)
        return max(0.0, oldest + self.timeout - time.monotonic())

    def expire(self) -> int:
        """Give back the jobs held longer than ``timeout``; how many went back."""
        deadline = time.monotonic() - self.timeout
        expired = [job_id for job_id, held in self._held.items() if held.since <= deadline]
        if expired:
            self._forget_and_give_back(expired, "waited longer than scheduler.prefetch_timeout")
        return len(expired)

    def may_fill(self) -> bool:
        """Whether a claim round that filled the runner should hold more now."""
        return self.limit > 0 and len(self._held) < self.limit

    def give_back_all(self, why: str) -> int:
        """Give back every held job (a drain, a lost lease); best effort."""
        return self._forget_and_give_back(list(self._held), why)

    def forget_others(self) -> None:
        """This node became single mode's active scheduler: any job another node
        holds was held under a lease since superseded; give it back at the next
        round (:meth:`reconcile`)."""
        if self.limit > 0:
            self._stale = "all"

    def reconcile(self) -> None:
        """Give back what the store holds for this node (or, after
        :meth:`forget_others`, for any node) beyond the jobs this node knows it holds."""
        if self._stale is not None:
            node = None if self._stale == "all" else self._node_id
            self._store.holds.release_holds(node, keep=list(self._held))
            self._stale = None

    def _forget_and_give_back(self, job_ids: list[int], why: str) -> int:
        by_fence: dict[int, list[int]] = {}
        for job_id in job_ids:
            by_fence.setdefault(self._held.pop(job_id).fence, []).append(job_id)
        return sum(self._give_back(ids, fence, why) for fence, ids in by_fence.items())

    def _give_back(self, job_ids: list[int], fence: int, why: str) -> int:
        try:
            released = self._store.holds.release_holds(self._node_id, job_ids, fence=fence)
        except Exception:  # noqa: BLE001 - reconciled at the next round that can write
            log.warning("could not give back %d held job(s) (%s); will retry",
                        len(job_ids), why, exc_info=True)
            self._stale = self._stale or "mine"
            return 0
        if released:
            log.info("gave back %d held job(s): %s", released, why)
        return released
