"""How late a job held back by ``not_before`` starts: the idle scheduler's due timer.

    python -m bench.due                 # 100 jobs, PostgreSQL and SQLite
    python -m bench.due 50 postgres     # fewer jobs, one store

One real node (single mode, ``scheduler.poll_interval`` 1 s, NOTIFY/commit watcher
on) is idle; jobs of one ``bench.stamp`` step are submitted with ``not_before`` 0.3 to
0.8 s ahead, one at a time, each due after the one before has started, so the node is
idle at every due time. Lateness is the step body's first instruction minus
``not_before`` (one host clock). Without the timer a due job waited for the next poll:
up to the poll interval, 650 ms in the issue's measurement. Writes
``bench/results/due[-smoke].json``; ``make bench`` runs it as the ``due`` scenario.
"""

from __future__ import annotations

import random
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.cluster import ApiClient, Cluster
from bench.common import Options, latency_summary, loadavg, log, stamp_job, write_result
from bench.stores import stamps, store_for, wait_all_done

JOBS = 100
STORES = ("postgres", "sqlite")
LOCKS = {"postgres": "postgres", "sqlite": "file"}


def lateness(opts: Options, store: str, count: int) -> dict[str, Any]:
    work = opts.work_dir / f"due-{store}"
    with store_for(store, work) as url, Cluster(work, url, LOCKS[store], "single",
                                                 SCHEDULER__POLL_INTERVAL=1.0) as cluster:
        cluster.start("n1")
        cluster.wait_registered(api=True)
        time.sleep(1.0)
        client = ApiClient(cluster.port)
        due: dict[int, float] = {}
        try:
            for _ in range(count):
                at = datetime.now(timezone.utc) + timedelta(seconds=random.uniform(0.3, 0.8))
                job_id, _sent = client.submit(dict(stamp_job(), not_before=at.isoformat()))
                due[job_id] = at.timestamp()
                wait_all_done(url, len(due), 30, min_id=min(due))
        finally:
            client.close()
        started = stamps(url, list(due))
        late = [started[job_id] - at for job_id, at in due.items() if job_id in started]
        early = sum(1 for value in late if value < 0)
        return {"store": store, "jobs": count, **latency_summary(late), "early": early,
                "load1": loadavg()}


def run(opts: Options, stores: list[str] | None = None) -> list[dict[str, Any]]:
    """The ``due`` scenario of ``python -m bench``: both stores, 100 jobs each."""
    return measure(opts, opts.scale(JOBS, 10), stores or list(STORES))


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else JOBS
    measure(Options(command="python -m bench.due " + " ".join(argv)), count,
            argv[1:] or list(STORES))


def measure(opts: Options, count: int, stores: list[str]) -> list[dict[str, Any]]:
    rows = []
    for store in stores:
        rows.append(lateness(opts, store, count))
        log(f"due {store}: p50 {rows[-1]['p50_ms']} ms p99 {rows[-1]['p99_ms']} ms "
            f"max {rows[-1]['max_ms']} ms, {rows[-1]['early']} early")
    write_result("due", opts, rows)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
