"""The SQL statements and commits of the schedule evaluator per fire time.

    python -m bench.schedules_statements             # 10,000 schedules, PostgreSQL
    python -m bench.schedules_statements 2000 sqlite

A :class:`jobserver.node.Node` runs in this process on a fresh store; early in a minute
N enabled cron schedules (``* * * * *``, as in the schedules scenario) are created.
Every statement the evaluator's thread sends for their first fire time (from a second
before it until every schedule-job of it is LAUNCHED, up to ten minutes) is counted by the function of ``jobserver`` that
sent it and by kind, with its wall time (server round trip included); so is every
commit. Per fire time, these are what the evaluator pays for each schedule, free of
the noise of other processes. Writes ``bench/results/schedules_statements.json``.
Not part of ``make bench``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

from bench.common import Options, log, write_result
from bench.profile import _statement_kind
from bench.schedules_profile import EVALUATOR
from bench.schedules_store import create_after_boundary, unsettled, wait_launched
from bench.stores import store_for


def _call_site() -> str:
    """The innermost ``jobserver`` function outside the store's plumbing."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if "/jobserver/" in path and not path.endswith(("/store/__init__.py",
                                                         "/store/engine.py")):
            return f"{Path(path).stem}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


class Counter:
    """Statements and commits of the evaluator's thread, while ``on`` is set."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.on = threading.Event()
        self.stats: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        self.commits = [0, 0.0]
        self._local = threading.local()
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        dialect = engine.dialect
        original = dialect.do_commit

        def timed_commit(dbapi_connection: Any) -> None:
            started = time.perf_counter()
            try:
                original(dbapi_connection)
            finally:
                if self._counted():
                    self.commits[0] += 1
                    self.commits[1] += time.perf_counter() - started

        dialect.do_commit = timed_commit
        self._count_driver_submit()

    def _count_driver_submit(self) -> None:
        """PostgreSQL's submit runs on the driver's own cursor, out of SQLAlchemy's
        sight, and commits as it returns: count it here, as a statement and a commit."""
        from jobserver.store import pgsubmit

        original = pgsubmit.submit

        def counted(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if self._counted():
                    elapsed = time.perf_counter() - started
                    entry = self.stats[("pgsubmit.submit", "submit (driver, autocommit)")]
                    entry[0] += 1
                    entry[1] += elapsed
                    self.commits[0] += 1

        pgsubmit.submit = counted  # type: ignore[assignment]

    def _counted(self) -> bool:
        return self.on.is_set() and threading.current_thread().name == EVALUATOR

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self._counted():
            self._local.key = (_call_site(), _statement_kind(statement))
            self._local.started = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self._counted() and getattr(self._local, "key", None) is not None:
            entry = self.stats[self._local.key]
            entry[0] += 1
            entry[1] += time.perf_counter() - self._local.started
            self._local.key = None


def one_boundary(opts: Options, store: str, count: int) -> tuple[list[dict], dict]:
    from jobserver.config import load_config
    from jobserver.node import Node

    work = opts.work_dir / f"schedule-statements-{store}"
    with store_for(store, work / "store") as url:
        lock = "postgres" if store == "postgres" else "file"
        node = Node(load_config(environ={
            "JOBSERVER_DATABASE__URL": url, "JOBSERVER_DATA_DIR": str(work / "data"),
            "JOBSERVER_LOCK__BACKEND": lock, "JOBSERVER_SERVER__ID": "statements"}))
        counter = Counter(node.store.engine)
        node.start(upgrade=False)
        try:
            _, fire = create_after_boundary(url, count, 55.0)
            while unsettled(url) and time.time() < fire - 1:
                time.sleep(0.5)
            while time.time() < fire - 1:
                time.sleep(0.2)
            counter.on.set()
            done, at = wait_launched(url, fire, count, fire + 600, poll=0.5)
            counter.on.clear()
        finally:
            node.stop(10)
    log(f"statements {store}: {done:,} of {count:,} launched within {at - fire:.1f} s")
    rows: list[dict[str, Any]] = [{"store": store, "site": site, "statement": kind, "count": int(n),
             "per_fire": round(n / count, 3), "ms_total": round(seconds * 1000, 1),
             "ms_per_fire": round(seconds * 1000 / count, 3)}
            for (site, kind), (n, seconds) in sorted(counter.stats.items(),
                                                     key=lambda kv: -kv[1][1])]
    totals = {"store": store, "schedules": count, "launched": done,
              "firing_s": round(at - fire, 1),
              "statements_per_fire": round(sum(r["count"] for r in rows) / count, 2),
              "statement_ms_per_fire": round(sum(r["ms_total"] for r in rows) / count, 3),
              "commits_per_fire": round(counter.commits[0] / count, 3),
              "commit_ms_per_fire": round(counter.commits[1] * 1000 / count, 3)}
    return rows, totals


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 10_000
    stores = argv[1:] or ["postgres"]
    opts = Options(command="python -m bench.schedules_statements " + " ".join(argv))
    rows: list[dict[str, Any]] = []
    totals = []
    for store in stores:
        found, total = one_boundary(opts, store, count)
        rows += found
        totals.append(total)
        log(f"statements {store}: {total}")
    write_result("schedules_statements", opts, rows, {"totals": totals})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
