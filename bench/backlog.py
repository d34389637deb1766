"""Scenario 4 — backlog scale: claim rate and latency with 1k, 100k and 1M jobs in the
table (PostgreSQL, postgres locks, single mode, one node, NOTIFY on).

The node runs 2,000 jobs first (its threads, connections and first plans), then the
measured jobs are queued:

* ``finished`` mix: N SUCCEED jobs of history plus 10,000 READY no-op jobs; the
  claim rate is measured while the node drains the 10,000; then jobs are POSTed one
  at a time on the idle node for submit-to-start latency.
* ``ready`` mix: N READY no-op jobs; the claim rate is measured over the first
  ``min(N, 10,000)`` of them; latency jobs are POSTed at priority 1 while the node
  drains the backlog, so they jump the queue and the figure is the claim path's cost
  under a full table, not the wait behind N jobs.

Either rate is the steady one: jobs per second between the 10th and the 90th
percentile of the measured jobs' finish times (:func:`bench.stores.drain_rate`), so
neither the node's start nor the drain's tail, nor the latency jobs, weigh in.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.cluster import Cluster
from bench.common import Options, log, stamp_job, write_result
from bench.latency import measure, submit_idle
from bench.stores import drain_rate, queue_jobs, store_for, wait_all_done

#: READY jobs whose drain gives the claim rate: about 4 s at 2,500 jobs/s.
MEASURE_READY = 10_000
#: Jobs a node runs before the measured ones.
WARM_UP = 2_000


def _submit_priority(port: int, count: int, out: list) -> None:
    from bench.cluster import ApiClient
    import random

    client = ApiClient(port)
    try:
        for _ in range(count):
            spec = dict(stamp_job(), priority=1)
            out.append(client.submit(spec))
            time.sleep(random.uniform(0.02, 0.06))
    finally:
        client.close()


def run_one(opts: Options, size: int, mix: str, latency_jobs: int) -> dict[str, Any]:
    measured = opts.scale(MEASURE_READY, 100)
    work = opts.work_dir / f"backlog-{mix}-{size}"
    with store_for("postgres", work) as url:
        began = time.monotonic()
        if mix == "finished":
            queue_jobs(url, size, finished=True)
        load_s = time.monotonic() - began
        with Cluster(work, url, "postgres", "single") as cluster:
            cluster.start("n1")
            cluster.wait_registered(api=True, timeout=120)
            _warm_up(url, opts.scale(WARM_UP, 20))
            began = time.monotonic()
            count = measured if mix == "finished" else size
            first, _ = queue_jobs(url, count)
            load_s += time.monotonic() - began
            log(f"backlog {mix} {size}: table loaded in {load_s:.0f} s")
            # Queued jobs run in id order (one priority); latency jobs come after them.
            last = first + min(count, measured) - 1
            window, latency = (_finished_mix if mix == "finished" else _ready_mix)(
                url, cluster.port, first, last, latency_jobs)
    row = {"mix": mix, "jobs_in_table": size, "load_s": round(load_s, 1),
           "claimed": window["done"], "rate_over": window["measured"],
           "claim_rate": window["jobs_per_s"],
           "p50_ms": latency["p50_ms"], "p95_ms": latency["p95_ms"],
           "p99_ms": latency["p99_ms"], "latency_n": latency["n"]}
    if mix == "ready":
        row["note"] = "latency jobs at priority 1 during the drain"
    log(f"backlog {mix} {size}: {row['claim_rate']} jobs/s, p50 {row['p50_ms']} ms")
    return row


def _warm_up(url: str, count: int) -> None:
    """Run ``count`` jobs before measuring: a node's first jobs pay for its threads,
    connections and first plans, which would weigh most on the smallest table."""
    first, last = queue_jobs(url, count)
    wait_all_done(url, count, 120, min_id=first, max_id=last)


def _finished_mix(url: str, port: int, first: int, last: int,
                  latency_jobs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    wait_all_done(url, last - first + 1, 120, min_id=first, max_id=last)
    window = drain_rate(url, first, last)
    time.sleep(0.5)
    return window, measure(url, submit_idle(port, latency_jobs), 60)


def _ready_mix(url: str, port: int, first: int, last: int,
               latency_jobs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    sent: list = []
    submitter = threading.Thread(target=_submit_priority, args=(port, latency_jobs, sent))
    submitter.start()
    wait_all_done(url, last - first + 1, 120, min_id=first, max_id=last)
    window = drain_rate(url, first, last)
    submitter.join()
    return window, measure(url, sent, 60)


def run(opts: Options, sizes: list[int] | None = None) -> list[dict]:
    sizes = sizes or ([200] if opts.smoke else [1_000, 100_000, 1_000_000])
    latency_jobs = opts.scale(200, 10)
    rows = [run_one(opts, size, mix, latency_jobs)
            for mix in ("finished", "ready") for size in sizes]
    for mix in ("finished", "ready"):
        base = next((r for r in rows if r["mix"] == mix and r["jobs_in_table"] == sizes[0]), None)
        for row in rows:
            if row["mix"] == mix and base and base["claim_rate"] and row["claim_rate"]:
                row["rate_vs_smallest"] = round(row["claim_rate"] / base["claim_rate"], 3)
    write_result("backlog", opts, rows, {"sizes": sizes, "measured_ready": MEASURE_READY})
    return rows
