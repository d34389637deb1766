"""Scenario 3 — failover: ``kill -9`` of the active node; time until another node
starts a job under the new lease.

Two nodes share a steady supply of 0.2 s jobs (``bench.stamp`` with a sleep). Each
trial reads who holds the scheduling lease (``lock_epochs``: ``scheduler/global`` in
``single`` mode, ``election/scheduler`` in ``leader`` mode) and its fence, SIGKILLs
that node, and waits for the first job whose fence is newer than the killed lease's
(its step body's stamp is the "start"). In ``leader`` mode the surviving follower keeps
running what it was assigned before the kill; those jobs carry the old fence and do
not count. The killed node is then replaced by a fresh one (new server id), and the
next trial starts after a random 1–2 s pause.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from sqlalchemy import create_engine, text

from bench.cluster import Cluster
from bench.common import Options, log, stamp_job, write_result
from bench.stores import queue_jobs, store_for

BACKENDS = [("sqlite", "file"), ("postgres", "postgres"), ("postgres", "zookeeper")]
LEASE_KEY = {"single": "scheduler/global", "leader": "election/scheduler"}
ZK_SESSION = 4.0
JOB_SECONDS = 0.2


def _holder(engine, key: str) -> tuple[str | None, int]:
    with engine.connect() as conn:
        row = conn.execute(text("SELECT holder, epoch FROM lock_epochs WHERE key = :k"),
                           {"k": key}).first()
    return (row[0], int(row[1])) if row else (None, 0)


def _first_start_after(engine, fence: int, timeout: float) -> tuple[float | None, str | None]:
    """Earliest step stamp among jobs claimed under a fence newer than ``fence``."""
    deadline = time.monotonic() + timeout
    query = text("SELECT j.node, s.metrics FROM jobs j JOIN steps s ON s.job_id = j.id "
                 "WHERE j.fence > :f AND j.started_at IS NOT NULL AND s.metrics IS NOT NULL")
    found_at = None
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            rows = conn.execute(query, {"f": fence}).all()
        if rows and found_at is None:
            found_at = time.monotonic()
        if rows and time.monotonic() - found_at > JOB_SECONDS * 3:
            best = min(rows, key=lambda r: _t(r[1]))
            return _t(best[1]), best[0]
        time.sleep(0.05)
    return None, None


def _t(metrics: Any) -> float:
    return float((json.loads(metrics) if isinstance(metrics, str) else metrics)["t"])


def _top_up(url: str, engine, low: int = 400, batch: int = 3000) -> None:
    with engine.connect() as conn:
        ready = conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'READY'")).scalar()
    if ready < low:
        queue_jobs(url, batch, stamp_job(JOB_SECONDS, "failover"), analyze=False)


def run_config(opts: Options, store: str, lock: str, mode: str, trials: int,
               zk_hosts: str | None) -> dict[str, Any]:
    work = opts.work_dir / f"fo-{store}-{lock}-{mode}"
    settings: dict[str, Any] = {"SCHEDULER__POLL_INTERVAL": 1.0}
    if lock == "zookeeper":
        settings.update(ZOOKEEPER__HOSTS=zk_hosts, ZOOKEEPER__ROOT=f"/bench-{work.name}",
                        ZOOKEEPER__SESSION_TIMEOUT=ZK_SESSION)
    results: list[dict[str, Any]] = []
    with store_for(store, work) as url, Cluster(work, url, lock, mode, **settings) as cluster:
        engine = create_engine(url)
        queue_jobs(url, 3000, stamp_job(JOB_SECONDS, "failover"))
        serial = 0
        alive: list[str] = []
        try:
            for trial in range(trials):
                while len(alive) < 2:
                    serial += 1
                    alive.append(cluster.start(f"n{serial}").name)
                cluster.wait_registered(alive)
                _top_up(url, engine)
                deadline = time.monotonic() + 30
                holder, fence = _holder(engine, LEASE_KEY[mode])
                while holder not in alive and time.monotonic() < deadline:
                    time.sleep(0.1)
                    holder, fence = _holder(engine, LEASE_KEY[mode])
                if holder not in alive:
                    raise RuntimeError(f"no live node holds {LEASE_KEY[mode]} (holder {holder})")
                time.sleep(random.uniform(1.0, 2.0))
                holder, fence = _holder(engine, LEASE_KEY[mode])
                killed_at = cluster.kill9(holder)
                alive.remove(holder)
                started, node = _first_start_after(engine, fence, 30)
                seconds = None if started is None else round(started - killed_at, 3)
                results.append({"trial": trial + 1, "killed": holder, "fence": fence,
                                "next_node": node, "seconds": seconds})
                log(f"failover {store}/{lock}/{mode} trial {trial + 1}: {seconds} s "
                    f"({holder} -> {node})")
        finally:
            engine.dispose()
    times = [r["seconds"] for r in results if r["seconds"] is not None]
    times.sort()
    return {"store": store, "lock": lock, "mode": mode, "trials": len(results),
            "failed": len(results) - len(times),
            "p50_s": times[len(times) // 2] if times else None,
            "max_s": max(times) if times else None,
            "min_s": min(times) if times else None, "samples": results}


def run(opts: Options, zk_hosts: str | None, trials: int | None = None) -> list[dict]:
    trials = trials or opts.scale(20, 2)
    rows = []
    for store, lock in BACKENDS:
        if lock == "zookeeper" and not zk_hosts:
            continue
        for mode in ("single", "leader"):
            rows.append(run_config(opts, store, lock, mode, trials, zk_hosts))
    write_result("failover", opts, rows, {"trials": trials, "zk_session_timeout_s": ZK_SESSION,
                                          "poll_interval_s": 1.0})
    return rows
