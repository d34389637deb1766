"""Scenario 2 — submit-to-start latency over the HTTP API.

Start is the first instruction of the step body (``bench.stamp`` stamps
``time.time()``); submit is the client's clock just before the POST is sent, so the
figure includes the API's insert and commit. Both clocks are this machine's.

* idle: one node, jobs POSTed one at a time with a random 20–60 ms gap (the node is
  idle at each submit);
* load: the same node, jobs POSTed open-loop from 16 keep-alive client threads at 80 %
  of its peak. The peak is the lower of two measured rates: the drain rate of scenario
  1 (jobs queued up front) and the rate at which this node's API takes jobs in when
  pushed (a closed-loop burst just before). Jobs that come in over HTTP cannot start
  faster than the API takes them in; above that rate the queue in front of the API
  grows for as long as the run lasts, and the latency measured grows with it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.cluster import ApiClient, Cluster, one_at_a_time, open_loop, post_all
from bench.common import Options, latency_summary, loadavg, log, stamp_job, write_result
from bench.stores import created_and_claimed, stamps, store_for, wait_all_done, wait_drained

#: Submit rates under load, as fractions of the node's peak (see the module's text).
LOAD_FRACTIONS = [0.8]
#: Client threads of the closed-loop burst that measures the API's intake rate.
INTAKE_CLIENTS = 16

#: (label, store, lock, notify, poll_interval)
CONFIGS = [
    ("postgres notify", "postgres", "postgres", True, 1.0),
    ("postgres poll 100ms", "postgres", "postgres", False, 0.1),
    ("sqlite poll 100ms", "sqlite", "file", False, 0.1),
    ("sqlite watch", "sqlite", "file", True, 1.0),
]


def submit_idle(port: int, count: int) -> list[tuple[int, float]]:
    client = ApiClient(port)
    try:
        return one_at_a_time(lambda i: client.submit(stamp_job()), count)
    finally:
        client.close()


def submit_open_loop(port: int, count: int, rate: float,
                     threads: int = 16) -> tuple[list[tuple[int, float]], float]:
    """POST ``count`` jobs open-loop at ``rate`` (one HTTP connection per thread);
    returns (sent, achieved rate)."""
    local, clients = threading.local(), []

    def submit(i: int) -> tuple[int, float]:
        if not hasattr(local, "client"):
            local.client = ApiClient(port)
            clients.append(local.client)
        return local.client.submit(stamp_job())

    try:
        return open_loop(submit, count, rate, threads)
    finally:
        for client in clients:
            client.close()


def measure(url: str, sent: list[tuple[int, float]], timeout: float) -> dict[str, Any]:
    first = min(job_id for job_id, _ in sent)
    wait_all_done(url, len(sent), timeout, min_id=first)
    started = stamps(url, [job_id for job_id, _ in sent])
    latencies = [started[job_id] - at for job_id, at in sent if job_id in started]
    summary = latency_summary(latencies)
    summary["missing"] = len(sent) - len(latencies)
    summary["split_p50_ms"] = split(url, sent, started)
    return summary


def split(url: str, sent: list[tuple[int, float]], started: dict[int, float]) -> dict:
    """Median of each leg (same host clock): POST sent -> row inserted (``created_at``),
    inserted -> claimed (``started_at``), claimed -> step body's first instruction."""
    from bench.common import percentile

    rows = created_and_claimed(url, [job_id for job_id, _ in sent])
    legs: dict[str, list[float]] = {"api_insert": [], "wake_claim": [], "claim_to_step": []}
    for job_id, at in sent:
        if job_id in rows and job_id in started:
            created, claimed = rows[job_id]
            legs["api_insert"].append((created - at) * 1000)
            legs["wake_claim"].append((claimed - created) * 1000)
            legs["claim_to_step"].append((started[job_id] - claimed) * 1000)
    return {leg: round(percentile(v, 50), 2) if v else None for leg, v in legs.items()}


def intake_rate(opts: Options, port: int, url: str) -> float:
    """Jobs a second the node's API takes in when pushed (``INTAKE_CLIENTS`` clients
    POSTing as fast as it answers, the scheduler running what comes in); returns once
    those jobs are done, so the runs after it start on an idle node."""
    count = opts.scale(3_000, 40)
    seconds = post_all(port, count, INTAKE_CLIENTS)
    wait_drained(url, 120)
    return count / seconds


def run_config(opts: Options, label: str, store: str, lock: str, notify: bool, poll: float,
               count: int, peak_rate: float | None) -> list[dict[str, Any]]:
    work = opts.work_dir / f"lat-{store}-{'notify' if notify else 'poll'}"
    rows = []
    with store_for(store, work) as url, Cluster(
            work, url, lock, "single", SCHEDULER__NOTIFY=str(notify).lower(),
            SCHEDULER__POLL_INTERVAL=poll,
            # The open-loop runs submit at 80 % of the node's peak, far above the
            # default per-token limit (api.submit_rate 100/s): lift it for this token.
            API__SUBMIT_RATE=1_000_000, API__SUBMIT_BURST=1_000_000) as cluster:
        cluster.start("n1")
        cluster.wait_registered(api=True)
        time.sleep(1.0)  # let the node settle (scheduler active, LISTEN connected)
        submit_idle(cluster.port, 5)  # warm the API workers' connections
        time.sleep(0.5)
        sent = submit_idle(cluster.port, count)
        row = {"config": label, "load": "idle", "drain_peak": None, "intake_peak": None,
               "target_rate": None, "achieved_rate": None, **measure(url, sent, 60),
               "load1": loadavg()}
        rows.append(row)
        log(f"latency {label} idle: p50 {row['p50_ms']} ms p99 {row['p99_ms']} ms")
        if not peak_rate:
            return rows
        intake = intake_rate(opts, cluster.port, url)
        log(f"latency {label}: drain peak {peak_rate:.0f}/s, API intake {intake:.0f}/s")
        for fraction in LOAD_FRACTIONS:
            rate = fraction * min(peak_rate, intake)
            n = max(count, int(rate * opts.scale(10, 2)))
            sent, achieved = submit_open_loop(cluster.port, n, rate)
            row = {"config": label, "load": f"{fraction:.0%} of peak",
                   "drain_peak": round(peak_rate, 1), "intake_peak": round(intake, 1),
                   "target_rate": round(rate, 1), "achieved_rate": round(achieved, 1),
                   **measure(url, sent, 120), "load1": loadavg()}
            rows.append(row)
            log(f"latency {label} at {achieved:.0f}/s: p50 {row['p50_ms']} ms "
                f"p99 {row['p99_ms']} ms")
    return rows


def run(opts: Options, peak: dict[str, float]) -> list[dict]:
    """``peak``: store -> measured 1-node single-mode jobs/s (the drain peak)."""
    count = opts.scale(500, 10)
    rows = []
    for label, store, lock, notify, poll in CONFIGS:
        if opts.smoke and label in ("postgres poll 100ms", "sqlite watch"):
            continue
        rate = peak.get(store)
        rows += run_config(opts, label, store, lock, notify, poll, count, rate)
    write_result("latency", opts, rows, {"jobs_per_run": count, "peak_used": peak,
                                         "load_fractions": LOAD_FRACTIONS})
    return rows
