"""``GET /api/v1/cluster``: mode, lock backend, nodes and the active one.

A node is shown alive only while the lock backend does not know it gone (see
``jobserver.presence``), so a ``kill -9`` shows within a second, not when its last
heartbeat ages out; and "active" names one node: the one ``active`` names. The
dashboard's cluster page shows the same judgement (:func:`cluster_view`).
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Blueprint
from flask.typing import ResponseReturnValue

from jobserver.api import ApiContext, api
from jobserver.api.serialize import server_json
from jobserver.presence import active_node, alive_nodes
from jobserver.store.records import ServerRecord
from schedulers import ACTIVE_LOCK

blueprint = Blueprint("cluster", __name__, url_prefix="/api/v1")


@dataclass(frozen=True)
class NodeView:
    """A node with whether it is alive and its role, as judged now."""

    server: ServerRecord
    alive: bool
    role: str


@dataclass(frozen=True)
class ClusterView:
    mode: str
    lock_backend: str
    active: str | None  # the node scheduling for the cluster (single, leader mode)
    nodes: list[NodeView]


def cluster_view(ctx: ApiContext) -> ClusterView:
    """The nodes as the lock service and their heartbeats show them now: one read of
    the ``servers`` table and of the active lock's holder."""
    servers = ctx.store.servers.list()
    alive = alive_nodes(servers, ctx.config.server.dead_after, ctx.presence)
    active_lock = ACTIVE_LOCK.get(ctx.config.scheduler.mode)
    active = active_node(ctx.store, active_lock, alive, ctx.presence)
    nodes = [NodeView(server, server.id in alive,
                      _role(server, server.id in alive, active_lock, active))
             for server in servers]
    return ClusterView(ctx.config.scheduler.mode.value, ctx.config.lock.backend, active, nodes)


@blueprint.get("/cluster")
def cluster() -> ResponseReturnValue:
    ctx = api()
    view = cluster_view(ctx)
    return {
        "mode": view.mode,
        "lock_backend": view.lock_backend,
        "active": view.active,
        "nodes": [server_json(node.server, node.alive, node.role) for node in view.nodes],
        "jobs": ctx.store.jobs.count_by_state(),
    }


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
