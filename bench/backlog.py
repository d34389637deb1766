"""Scenario 4 — backlog scale: claim rate and latency with 1k, 100k and 1M jobs in the
table (PostgreSQL, postgres locks, single mode, one node, NOTIFY on).

* ``finished`` mix: N SUCCEED jobs of history plus 1,000 READY no-op jobs; the claim
  rate is measured while the node drains the 1,000; then jobs are POSTed one at a
  time on the idle node for submit-to-start latency.
* ``ready`` mix: N READY no-op jobs; the claim rate is measured over the first
  ``min(N, 1,500)`` jobs (or 25 s); latency jobs are POSTed at priority 1 while the
  node drains the backlog, so they jump the queue and the figure is the claim path's
  cost under a full table, not the wait behind N jobs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.common import (Cluster, Options, log, queue_jobs, run_window, stamp_job, stamps,
                          store_for, wait_all_done, write_result)
from bench.latency import measure, submit_idle

MEASURE_READY = 1000


def _submit_priority(port: int, count: int, out: list) -> None:
    from bench.common import ApiClient
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
            first, _ = queue_jobs(url, measured)
            target = measured
        else:
            first, _ = queue_jobs(url, size)
            target = min(size, int(measured * 1.5))
        load_s = time.monotonic() - began
        log(f"backlog {mix} {size}: table loaded in {load_s:.0f} s")
        with Cluster(work, url, "postgres", "single") as cluster:
            cluster.start("n1")
            cluster.wait_registered(api=True, timeout=120)
            if mix == "finished":
                wait_all_done(url, target, 120, min_id=first)
                window = run_window(url, min_id=first)
                time.sleep(0.5)
                latency = measure(url, submit_idle(cluster.port, latency_jobs), 60)
            else:
                sent: list = []
                submitter = threading.Thread(target=_submit_priority,
                                             args=(cluster.port, latency_jobs, sent))
                submitter.start()
                wait_all_done(url, target, 25, min_id=first)
                submitter.join()
                latency = measure(url, sent, 60)
                window = run_window(url, min_id=first)
    row = {"mix": mix, "jobs_in_table": size, "load_s": round(load_s, 1),
           "claimed": window["done"], "claim_rate": window["jobs_per_s"],
           "p50_ms": latency["p50_ms"], "p95_ms": latency["p95_ms"],
           "p99_ms": latency["p99_ms"], "latency_n": latency["n"]}
    if mix == "ready":
        # The window counts latency jobs too; the rate is still jobs through the node.
        row["note"] = "latency jobs at priority 1 during the drain"
    log(f"backlog {mix} {size}: {row['claim_rate']} jobs/s, p50 {row['p50_ms']} ms")
    return row


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
