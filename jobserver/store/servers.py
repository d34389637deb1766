"""Nodes: registration, heartbeats on the store's clock, and rescue of their orphans."""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Connection, func, insert, select, update

from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.engine import seconds_since, store_now
from jobserver.store.hooks import PlannerHooks
from jobserver.store.records import ServerRecord
from jobserver.store.tables import AuditEvent, jobs, record_events, servers, steps

if TYPE_CHECKING:
    from jobserver.planners.hooks import JobInputs


class OwnedRun(NamedTuple):
    """One run of a job on a node: what a rescue's compare-and-set matches."""

    id: int
    fence: int
    attempt: int


class ServerRepository:
    def __init__(self, tx: Transactions, hooks: PlannerHooks | None = None) -> None:
        """``hooks``: the planners' (:mod:`jobserver.store.hooks`), none by default."""
        self._tx = tx
        self._hooks = hooks or PlannerHooks()

    def register(self, server_id: str, host: str, pid: int, mode: str, capacity: int,
                 tags: dict[str, Any] | None = None) -> None:
        values = {"host": host, "pid": pid, "mode": mode, "role": "standby", "state": "alive",
                  "capacity": capacity, "running": 0, "tags": tags or {},
                  "started_at": store_now(), "heartbeat_at": store_now()}
        with self._tx.write() as conn:
            updated = conn.execute(update(servers).where(servers.c.id == server_id)
                                   .values(**values)).rowcount
            if not updated:
                conn.execute(insert(servers).values(id=server_id, **values))

    def heartbeat(self, server_id: str, running: int, role: str) -> bool:
        """Stamp the node alive; False if its row vanished (the caller re-registers)."""
        with self._tx.write() as conn:
            return bool(conn.execute(
                update(servers).where(servers.c.id == server_id)
                .values(heartbeat_at=store_now(), running=running, role=role,
                        state="alive")).rowcount)

    def set_capacity(self, server_id: str, capacity: int) -> None:
        """Advertise how many jobs the node takes (0 while it drains: the leader
        assigns by free capacity)."""
        with self._tx.write() as conn:
            conn.execute(update(servers).where(servers.c.id == server_id)
                         .values(capacity=capacity))

    def set_role(self, server_id: str, role: str) -> None:
        with self._tx.write() as conn:
            conn.execute(update(servers).where(servers.c.id == server_id).values(role=role))

    def mark_stopped(self, server_id: str) -> None:
        with self._tx.write() as conn:
            conn.execute(update(servers).where(servers.c.id == server_id)
                         .values(state="stopped", role="standby", running=0))

    def list(self) -> list[ServerRecord]:
        with self._tx.read() as conn:
            rows = conn.execute(select(servers, seconds_since(servers.c.heartbeat_at)
                                       .label("heartbeat_age"))
                                .order_by(servers.c.id)).mappings().all()
        return [ServerRecord.from_row(row) for row in rows]

    def running_on(self, node_ids: Collection[str]) -> dict[str, int]:
        """How many jobs the store has RUNNING on each of ``node_ids`` now (absent: none).

        A node's ``running`` column is what its last heartbeat said; a dead node's is
        stale once its jobs are rescued, so the cluster view asks the jobs themselves
        (one read of ``ix_jobs_queue``'s (state, node) prefix)."""
        if not node_ids:
            return {}
        with self._tx.read() as conn:
            rows = conn.execute(select(jobs.c.node, func.count())
                                .where(jobs.c.state == State.RUNNING.value,
                                       jobs.c.node.in_(list(node_ids)))
                                .group_by(jobs.c.node)).all()
        return {row[0]: int(row[1]) for row in rows}

    def owned_jobs(self) -> dict[str, set[OwnedRun]]:
        """Each node that owns at least one RUNNING job, or (leader mode) a READY job
        assigned to it, with its RUNNING jobs.

        These are the candidates for orphan checks (a node that died holding only
        assignments would otherwise keep them forever) and, read before a node is
        judged dead, the only jobs a rescue may take from it (``requeue_orphans``).
        """
        owned: dict[str, set[OwnedRun]] = {}
        with self._tx.read() as conn:
            rows = conn.execute(select(jobs.c.node, jobs.c.state, jobs.c.id, jobs.c.fence,
                                       jobs.c.attempt)
                                .where(jobs.c.state.in_([State.RUNNING.value,
                                                         State.READY.value]),
                                       jobs.c.node.is_not(None)))
            for row in rows:
                running = owned.setdefault(row.node, set())
                if row.state == State.RUNNING.value:
                    running.add(OwnedRun(row.id, row.fence, row.attempt))
        return owned

    def stale(self, node_ids: set[str], dead_after: float) -> dict[str, str]:
        """Of ``node_ids``, those with no live row, each with why: not registered,
        stopped, or its last heartbeat (store clock) older than ``dead_after``."""
        if not node_ids:
            return {}
        with self._tx.read() as conn:
            rows = conn.execute(select(servers.c.id, servers.c.state,
                                       seconds_since(servers.c.heartbeat_at).label("age"))
                                .where(servers.c.id.in_(list(node_ids)))).all()
        found = {row.id: row for row in rows}
        reasons = {}
        for node in node_ids:
            row = found.get(node)
            if row is None:
                reasons[node] = "not registered"
            elif row.state != "alive":
                reasons[node] = f"marked {row.state}"
            elif row.age is None:
                reasons[node] = "no heartbeat"
            elif row.age > dead_after:
                reasons[node] = f"last heartbeat {row.age:.1f} s ago"
        return reasons

    def requeue_orphans(self, node_id: str, rescuer: str,
                        only: Collection[OwnedRun] | None = None, why: str = ""
                        ) -> builtins.list[tuple[int, State]]:
        """Re-queue (or fail) every job RUNNING on a dead node, each run once (the
        step that was running runs again: at-least-once, docs/jobs.md "Guarantees").

        Each job is a compare-and-set on (id, node, fence, attempt), so two rescuers
        never both move it. A job whose running step is ``retryable: false`` goes to
        ERROR instead of READY. ``only`` limits the rescue to those runs: the jobs
        seen RUNNING there *before* the node was judged dead (the compare-and-set
        skips any that moved on since). A node judged dead while it was coming back
        (its presence lock not yet taken again) may have claimed jobs since, and
        those are its own. ``why`` (how the node was found dead) goes into the
        audit message. Returns ``[(job_id, new_state)]``.
        """
        with self._tx.write() as conn:
            # Leader mode: jobs assigned to the dead node but not started go back to
            # the pool (still READY; no state change, so no event).
            conn.execute(update(jobs).where(jobs.c.state == State.READY.value,
                                            jobs.c.node == node_id).values(node=None))
            orphans = sorted(only) if only is not None else conn.execute(
                select(jobs.c.id, jobs.c.fence, jobs.c.attempt)
                .where(jobs.c.state == State.RUNNING.value, jobs.c.node == node_id)).all()
            inputs = self._hooks.inputs
            return [(job.id, state) for job in orphans
                    if (state := _requeue(conn, job, node_id, rescuer, why, inputs))
                    is not None]


def _requeue(conn: Connection, job: Any, node_id: str, rescuer: str, why: str,
             inputs: JobInputs | None) -> State | None:
    """Move one orphan on, and give back what its run took (``inputs``)."""
    running = conn.execute(select(steps.c.id, steps.c.name, steps.c.retryable)
                           .where(steps.c.job_id == job.id,
                                  steps.c.state == State.RUNNING.value)).all()
    fatal = [step.name for step in running if not step.retryable]
    target = State.ERROR if fatal else State.READY
    died = f"node {node_id} died ({why})" if why else f"node {node_id} died"
    message = (f"{died} while non-retryable step(s) {', '.join(fatal)} ran"
               if fatal else f"{died}; re-queued by {rescuer}")
    values: dict[str, Any] = {"state": target.value, "node": None, "updated_at": store_now()}
    if fatal:
        values.update(error=message, finished_at=store_now())
    moved = conn.execute(update(jobs).where(
        jobs.c.id == job.id, jobs.c.state == State.RUNNING.value, jobs.c.node == node_id,
        jobs.c.fence == job.fence, jobs.c.attempt == job.attempt).values(**values)).rowcount
    if not moved:
        return None
    step_events = []
    for step in running:
        step_state = State.ERROR if not step.retryable else State.READY
        conn.execute(update(steps).where(steps.c.id == step.id).values(
            state=step_state.value, finished_at=store_now(),
            error=message if step_state is State.ERROR else None))
        step_events.append(AuditEvent(job.id, State.RUNNING, step_state, step.name, rescuer,
                                      message=message))
    record_events(conn, [AuditEvent(job.id, State.RUNNING, target, None, rescuer, job.fence,
                                    job.attempt, message)] + step_events)
    if inputs is not None:
        inputs.settle(conn, [job.id], error=message)
    return target
