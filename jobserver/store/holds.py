"""Claim-ahead (``scheduler.prefetch``): jobs a node claims before it has a slot.

A held job stays READY, with ``node`` and the holding lease's fence set. Every rule
about READY jobs then holds for it unchanged: other claims skip it (the claim takes
only jobs with no node, as a leader's assignments), pause and discard act on it as on
any READY job, a rescue of a dead holder gives it back (``requeue_orphans`` frees the
READY jobs of a dead node), and nothing about it reads as started (no attempt, no
``started_at``, no RUNNING step, no audit row). Its start is the claim's own
compare-and-set, by id, under the lease it was held with, so a job paused, discarded
or given back meanwhile, or held under a lease since superseded, never starts.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import update

from jobserver.states import State
from jobserver.store import Transactions, pgclaim
from jobserver.store.engine import store_now
from jobserver.store.epochs import is_current
from jobserver.store.pgclaim import ClaimKind
from jobserver.store.queries import driver_rows
from jobserver.store.records import JobRecord
from jobserver.store.runs import LeaseRef, RunRepository, open_claim_params, ready_candidates
from jobserver.store.tables import jobs


class HoldRepository:
    def __init__(self, tx: Transactions, runs: RunRepository) -> None:
        self._tx = tx
        self._runs = runs

    def hold(self, node: str, lease: LeaseRef, limit: int, keyless: bool = False) -> list[int]:
        """Claim up to ``limit`` jobs ahead for ``node`` under ``lease`` without
        starting them; their ids in claim order.

        A held job stays READY with ``node`` and the lease's fence set: other claims
        skip it (as a leader's assignment), pause and discard act on it as on any
        READY job, a rescue of ``node`` gives it back, and nothing about it reads as
        started (no attempt, no ``started_at``, no RUNNING step, no audit row).
        Matches only while ``lease`` is the newest of its key.
        """
        if self._tx.dialect == "postgresql":
            params = open_claim_params(node, lease, limit, keyless=keyless)
            with self._tx.statement() as conn:
                return [row[0] for row in driver_rows(conn, "hold", params)]
        candidates = ready_candidates(node, limit, keyed=False if keyless else None)
        with self._tx.write() as conn:
            rows = conn.execute(update(jobs).where(
                jobs.c.id.in_(candidates), jobs.c.state == State.READY.value,
                jobs.c.node.is_(None), is_current(lease.key, lease.fence))
                .values(node=node, fence=lease.fence, updated_at=store_now())
                .returning(jobs.c.id, jobs.c.priority)).all()
        return [row.id for row in sorted(rows, key=lambda row: (-row.priority, row.id))]

    def start_held(self, node: str, lease: LeaseRef, job_ids: list[int]) -> list[JobRecord]:
        """Start the jobs of ``job_ids`` that ``node`` still holds under ``lease``, as
        a claim would (the same compare-and-set, first step and audit rows), while
        ``lease`` is the newest of its key. Those paused, discarded, rescued or held
        under an older lease meanwhile are not started."""
        if not job_ids:
            return []
        if self._tx.dialect == "postgresql":
            return self._runs.claim_postgresql(pgclaim.params(
                ClaimKind.HELD, node, len(job_ids), key=lease.key, fence=lease.fence,
                job_ids=job_ids))
        return self._runs.start_where(node, [
            jobs.c.id.in_(job_ids), jobs.c.node == node, jobs.c.fence == lease.fence,
            jobs.c.waiting_on == 0, is_current(lease.key, lease.fence)])

    def release_holds(self, node: str | None, job_ids: list[int] | None = None,
                      fence: int | None = None, keep: Sequence[int] = ()) -> int:
        """Give jobs claimed ahead back to any claimer (READY, no node): those of
        ``job_ids`` that ``node`` holds under ``fence``, or every job ``node`` holds
        but ``keep``, or with ``node`` None every held job of any node (the store
        must then hold no leader assignments). Wakes idle schedulers; returns how
        many went back."""
        where = [jobs.c.state == State.READY.value, jobs.c.node.is_not(None)
                 if node is None else jobs.c.node == node]
        if job_ids is not None:
            where.append(jobs.c.id.in_(job_ids))
        if fence is not None:
            where.append(jobs.c.fence == fence)
        if keep:
            where.append(jobs.c.id.not_in(list(keep)))
        with self._tx.write() as conn:
            released = conn.execute(update(jobs).where(*where)
                                    .values(node=None, updated_at=store_now())).rowcount
            if released:
                self._tx.notify(conn)
        return int(released)
