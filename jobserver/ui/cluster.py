"""The cluster page: mode, lock backend, the active node, the planner, every node, jobs
by state and the last hour's throughput.

Reads per request: the ``servers`` table and the planner seat's holder (as
``/api/v1/cluster``, :func:`~jobserver.api.cluster.cluster_view`, with the same rule
for "alive", "active" and "planner"), each state's count up to a cap, and the last hour's
finished jobs per minute (see :mod:`jobserver.store.browse`): the minutes that are
over are kept by each API process (:class:`ThroughputCache`), so a request reads
those of the last minute or two, and the whole hour only when the process has none.
"""

from __future__ import annotations

import threading
from typing import Any

from flask import current_app, render_template
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.cluster import cluster_view
from jobserver.states import State
from jobserver.store.browse import JobBrowser, Throughput
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.charts import throughput_chart
from jobserver.ui.pages import ui_page


#: A minute counts as over once this many minutes have begun after it: a job whose
#: end was written just before the minute ended may commit just after it.
SETTLE = 2


class ThroughputCache:
    """The jobs finished per minute of the minutes that are over (they change no
    more), kept between requests; one per application. Thread-safe."""

    def __init__(self) -> None:
        self._over: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def read(self, browser: JobBrowser, minutes: int = 60) -> Throughput:
        with self._lock:
            over = dict(self._over)
        fresh = browser.finished_per_minute(minutes, max(over) + 1 if over else None)
        counts = {**over, **fresh.counts}
        kept = {minute: counts.get(minute, {})
                for minute in range(fresh.now - minutes + 1, fresh.now - SETTLE + 1)}
        with self._lock:
            self._over = kept
        return Throughput.of(fresh.now, counts, minutes)


def _throughput(browser: JobBrowser) -> Throughput:
    cache = current_app.extensions.setdefault("jobserver.ui.throughput", ThroughputCache())
    return cache.read(browser)


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
            "chart": throughput_chart(_throughput(ctx.store.browse)),
            "dead_after": ctx.config.server.dead_after}
