"""``GET /metrics``: Prometheus exposition for the whole node (needs a token)."""

from __future__ import annotations

from flask import Blueprint, Response

from jobserver.api import api
from jobserver.metrics import exposition

blueprint = Blueprint("metrics", __name__)


@blueprint.get("/metrics")
def metrics() -> Response:
    ctx = api()
    body, content_type = exposition(ctx.store, ctx.config.server.dead_after, ctx.registry,
                                    ctx.presence)
    return Response(body, content_type=content_type)
