"""The peers' side of the shapes scenario (:mod:`bench.shapes`): the same job shapes
with procrastinate and Celery, at the same concurrency of 10.

* procrastinate (a fresh database on the same PostgreSQL server): jobs deferred up
  front with ``batch_defer``; one worker, ``concurrency=10``. ``chain5`` is a task
  that defers the next link itself (procrastinate has no chains); ``payload``'s 4 KB
  return value is dropped (procrastinate keeps no results).
* Celery on Redis (database 13, flushed before each run): tasks sent up front; one
  worker, prefork or threads, concurrency 10. ``chain5`` is ``chain`` of 5 tasks;
  ``payload``'s 4 KB return value goes to the result backend.

jobs/s is from the first task body's start to the last task's end, on each peer's own
clock (procrastinate: its ``started``/``succeeded`` events; Celery: the body's stamp
and ``date_done``). A chain's jobs/s is its tasks done / 5 over that span: both peers
queue each next link behind every first link queued up front, so whole chains only
finish at the end of the run (``done`` counts them; a capped row has few). CPU per
job is read from /proc between the first finished job and the last: the worker's
process tree, the processes it waited for, and the store (this database's PostgreSQL
backends, or the Redis server, which other clients of it may share).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.common import (PYTHON, Options, backend_pids, cpu_seconds, epoch_seconds, log,
                          reaped_cpu_seconds, tree_pids)
from bench.peers.scenarios import (Workers, _celery_results, _celery_worker, _pq_count,
                                   _procrastinate_app, _redis)
from bench.stores import libpq_dsn, pg_database

#: The task each shape runs, by peer (the names in celery_app / procrastinate_app).
TASKS = {"sleep10": "sleep10", "true": "true", "chain5": "link", "payload": "payload"}
#: Tasks one job of the shape runs.
LINKS = {"chain5": 5}
BLOB = "p" * 1024


class CpuWindow:
    """CPU seconds of a worker tree (its own and what it reaped) and of the store's
    processes, from :meth:`begin` to :meth:`end`."""

    def __init__(self, worker_pid: int, store_pids: Any) -> None:
        self.worker_pid, self.store_pids = worker_pid, store_pids
        self.figures = [0.0, 0.0, 0.0]

    def _now(self) -> list[float]:
        tree = tree_pids(self.worker_pid)
        return [sum(cpu_seconds(p) for p in tree), sum(reaped_cpu_seconds(p) for p in tree),
                sum(cpu_seconds(p) for p in self.store_pids())]

    def begin(self) -> None:
        self.figures = [-v for v in self._now()]

    def end(self) -> None:
        self.figures = [a + b for a, b in zip(self.figures, self._now())]

    def per_job(self, jobs: float) -> dict[str, float | None]:
        """CPU ms per job over ``jobs`` done in the window (None without any)."""
        worker, reaped, store = (round(v * 1000 / jobs, 2) if jobs > 0 else None
                                 for v in self.figures)
        return {"worker_cpu_ms_per_job": worker, "child_cpu_ms_per_job": reaped,
                "store_cpu_ms_per_job": store}


def _watch(count: Any, jobs: int, cap: float, window: CpuWindow) -> tuple[int, int]:
    """Poll ``count()`` (jobs done) until all are, or ``cap`` seconds; the CPU window
    opens at the first job done. Returns (done when it opened, done at the end)."""
    began, done0 = time.monotonic(), None
    while True:
        done = count()
        if done0 is None and done > 0:
            window.begin()
            done0 = done
        if done >= jobs or time.monotonic() - began > cap:
            window.end()
            return done0 or 0, done
        time.sleep(0.25)


# -- procrastinate ----------------------------------------------------------------------------
_PQ_TASKS = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
_PQ_WHOLE = _PQ_TASKS + " AND (task_name <> 'link' OR (args->>'n')::int = 5)"


def _defer_all(dsn: str, shape: str, jobs: int) -> None:
    app = _procrastinate_app(dsn)
    args = {"chain5": {"n": 1}, "payload": {"blob": BLOB}}.get(shape, {})
    with app.open():
        app.schema_manager.apply_schema()
        task = app.configure_task(TASKS[shape])
        for i in range(0, jobs, 2000):
            task.batch_defer(*[dict(args) for _ in range(min(2000, jobs - i))])


def procrastinate_shape(opts: Options, shape: str, jobs: int, cap: float) -> dict[str, Any]:
    """One shape with one procrastinate worker of concurrency 10."""
    work = opts.work_dir / f"procrastinate-shape-{shape}"
    links = LINKS.get(shape, 1)
    with pg_database("procr") as url:
        dsn, dbname = libpq_dsn(url), url.rsplit("/", 1)[1]
        _defer_all(dsn, shape, jobs)
        with Workers(work) as pool:
            pool.spawn([PYTHON, "-m", "bench.peers.procrastinate_app"],
                       {"BENCH_PG_DSN": dsn, "BENCH_CONCURRENCY": "10"}, "worker")
            window = CpuWindow(pool.procs[0].pid, lambda: backend_pids(dbname))
            done0, _ = _watch(lambda: _pq_count(dsn, _PQ_TASKS)[0] // links, jobs, cap,
                              window)
        done, tasks, errors, first, last = _pq_count(dsn, (
            f"SELECT ({_PQ_WHOLE}), ({_PQ_TASKS}), (SELECT count(*) FROM procrastinate_jobs "
            "WHERE status = 'failed'), "
            "(SELECT min(at) FROM procrastinate_events WHERE type = 'started'), "
            "(SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded')"))
    span = (last - first).total_seconds() if tasks else None
    note = {"chain5": "each link defers the next", "payload": "no result kept"}.get(shape)
    return {"system": "procrastinate", "config": "concurrency=10", "jobs": jobs,
            "done": done, "errors": errors, **_rate(tasks / links, span),
            "capped": done < jobs,
            **window.per_job(tasks / links - done0), "note": note}


# -- Celery ----------------------------------------------------------------------------------
def _send_all(shape: str, jobs: int) -> None:
    from celery import chain

    from bench.peers import celery_app as tasks

    for _ in range(jobs):
        if shape == "chain5":
            chain(*[tasks.link.s() for _ in range(LINKS[shape])]).apply_async()
        elif shape == "payload":
            tasks.payload.apply_async((BLOB,))
        else:
            getattr(tasks, TASKS[shape]).apply_async()


def _redis_pids() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(b"redis-server"):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _celery_window(results: list[dict[str, Any]],
                   shape: str) -> tuple[int, int, float, float | None]:
    """(whole jobs done, tasks failed, jobs' worth of tasks done, first body start to
    last task end)."""
    ok = [r for r in results if r.get("status") == "SUCCESS"]
    failed = sum(1 for r in results if r.get("status") == "FAILURE")
    if shape == "chain5":
        whole = sum(1 for r in ok if r["result"][1] == LINKS[shape])
        starts = [float(r["result"][0]) for r in ok]
    else:
        whole = len(ok)
        starts = [float(r["result"]["t"] if shape == "payload" else r["result"]) for r in ok]
    if not ok:
        return 0, failed, 0, None
    span = max(epoch_seconds(r["date_done"]) for r in ok) - min(starts)
    return whole, failed, len(ok) / LINKS.get(shape, 1), span


def celery_shape(opts: Options, kind: str, concurrency: int, shape: str, jobs: int,
                 cap: float) -> dict[str, Any]:
    """One shape with one Celery worker (``kind`` pool of ``concurrency``)."""
    client = _redis()
    client.flushdb()
    links = LINKS.get(shape, 1)
    _send_all(shape, jobs)
    work = opts.work_dir / f"celery-shape-{kind}-{shape}"
    with Workers(work) as pool:
        _celery_worker(pool, "w0", kind, concurrency)
        window = CpuWindow(pool.procs[0].pid, _redis_pids)
        count = lambda: len(client.keys("celery-task-meta-*")) // links  # noqa: E731
        done0, _ = _watch(count, jobs, cap, window)
        results = _celery_results(client)
    client.flushdb()
    done, errors, units, span = _celery_window(results, shape)
    note = {"chain5": "celery.chain of 5 tasks", "payload": "4 KB result in Redis"}.get(shape)
    return {"system": "celery", "config": f"{kind} c={concurrency}", "jobs": jobs,
            "done": done, "errors": errors, **_rate(units, span), "capped": done < jobs,
            **window.per_job(units - done0), "note": note}


def _rate(done: float, span: float | None) -> dict[str, Any]:
    if not done or not span:
        return {"seconds": None, "jobs_per_s": None}
    return {"seconds": round(span, 3), "jobs_per_s": round(done / span, 1)}


def run_peers(opts: Options, shape: str, jobs: int, cap: float) -> list[dict[str, Any]]:
    """The shape's peer rows: procrastinate, Celery prefork and threads (c=10)."""
    rows = [procrastinate_shape(opts, shape, jobs, cap)]
    for kind in ("prefork", "threads"):
        rows.append(celery_shape(opts, kind, 10, shape, jobs, cap))
    for row in rows:
        log(f"shapes {shape} {row['system']} {row['config']}: {row['jobs_per_s']} jobs/s "
            f"({row['done']}/{jobs})")
    return rows
