"""What planning costs on the hot path, and why the node plans every statement anyway.

    python -m bench.planning              # 20,000 READY jobs, batches of 10, 40 rounds

1. **Split**: on a table of 20,000 READY no-op jobs, each round claims a batch through
   the store as a node does, then runs ``EXPLAIN (ANALYZE, SUMMARY)`` of the group
   commit statement for that batch (committed, so the jobs finish) and of the claim
   statement (rolled back). Reports the p50 planning and execution time of each: the
   server's share of one claim → complete cycle that a cached plan would save.
2. **Generic-plan hazard**: the node's connections set ``plan_cache_mode =
   force_custom_plan`` (see ``jobserver/store/engine.py``). This part shows what the
   other choice costs: a generic plan of the group commit statement prepared while
   the tables are small, executed again after 200,000 jobs were queued (before any
   ANALYZE, as in a new database filling up between autovacuum passes), against the
   same statement planned for each run.

Writes ``bench/results/planning.json``. Not part of ``make bench``: it measures a
design choice, not the product.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from typing import Any

from bench.common import Options, write_result
from bench.stores import GlobalLease, libpq_dsn, queue_jobs, store_for

READY_JOBS = 20_000
GROWN_TO = 200_000


def _completion_params(jobs: list[Any], fence: int) -> dict[str, Any]:
    """The group commit statement's parameters for ``jobs`` (claimed under ``fence``)
    all succeeding, built as the node's group commit builds them."""
    from jobserver.states import State
    from jobserver.store import batch as batch_sql
    from jobserver.store.records import ClaimToken, Completion, StepOutcome

    return batch_sql.postgresql_params([Completion(
        ClaimToken(job.id, "bench", fence, job.attempt), job.steps[0], job.steps[0].attempt,
        StepOutcome(State.SUCCEED, exit_code=0, wall_seconds=0.0, cpu_seconds=0.0),
        job_state=State.SUCCEED) for job in jobs])


def _explain(cursor: Any, sql: str, params: dict[str, Any]) -> tuple[float, float]:
    cursor.execute("EXPLAIN (ANALYZE, SUMMARY) " + sql, params)
    plan = "\n".join(row[0] for row in cursor.fetchall())
    planning = re.search(r"Planning Time: ([\d.]+)", plan)
    execution = re.search(r"Execution Time: ([\d.]+)", plan)
    assert planning and execution, plan
    return float(planning.group(1)), float(execution.group(1))


def _claimer(url: str) -> tuple[Any, GlobalLease]:
    from jobserver.store import Store

    store = Store(url, notify=False)
    return store, GlobalLease.drawn(store, "bench")


def split(opts: Options, batch: int, rounds: int) -> list[dict[str, Any]]:
    from jobserver.store import batch as batch_sql, pgclaim

    with store_for("postgres", opts.work_dir / "planning-split") as url:
        queue_jobs(url, READY_JOBS)
        store, lease = _claimer(url)
        raw = store.engine.raw_connection()
        times: dict[str, list[tuple[float, float]]] = {"claim": [], "complete": []}
        claim_params = lease.claim_params("bench", batch)
        try:
            cursor = raw.cursor()
            for _ in range(rounds):
                jobs = store.runs.claim("bench", lease, batch)
                times["complete"].append(_explain(
                    cursor, batch_sql.statement(), _completion_params(jobs, lease.fence)))
                raw.commit()
                times["claim"].append(_explain(cursor, pgclaim.statement(),
                                               claim_params))
                raw.rollback()
        finally:
            raw.close()
            store.dispose()
    return [{"part": "split", "statement": name, "batch": batch, "rounds": rounds,
             "planning_p50_ms": round(statistics.median(p for p, _ in pairs), 3),
             "execution_p50_ms": round(statistics.median(e for _, e in pairs), 3)}
            for name, pairs in times.items()]


def generic_hazard(opts: Options, batch: int, rounds: int) -> list[dict[str, Any]]:
    import psycopg

    from jobserver.store import batch as batch_sql

    with store_for("postgres", opts.work_dir / "planning-generic") as url:
        queue_jobs(url, 3 * batch, analyze=False)
        store, lease = _claimer(url)
        generic = psycopg.connect(libpq_dsn(url), autocommit=True, prepare_threshold=0,
                                  options="-c plan_cache_mode=force_generic_plan")
        custom = psycopg.connect(libpq_dsn(url), autocommit=True,
                                 options="-c plan_cache_mode=force_custom_plan")

        def timed(conn: Any) -> float:
            params = _completion_params(store.runs.claim("bench", lease, batch), lease.fence)
            started = time.perf_counter()
            conn.execute(batch_sql.statement(), params, prepare=conn is generic).fetchall()
            return (time.perf_counter() - started) * 1000

        try:
            small = [timed(generic) for _ in range(2)]
            # No ANALYZE after the growth, as in a new database filling up before
            # autovacuum's first pass: new statistics would make PostgreSQL plan again.
            queue_jobs(url, GROWN_TO, analyze=False)
            grown = {"generic, prepared small": [timed(generic) for _ in range(rounds)],
                     "custom, planned per run": [timed(custom) for _ in range(rounds)]}
        finally:
            generic.close()
            custom.close()
            store.dispose()
    rows = [{"part": "generic hazard", "statement": "complete", "batch": batch,
             "plan": name, "rounds": rounds, "jobs_in_table": GROWN_TO,
             "p50_ms": round(statistics.median(values), 2)} for name, values in grown.items()]
    rows.append({"part": "generic hazard", "statement": "complete", "batch": batch,
                 "plan": "generic, while small", "rounds": len(small),
                 "jobs_in_table": 3 * batch, "p50_ms": round(statistics.median(small), 2)})
    return rows


def main(argv: list[str]) -> int:
    opts = Options(command="python -m bench.planning " + " ".join(argv))
    batch, rounds = 10, 40
    write_result("planning", opts, split(opts, batch, rounds) +
                 generic_hazard(opts, batch, rounds // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
