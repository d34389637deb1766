"""The Celery side: Redis broker and result backend on a database of its own.

Worker: ``celery -A bench.peers.celery_app worker`` (env ``BENCH_REDIS_URL``).
Both tasks return the wall clock of their first instruction; the result backend
stores it with ``date_done``.
"""

from __future__ import annotations

import os
import time

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
