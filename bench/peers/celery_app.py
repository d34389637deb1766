"""The Celery side: Redis broker and result backend on a database of its own.

Worker: ``celery -A bench.peers.celery_app worker`` (env ``BENCH_REDIS_URL``).
Every task's result carries the wall clock of its body's first instruction; the
result backend stores it with ``date_done``. The shapes' tasks (``sleep10``,
``true``, ``link``, ``payload``) are the job shapes of :mod:`bench.shapes`.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from celery import Celery

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
app = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(name="noop")
def noop() -> float:
    return time.time()


@app.task(name="stamp")
def stamp() -> float:
    return time.time()  # the body's first instruction


@app.task(name="sleep10")
def sleep10() -> float:
    started = time.time()
    time.sleep(0.01)
    return started


@app.task(name="true")
def true() -> float:
    started = time.time()
    subprocess.run(["/bin/true"], check=True)
    return started


@app.task(name="link")
def link(prev: list[Any] | None = None) -> list[Any]:
    """One link of a chain: ``[the first link's start stamp, links run so far]``
    (a chain passes each link's result to the next as its first argument)."""
    if prev is None:
        return [time.time(), 1]
    return [prev[0], prev[1] + 1]


@app.task(name="payload")
def payload(blob: str) -> dict[str, Any]:
    """Takes the 1 KB argument, returns 4 KB (kept by the result backend)."""
    return {"t": time.time(), "in": len(blob), "out": "o" * 4096}
