"""Trace points for ``python -m bench.handoffs``; inert unless its variable is set.

``bench.handoffs`` puts this directory first on ``PYTHONPATH`` of the node it starts,
so that the node, its gunicorn arbiter and the API workers all import this module at
start-up. With ``JOBSERVER_BENCH_TRACE_DIR`` set, it wraps a few functions on the
submit-to-start path so that each call appends ``{"point", "t", ...}`` (wall clock)
to a file of its process in that directory. Nothing here is part of the product.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable

_DIRECTORY = os.environ.get("JOBSERVER_BENCH_TRACE_DIR")
_local = threading.local()


def _record(point: str, **fields: Any) -> None:
    if not hasattr(_local, "out"):
        path = os.path.join(_DIRECTORY or ".", f"{os.getpid()}-{threading.get_ident()}.jsonl")
        _local.out = open(path, "a", buffering=1)  # noqa: SIM115 - lives with the thread
    _local.out.write(json.dumps({"point": point, "t": time.time(), **fields}) + "\n")


def _before(owner: Any, name: str, point: str) -> None:
    """Record ``point`` as ``owner.name`` is entered."""
    original: Callable[..., Any] = getattr(owner, name)

    def traced(*args: Any, **kwargs: Any) -> Any:
        _record(point)
        return original(*args, **kwargs)

    setattr(owner, name, traced)


def _trace_api() -> None:
    import flask
    from gunicorn.workers import gthread

    _before(gthread.ThreadWorker, "on_client_socket_readable", "readable")
    _before(gthread.ThreadWorker, "accept", "readable")
    _before(gthread.ThreadWorker, "handle", "handled")
    _before(flask.Flask, "wsgi_app", "flask")

    from jobserver.store import pgsubmit

    submit = pgsubmit.submit

    def traced_submit(*args: Any, **kwargs: Any) -> Any:
        started = time.time()
        job = submit(*args, **kwargs)
        _record("submitted", job_id=job.id, statement=started)
        return job

    pgsubmit.submit = traced_submit


def _trace_node() -> None:
    from jobserver import wakeup
    from schedulers.base import Scheduler

    original_init = wakeup.Listener.__init__

    class TracedWake:
        def __init__(self, event: threading.Event) -> None:
            self._event = event

        def set(self) -> None:
            _record("notified")
            self._event.set()

    def init(self: Any, url: str, wake: threading.Event) -> None:
        original_init(self, url, TracedWake(wake))  # type: ignore[arg-type]

    wakeup.Listener.__init__ = init  # type: ignore[method-assign]
    dispatch, start = Scheduler.dispatch, Scheduler.start

    def traced_dispatch(self: Any, lease: Any) -> int:
        _local.dispatched = time.time()
        return dispatch(self, lease)

    def traced_start(self: Any, jobs: list[Any], on_done: Any = None) -> int:
        if jobs:
            _record("claimed", job_ids=[job.id for job in jobs],
                    dispatch=getattr(_local, "dispatched", None))
        return start(self, jobs, on_done)

    Scheduler.dispatch = traced_dispatch  # type: ignore[method-assign]
    Scheduler.start = traced_start  # type: ignore[method-assign]


if _DIRECTORY:
    for _install in (_trace_api, _trace_node):
        try:
            _install()
        except Exception as exc:  # noqa: BLE001 - a missing point is reported, not fatal
            _record("trace-error", error=repr(exc))
