"""The cluster page: mode, lock backend, the active node, every node, jobs by state
and the last hour's throughput.

Reads per request: the ``servers`` table and the active lock's holder (as
``/api/v1/cluster``, :func:`~jobserver.api.cluster.cluster_view`, with the same rule
for "alive" and "active"), each state's count up to a cap, and the last hour's
finished jobs per minute (see :mod:`jobserver.store.browse`).
"""

from __future__ import annotations

from typing import Any

from flask import render_template
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.cluster import cluster_view
from jobserver.states import State
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.charts import throughput_chart
from jobserver.ui.pages import ui_page


@blueprint.get("/cluster")
@ui_page(READ)
def cluster() -> ResponseReturnValue:
    return render_template("ui/cluster.html", **_context())


@blueprint.get("/cluster/live")
@ui_page(READ)
def cluster_live() -> ResponseReturnValue:
    """The page's live part, which the page asks for again every few seconds."""
    return render_template("ui/cluster_live.html", **_context())


def _context() -> dict[str, Any]:
    ctx = api()
    view = cluster_view(ctx)
    return {"view": view, "alive": sum(1 for node in view.nodes if node.alive),
            "counts": ctx.store.browse.counts(), "states": [state.value for state in State],
            "chart": throughput_chart(ctx.store.browse.throughput()),
            "dead_after": ctx.config.server.dead_after}
