"""The submit rate limit of a real node: one bucket per token for the whole node,
whichever of its gunicorn workers takes a submit.

Many concurrent POSTs (new connections each, so both workers accept some): the node
admits the burst and the refill of its elapsed time, once, not once per worker; the
rest are 429 with ``Retry-After``. Which worker served what is read from each
worker's own metrics files (prometheus-client's multiprocess files, named by pid).
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from tests.helpers import free_port, wait_for
from tests.integration.nodes import TOKEN, Api, Harness, http_call
from tests.integration.test_observability import gunicorn_workers

RATE, BURST, WORKERS = 0.5, 20, 2
REQUESTS, CLIENTS = 120, 12


def _posts_by_worker(metrics_dir: Path, workers: set[int], scratch: Path) -> dict[int, float]:
    """POST /api/v1/jobs answers counted by each worker, from its own metrics file."""
    counts = {}
    for pid in workers:
        directory = scratch / str(pid)
        directory.mkdir(parents=True)
        for path in metrics_dir.glob(f"counter_{pid}.db"):
            shutil.copy(path, directory)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, str(directory))
        counts[pid] = sum(sample.value for family in registry.collect()
                          for sample in family.samples
                          if sample.name == "jobserver_api_requests_total"
                          and sample.labels.get("route") == "/api/v1/jobs"
                          and sample.labels.get("method") == "POST")
    return counts


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_submit_limit_holds_per_node_across_its_workers(harness: Harness,
                                                            tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    node = harness.start_node("node-1", port, data_dir, JOBSERVER_API__WORKERS=str(WORKERS),
                              JOBSERVER_API__SUBMIT_RATE=str(RATE),
                              JOBSERVER_API__SUBMIT_BURST=str(BURST))
    base = f"http://127.0.0.1:{port}"
    harness.wait_nodes_ready(Api(base, TOKEN), [node], port)
    workers = wait_for(lambda: len(w := gunicorn_workers(node)) == WORKERS and w, 20, 0.1,
                       "the gunicorn workers")
    spec = {"name": "limited", "steps": [{"name": "s", "type": "noop"}]}

    began = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda _: http_call(base + "/api/v1/jobs", "POST", spec,
                                                    TOKEN, timeout=30), range(REQUESTS)))
    elapsed = time.monotonic() - began
    statuses = [status for status, _ in answers]
    created, limited = statuses.count(201), statuses.count(429)
    by_worker = _posts_by_worker(data_dir / "metrics" / "node-1", workers, tmp_path / "w")
    print(f"\n{REQUESTS} POSTs in {elapsed:.2f} s: {created} x 201, {limited} x 429; "
          f"per worker {by_worker}")

    assert created + limited == REQUESTS, statuses
    assert sum(1 for count in by_worker.values() if count > 0) == WORKERS, by_worker
    assert BURST <= created <= BURST + RATE * elapsed + 1, (created, elapsed)
    body = next(body for status, body in answers if status == 429)
    assert body["error"]["details"]["retry_after"] >= 1, body
