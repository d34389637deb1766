"""``GET /healthz``: the one route without authentication."""

from __future__ import annotations

from flask import Blueprint
from flask.typing import ResponseReturnValue

from jobserver.api import api, error_response

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> ResponseReturnValue:
    try:
        with api().store.tx.read() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception:
        return error_response(503, "store_unavailable", "the metadata store is not reachable")
    return {"status": "ok"}
