"""Claim rate and submit-to-start latency while old jobs are deleted (PostgreSQL).

    python -m bench --only retention [--retention-jobs N] [--rounds R]
    python -m bench.retention [N] [ROUNDS]          # defaults 1000000 2

The table first gets N SUCCEED jobs that finished 60 days ago, each with one step
and the five events a one-step job leaves, in one ``generate_series`` statement per
table (:mod:`bench.filling`). Then one node (single mode, postgres locks, NOTIFY on)
is measured in three phases per round, alternated so that other load on the machine
weighs on all alike:

* ``none``: nothing deletes (``retention.finished_jobs = 0``);
* ``purge``: ``jobserver purge --before <30 days ago>`` runs in a process of its own
  for the whole phase, deleting the old jobs in batches of ``retention.batch_size``;
* ``loop``: the node itself deletes them (``retention.finished_jobs = 30d``, checked
  every second): the retention loop of the node holding the planner seat, in the
  scheduler's own process.

Each phase drains ``MEASURE_READY`` READY no-op jobs queued at once (the claim rate is
the steady one, between the 10th and 90th percentile of their finish times, as in
the backlog scenario) and then POSTs ``LATENCY_JOBS`` jobs one at a time for
submit-to-start latency. ``deleted`` is how many old jobs went during the phase: a
``with`` phase that deleted nothing measured nothing. The ratios compare each deleting
phase with ``none``; the target is within 10 %: claim rate >= 0.9, p99 <= 1.1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.common import PYTHON, ROOT, Options, loadavg, log, write_result
from bench.filling import Shape
from bench.filling import fill as fill_jobs
from bench.latency import measure, submit_idle
from bench.stores import drain_rate, poll_engine, queue_jobs, store_for, wait_all_done

#: READY jobs drained per phase for the claim rate, and jobs POSTed for latency.
MEASURE_READY = 10_000
LATENCY_JOBS = 200
PHASES = ("none", "purge", "loop")
#: The old jobs' name: they are counted by it (``ix_jobs_name_id``).
OLD_NAME = "retention-old"

#: The old jobs: finished 60 days ago, a millisecond apart, one step each.
OLD_JOBS = Shape(name=f"'{OLD_NAME}'", state="'SUCCEED'", node="'bench'",
                 created="clock_timestamp() - interval '60 days' + g * interval '1 ms'")


def fill(url: str, count: int) -> float:
    """``count`` old SUCCEED jobs with their steps and events; the seconds it took."""
    return fill_jobs(url, count, OLD_JOBS)


def old_left(url: str) -> int:
    from sqlalchemy import text

    with poll_engine(url).connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM jobs WHERE name = :n"),
                                {"n": OLD_NAME}).scalar() or 0)


def start_purge(cluster: Cluster, log_path: Path) -> subprocess.Popen[bytes]:
    """``jobserver purge`` for jobs finished over 30 days ago, in a process group of
    its own (stopped by :func:`stop_purge`)."""
    before = (datetime.now(timezone.utc) - timedelta(days=30)).isoformat(timespec="seconds")
    with open(log_path, "ab") as handle:
        return subprocess.Popen([PYTHON, "-P", "-m", "jobserver.cli", "--log-level", "WARNING",
                                 "purge", "--before", before], env=cluster.env("purge"),
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=handle,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_purge(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def wait_deleting(url: str, timeout: float = 15.0) -> bool:
    """Until old jobs are going (the loop's first round has run); False if none went."""
    first, deadline = old_left(url), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if old_left(url) < first:
            return True
    return False


def measure_phase(opts: Options, url: str, port: int) -> dict[str, Any]:
    """Drain READY jobs for the claim rate, then POST jobs one at a time for latency."""
    count = opts.scale(MEASURE_READY, 500)
    first, last = queue_jobs(url, count, analyze=False)
    wait_all_done(url, count, 300, min_id=first, max_id=last)
    window = drain_rate(url, first, last)
    time.sleep(0.5)
    latency = measure(url, submit_idle(port, opts.scale(LATENCY_JOBS, 10)), 60)
    return {"claim_rate": window["jobs_per_s"], "rate_over": window.get("measured"),
            "p50_ms": latency["p50_ms"], "p99_ms": latency["p99_ms"],
            "latency_n": latency["n"]}


def run_phase(opts: Options, work: Path, url: str, phase: str, number: int) -> dict[str, Any]:
    settings: dict[str, Any] = {"RETENTION__FINISHED_JOBS": "0"}
    if phase == "loop":
        settings = {"RETENTION__FINISHED_JOBS": "30d", "RETENTION__INTERVAL": "1"}
    with Cluster(work, url, "postgres", "single", **settings) as cluster:
        name = f"n-{phase}-{number}"
        cluster.start(name)
        cluster.wait_registered(api=True, timeout=120)
        queue_first, queue_last = queue_jobs(url, opts.scale(2_000, 20), analyze=False)
        wait_all_done(url, queue_last - queue_first + 1, 120, min_id=queue_first)  # warm up
        purge = start_purge(cluster, work / "logs" / "purge.log") if phase == "purge" else None
        try:
            deleting = phase == "none" or wait_deleting(url)
            before, load, began = old_left(url), loadavg(), time.monotonic()
            row = measure_phase(opts, url, cluster.port)
            seconds, after = time.monotonic() - began, old_left(url)
            running = purge is None or purge.poll() is None
        finally:
            if purge is not None:
                stop_purge(purge)
    row = {"round": number, "phase": phase, "old_jobs": before,
           "deleted": before - after, "deleted_per_s": round((before - after) / seconds),
           **row, "load_1m": load}
    if phase != "none" and not (deleting and after < before and running and after > 0):
        row["note"] = "deletion did not span the whole phase"
    log(f"retention {phase}: {row['claim_rate']} jobs/s, p99 {row['p99_ms']} ms, "
        f"{row['deleted']:,} old jobs deleted ({row['deleted_per_s']:,}/s)")
    return row


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each deleting phase against ``none``: claim rate and p99 (means over rounds)."""
    def mean(phase: str, key: str) -> float | None:
        values = [row[key] for row in rows if row["phase"] == phase and row[key] is not None]
        return sum(values) / len(values) if values else None

    found: dict[str, Any] = {}
    base_rate, base_p99 = mean("none", "claim_rate"), mean("none", "p99_ms")
    for phase in PHASES[1:]:
        rate, p99 = mean(phase, "claim_rate"), mean(phase, "p99_ms")
        found[phase] = {
            "claim_rate_ratio": round(rate / base_rate, 3) if rate and base_rate else None,
            "p99_ratio": round(p99 / base_p99, 3) if p99 and base_p99 else None}
    return found


def run(opts: Options, old: int | None = None, rounds: int | None = None) -> list[dict]:
    old = old or opts.scale(1_000_000, 20_000)
    rounds = rounds or opts.scale(2, 1)
    work = opts.work_dir / "retention"
    rows: list[dict[str, Any]] = []
    with store_for("postgres", work) as url:
        log(f"retention: loading {old:,} old finished jobs")
        log(f"retention: loaded in {fill(url, old):.0f} s")
        for number in range(1, rounds + 1):
            rows += [run_phase(opts, work, url, phase, number) for phase in PHASES]
    found = ratios(rows)
    write_result("retention", opts, rows, {"old_jobs": old, "ratios": found})
    for phase, figures in found.items():
        print(f"{phase} / none: claim rate {figures['claim_rate_ratio']}, "
              f"p99 {figures['p99_ratio']}")
    return rows


if __name__ == "__main__":
    args = [int(arg) for arg in sys.argv[1:3]]
    run(Options(command="python -m bench.retention " + " ".join(sys.argv[1:])),
        *(args + [1_000_000, 2][len(args):]))
