"""``GET /healthz``: the one route without authentication.

Healthy means this process can use the store and its node has not given up: a node
whose required background loop died marks itself failed (see ``jobserver.loops``),
and its API answers 503 until the process exits, so a load balancer stops sending
it requests at once.
"""

from __future__ import annotations

from flask import Blueprint
from flask.typing import ResponseReturnValue

from jobserver.api import STORE_UNAVAILABLE, api, error_response
from jobserver.exceptions import StoreError
from jobserver.loops import FailureMark

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> ResponseReturnValue:
    ctx = api()
    failure = FailureMark(ctx.config.data_dir, ctx.config.server.id).read()
    if failure is not None:
        return error_response(503, "node_failed", f"this node is stopping: {failure}")
    try:
        with ctx.store.tx.read() as conn:
            conn.exec_driver_sql("SELECT 1")
    except StoreError:
        return error_response(503, "store_unavailable", STORE_UNAVAILABLE)
    return {"status": "ok"}
