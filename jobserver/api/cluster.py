"""``GET /api/v1/cluster``: mode, lock backend, nodes and the active one."""

from __future__ import annotations

from flask import Blueprint

from jobserver.api import api
from jobserver.api.serialize import server_json

blueprint = Blueprint("cluster", __name__, url_prefix="/api/v1")


@blueprint.get("/cluster")
def cluster():
    ctx = api()
    dead_after = ctx.config.server.dead_after
    nodes = [server_json(server, dead_after) for server in ctx.store.servers.list()]
    active = [node["id"] for node in nodes if node["alive"] and node["role"] == "active"]
    return {
        "mode": ctx.config.scheduler.mode.value,
        "lock_backend": ctx.config.lock.backend,
        "active": active[0] if active else None,
        "nodes": nodes,
        "jobs": ctx.store.jobs.count_by_state(),
    }
