"""Why a READY job is not running: the claim's rules read back, for one job on request
and counted for every job READY too long (``jobserver_jobs_stuck``).

A claim takes a READY job only when all of these hold (``jobserver.store.runs``:
``claimable`` and the PostgreSQL ``claim`` statement; the schedulers of
``schedulers/``), and the first that fails is the reason, in this order:

1. ``not_due``: its ``not_before`` is later than the store's clock;
2. ``waiting_upstream``: ``waiting_on > 0``, upstream jobs not final for their ``when``;
3. ``claimed_ahead`` (single and distributed modes, ``scheduler.prefetch``): a node
   claimed it ahead and starts it when one of its slots frees (or gives it back after
   ``scheduler.prefetch_timeout``); ``assigned`` (leader mode): the leader gave it to
   a node, which has not started it;
4. ``no_live_node``: ``assigned_servers`` names no live node;
5. ``no_scheduler``: no node claims at all (``single``: no active scheduler;
   ``leader``: no leader; ``distributed``: no node scheduling);
6. ``not_scheduling``: the live nodes of ``assigned_servers`` do not claim (``single``
   mode: only the active scheduler claims, and it is not one of them);
7. ``lock_held`` (distributed mode, where a ``lock_key`` is a segment lock held for
   the whole run): another job with the same ``lock_key`` is RUNNING;
8. ``no_free_slot``: every node that may claim it runs (or was given) as many jobs as
   its capacity; otherwise ``claimable``: a slot is free, and the next claim takes the
   READY jobs in priority order.

A node is live as the cluster view says: its row is ``alive`` and its heartbeat is
younger than ``server.dead_after``; it claims while its scheduling role is
``active``. Free slots are its capacity less the jobs it holds (RUNNING, and READY
jobs assigned to it), as the leader counts them.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, case, exists, false, func, select

from jobserver.states import State
from jobserver.store.engine import seconds_since, store_now
from jobserver.store.records import JobRecord
from jobserver.store.tables import jobs, servers

NOT_DUE = "not_due"
WAITING_UPSTREAM = "waiting_upstream"
CLAIMED_AHEAD = "claimed_ahead"
ASSIGNED = "assigned"
NO_LIVE_NODE = "no_live_node"
NO_SCHEDULER = "no_scheduler"
NOT_SCHEDULING = "not_scheduling"
LOCK_HELD = "lock_held"
NO_FREE_SLOT = "no_free_slot"
CLAIMABLE = "claimable"
#: Every reason, in the order they are checked.
CODES = (NOT_DUE, WAITING_UPSTREAM, CLAIMED_AHEAD, ASSIGNED, NO_LIVE_NODE, NO_SCHEDULER,
         NOT_SCHEDULING, LOCK_HELD, NO_FREE_SLOT, CLAIMABLE)
#: The reasons of a job that waits for nothing but room (or for the next claim): not
#: counted as stuck, however long it waits.
ONLY_BUSY = frozenset({CLAIMED_AHEAD, NO_FREE_SLOT, CLAIMABLE})
#: The reasons ``jobserver_jobs_stuck`` reports.
STUCK_CODES = tuple(code for code in CODES if code not in ONLY_BUSY)

_NO_SCHEDULER = {"single": "no node is the active scheduler (single mode)",
                 "leader": "no leader is elected (leader mode)",
                 "distributed": "no live node is scheduling"}


@dataclass(frozen=True)
class NotRunning:
    """Why a READY job is not running now: a ``code`` of :data:`CODES`, a sentence
    saying it, and the facts behind it (``not_before``, ``upstreams``, ``job``, …)."""

    code: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRoom:
    """A live node: whether it claims now (its role is ``active``) and its free slots."""

    id: str
    active: bool
    free: int
    capacity: int


@dataclass(frozen=True)
class Cluster:
    """The live nodes, as a claim would find them, in ``mode``."""

    mode: str
    live: builtins.list[NodeRoom]

    def claimers(self) -> builtins.list[NodeRoom]:
        """The nodes that may start a job now: the active scheduler (``single``), the
        scheduling nodes (``distributed``), every live node while a leader assigns
        (``leader``)."""
        active = [node for node in self.live if node.active]
        if self.mode == "leader":
            return list(self.live) if active else []
        return active


@dataclass(frozen=True)
class Facts:
    """What of a READY job the reasons depend on. ``lock_holder``: the RUNNING job
    holding its ``lock_key`` (0 when only known to exist), None when none does."""

    not_due_until: datetime | None
    waiting_on: int
    node: str | None
    assigned_servers: builtins.list[str] | None
    lock_key: str | None
    lock_holder: tuple[int, str | None] | None = None
    upstreams: builtins.list[dict[str, Any]] = field(default_factory=list)


def classify(facts: Facts, cluster: Cluster) -> NotRunning:
    """The first claim rule ``facts`` fail, in the order of this module's doc."""
    if facts.not_due_until is not None:
        until = facts.not_due_until.isoformat().replace("+00:00", "Z")
        return NotRunning(NOT_DUE, f"not due until {until}", {"not_before": until})
    if facts.waiting_on > 0:
        waits = ", ".join(f"job {up['job']} ({up['when']}, {up['state']})"
                          for up in facts.upstreams)
        return NotRunning(WAITING_UPSTREAM, f"waiting for {facts.waiting_on} upstream "
                          f"job(s){': ' + waits if waits else ''}",
                          {"upstreams": facts.upstreams})
    if facts.node is not None:
        return _assigned(facts.node, cluster)
    return _placement(facts, cluster)


def _assigned(node: str, cluster: Cluster) -> NotRunning:
    if cluster.mode != "leader":
        return _claimed_ahead(node, cluster)
    if any(live.id == node for live in cluster.live):
        return NotRunning(ASSIGNED, f"assigned to node {node} by the leader; it starts the "
                          "job at its next claim", {"node": node})
    return NotRunning(ASSIGNED, f"assigned to node {node} by the leader, and {node} is not "
                      "live: the leader takes the job back when it rescues that node's jobs",
                      {"node": node})


def _claimed_ahead(node: str, cluster: Cluster) -> NotRunning:
    if any(live.id == node for live in cluster.live):
        return NotRunning(CLAIMED_AHEAD, f"claimed by node {node}, waiting for a slot: it "
                          "starts when one frees, or goes back to any node after "
                          "scheduler.prefetch_timeout", {"node": node})
    return NotRunning(CLAIMED_AHEAD, f"claimed by node {node}, which is not live: it goes "
                      "back to any node when that node's jobs are rescued", {"node": node})


def _placement(facts: Facts, cluster: Cluster) -> NotRunning:
    allowed = facts.assigned_servers
    live = [node for node in cluster.live if allowed is None or node.id in allowed]
    if allowed is not None and not live:
        return NotRunning(NO_LIVE_NODE, f"no live node among assigned_servers "
                          f"{json.dumps(allowed)}", {"assigned_servers": allowed})
    claimers = cluster.claimers()
    if not claimers:
        return NotRunning(NO_SCHEDULER, _NO_SCHEDULER.get(cluster.mode, "no node schedules"))
    eligible = [node for node in claimers if allowed is None or node.id in allowed]
    if not eligible:
        names = ", ".join(node.id for node in claimers)
        return NotRunning(NOT_SCHEDULING, f"none of assigned_servers {json.dumps(allowed)} "
                          f"claims jobs now; {names} does", {"assigned_servers": allowed,
                                                            "scheduling": [n.id for n in claimers]})
    if cluster.mode == "distributed" and facts.lock_holder is not None:
        return _lock_held(facts.lock_key or "", facts.lock_holder)
    return _room(eligible)


def _lock_held(lock_key: str, holder: tuple[int, str | None]) -> NotRunning:
    job, node = holder
    who = f"job {job}" if job else "another job"
    where = f" (RUNNING on {node})" if node else ""
    return NotRunning(LOCK_HELD, f"lock_key {lock_key!r} is held by {who}{where}",
                      {"lock_key": lock_key, "job": job or None, "node": node})


def _room(eligible: builtins.list[NodeRoom]) -> NotRunning:
    free = [node for node in eligible if node.free > 0]
    nodes = {node.id: {"free": max(node.free, 0), "capacity": node.capacity}
             for node in eligible}
    if free:
        slots = ", ".join(f"{node.id} ({node.free} of {node.capacity})" for node in free)
        return NotRunning(CLAIMABLE, f"claimable now: free slots on {slots}; the next claim "
                          "takes READY jobs in priority order", {"nodes": nodes})
    busy = ", ".join(f"{node.id} {node.capacity - node.free}/{node.capacity}"
                     for node in eligible)
    return NotRunning(NO_FREE_SLOT, f"no free slot on any node that may run it ({busy})",
                      {"nodes": nodes})


# -- reading the facts ---------------------------------------------------------------------
def cluster(conn: Connection, mode: str, dead_after: float) -> Cluster:
    """The live nodes with their roles and free slots: two short reads (the servers,
    and the jobs each holds by the (state, node) prefix of the queue index)."""
    age = seconds_since(servers.c.heartbeat_at)
    rows = conn.execute(select(servers.c.id, servers.c.role, servers.c.capacity)
                        .where(servers.c.state == "alive", age <= dead_after)
                        .order_by(servers.c.id)).all()
    held: dict[str, int] = dict(conn.execute(
        select(jobs.c.node, func.count())
        .where(jobs.c.state.in_([State.RUNNING.value, State.READY.value]),
               jobs.c.node.is_not(None)).group_by(jobs.c.node)).all())
    return Cluster(mode, [NodeRoom(row.id, row.role == "active",
                                   row.capacity - int(held.get(row.id, 0)), row.capacity)
                          for row in rows])


def explain(conn: Connection, job: JobRecord, mode: str, dead_after: float) -> NotRunning:
    """Why ``job`` (READY, read with its upstreams) is not running now."""
    now = conn.execute(select(store_now())).scalar_one()
    holder = None
    if mode == "distributed" and job.lock_key is not None:
        row = conn.execute(select(jobs.c.id, jobs.c.node).where(
            jobs.c.state == State.RUNNING.value, jobs.c.lock_key == job.lock_key,
            jobs.c.id != job.id).order_by(jobs.c.id).limit(1)).first()
        holder = None if row is None else (int(row.id), row.node)
    upstreams = [{"job": up.job, "when": up.when, "state": up.state.value}
                 for up in job.after or [] if not up.met]
    facts = Facts(job.not_before if job.not_before and job.not_before > now else None,
                  job.waiting_on, job.node, job.assigned_servers, job.lock_key, holder,
                  upstreams)
    return classify(facts, cluster(conn, mode, dead_after))


def count_stuck(conn: Connection, mode: str, dead_after: float,
                older_than: float) -> dict[str, int]:
    """How many jobs have been READY (by ``updated_at``) for more than ``older_than``
    seconds, by the reason of each that is not :data:`ONLY_BUSY`: one grouped read of
    those jobs (plus :func:`cluster`), never one per job."""
    due = jobs.c.not_before > store_now()
    early = case((due, NOT_DUE), (jobs.c.waiting_on > 0, WAITING_UPSTREAM), else_=None)
    holder = jobs.alias("holder")
    locked = (exists().where(holder.c.state == State.RUNNING.value,
                             holder.c.lock_key == jobs.c.lock_key, holder.c.id != jobs.c.id)
              if mode == "distributed" else false())
    old = (select(early.label("early"), jobs.c.node, jobs.c.assigned_servers,
                  locked.label("locked"))
           .where(jobs.c.state == State.READY.value,
                  jobs.c.updated_at < store_now(-older_than)).subquery())
    groups = conn.execute(select(old.c.early, old.c.node, old.c.assigned_servers,
                                 old.c.locked, func.count())
                          .group_by(old.c.early, old.c.node, old.c.assigned_servers,
                                    old.c.locked)).all()
    counts = dict.fromkeys(STUCK_CODES, 0)
    if not groups:
        return counts
    nodes = cluster(conn, mode, dead_after)
    for code, count in _classified(groups, nodes):
        if code not in ONLY_BUSY:
            counts[code] += count
    return counts


def _classified(groups: Iterable[Any], nodes: Cluster) -> Iterable[tuple[str, int]]:
    for early, node, assigned, locked, count in groups:
        if early is not None:
            yield early, int(count)
            continue
        # Only the codes are needed here: which key, and which job holds it, are not read.
        facts = Facts(None, 0, node, json.loads(assigned) if assigned else None, None,
                      (0, None) if locked else None)
        yield classify(facts, nodes).code, int(count)

