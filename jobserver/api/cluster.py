"""``GET /api/v1/cluster``: mode, lock backend, nodes, the active one and the planner.

A node is shown alive only while the lock backend does not know it gone (see
``jobserver.presence``), so a ``kill -9`` shows within a second, not when its last
heartbeat ages out; and "active" names one node: the one ``active`` names. A node
not alive has the state ``dead`` (or ``stopped``), never its row's ``alive``, and as
``running`` the jobs the store has RUNNING on it: after a rescue, none. The
dashboard's cluster page shows the same judgement (:func:`cluster_view`).

``planner`` names the node whose planner loops act (schedules, retention, the view
and batch trackers; ``jobserver.planner``) and since when it does: the holder of the
seat's lock by the same rule as ``active``, so in ``single`` and ``leader`` mode it is
the active node, and in ``distributed`` mode the holder of the planner lock. A killed
planner is never named: the view shows nobody until its successor takes the lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint
from flask.typing import ResponseReturnValue

from jobserver.api import ApiContext, api
from jobserver.api.serialize import server_json, time_text
from jobserver.planner import seat_key
from jobserver.presence import alive_nodes, seat_holder
from jobserver.store.epochs import Taken
from jobserver.store.records import ServerRecord
from schedulers import ACTIVE_LOCK

blueprint = Blueprint("cluster", __name__, url_prefix="/api/v1")


@dataclass(frozen=True)
class NodeView:
    """A node as judged now: whether it is alive, its role, its ``state`` (``alive``,
    or ``stopped`` or ``dead`` for a node not alive, whatever its row still says) and
    the jobs ``running`` on it: an alive node's last heartbeat, a node not alive's
    RUNNING jobs in the store, which its rescue moves away."""

    server: ServerRecord
    alive: bool
    role: str
    state: str
    running: int


@dataclass(frozen=True)
class ClusterView:
    mode: str
    lock_backend: str
    active: str | None  # the node scheduling for the cluster (single, leader mode)
    nodes: list[NodeView]
    planner: Taken | None = None  # the planner seat's holder and since when


def planner_json(seat: Taken | None) -> dict[str, Any] | None:
    """``{"node", "since"}`` of the planner seat's holder; null while nobody holds it."""
    return None if seat is None else {"node": seat.holder, "since": time_text(seat.at)}


def cluster_view(ctx: ApiContext) -> ClusterView:
    """The nodes as the lock service and their heartbeats show them now: one read of
    the ``servers`` table and of the planner seat's holder, who is the active node
    where one node schedules (the seat's lock is then the active lock)."""
    servers = ctx.store.servers.list()
    alive = alive_nodes(servers, ctx.config.server.dead_after, ctx.presence)
    mode = ctx.config.scheduler.mode
    active_lock = ACTIVE_LOCK.get(mode)
    planner = seat_holder(ctx.store, seat_key(mode), alive, ctx.presence)
    active = planner.holder if planner is not None and active_lock is not None else None
    gone = ctx.store.servers.running_on([s.id for s in servers if s.id not in alive])
    nodes = [_node(server, server.id in alive, _role(server, server.id in alive,
                                                     active_lock, active), gone)
             for server in servers]
    return ClusterView(mode.value, ctx.config.lock.backend, active, nodes, planner)


@blueprint.get("/cluster")
def cluster() -> ResponseReturnValue:
    ctx = api()
    view = cluster_view(ctx)
    return {
        "mode": view.mode,
        "lock_backend": view.lock_backend,
        "active": view.active,
        "planner": planner_json(view.planner),
        "nodes": [server_json(node.server, node.alive, node.role, node.state, node.running)
                  for node in view.nodes],
        "jobs": ctx.store.jobs.count_by_state(),
    }


def _node(server: ServerRecord, alive: bool, role: str, gone: dict[str, int]) -> NodeView:
    """A node alive is as its heartbeat says. One not alive is ``stopped`` (it said
    so) or ``dead`` (its row may still say ``alive``: the lock service told first),
    with the jobs the store has RUNNING on it now, not its last heartbeat's count."""
    if alive:
        return NodeView(server, True, role, server.state, server.running)
    state = "stopped" if server.state == "stopped" else "dead"
    return NodeView(server, False, role, state, gone.get(server.id, 0))


def _role(server: ServerRecord, alive: bool, active_lock: str | None,
          active: str | None) -> str:
    """``none`` for a node not alive. Where one node schedules (``single``,
    ``leader``), ``active`` for that node only and ``standby`` for the others: a row
    may still say ``active`` for a node that has just lost the lock, or whose
    successor has taken it. In ``distributed`` mode, the role the node recorded."""
    if not alive:
        return "none"
    if active_lock is None:
        return server.role
    return "active" if server.id == active else "standby"
