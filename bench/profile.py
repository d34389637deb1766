"""Where the time of one job goes: SQL statements per job, and a py-spy profile.

1. Statement count (in-process): a :class:`jobserver.node.Node` runs in this process
   on a fresh store with N no-op jobs queued; SQLAlchemy's ``before/after_cursor_execute``
   events count and time every statement, grouped by the store function that issued
   it and the thread that ran it; commits are timed by wrapping the dialect's
   ``do_commit`` on this engine (in this process only). The postgres lock backend's
   own connection is counted by wrapping its ``_query``.
2. py-spy: ``py-spy record`` on a real ``jobserver serve`` process draining no-op jobs
   (on-CPU samples, and a second run with ``--idle`` for wall time), written as
   collapsed stacks under ``bench/results/profiles/`` and summarised here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.common import RESULTS_DIR, Options, log, write_result
from bench.stores import queue_jobs, store_for, wait_all_done

_TABLE = re.compile(r"^\s*(SELECT|UPDATE|INSERT INTO|DELETE FROM|WITH|BEGIN|NOTIFY|SET|SHOW)"
                    r"\s*(?:.*?\bFROM\s+|)(\w+)?", re.I | re.S)


def _statement_kind(sql: str) -> str:
    head = " ".join(sql.split())
    verb = head.split(" ", 1)[0].upper()
    if verb == "INSERT":
        return "INSERT " + head.split()[2]
    if verb in ("UPDATE", "DELETE"):
        return f"{verb} {head.split()[1 if verb == 'UPDATE' else 2]}"
    if verb == "SELECT":
        match = re.search(r"\bFROM\s+(\w+)", head, re.I)
        return "SELECT " + (match.group(1) if match else head[7:40])
    return head[:40]


def _call_site() -> str:
    """The jobserver/locks/schedulers function that issued the statement."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if ("/jobserver/store/" in path or "/schedulers/" in path or "/locks/" in path) \
                and "/store/__init__" not in path and "/store/engine" not in path:
            module = Path(path).stem
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


#: Threads whose work is periodic, not per job (everything else is counted per job).
PERIODIC = {"MainThread", "heartbeat", "watcher", "lock-monitor", "pg-listen"}


def _thread_role() -> str:
    name = threading.current_thread().name
    for prefix, role in (("runner-watch", "watcher"), ("pg-lock", "lock-monitor")):
        if name.startswith(prefix):
            return role
    return re.sub(r"[_-]?\d+$", "", name) or name


def _count_driver_claims(stats: dict, guard: threading.Lock) -> Any:
    """The PostgreSQL claim runs on the driver's own cursor, out of SQLAlchemy's
    sight: count (and time, rows to records included) each call here instead.
    Returns the function that puts the original back."""
    from jobserver.store import pgclaim

    original = pgclaim.claim

    def counted(conn, variant, **params):
        t0 = time.perf_counter()
        try:
            return original(conn, variant, **params)
        finally:
            with guard:
                entry = stats[(_thread_role(), "pgclaim.claim",
                               f"WITH claim ({variant}, driver cursor)")]
                entry[0] += 1
                entry[1] += time.perf_counter() - t0

    pgclaim.claim = counted
    return lambda: setattr(pgclaim, "claim", original)


def count_statements(opts: Options, store: str, lock: str, mode: str, jobs: int,
                     zk_hosts: str | None = None) -> dict[str, Any]:
    from sqlalchemy import event

    from jobserver.config import load_config
    from jobserver.node import Node

    work = opts.work_dir / f"stmts-{store}-{lock}-{mode}"
    with store_for(store, work) as url:
        queue_jobs(url, jobs)
        env = {"JOBSERVER_DATA_DIR": str(work / "data"), "JOBSERVER_LOCK__BACKEND": lock,
               "JOBSERVER_SCHEDULER__MODE": mode, "JOBSERVER_SERVER__ID": "profiled",
               "JOBSERVER_DATABASE__URL": url}
        if zk_hosts:
            env.update(JOBSERVER_ZOOKEEPER__HOSTS=zk_hosts,
                       JOBSERVER_ZOOKEEPER__ROOT=f"/bench-stmts-{mode}")
        node = Node(load_config(environ=env))
        engine = node.store.engine
        stats: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        commits: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        local = threading.local()
        guard = threading.Lock()

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn, cursor, statement, parameters, context, executemany):
            local.t0 = time.perf_counter()
            local.key = (_thread_role(), _call_site(), _statement_kind(statement))

        @event.listens_for(engine, "after_cursor_execute")
        def _after(conn, cursor, statement, parameters, context, executemany):
            elapsed = time.perf_counter() - local.t0
            with guard:
                entry = stats[local.key]
                entry[0] += 1
                entry[1] += elapsed

        dialect = engine.dialect
        original_commit = dialect.do_commit

        def timed_commit(dbapi_connection):
            t0 = time.perf_counter()
            try:
                return original_commit(dbapi_connection)
            finally:
                with guard:
                    entry = commits[_thread_role()]
                    entry[0] += 1
                    entry[1] += time.perf_counter() - t0

        dialect.do_commit = timed_commit
        pings: Counter[str] = Counter()
        if hasattr(dialect, "do_ping"):  # pool_pre_ping: one round trip per checkout
            original_ping = dialect.do_ping

            def counted_ping(dbapi_connection):
                pings[_thread_role()] += 1
                return original_ping(dbapi_connection)

            dialect.do_ping = counted_ping
        lock_queries: Counter[str] = Counter()
        if hasattr(node.locks, "_query"):
            original_query = node.locks._query

            def counted(sql, params=()):
                lock_queries[f"{_thread_role()}: {sql.split('(')[0][:40]}"] += 1
                return original_query(sql, params)

            node.locks._query = counted
        restore_claim = _count_driver_claims(stats, guard)
        try:
            began = time.monotonic()
            node.start(upgrade=False)
            done, _ = wait_all_done(url, jobs, opts.scale(300, 60), poll=0.1)
            elapsed = time.monotonic() - began
            node.stop(drain_timeout=10)
        finally:
            restore_claim()
    roles = {key[0] for key in stats} | set(commits) | {
        k.split(":")[0] for k in lock_queries}
    per_job_roles = roles - PERIODIC
    rows = []
    for (role, site, kind), (count, seconds) in sorted(stats.items(),
                                                       key=lambda kv: -kv[1][0]):
        rows.append({"thread": role, "site": site, "statement": kind, "count": count,
                     "per_job": round(count / jobs, 3),
                     "ms_per_job": round(seconds * 1000 / jobs, 3),
                     "mean_ms": round(seconds * 1000 / count, 3)})
    job_statements = sum(r["count"] for r in rows if r["thread"] in per_job_roles)
    job_commits = sum(c for role, (c, _) in commits.items() if role in per_job_roles)
    commit_ms = sum(s for role, (_, s) in commits.items() if role in per_job_roles) * 1000
    stmt_ms = sum(r["ms_per_job"] for r in rows if r["thread"] in per_job_roles)
    summary = {"store": store, "lock": lock, "mode": mode, "jobs": jobs, "done": done,
               "elapsed_s": round(elapsed, 2), "jobs_per_s": round(done / elapsed, 1),
               "statements_per_job": round(job_statements / jobs, 2),
               "commits_per_job": round(job_commits / jobs, 2),
               "statement_ms_per_job": round(stmt_ms, 3),
               "commit_ms_per_job": round(commit_ms / jobs, 3),
               "lock_queries_per_job": round(sum(
                   n for k, n in lock_queries.items()
                   if k.split(":")[0] in per_job_roles) / jobs, 2),
               "pings_per_job": round(sum(n for role, n in pings.items()
                                          if role in per_job_roles) / jobs, 2),
               "lock_queries": dict(lock_queries), "statements": rows,
               "commits_by_thread": {k: v[0] for k, v in commits.items()},
               "per_job_threads": sorted(per_job_roles)}
    log(f"statements {store}/{lock}/{mode}: {summary['statements_per_job']} statements + "
        f"{summary['commits_per_job']} commits per job "
        f"({summary['statement_ms_per_job']} + {summary['commit_ms_per_job']} ms)")
    return summary


# -- py-spy -------------------------------------------------------------------------------
PROFILE_DIR = RESULTS_DIR / "profiles"

#: Inclusive shares reported for these frames (substring of "function (file").
INCLUSIVE = [
    ("SQL compile + cache key", "_compile_w_cache"),
    ("driver execute (incl. server wait)", "do_execute"),
    ("commit (incl. fsync wait)", "do_commit"),
    ("pool checkout / pre-ping", "_ConnectionFairy._checkout"),
    ("result rows -> records", "from_row"),
    ("logging", "Logger."),
    ("thread pool handoff", "ThreadPoolExecutor.submit"),
]


def summarise_collapsed(path: Path, top: int = 25) -> dict[str, Any]:
    total = 0
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_thread: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        thread = frames[0]
        by_thread[re.sub(r"\d+", "", thread.split("(")[0]).strip() or thread] += n
        self_time[frames[-1]] += n
        seen = set()
        for label, needle in INCLUSIVE:
            if label not in seen and any(needle in f for f in frames):
                inclusive[label] += n
                seen.add(label)
        for frame in set(frames):  # every function of ours on the stack, once
            if re.search(r"\((/\S*)?(jobserver|schedulers|locks)/", frame):
                ours[frame.split(" (")[0] + " (" + frame.split("/")[-1]] += n
    pct = lambda n: round(100.0 * n / total, 1) if total else 0.0  # noqa: E731
    return {"samples": total,
            "inclusive_pct": {label: pct(inclusive[label]) for label, _ in INCLUSIVE},
            "ours_inclusive_top": [{"frame": f, "pct": pct(n)}
                                   for f, n in ours.most_common(top)],
            "self_top": [{"frame": f, "pct": pct(n)} for f, n in self_time.most_common(top)],
            "threads_pct": {t: pct(n) for t, n in by_thread.most_common(12)}}


def py_spy(opts: Options, store: str = "postgres", lock: str = "postgres",
           mode: str = "single", seconds: int = 15) -> dict[str, Any]:
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    py_spy_bin = Path(sys.executable).parent / "py-spy"
    # Enough jobs that the node is still draining when the recording stops: samples of
    # an idle node after the drain would dilute every percentage.
    jobs = opts.scale(seconds * 6000, 600)
    results: dict[str, Any] = {}
    for flavour, flags in (("cpu", []), ("gil", ["--gil"]), ("wall", ["--idle"])):
        work = opts.work_dir / f"pyspy-{flavour}"
        with store_for(store, work) as url, Cluster(work, url, lock, mode) as cluster:
            queue_jobs(url, jobs)
            node = cluster.start("n1")
            cluster.wait_registered()
            out = PROFILE_DIR / f"{store}-{lock}-{mode}-{flavour}{'-smoke' if opts.smoke else ''}.txt"
            argv = [str(py_spy_bin), "record", "-p", str(node.pid), "-d",
                    str(opts.scale(seconds, 3)), "-r", "200", "-f", "raw", "--threads",
                    "--nonblocking", "-o", str(out)] + flags
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode != 0 or not out.exists():
                results[flavour] = {"error": proc.stderr[-500:]}
                continue
            summary = summarise_collapsed(out)
            summary["file"] = str(out.relative_to(RESULTS_DIR.parent.parent))
            summary["command"] = " ".join(argv)
            results[flavour] = summary
            log(f"py-spy {flavour}: {summary['samples']} samples -> {out.name}")
    return results


def run(opts: Options, zk_hosts: str | None = None) -> dict[str, Any]:
    jobs = opts.scale(3000, 100)
    modes = ("single",) if opts.smoke else ("single", "distributed", "leader")
    counts = [count_statements(opts, "postgres", "postgres", mode, jobs) for mode in modes]
    counts.append(count_statements(opts, "sqlite", "file", "single", jobs))
    if zk_hosts:
        counts.append(count_statements(opts, "postgres", "zookeeper", "distributed", jobs,
                                       zk_hosts))
    table = [{k: v for k, v in c.items() if not isinstance(v, (dict, list))} for c in counts]
    spy = py_spy(opts) if opts.profile else {}
    write_result("profile", opts, table, {"statement_detail": counts, "py_spy": spy})
    for flavour, summary in spy.items():
        if "inclusive_pct" in summary:
            print(f"py-spy {flavour}: inclusive % of samples")
            for label, value in summary["inclusive_pct"].items():
                print(f"  {label:40s} {value:5.1f}")
            for item in summary["ours_inclusive_top"][:15]:
                print(f"  {item['frame'][:60]:60s} {item['pct']:5.1f}")
    return {"counts": counts, "py_spy": spy}
