"""Scenario — shapes: realistic jobs beside the no-op rows, each against procrastinate
and Celery with the same shape and the same concurrency of 10.

* ``sleep10``: one python step sleeping 10 ms (``bench.stamp``); 10 slots make a floor
  of 1,000 jobs/s.
* ``true``: one shell step running ``/bin/true``; the ``floor`` rows time a process
  start from Python in a loop (``os.posix_spawn`` and ``subprocess.run``, one thread
  and 10), and the argv a shell step really spawns (:func:`jobserver.steps.shell.
  _command`: setpriv, sh and the reaper around the step), so that the gap between the
  two says where a step's process start goes.
* ``chain5``: five no-op steps, each depending on the one before.
* ``payload``: 1 KB of job params, a python step returning 4 KB of result (kept as
  the step's metrics, as any python step's result is).

Ours is the throughput scenario's ``postgres/postgres/single/1`` configuration (one
node, 10 slots): jobs queued up front, jobs/s from the first start to the last finish
on the store's clock, CPU per job of the node (its own, and the processes it reaped:
a shell step's), and of this database's PostgreSQL backends. ``step_ms`` is the wall
time of a job's steps as the store recorded it; ``slot_ms_per_job`` (10 slots / jobs/s)
minus ``step_ms`` is what a job costs a slot outside its steps; ``jobs_per_claim`` and
``jobs_per_finish`` say how many jobs shared each claim and each final write.
``vs_floor``: for ``sleep10``, jobs/s over the 1,000/s floor (target >= 0.95); for
``true``, how many times fork+exec (posix_spawn, 10 threads) outruns the row (target
<= 2).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.common import (Options, backend_pids, cpu_seconds, loadavg, log, reaped_cpu_seconds,
                          stamp_job, write_result)
from bench.stores import poll_engine, queue_jobs, run_window, store_for, wait_all_done

SHAPES = ["sleep10", "true", "chain5", "payload"]
SLOTS = 10
#: Jobs per row (full size): each row runs for a few seconds at its floor, the cap at most.
FULL_JOBS = {"sleep10": 6000, "true": 1000, "chain5": 1500, "payload": 6000}
SMOKE_JOBS = {"sleep10": 60, "true": 20, "chain5": 20, "payload": 60}


def shape_spec(shape: str) -> dict[str, Any]:
    """The job spec of ``shape`` (as a user would submit it)."""
    if shape == "sleep10":
        return stamp_job(0.01, "sleep10")
    if shape == "true":
        return {"name": "true", "steps": [{"name": "s", "type": "shell", "argv": ["/bin/true"]}]}
    if shape == "chain5":
        return {"name": "chain5", "steps": [
            {"name": f"s{i}", "type": "noop", **({"depends_on": [f"s{i - 1}"]} if i > 1 else {})}
            for i in range(1, 6)]}
    if shape == "payload":
        spec = stamp_job(name="payload")
        spec["params"] = {"blob": "p" * 1024}
        spec["steps"][0]["args"] = {"out_bytes": 4096}
        return spec
    raise ValueError(f"unknown shape {shape!r}")


# -- ours -------------------------------------------------------------------------------------
def _node_cpu(pid: int, dbname: str) -> list[float]:
    return [cpu_seconds(pid), reaped_cpu_seconds(pid),
            sum(cpu_seconds(p) for p in backend_pids(dbname))]


def _step_ms(url: str) -> float | None:
    from sqlalchemy import text

    with poll_engine(url).connect() as conn:
        value = conn.execute(text("SELECT sum(wall_seconds) / count(DISTINCT job_id) "
                                  "FROM steps WHERE state = 'SUCCEED'")).scalar()
    return None if value is None else round(float(value) * 1000, 3)


def _batches(url: str) -> dict[str, float | None]:
    """Jobs per claim and per final write: job events of one transaction (``txid``)
    came from one claim statement, or from one group commit of finished jobs."""
    from sqlalchemy import text

    with poll_engine(url).connect() as conn:
        found = dict(conn.execute(text(
            "SELECT to_state, count(*)::float / count(DISTINCT txid) FROM job_events "
            "WHERE step IS NULL AND txid IS NOT NULL AND ((from_state = 'READY' AND "
            "to_state = 'RUNNING') OR (from_state = 'RUNNING' AND to_state = 'SUCCEED')) "
            "GROUP BY to_state")).all())
    return {"jobs_per_claim": _round(found.get("RUNNING")),
            "jobs_per_finish": _round(found.get("SUCCEED"))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_ours(opts: Options, shape: str, jobs: int, cap: float) -> dict[str, Any]:
    """One shape through one node (PostgreSQL store, postgres lock, single mode)."""
    work = opts.work_dir / f"shapes-{shape}"
    with store_for("postgres", work) as url:
        queue_jobs(url, jobs, shape_spec(shape))
        dbname = url.rsplit("/", 1)[1]
        with Cluster(work, url, "postgres", "single") as cluster:
            node = cluster.start("n1")
            cluster.wait_registered()
            done0, _ = wait_all_done(url, jobs, 0)
            cpu = [-v for v in _node_cpu(node.pid, dbname)]
            done, _ = wait_all_done(url, jobs, cap)
            cpu = [a + b for a, b in zip(cpu, _node_cpu(node.pid, dbname))]
        window, step_ms, batches = run_window(url), _step_ms(url), _batches(url)
    measured = max(done - done0, 1)
    own, reaped, db = (round(v * 1000 / measured, 2) for v in cpu)
    return {"system": "jobserver", "config": "postgres/postgres/single/1", "jobs": jobs,
            "done": window["done"], "errors": window["errors"], "seconds": window["seconds"],
            "jobs_per_s": window["jobs_per_s"], "capped": done < jobs,
            "worker_cpu_ms_per_job": own, "child_cpu_ms_per_job": reaped,
            "store_cpu_ms_per_job": db, "step_ms": step_ms, **batches,
            "note": {"payload": "4 KB in steps.metrics"}.get(shape)}


# -- the process-start floor ---------------------------------------------------------------
def _posix_spawn(argv: list[str]) -> None:
    pid = os.posix_spawn(argv[0], argv, os.environ)
    os.waitpid(pid, 0)


def _subprocess_run(argv: list[str]) -> None:
    subprocess.run(argv, check=True)


def _usage_file(scratch: Path) -> str:
    scratch.mkdir(parents=True, exist_ok=True)
    return str(Path(tempfile.mkdtemp(prefix="reaper-", dir=scratch)) / "usage.json")


def _step_argv(scratch: Path) -> list[str]:
    """What a shell step of ``/bin/true`` spawns: setpriv and sh (the step dies with
    the node), the reaper (the step's own usage), setpriv and sh again, the step."""
    from jobserver.steps.shell import _command

    return _command(["/bin/true"], dict(os.environ), Path(_usage_file(scratch)))


def _wrapper_argv() -> list[str]:
    """The step's setpriv and sh alone, without the reaper."""
    from jobserver.steps import reaper
    from jobserver.steps.shell import SETPRIV

    return reaper.command(SETPRIV or "", ["/bin/true"], os.getpid())


def _reaper_argv(scratch: Path) -> list[str]:
    """The reaper alone (its interpreter), without setpriv and sh."""
    from jobserver.steps.shell import REAPER

    return [*(REAPER or []), _usage_file(scratch), "", "", "/bin/true"]


def _loop(call: Any, argv: list[str], threads: int, seconds: float) -> dict[str, Any]:
    """``call(argv)`` back to back from ``threads`` threads for ``seconds``."""
    counts = [0] * threads
    argvs = [argv() if callable(argv) else argv for _ in range(threads)]
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        while True:  # one call at least, however slow
            call(argvs[i])
            counts[i] += 1
            if time.monotonic() >= stop:
                return

    before, began = os.times(), time.perf_counter()
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    wall, after = time.perf_counter() - began, os.times()
    calls = sum(counts)
    cpu = sum(after[:4]) - sum(before[:4])  # this process and the children it reaped
    return {"jobs": calls, "done": calls, "seconds": round(wall, 3),
            "jobs_per_s": round(calls / wall, 1), "per_call_ms": round(threads * wall * 1000 /
                                                                       calls, 3),
            "worker_cpu_ms_per_job": round(cpu * 1000 / calls, 3)}


def floor_rows(opts: Options) -> list[dict[str, Any]]:
    """fork+exec of /bin/true in a loop: posix_spawn, subprocess.run, and through
    subprocess.run the argv of a shell step, whole and in its two parts (setpriv + sh,
    the reaper); 1 and 10 threads."""
    seconds, scratch = opts.scale(3, 0.3), opts.work_dir / "shapes-floor"
    ways = [("posix_spawn /bin/true", _posix_spawn, ["/bin/true"]),
            ("subprocess.run /bin/true", _subprocess_run, ["/bin/true"]),
            ("subprocess.run shell-step argv", _subprocess_run, lambda: _step_argv(scratch)),
            ("subprocess.run setpriv+sh part", _subprocess_run, _wrapper_argv),
            ("subprocess.run reaper part", _subprocess_run, lambda: _reaper_argv(scratch))]
    rows = []
    for config, call, argv in ways:
        for threads in (1, SLOTS):
            row = _loop(call, argv, threads, seconds)
            rows.append({"shape": "true", "system": "floor", "config": f"{config} x{threads}",
                         **row, "load1": loadavg()})
            log(f"shapes floor {config} x{threads}: {row['jobs_per_s']} calls/s, "
                f"{row['per_call_ms']} ms per call")
    return rows


# -- the scenario ------------------------------------------------------------------------------
def _derived(row: dict[str, Any], shape: str, floor: dict[str, float]) -> dict[str, Any]:
    """Per-job figures: wall ms per job, slot ms per job, and the shape's target ratio."""
    rate = row.get("jobs_per_s")
    row["ms_per_job"] = round(1000 / rate, 3) if rate else None
    row["slot_ms_per_job"] = round(SLOTS * 1000 / rate, 3) if rate else None
    if shape == "sleep10":
        row["vs_floor"] = round(rate / 1000, 3) if rate else None  # 10 slots / 10 ms
    elif shape == "true" and floor.get("posix_spawn /bin/true x10"):
        # How many times slower than fork+exec at the same parallelism.
        row["vs_floor"] = round(floor["posix_spawn /bin/true x10"] / rate, 2) if rate else None
    return row


def run(opts: Options) -> list[dict[str, Any]]:
    from bench.peers.scenarios import _require_peers
    from bench.peers.shapes import run_peers

    _require_peers()
    cap = opts.scale(15, 8)
    sizes = SMOKE_JOBS if opts.smoke else FULL_JOBS
    rows = floor_rows(opts)
    floor = {r["config"]: r["jobs_per_s"] for r in rows}
    for shape in SHAPES:
        ours = run_ours(opts, shape, sizes[shape], cap)
        log(f"shapes {shape} jobserver: {ours['jobs_per_s']} jobs/s "
            f"({ours['done']}/{sizes[shape]})")
        for row in [ours, *run_peers(opts, shape, sizes[shape], cap)]:
            rows.append(_derived({"shape": shape, **row, "load1": loadavg()}, shape, floor))
    write_result("shapes", opts, rows, {"slots": SLOTS, "cap_s": cap, "jobs": sizes})
    return rows
