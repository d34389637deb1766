"""Scenario 5 — footprint: RSS of an idle node and of a node running 10 jobs at once.

``node_rss_mb`` is the ``jobserver serve`` process (scheduler, runner, lock backend,
store); ``api_rss_mb`` is its gunicorn arbiter and workers together (``api.workers``,
default 2); ``total_rss_mb`` both (RSS counts shared pages once per process, so the
total over-counts what the tree really holds).

Then idle RSS after many jobs (``--footprint-jobs``, default 1,000,000): one node on
PostgreSQL, idle RSS taken, N no-op jobs pushed through it in batches (the next
queued once fewer than a batch are left, so the table never holds more than two
batches READY), idle RSS taken again after a settle. RSS is also sampled while the
jobs run, about every N / 10 jobs (at most every 100,000): a cache or a listener's
replay buffer that grows with the jobs shows as a rising curve (``samples``).
"""

from __future__ import annotations

import time
from typing import Any

from bench.cluster import Cluster
from bench.common import Options, log, rss_kb, stamp_job, tree_pids, write_result
from bench.stores import poll_engine, queue_jobs, store_for

#: Jobs queued at once while N jobs pass through a node: at most two batches are READY.
BATCH = 25000
#: Stop pushing jobs when none has finished for this long (a stalled node).
STALL_S = 120.0


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


def _counts(url: str) -> tuple[int, int]:
    """(jobs READY or RUNNING, jobs finished)."""
    from sqlalchemy import text

    with poll_engine(url).connect() as conn:
        left, done = conn.execute(text(
            "SELECT count(*) FILTER (WHERE state IN ('READY', 'RUNNING')), "
            "count(*) FILTER (WHERE state NOT IN ('READY', 'RUNNING')) FROM jobs")).one()
    return int(left), int(done)


def _push(url: str, node: Any, total: int, every: int) -> tuple[int, list[dict[str, Any]]]:
    """Queue ``total`` no-op jobs batch by batch while the node runs them; RSS sampled
    each ``every`` jobs done. Returns (jobs finished, samples)."""
    queued, samples, began = 0, [], time.monotonic()
    last_done, last_change = -1, began
    while True:
        if not node.running():
            raise RuntimeError(f"the node exited:\n{node.tail()}")
        left, done = _counts(url)
        if queued < total and left < BATCH:
            count = min(BATCH, total - queued)
            queue_jobs(url, count)  # its VACUUM ANALYZE stands in for autovacuum
            queued += count
            continue
        if done >= (len(samples) + 1) * every or (queued >= total and not left):
            samples.append({"jobs_done": done, "at_s": round(time.monotonic() - began, 1),
                            **_sample(node.pid)})
            log(f"footprint {done:,} jobs done: node {samples[-1]['node_rss_mb']} MB, "
                f"api {samples[-1]['api_rss_mb']} MB")
        if queued >= total and not left:
            return done, samples
        if done != last_done:
            last_done, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            log(f"footprint: no job finished for {STALL_S:.0f} s at {done:,}; stopping")
            return done, samples
        time.sleep(0.5)


def run_jobs(opts: Options, total: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Idle RSS of one PostgreSQL node before and after ``total`` no-op jobs passed
    through it; the rows and the samples taken on the way."""
    work = opts.work_dir / "footprint-jobs"
    every = min(100_000, max(total // 10, 1))
    with store_for("postgres", work) as url, Cluster(work, url, "postgres", "single") as cluster:
        node = cluster.start("n1")
        cluster.wait_registered(api=True)
        time.sleep(opts.scale(5, 1))
        before = _sample(node.pid)
        began = time.monotonic()
        done, samples = _push(url, node, total, every)
        seconds = time.monotonic() - began
        time.sleep(opts.scale(10, 1))  # settled: the last batch's work is over
        after = _sample(node.pid)
    base = {"store": "postgres", "lock": "postgres", "running": 0}
    rows = [{**base, "state": "idle before", "jobs_done": 0, **before},
            {**base, "state": f"idle after {done:,} jobs", "jobs_done": done, **after,
             "node_growth_mb": round(after["node_rss_mb"] - before["node_rss_mb"], 1),
             "jobs_per_s": round(done / seconds, 1) if seconds else None}]
    log(f"footprint after {done:,} jobs: node {before['node_rss_mb']} -> "
        f"{after['node_rss_mb']} MB, api {before['api_rss_mb']} -> {after['api_rss_mb']} MB")
    return rows, samples


def run(opts: Options, jobs: int | None = None) -> list[dict]:
    """``jobs``: no-op jobs pushed through a node for the after-N-jobs rows (default
    1,000,000; 300 in smoke mode, which only shows the path works; 0 leaves those rows
    out)."""
    rows = run_one(opts, "postgres", "postgres")
    if not opts.smoke:
        rows += run_one(opts, "sqlite", "file")
    total = opts.scale(1_000_000, 300) if jobs is None else jobs
    samples: list[dict[str, Any]] = []
    if total > 0:
        after_rows, samples = run_jobs(opts, total)
        rows += after_rows
    write_result("footprint", opts, rows, {"footprint_jobs": total, "samples": samples})
    return rows
