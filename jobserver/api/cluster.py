"""``GET /api/v1/cluster``: mode, lock backend, nodes and the active one."""

from __future__ import annotations

from flask import Blueprint
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.serialize import server_json
from schedulers import ACTIVE_LOCK

blueprint = Blueprint("cluster", __name__, url_prefix="/api/v1")


@blueprint.get("/cluster")
def cluster() -> ResponseReturnValue:
    ctx = api()
    dead_after = ctx.config.server.dead_after
    nodes = [server_json(server, dead_after) for server in ctx.store.servers.list()]
    return {
        "mode": ctx.config.scheduler.mode.value,
        "lock_backend": ctx.config.lock.backend,
        "active": _active(ctx, nodes),
        "nodes": nodes,
        "jobs": ctx.store.jobs.count_by_state(),
    }


def _active(ctx, nodes: list[dict]) -> str | None:
    """The node holding the newest lease of the mode's lock (the lock holder in
    ``single``, the leader in ``leader``), if it is alive; None in ``distributed``."""
    key = ACTIVE_LOCK.get(ctx.config.scheduler.mode)
    if key is None:
        return None
    holder = ctx.store.epochs.holder(key)
    alive = {node["id"] for node in nodes if node["alive"]}
    return holder if holder in alive else None
