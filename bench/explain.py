"""EXPLAIN (ANALYZE, BUFFERS) of the claim statement with N jobs in the table.

    python -m bench.explain 1000000 finished     # N SUCCEED + 1,000 READY
    python -m bench.explain 1000000 ready        # N READY

The statement is captured from a real ``RunRepository.claim`` (SQLAlchemy's
``before_cursor_execute``), then explained inside a transaction that is rolled back.
Output goes to stdout and ``bench/results/profiles/explain-<mix>-<N>.txt``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from bench.common import RESULTS_DIR, queue_jobs, store_for, Options


@dataclass
class _Lease:
    key: str
    fence: int


def explain(size: int, mix: str) -> str:
    from sqlalchemy import event

    from jobserver.store import Store

    opts = Options()
    with store_for("postgres", opts.work_dir / "explain") as url:
        if mix == "finished":
            queue_jobs(url, size, finished=True)
            queue_jobs(url, 1000)
        else:
            queue_jobs(url, size)
        store = Store(url, notify=False)
        fence = store.epochs.bump("scheduler/global", "explain")
        captured: list[tuple[str, object]] = []

        @event.listens_for(store.engine, "before_cursor_execute")
        def _capture(conn, cursor, statement, parameters, context, executemany):
            captured.append((statement, parameters))

        store.runs.claim("explain", _Lease("scheduler/global", fence), 10)  # warm: plan cached
        captured.clear()
        store.runs.claim("explain", _Lease("scheduler/global", fence), 10)
        claim_sql, params = captured[0]
        raw = store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            raw.rollback()
        finally:
            raw.close()
        statements = "\n\n".join(s for s, _ in captured)
        store.dispose()
    text = (f"-- claim with {size:,} {mix} jobs in the table\n-- statements of one claim "
            f"transaction:\n{statements}\n\n-- EXPLAIN (ANALYZE, BUFFERS) of the first:\n{plan}\n")
    out = RESULTS_DIR / "profiles" / f"explain-{mix}-{size}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


if __name__ == "__main__":
    print(explain(int(sys.argv[1]) if len(sys.argv) > 1 else 1000,
                  sys.argv[2] if len(sys.argv) > 2 else "finished"))
