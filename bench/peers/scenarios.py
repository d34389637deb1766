"""Scenario 6 — the same throughput and latency runs with procrastinate and Celery.

* procrastinate (PostgreSQL, the same server, a fresh database): jobs deferred up front
  with ``batch_defer``; workers with ``concurrency=10`` (as our ``max_concurrent_jobs``),
  LISTEN/NOTIFY on (its default); jobs/s from its own event timestamps (first
  ``started`` to last ``succeeded``).
* Celery on Redis (127.0.0.1:6379, database 13, flushed before each run): tasks sent
  up front with ``apply_async``; workers with the prefork pool at 10 processes (our
  concurrency) and at its default (concurrency = cores = 2), and a threads pool of 10;
  jobs/s from the first task body's stamp to the last ``date_done`` in the result
  backend. Note: this Redis has no persistence
  (``appendonly no``, no ``save``), so Celery's figures are not durable work.

Latency: the task body stamps ``time.time()`` first; submit is the client's clock just
before ``defer``/``apply_async``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cluster import one_at_a_time, open_loop, stamped
from bench.common import PYTHON, ROOT, Options, latency_summary, log, write_result
from bench.stores import libpq_dsn, pg_database

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
#: Prefork at 10 processes is the comparison at our concurrency (10 slots); at 2 (the
#: cores) it is Celery's own default; threads of 10 share one interpreter as our slots do.
CELERY_POOLS = [("prefork", 10), ("prefork", 2), ("threads", 10)]


# -- processes ------------------------------------------------------------------------------
class Workers:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[subprocess.Popen[bytes]] = []
        work.mkdir(parents=True, exist_ok=True)

    def spawn(self, argv: list[str], env: dict[str, str], name: str) -> None:
        full_env = dict(os.environ, PYTHONPATH=str(ROOT), **env)
        with open(self.work / f"{name}.log", "ab") as handle:
            self.procs.append(subprocess.Popen(argv, env=full_env, cwd=ROOT,
                                               stdin=subprocess.DEVNULL, stdout=handle,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# -- procrastinate --------------------------------------------------------------------------
def _procrastinate_app(dsn: str):
    """A client app on ``dsn``; it defers the worker's tasks by name."""
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))


def _pq_count(dsn: str, sql: str) -> Any:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchone()


def procrastinate_throughput(opts: Options, workers: int, jobs: int, cap: float) -> dict:
    work = opts.work_dir / f"procrastinate-tp-{workers}"
    with pg_database("procr") as url:
        dsn = libpq_dsn(url)
        app = _procrastinate_app(dsn)
        with app.open():
            app.schema_manager.apply_schema()
            noop = app.configure_task("noop")
            for i in range(0, jobs, 2000):
                noop.batch_defer(*[{} for _ in range(min(2000, jobs - i))])
        with Workers(work) as pool:
            for w in range(workers):
                pool.spawn([PYTHON, "-m", "bench.peers.procrastinate_app"],
                           {"BENCH_PG_DSN": dsn, "BENCH_CONCURRENCY": "10"}, f"w{w}")
            began = time.monotonic()
            while time.monotonic() - began < cap:
                done = _pq_count(dsn, "SELECT count(*) FROM procrastinate_jobs "
                                      "WHERE status = 'succeeded'")[0]
                if done >= jobs:
                    break
                time.sleep(0.25)
        count, first, last = _pq_count(dsn, (
            "SELECT (SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'), "
            "(SELECT min(at) FROM procrastinate_events WHERE type = 'started'), "
            "(SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded')"))
    span = (last - first).total_seconds() if count else None
    row = {"peer": "procrastinate", "config": "concurrency=10", "workers": workers,
           "jobs": jobs, "done": count, "seconds": round(span, 3) if span else None,
           "jobs_per_s": round(count / span, 1) if span else None, "capped": count < jobs}
    log(f"procrastinate x{workers}: {row['jobs_per_s']} jobs/s ({count}/{jobs})")
    return row


def procrastinate_latency(opts: Options, count: int, rate: float | None) -> list[dict]:
    work = opts.work_dir / "procrastinate-lat"
    work.mkdir(parents=True, exist_ok=True)
    stamp_file = work / "stamps.txt"
    rows = []
    with pg_database("procr") as url:
        dsn = libpq_dsn(url)
        app = _procrastinate_app(dsn)
        with app.open(), Workers(work) as pool:
            app.schema_manager.apply_schema()
            pool.spawn([PYTHON, "-m", "bench.peers.procrastinate_app"],
                       {"BENCH_PG_DSN": dsn, "BENCH_CONCURRENCY": "10",
                        "BENCH_STAMP_FILE": str(stamp_file)}, "worker")
            time.sleep(3.0)  # worker up and listening
            task = app.configure_task("stamp")
            for i in range(5):  # warm-up
                task.defer(key=-1 - i)
            time.sleep(1.0)
            idle = one_at_a_time(stamped(lambda i: task.defer(key=i) and i), count)
            runs = [("idle", None, idle)]
            if rate:
                time.sleep(1.0)
                n = max(count, int(rate * opts.scale(10, 2)))
                defer = stamped(lambda i: task.defer(key=100000 + i) and 100000 + i)
                sent, achieved = open_loop(defer, n, rate, threads=4)
                runs.append(("80% of peak", (rate, achieved), sent))
            total = sum(len(r[2]) for r in runs)
            _wait(lambda: len(_read_stamps(stamp_file)) >= total + 5, 60)
        started = _read_stamps(stamp_file)
    for load, rates, sent in runs:
        summary = latency_summary([started[k] - at for k, at in sent if k in started])
        rows.append({"peer": "procrastinate", "config": "concurrency=10", "load": load,
                     "target_rate": round(rates[0], 1) if rates else None,
                     "achieved_rate": round(rates[1], 1) if rates else None, **summary})
        log(f"procrastinate latency {load}: p50 {summary['p50_ms']} ms")
    return rows


def _read_stamps(path: Path) -> dict[int, float]:
    found = {}
    try:
        for line in path.read_text().splitlines():
            key, at = line.split()
            found[int(key)] = float(at)
    except (FileNotFoundError, ValueError):
        pass
    return found


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return False


# -- Celery ------------------------------------------------------------------------------------
def _redis():
    import redis

    return redis.Redis.from_url(REDIS_URL)


def _celery_worker(pool: Workers, name: str, kind: str, concurrency: int) -> None:
    pool.spawn([PYTHON, "-m", "celery", "-A", "bench.peers.celery_app", "worker", "-l",
                "WARNING", "-P", kind, "-c", str(concurrency), "-n", f"{name}@%h"],
               {"BENCH_REDIS_URL": REDIS_URL}, name)


def _celery_results(client) -> list[dict[str, Any]]:
    keys = client.keys("celery-task-meta-*")
    results = []
    for i in range(0, len(keys), 5000):
        for raw in client.mget(keys[i:i + 5000]):
            if raw:
                results.append(json.loads(raw))
    return results


def celery_throughput(opts: Options, workers: int, kind: str, concurrency: int, jobs: int,
                      cap: float) -> dict:
    from bench.peers.celery_app import noop

    client = _redis()
    client.flushdb()
    work = opts.work_dir / f"celery-tp-{kind}-{workers}"
    for _ in range(jobs):
        noop.apply_async()
    with Workers(work) as pool:
        for w in range(workers):
            _celery_worker(pool, f"w{w}", kind, concurrency)
        began = time.monotonic()
        while time.monotonic() - began < cap:
            if len(client.keys("celery-task-meta-*")) >= jobs:
                break
            time.sleep(0.25)
    results = [r for r in _celery_results(client) if r.get("status") == "SUCCESS"]
    client.flushdb()
    from bench.common import epoch_seconds

    if results:
        span = (max(epoch_seconds(r["date_done"]) for r in results)
                - min(float(r["result"]) for r in results))
    else:
        span = None
    row = {"peer": "celery", "config": f"{kind} c={concurrency}", "workers": workers,
           "jobs": jobs, "done": len(results), "seconds": round(span, 3) if span else None,
           "jobs_per_s": round(len(results) / span, 1) if span else None,
           "capped": len(results) < jobs}
    log(f"celery {kind} x{workers}: {row['jobs_per_s']} jobs/s ({len(results)}/{jobs})")
    return row


def celery_latency(opts: Options, kind: str, concurrency: int, count: int,
                   rate: float | None) -> list[dict]:
    from bench.peers.celery_app import stamp

    client = _redis()
    client.flushdb()
    work = opts.work_dir / f"celery-lat-{kind}"
    rows = []
    with Workers(work) as pool:
        _celery_worker(pool, "w0", kind, concurrency)
        for _ in range(5):
            stamp.apply_async().get(timeout=60)  # worker up; warm-up
        time.sleep(0.5)
        runs = [("idle", None, one_at_a_time(stamped(lambda i: stamp.apply_async()), count))]
        if rate:
            time.sleep(1.0)
            n = max(count, int(rate * opts.scale(10, 2)))
            sent, achieved = open_loop(stamped(lambda i: stamp.apply_async()), n, rate, threads=4)
            runs.append(("80% of peak", (rate, achieved), sent))
        for load, rates, sent in runs:
            lat = [float(result.get(timeout=120)) - at for result, at in sent]
            summary = latency_summary(lat)
            rows.append({"peer": "celery", "config": f"{kind} c={concurrency}", "load": load,
                         "target_rate": round(rates[0], 1) if rates else None,
                         "achieved_rate": round(rates[1], 1) if rates else None, **summary})
            log(f"celery {kind} latency {load}: p50 {summary['p50_ms']} ms")
    client.flushdb()
    return rows


# -- the scenario ------------------------------------------------------------------------------
def run(opts: Options) -> dict[str, list[dict]]:
    _require_peers()
    jobs = opts.scale(20000, 300)
    cap = opts.scale(30, 15)
    count = opts.scale(500, 30)
    throughput = []
    for workers in (1, 3):
        throughput.append(procrastinate_throughput(opts, workers, jobs, cap))
    for kind, concurrency in CELERY_POOLS:
        for workers in (1, 3):
            throughput.append(celery_throughput(opts, workers, kind, concurrency, jobs, cap))
    write_result("peers_throughput", opts, throughput, {"jobs": jobs, "cap_s": cap,
                                                        "redis": _redis_persistence()})
    latency = []
    peak = next(r["jobs_per_s"] for r in throughput
                if r["peer"] == "procrastinate" and r["workers"] == 1)
    latency += procrastinate_latency(opts, count, 0.8 * peak if peak else None)
    for kind, concurrency in CELERY_POOLS:
        peak = next(r["jobs_per_s"] for r in throughput
                    if r["config"] == f"{kind} c={concurrency}" and r["workers"] == 1)
        latency += celery_latency(opts, kind, concurrency, count, 0.8 * peak if peak else None)
    write_result("peers_latency", opts, latency, {"jobs_per_run": count})
    return {"throughput": throughput, "latency": latency}


def _require_peers() -> None:
    """Stop with a message naming the extra, not an ImportError midway."""
    import importlib.util

    missing = [name for name in ("procrastinate", "celery")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"peers: {', '.join(missing)} not installed; run `make bench`, or "
                         "pip install -e '.[bench]' in this virtual environment")


def _redis_persistence() -> dict[str, Any]:
    try:
        client = _redis()
        return {"appendonly": client.config_get("appendonly").get("appendonly"),
                "save": client.config_get("save").get("save")}
    except Exception as exc:  # noqa: BLE001 - informational
        return {"error": str(exc)}
