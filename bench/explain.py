"""EXPLAIN (ANALYZE, BUFFERS) of the claim statement with N jobs in the table.

    python -m bench.explain 1000000 finished     # N SUCCEED + 10,000 READY
    python -m bench.explain 1000000 ready        # N READY

After one real ``RunRepository.claim``, the claim statement (``pgclaim.statement``)
is explained inside a transaction that is rolled back.
Output goes to stdout and ``bench/results/profiles/explain-<mix>-<N>.txt``.
"""

from __future__ import annotations

import sys
from bench.common import RESULTS_DIR, Options
from bench.stores import GlobalLease, queue_jobs, store_for


def explain(size: int, mix: str, limit: int = 32) -> str:
    from jobserver.store import Store, pgclaim

    opts = Options()
    with store_for("postgres", opts.work_dir / "explain") as url:
        if mix == "finished":
            queue_jobs(url, size, finished=True)
            queue_jobs(url, 10_000)
        else:
            queue_jobs(url, size)
        store = Store(url, notify=False)
        lease = GlobalLease.drawn(store, "explain")
        store.runs.claim("explain", lease, limit)  # as a node would
        sql = pgclaim.statement()
        params = lease.claim_params("explain", limit)
        raw = store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            raw.rollback()
        finally:
            raw.close()
        store.dispose()
    text = (f"-- claim of {limit} with {size:,} {mix} jobs in the table\n{sql}\n\n"
            f"-- EXPLAIN (ANALYZE, BUFFERS), rolled back:\n{plan}\n")
    out = RESULTS_DIR / "profiles" / f"explain-{mix}-{size}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


if __name__ == "__main__":
    print(explain(int(sys.argv[1]) if len(sys.argv) > 1 else 1000,
                  sys.argv[2] if len(sys.argv) > 2 else "finished"))
