"""Scenario 5 — footprint: RSS of an idle node and of a node running 10 jobs at once.

``node_rss_mb`` is the ``jobserver serve`` process (scheduler, runner, lock backend,
store); ``api_rss_mb`` is its gunicorn arbiter and workers together (``api.workers``,
default 2); ``total_rss_mb`` both (RSS counts shared pages once per process, so the
total over-counts what the tree really holds).
"""

from __future__ import annotations

import time
from typing import Any

from bench.cluster import Cluster
from bench.common import Options, log, rss_kb, stamp_job, tree_pids, write_result
from bench.stores import queue_jobs, store_for


def _sample(pid: int) -> dict[str, float]:
    node = rss_kb(pid) or 0
    api = sum(rss_kb(p) or 0 for p in tree_pids(pid) if p != pid)
    return {"node_rss_mb": round(node / 1024, 1), "api_rss_mb": round(api / 1024, 1),
            "total_rss_mb": round((node + api) / 1024, 1)}


def _running(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs WHERE state='RUNNING'"))
                       .scalar())
    finally:
        engine.dispose()


def run_one(opts: Options, store: str, lock: str) -> list[dict[str, Any]]:
    work = opts.work_dir / f"footprint-{store}"
    rows = []
    with store_for(store, work) as url, Cluster(work, url, lock, "single",
                                                SCHEDULER__POLL_INTERVAL=0.2) as cluster:
        node = cluster.start("n1")
        cluster.wait_registered(api=True)
        time.sleep(opts.scale(5, 1))  # settled: threads started, API workers booted
        rows.append({"store": store, "lock": lock, "state": "idle", "running": 0,
                     **_sample(node.pid)})
        queue_jobs(url, 10, stamp_job(opts.scale(8, 3), "footprint"))
        deadline = time.monotonic() + 10
        while _running(url) < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        rows.append({"store": store, "lock": lock, "state": "10 jobs running",
                     "running": _running(url), **_sample(node.pid)})
    for row in rows:
        log(f"footprint {store} {row['state']}: node {row['node_rss_mb']} MB, "
            f"api {row['api_rss_mb']} MB")
    return rows


def run(opts: Options) -> list[dict]:
    rows = run_one(opts, "postgres", "postgres")
    if not opts.smoke:
        rows += run_one(opts, "sqlite", "file")
    write_result("footprint", opts, rows)
    return rows
