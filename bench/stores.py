"""The benchmark's store side: fresh databases, bulk queueing, reading outcomes.

Jobs are queued through the store (or as a bulk copy of a job the store inserted),
exactly the rows a submit writes; outcomes are read back with plain SQL.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import NOOP_JOB, epoch_seconds

PG_ADMIN_URL = os.environ.get("BENCH_PG",
                              "postgresql://postgres@127.0.0.1:5432/postgres")


# -- PostgreSQL ---------------------------------------------------------------------------
def admin_engine():
    from sqlalchemy import create_engine

    return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")


@contextmanager
def pg_database(prefix: str = "bench") -> Iterator[str]:
    """A fresh PostgreSQL database, dropped (WITH FORCE) afterwards."""
    from sqlalchemy import text

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        forget_engine(PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def libpq_dsn(url: str) -> str:
    """``postgresql[+driver]://u@h:p/db`` -> ``postgresql://u@h:p/db``."""
    return "postgresql://" + url.split("://", 1)[1]


@contextmanager
def store_for(backend: str, work: Path) -> Iterator[str]:
    """A migrated, empty store URL for ``backend`` ('sqlite' or a PostgreSQL one)."""
    from jobserver.store import Store

    if backend == "sqlite":
        work.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{work / 'jobserver.db'}"
        store = Store(url)
        store.upgrade()
        store.dispose()
        try:
            yield url
        finally:
            forget_engine(url)
        return
    with pg_database() as url:
        store = Store(url)
        store.upgrade()
        store.dispose()
        yield url


@dataclass
class GlobalLease:
    """The global scheduling lease as the store knows it (``key``, ``fence``): enough to
    claim through the store outside a node, as a single-mode node would."""

    key: str
    fence: int

    KEY = "scheduler/global"

    @classmethod
    def drawn(cls, store: Any, holder: str) -> GlobalLease:
        """A fresh fence for ``holder``, recorded as the newest of the key."""
        return cls(cls.KEY, store.epochs.bump(cls.KEY, holder))

    def claim_params(self, node: str, limit: int) -> dict[str, Any]:
        """The parameters of ``pgclaim.statement()`` claiming unassigned jobs for ``node``."""
        from jobserver.store.runs import open_claim_params

        return open_claim_params(node, self, limit)


# -- queueing ----------------------------------------------------------------------------
JOB_COLUMNS = ("name", "state", "priority", "lock_key", "assigned_servers", "params",
               "parallelism", "not_before", "idempotency_key", "request_hash", "node",
               "fence", "attempt", "error", "created_at", "updated_at", "started_at",
               "finished_at")
STEP_COLUMNS = ("position", "name", "type", "spec", "depends_on", "retries",
                "retry_backoff", "retryable", "state", "attempt")
EVENT_COLUMNS = ("step", "from_state", "to_state", "node", "fence", "attempt", "message",
                 "at")


def submit_through_store(url: str, spec: dict[str, Any]) -> int:
    """One job exactly as the API stores it (parse, validate, submit)."""
    from jobserver.spec import Policy, parse_job, validate_job
    from jobserver.steps.python import PythonSteps
    from jobserver.store import Store

    store = Store(url, notify=False)
    try:
        parsed = parse_job(json.dumps(spec))
        deps = validate_job(parsed, Policy(PythonSteps.with_entry_points().is_registered, None))
        job, _ = store.jobs.submit(parsed, deps)
        return job.id
    finally:
        store.dispose()


def queue_jobs(url: str, count: int, spec: dict[str, Any] | None = None,
               finished: bool = False, priority: int | None = None,
               analyze: bool = True) -> tuple[int, int]:
    """Queue ``count`` copies of ``spec``: one submitted through the store, the rest
    bulk-copied from it in one statement per table (the same rows ``submit`` writes:
    job, steps, the ``submitted`` event). ``finished``: mark them all SUCCEED (a
    table of history). Returns the (first, last) job id."""
    from sqlalchemy import create_engine, text

    template = submit_through_store(url, spec or NOOP_JOB)
    engine = create_engine(url)
    pg = engine.dialect.name == "postgresql"
    jcols = ", ".join(JOB_COLUMNS)
    scols = ", ".join(STEP_COLUMNS)
    ecols = ", ".join(EVENT_COLUMNS)
    try:
        with engine.begin() as conn:
            if finished:  # mark the template first: the copies are born finished
                now = "clock_timestamp()" if pg else "strftime('%Y-%m-%d %H:%M:%f','now')"
                conn.execute(text(f"UPDATE jobs SET state='SUCCEED', node='bulk', attempt=1, "
                                  f"started_at={now}, finished_at={now} WHERE id = :t"),
                             {"t": template})
                conn.execute(text("UPDATE steps SET state='SUCCEED', attempt=1 "
                                  "WHERE job_id = :t"), {"t": template})
            if count > 1:
                series = ("generate_series(1, :n) AS g(x)" if pg else
                          "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                          "WHERE x < :n) SELECT x FROM c) AS g")
                # A running node may claim the template meanwhile: the copies take the
                # claim columns as submitted, not as the template has them now.
                fresh = {"state": "'READY'", "node": "NULL", "fence": "0", "attempt": "0",
                         "error": "NULL", "started_at": "NULL", "finished_at": "NULL"}
                jsel = ", ".join(c if finished else fresh.get(c, c) for c in JOB_COLUMNS)
                ssel = ", ".join(f"s.{c}" if finished or c not in ("state", "attempt")
                                 else fresh[c] for c in STEP_COLUMNS)
                conn.execute(text(f"INSERT INTO jobs ({jcols}) SELECT {jsel} FROM jobs "
                                  f"CROSS JOIN {series} WHERE jobs.id = :t ORDER BY g.x"),
                             {"n": count - 1, "t": template})
                conn.execute(text(f"INSERT INTO steps (job_id, {scols}) SELECT j.id, {ssel} "
                                  f"FROM jobs j JOIN steps s ON s.job_id = :t WHERE j.id > :t"),
                             {"t": template})
                conn.execute(text(f"INSERT INTO job_events (job_id, {ecols}) SELECT j.id, "
                                  f"{', '.join('e.' + c for c in EVENT_COLUMNS)} FROM jobs j "
                                  f"JOIN job_events e ON e.job_id = :t AND e.from_state IS NULL "
                                  f"WHERE j.id > :t"),
                             {"t": template})
            if priority is not None:
                conn.execute(text("UPDATE jobs SET priority = :p WHERE id >= :t"),
                             {"p": priority, "t": template})
            last = conn.execute(text("SELECT max(id) FROM jobs")).scalar()
        with engine.connect() as conn:
            if not analyze:
                pass
            elif pg:
                auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                auto.execute(text("VACUUM ANALYZE jobs, steps, job_events"))
                # Flush the load's dirty pages now, so that the measurement that follows
                # does not pay for the bulk load's checkpoint.
                auto.execute(text("CHECKPOINT"))
            else:
                conn.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()
    return template, int(last)


# -- reading results from the store -------------------------------------------------------
_ENGINES: dict[str, Any] = {}


def poll_engine(url: str):
    """One small engine per store URL for the harness's own polling (cheap to reuse)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    if url not in _ENGINES:
        _ENGINES[url] = create_engine(url, poolclass=NullPool) if url.startswith(
            "sqlite") else create_engine(url, pool_size=1, max_overflow=0)
    return _ENGINES[url]


def forget_engine(url: str) -> None:
    engine = _ENGINES.pop(url, None)
    if engine is not None:
        engine.dispose()


def wait_all_done(url: str, total: int, timeout: float, states=("SUCCEED",),
                  poll: float = 0.25, min_id: int = 0,
                  max_id: int | None = None) -> tuple[int, float]:
    """Poll until ``total`` jobs (``min_id`` <= id <= ``max_id``) are in ``states``;
    returns (count, waited)."""
    from sqlalchemy import text

    engine = poll_engine(url)
    started = time.monotonic()
    marks = ", ".join(f"'{s}'" for s in states)
    while True:
        with engine.connect() as conn:
            done = conn.execute(text(f"SELECT count(*) FROM jobs WHERE state IN ({marks}) "
                                     "AND id BETWEEN :m AND :x"),
                                {"m": min_id, "x": max_id or 2 ** 62}).scalar()
        waited = time.monotonic() - started
        if done >= total or waited > timeout:
            return int(done), waited
        time.sleep(poll)


def wait_drained(url: str, timeout: float, poll: float = 0.1) -> bool:
    """Poll until no job is READY or RUNNING; False if some still are after ``timeout``."""
    from sqlalchemy import text

    deadline = time.monotonic() + timeout
    while True:
        with poll_engine(url).connect() as conn:
            left = conn.execute(text(
                "SELECT count(*) FROM jobs WHERE state IN ('READY', 'RUNNING')")).scalar()
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def run_window(url: str, min_id: int = 0) -> dict[str, Any]:
    """Finished jobs (id >= min_id): count, first start, last finish, jobs/s between."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text(
                "SELECT count(*), min(started_at), max(finished_at) FROM jobs "
                "WHERE state = 'SUCCEED' AND id >= :m"), {"m": min_id}).one()
            errors = conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'ERROR' "
                                       "AND id >= :m"), {"m": min_id}).scalar()
    finally:
        engine.dispose()
    count, first, last = row
    if not count:
        return {"done": 0, "errors": int(errors), "seconds": None, "jobs_per_s": None}
    span = max(epoch_seconds(last) - epoch_seconds(first), 1e-6)
    return {"done": int(count), "errors": int(errors), "seconds": round(span, 3),
            "jobs_per_s": round(count / span, 1)}


def drain_rate(url: str, first_id: int, last_id: int, trim: float = 0.1) -> dict[str, Any]:
    """The steady rate at which the jobs ``first_id..last_id`` finished: jobs per second
    between the finish of the ``trim`` quantile and that of the ``1 - trim`` quantile.
    The node's start (threads, connections, first plans) and the drain's ragged end
    fall outside that middle, so short drains of different tables compare fairly."""
    from sqlalchemy import text

    with poll_engine(url).connect() as conn:
        finished = [epoch_seconds(row[0]) for row in conn.execute(text(
            "SELECT finished_at FROM jobs WHERE state = 'SUCCEED' AND id BETWEEN :a AND :b "
            "ORDER BY finished_at"), {"a": first_id, "b": last_id})]
    low, high = int(len(finished) * trim), int(len(finished) * (1 - trim)) - 1
    if high <= low or finished[high] <= finished[low]:
        return {"done": len(finished), "jobs_per_s": None, "measured": 0, "seconds": None}
    span = finished[high] - finished[low]
    return {"done": len(finished), "measured": high - low, "seconds": round(span, 3),
            "jobs_per_s": round((high - low) / span, 1)}


def created_and_claimed(url: str, job_ids: list[int]) -> dict[int, tuple[float, float]]:
    """``(created_at, started_at)`` in epoch seconds of each of ``job_ids`` that was
    claimed: when its row was inserted and when a node claimed it (store's clock)."""
    from sqlalchemy import text

    if not job_ids:
        return {}
    with poll_engine(url).connect() as conn:
        return {row[0]: (epoch_seconds(row[1]), epoch_seconds(row[2])) for row in conn.execute(
            text("SELECT id, created_at, started_at FROM jobs WHERE id IN "
                 f"({', '.join(str(int(i)) for i in job_ids)}) AND started_at IS NOT NULL"))}


def stamps(url: str, job_ids: list[int]) -> dict[int, float]:
    """The start stamp of each job's step (``bench.stamp`` metrics ``t``)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    found: dict[int, float] = {}
    try:
        with engine.connect() as conn:
            for i in range(0, len(job_ids), 5000):
                chunk = job_ids[i:i + 5000]
                rows = conn.execute(text(
                    "SELECT job_id, metrics FROM steps WHERE job_id IN "
                    f"({', '.join(str(int(j)) for j in chunk)}) AND metrics IS NOT NULL"))
                for job_id, metrics in rows:
                    metrics = json.loads(metrics) if isinstance(metrics, str) else metrics
                    found[int(job_id)] = float(metrics["t"])
    finally:
        engine.dispose()
    return found
