"""Shared pieces of the benchmark: databases, node processes, bulk queueing, results.

Everything here drives jobserver from the outside, as an operator would: real
``jobserver serve`` processes configured through ``JOBSERVER_*`` variables, jobs
queued through the store (or a bulk copy of a job the store inserted) and submitted
over the HTTP API. Nothing here changes a setting that weakens durability.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(os.environ.get("BENCH_RESULTS", ROOT / "bench" / "results"))
PG_ADMIN_URL = os.environ.get("BENCH_PG",
                              "postgresql://postgres@127.0.0.1:5432/postgres")
PYTHON = sys.executable
TOKEN = "bench-token-0123456789abcdef"
NOOP_JOB = {"name": "noop", "steps": [{"name": "s", "type": "noop"}]}


def stamp_job(sleep: float = 0.0, name: str = "stamp") -> dict[str, Any]:
    """A job of one python step that stamps ``time.time()`` as its first instruction."""
    args = {"sleep": sleep} if sleep else {}
    return {"name": name,
            "steps": [{"name": "s", "type": "python", "callable": "bench.stamp", "args": args}]}


# -- options shared by every scenario ----------------------------------------------------
@dataclass
class Options:
    smoke: bool = False
    command: str = ""
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-")))
    profile: bool = True
    #: Extra JOBSERVER_* settings for the throughput nodes (``--node-setting K=V``).
    node_settings: dict[str, str] = field(default_factory=dict)

    def scale(self, full: int, smoke: int) -> int:
        return smoke if self.smoke else full


# -- statistics ---------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(round(q / 100.0 * len(ordered) + 0.5))))
    return ordered[rank - 1]


def latency_summary(seconds: list[float]) -> dict[str, Any]:
    ms = [v * 1000.0 for v in seconds]
    return {"n": len(ms), "p50_ms": _r(percentile(ms, 50)), "p95_ms": _r(percentile(ms, 95)),
            "p99_ms": _r(percentile(ms, 99)), "max_ms": _r(max(ms) if ms else None),
            "mean_ms": _r(statistics.fmean(ms) if ms else None)}


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- results ------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    def run(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001 - informational only
            return "?"

    return {"nproc": os.cpu_count(), "free_h": run("free -h"),
            "cpu": run("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
            "python": platform.python_version(), "kernel": platform.release(),
            "postgres": run("psql -h 127.0.0.1 -U postgres -Atc 'select version()'"),
            "synchronous_commit": run("psql -h 127.0.0.1 -U postgres -Atc "
                                      "'show synchronous_commit'"),
            "fsync": run("psql -h 127.0.0.1 -U postgres -Atc 'show fsync'"),
            "git_head": run(f"git -C {ROOT} rev-parse --short HEAD"),
            "git_dirty_files": run(f"git -C {ROOT} status --porcelain -- jobserver schedulers "
                                   "locks migrations | wc -l")}


def write_result(name: str, opts: Options, rows: list[dict[str, Any]],
                 extra: dict[str, Any] | None = None) -> Path:
    """Write ``bench/results/<name>[-smoke].json`` and print the rows as a table."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}{'-smoke' if opts.smoke else ''}.json"
    document = {"scenario": name, "smoke": opts.smoke, "command": opts.command,
                "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(), "rows": rows}
    document.update(extra or {})
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print_table(name, rows)
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}\n", flush=True)
    return path


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        print(f"== {title}: no rows")
        return
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns and not isinstance(
            row[key], (dict, list))]
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(line[i]) for line in cells)) for i, col in enumerate(columns)]
    print(f"== {title}")
    print("  ".join(col.ljust(w) for col, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for line in cells:
        print("  ".join(value.ljust(w) for value, w in zip(line, widths)))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def loadavg() -> float | None:
    """The 1-minute load average: other work on this 2-core machine skews a figure."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


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
        """The parameters of ``pgclaim.statement("open")`` for ``node``."""
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


# -- node processes -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class NodeProc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


class Cluster:
    """Real ``jobserver serve`` processes sharing one store and one lock backend.

    Each node runs in a process group of its own (its gunicorn API with it), so that
    :meth:`stop_all` ends exactly what was started here.
    """

    def __init__(self, work: Path, database_url: str, lock: str, mode: str,
                 **settings: Any) -> None:
        self.work = work
        self.database_url = database_url
        self.port = free_port()
        self.settings = {"LOCK__BACKEND": lock, "SCHEDULER__MODE": mode,
                         "API__TOKENS": TOKEN, "API__REUSE_PORT": "true",
                         "API__BIND": f"127.0.0.1:{self.port}",
                         "SERVER__HEARTBEAT_INTERVAL": "0.5", "SERVER__DEAD_AFTER": "3",
                         "SERVER__DRAIN_TIMEOUT": "5", "DATA_DIR": str(work / "data")}
        self.settings.update({key.upper(): str(value) for key, value in settings.items()})
        # A plain postgresql:// URL: the nodes use the driver a user's would (psycopg 3).
        self.settings["DATABASE__URL"] = database_url
        self.nodes: dict[str, NodeProc] = {}
        (work / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, name: str, **extra: Any) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
        env.update({f"JOBSERVER_{k}": v for k, v in self.settings.items()})
        env.update({f"JOBSERVER_{k.upper()}": str(v) for k, v in extra.items()})
        env["JOBSERVER_SERVER__ID"] = name
        # bench.steps (the stamp step) lives in the repository, not in the package.
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self, name: str, **extra: Any) -> NodeProc:
        path = self.work / "logs" / f"{name}.log"
        with open(path, "ab") as handle:
            popen = subprocess.Popen([PYTHON, "-P", "-m", "jobserver.cli", "--log-level",
                                      "WARNING", "serve"], env=self.env(name, **extra),
                                     cwd=self.work, stdin=subprocess.DEVNULL, stdout=handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        node = NodeProc(name, popen, path)
        self.nodes[name] = node
        return node

    def wait_registered(self, names: list[str] | None = None, timeout: float = 60.0,
                        api: bool = False) -> None:
        """Until each node's row is alive with its pid (and the API answers)."""
        from sqlalchemy import create_engine, text

        names = names or list(self.nodes)
        engine = create_engine(self.database_url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                for name in names:
                    if not self.nodes[name].running():
                        raise RuntimeError(f"node {name} exited during start-up:\n"
                                           f"{self.nodes[name].tail()}")
                try:
                    with engine.connect() as conn:
                        rows = dict(conn.execute(text(
                            "SELECT id, pid FROM servers WHERE state = 'alive'")).all())
                except Exception:  # noqa: BLE001 - the schema may not exist yet
                    rows = {}
                if all(rows.get(n) == self.nodes[n].pid for n in names) and (
                        not api or self.api_ready()):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nodes {names} not ready after {timeout} s")
                time.sleep(0.1)
        finally:
            engine.dispose()

    def api_ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def kill9(self, name: str) -> float:
        """SIGKILL the node process (its API follows through PR_SET_PDEATHSIG); returns
        the wall-clock time of the kill."""
        node = self.nodes[name]
        os.kill(node.pid, signal.SIGKILL)
        killed = time.time()
        node.popen.wait(5)
        return killed

    def stop_all(self, grace: float = 8.0) -> None:
        for node in self.nodes.values():
            if node.running():
                node.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for node in self.nodes.values():
            try:
                node.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for node in self.nodes.values():
            try:
                os.killpg(node.pid, signal.SIGKILL)  # the group we created for this node
            except (ProcessLookupError, PermissionError):
                pass
            try:
                node.popen.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()


# -- the HTTP API -------------------------------------------------------------------------
class ApiClient:
    """A keep-alive HTTP client for POST /api/v1/jobs (one per thread)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def submit(self, spec: dict[str, Any]) -> tuple[int, float]:
        """POST the job; returns (job id, wall time just before sending)."""
        body = json.dumps(spec).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        for attempt in range(3):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                sent = time.time()
                self.conn.request("POST", "/api/v1/jobs", body, headers)
                response = self.conn.getresponse()
                payload = response.read()
                if response.status != 201:
                    raise RuntimeError(f"submit failed: {response.status} {payload[:300]!r}")
                return int(json.loads(payload)["id"]), sent
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


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


def epoch_seconds(value: Any) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


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


# -- submitting for latency: one at a time, or open-loop at a set rate ------------------
#: Submits job ``i``; returns (its key, wall time just before it was sent).
Submit = Callable[[int], "tuple[Any, float]"]


def stamped(call: Callable[[int], Any]) -> Submit:
    """``call(i)`` as a :data:`Submit`: stamped with the wall time before the call."""
    def submit(i: int) -> tuple[Any, float]:
        at = time.time()
        return call(i), at
    return submit


def one_at_a_time(submit: Submit, count: int) -> list[tuple[Any, float]]:
    """Submit ``count`` jobs with 20-60 ms between them: an idle system's latency."""
    sent = []
    for i in range(count):
        sent.append(submit(i))
        time.sleep(random.uniform(0.02, 0.06))
    return sent


def open_loop(submit: Submit, count: int, rate: float,
              threads: int = 16) -> tuple[list[tuple[Any, float]], float]:
    """Submit ``count`` jobs, job i due at start + i/rate, from ``threads`` threads (a
    slow submit does not delay the jobs due after it, up to ``threads`` at once).
    Returns the (key, sent) pairs and the rate achieved."""
    sent: list[tuple[Any, float]] = []
    lock = threading.Lock()
    counter = iter(range(count))
    start = time.monotonic() + 0.2

    def worker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            result = submit(i)
            with lock:
                sent.append(result)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sent, count / (time.monotonic() - start)


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


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(raw[raw.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0 if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_pids(dbname: str) -> list[int]:
    """PostgreSQL backends connected to ``dbname`` (their title names the database)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                title = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if title.startswith("postgres: ") and f" {dbname} " in title:
                found.append(int(entry))
    return found


def shell_quote(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
