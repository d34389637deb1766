"""``GET /api/v1/cluster``: mode, lock backend, nodes and the active one.

A node is shown alive only while the lock backend does not know it gone (see
``jobserver.presence``), so a ``kill -9`` shows within a second, not when its last
heartbeat ages out; and "active" names one node: the one ``active`` names.
"""

from __future__ import annotations

from flask import Blueprint
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.serialize import server_json
from jobserver.presence import active_node, alive_nodes
from jobserver.store.records import ServerRecord
from schedulers import ACTIVE_LOCK

blueprint = Blueprint("cluster", __name__, url_prefix="/api/v1")


@blueprint.get("/cluster")
def cluster() -> ResponseReturnValue:
    ctx = api()
    servers = ctx.store.servers.list()
    alive = alive_nodes(servers, ctx.config.server.dead_after, ctx.presence)
    active_lock = ACTIVE_LOCK.get(ctx.config.scheduler.mode)
    active = active_node(ctx.store, active_lock, alive, ctx.presence)
    nodes = [server_json(server, server.id in alive,
                         _role(server, server.id in alive, active_lock, active))
             for server in servers]
    return {
        "mode": ctx.config.scheduler.mode.value,
        "lock_backend": ctx.config.lock.backend,
        "active": active,
        "nodes": nodes,
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
