"""Claim rate with jobs waiting for upstreams (``after``) in the table (PostgreSQL).

    python -m bench.waiting [WAITING] [READY] [ROUNDS]   # defaults 100000 5000 2

Two databases: ``plain`` holds READY no-op jobs only; ``waiting`` holds the same plus
WAITING jobs that wait for one upstream job which stays RUNNING (waiting_on = 1, an
edge each in job_dependencies), as a planner's lattice would leave them. In each, the
READY jobs are drained through the store the way a node's hot path does it, one
thread: a claim of 32 (``RunRepository.claim``) then one group commit of the batch
(``RunRepository.complete``), until nothing is claimable; the rate is jobs claimed and
completed per second. Rounds alternate between the two, so that load from other work
on the machine weighs on both alike; the 1-minute load average is printed beside.
The claim's plan with the waiting jobs in the table is printed last: the candidate
scan of ix_jobs_queue must not pass over them.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench.common import Options, loadavg, log, write_result
from bench.stores import GlobalLease, queue_jobs, store_for

LIMIT = 32


def _make_waiting(url: str, count: int) -> None:
    """``count`` jobs waiting for one upstream, which is claimed (RUNNING) and left."""
    from sqlalchemy import text

    from jobserver.store import Store

    first, last = queue_jobs(url, count, analyze=False)
    store = Store(url, notify=False)
    try:
        upstream, _ = queue_jobs(url, 1, analyze=False)
        store.runs.claim("upstream-node", GlobalLease.drawn(store, "bench"), 1,
                         job_ids=[upstream])
        with store.tx.write() as conn:
            conn.execute(text("UPDATE jobs SET has_dependents = true WHERE id = :u"),
                         {"u": upstream})
            conn.execute(text("UPDATE jobs SET waiting_on = 1 WHERE id BETWEEN :a AND :b"),
                         {"a": first, "b": last})
            conn.execute(text("INSERT INTO job_dependencies (job_id, upstream_id, awaits) "
                              "SELECT id, :u, 'done' FROM jobs WHERE id BETWEEN :a AND :b"),
                         {"u": upstream, "a": first, "b": last})
        with store.tx.statement() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE jobs")
            conn.exec_driver_sql("ANALYZE job_dependencies")
    finally:
        store.dispose()


def drain(url: str, ready: int) -> dict[str, Any]:
    """Queue ``ready`` READY jobs and drain them by claim + group commit; jobs/s."""
    from jobserver.states import State
    from jobserver.store import Store
    from jobserver.store.records import Completion, StepOutcome

    queue_jobs(url, ready)
    store = Store(url, notify=False)
    try:
        lease = GlobalLease.drawn(store, "bench")
        done, load, began = 0, loadavg(), time.perf_counter()
        while batch := store.runs.claim("bench", lease, LIMIT):
            store.runs.complete([Completion(job.token(), (job.steps or [])[0], 1,
                                            StepOutcome(State.SUCCEED), State.SUCCEED)
                                 for job in batch])
            done += len(batch)
        seconds = time.perf_counter() - began
    finally:
        store.dispose()
    return {"jobs": done, "seconds": round(seconds, 2), "jobs_per_s": round(done / seconds),
            "load_1m": load}


def plan(url: str) -> str:
    """EXPLAIN ANALYZE of the claim's candidate scan with the waiting jobs there."""
    from jobserver.store import Store, pgclaim

    queue_jobs(url, LIMIT * 4)
    store = Store(url, notify=False)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        params = GlobalLease.drawn(store, "bench").claim_params("bench", LIMIT)
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF) " + pgclaim.statement(), params)
        lines = [row[0] for row in cursor.fetchall()]
        raw.rollback()
    finally:
        raw.close()
        store.dispose()
    start = next(i for i, line in enumerate(lines) if "candidates" in line)
    return "\n".join(lines[start:start + 8])


def run(opts: Options, waiting: int, ready: int, rounds: int) -> list[dict[str, Any]]:
    rows = []
    with store_for("postgres", opts.work_dir / "plain") as plain, \
            store_for("postgres", opts.work_dir / "waiting") as crowded:
        log(f"queueing {waiting:,} waiting jobs")
        _make_waiting(crowded, waiting)
        for number in range(1, rounds + 1):
            for name, url in (("plain", plain), ("waiting", crowded)):
                row = {"round": number, "table": name,
                       "waiting_jobs": waiting if name == "waiting" else 0}
                row.update(drain(url, ready))
                log(f"{name}: {row['jobs_per_s']:,} jobs/s (load {row['load_1m']})")
                rows.append(row)
        print(plan(crowded))
    write_result("waiting", opts, rows, {"ratio": ratio(rows)})
    print(f"waiting / plain claim rate: {ratio(rows):.3f}")
    return rows


def ratio(rows: list[dict[str, Any]]) -> float:
    def total(name: str) -> float:
        mine = [row for row in rows if row["table"] == name]
        return sum(row["jobs"] for row in mine) / sum(row["seconds"] for row in mine)
    return total("waiting") / total("plain")


if __name__ == "__main__":
    args = [int(arg) for arg in sys.argv[1:4]]
    run(Options(command="python -m bench.waiting " + " ".join(sys.argv[1:])),
        *(args + [100_000, 5_000, 2][len(args):]))
