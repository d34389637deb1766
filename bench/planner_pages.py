"""The planners' dashboard pages on PostgreSQL with 1,000,000 jobs in the store.

    python -m bench.planner_pages                  1,000,000 jobs, the sizes below
    python -m bench.planner_pages --jobs 10000     a quick look

The store gets a history of finished jobs (bulk-copied, as the backlog scenario does)
and planner data at the scale of a busy installation: 1,000 schedules with 50
launched schedule-jobs and 200 evaluations each; a dataset of 200,000 partitions
with a consumer holding 1,000 FAILED ones; the examples' views set materialized
for 10 shops over a year; a control table of 10 systems × 2 locations × 365 days.
Then each page is asked for through the app (Flask's test client, signed in: the
routing, the session, the reads and the template, no network) 5 times to warm and
30 times measured; the table gives the median and the 95th percentile in ms.
Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import text

from bench.stores import pg_database, queue_jobs

TOKEN = "bench-planner-pages-0123456789abcdef"
SHOPS = [f"SHOP{n:02d}" for n in range(1, 11)]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GRID_MONTH = "app.eci.stage/e(Search,SearchWeekly)/SHOP01/rymd(20150501-20150531)"
GRID_WIDEST = ("app.eci.stage/e(Search,SearchWeekly)/e(" + ",".join(SHOPS)
               + ")/rymd(20150101-20150219)")  # 1,000 cells, the most a grid shows


def _schedules(store: Any, count: int, jobs: int) -> None:
    from jobserver.schedules.spec import parse_schedule
    from jobserver.schedules.store import insert_evaluations
    from jobserver.schedules.tables import schedule_jobs
    from jobserver.spec import Policy

    policy = Policy(lambda name: False, None)
    ids = []
    for index in range(count):
        spec = parse_schedule({"name": f"s{index:04d}", "template": {
            "name": f"job{index}", "steps": [{"name": "a", "type": "noop"}]},
            "trigger": {"type": "time", "cron": f"{index % 60} 4 * * *",
                        "timezone": "Europe/Berlin"},
            "constraints": [{"type": "concurrency", "limit": 1}]}, policy)
        ids.append(store.schedules.create(spec, enabled=True).id)
    now = store.schedules._clock()  # noqa: SLF001 - the catalog's own clock
    with store.tx.write() as conn:
        for schedule_id in ids:
            conn.execute(schedule_jobs.insert(), [{
                "schedule_id": schedule_id, "generation": 1, "state": "LAUNCHED",
                "fire_time": now - timedelta(days=n), "notifications": [], "trigger_state": {},
                "properties": {}, "created_at": now, "updated_at": now, "deadline_at": now,
                "launch_key": f"bench/{schedule_id}/{n}",
                "job_id": random.randint(1, jobs)} for n in range(50)])
            insert_evaluations(conn, [{
                "schedule_id": schedule_id, "schedule_job_id": None, "at": now,
                "outcome": "launched", "fire_time": now - timedelta(hours=n),
                "reason": "time trigger fired; concurrency: 0 running, limit 1 → met",
                "details": {}, "next_check_at": None} for n in range(200)])


def _datasets(store: Any, partitions: int) -> None:
    from jobserver.datasets.consumer_spec import parse_consumer
    from jobserver.datasets.spec import parse_dataset

    store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "date", "type": "date"}, {"name": "hour", "type": "int"},
        {"name": "shop", "type": "string"}]}))
    store.consumers.put(parse_consumer({"dataset": "raw", "name": "cleanse",
                                        "filter": ["hour >= 6"]}))
    day0, made = date(2024, 1, 1), 0
    while made < partitions:
        batch = []
        for n in range(made, min(made + 10_000, partitions)):
            day = day0 + timedelta(days=n // (24 * len(SHOPS)))
            hour, shop = (n // len(SHOPS)) % 24, SHOPS[n % len(SHOPS)]
            batch.append({"key": {"date": day.isoformat(), "hour": hour, "shop": shop},
                          "location": f"s3://raw/{day}/{hour:02d}/{shop}"})
        store.partitions.add("default", "raw", batch)
        made += len(batch)
    with store.tx.write() as conn:  # a consumer with 1,000 FAILED partitions
        conn.execute(text(
            "INSERT INTO consumer_partitions (consumer_id, partition_id, state, attempts, "
            "last_error, added_at) SELECT c.id, p.id, 'FAILED', 4, 'step clean failed: exit "
            "status 1', now() FROM consumers c, partitions p WHERE p.id <= 1000"))
        conn.execute(text("ANALYZE"))


def _views(store: Any) -> None:
    from jobserver.apply import load
    from jobserver.spec import Policy
    from jobserver.views.catalog import ViewCatalog
    from jobserver.views.materialize import Materializer
    from jobserver.views.model import Mode

    policy = Policy(lambda name: False, None)
    catalog = ViewCatalog(store, policy)
    for document in load((EXAMPLES / "views.yaml").read_text()):
        document.pop("kind")
        catalog.put(catalog.parse(document))
    materializer = Materializer(store, policy)
    shops = "e(" + ",".join(SHOPS) + ")"
    for view in ("source/Search", "stage/Search", "stage/SearchWeekly"):
        materializer.materialize(f"app.eci.{view}/{shops}/rymd(20150101-20151231)",
                                 Mode.SET_ONLY)


def _batches(store: Any) -> None:
    day0 = date(2024, 1, 1)
    dates = [day0 + timedelta(days=n) for n in range(365)]
    with store.batches.write() as conn:
        for system in (f"SYS{n}" for n in range(10)):
            for location in ("IN", "US"):
                store.batches.create_batches(conn, system, location, {}, dates,
                                             ["STG", "FND", "SNAPSHOT"])
        conn.execute(text("UPDATE batch_stages SET status = 'SUCCESS' WHERE batch_id % 7 <> 0"))
        conn.execute(text("UPDATE batches SET status = 'SUCCESS' WHERE id % 7 <> 0"))


def signed_in_client(store: Any, data_dir: Path, token: str = TOKEN) -> Any:
    """A test client of the app over ``store``, signed in to the dashboard with
    ``token`` (a config token of that app)."""
    from jobserver.api import create_app
    from jobserver.config import load_config
    from tests.integration.test_ui_sessions import sign_in

    config = load_config(environ={"JOBSERVER_DATA_DIR": str(data_dir),
                                  "JOBSERVER_API__TOKENS": token})
    client = create_app(config, store=store).test_client()
    assert sign_in(client, token).status_code == 303
    return client


def _pages(store: Any, schedules: int) -> list[tuple[str, str]]:
    from jobserver.batches.store import BatchFilter

    batch_id = store.batches.list(BatchFilter(limit=1))[0].id
    return [
        ("schedules list", "/ui/schedules"),
        ("schedule page", f"/ui/schedules/default/s{schedules // 2:04d}"),
        ("schedule live part", f"/ui/schedules/default/s{schedules // 2:04d}/live"),
        ("datasets list", "/ui/datasets"),
        ("dataset page", "/ui/datasets/default/raw"),
        ("dataset, where hour >= 20 and a date range",
         "/ui/datasets/default/raw?where=hour+%3E%3D+20&field=date&from=2024-03-01&to=2024-03-31"),
        ("dataset, a rare shop (scans the index)",
         "/ui/datasets/default/raw?where=shop+%3D+SHOP99"),
        ("views, a month of 2 views", f"/ui/views?pattern={quote(GRID_MONTH)}"),
        ("views, 1,000 cells", f"/ui/views?pattern={quote(GRID_WIDEST)}"),
        ("views, materialize plan of the month",
         f"/ui/views/materialize?pattern={quote(GRID_MONTH)}"),
        ("batches grid", "/ui/batches"),
        ("batches grid, one system", "/ui/batches?system=SYS3&location=IN"),
        ("a batch's audit", f"/ui/batches/{batch_id}"),
    ]


def measure(client: Any, path: str, warm: int = 5, runs: int = 30) -> tuple[float, float, int]:
    """(median ms, p95 ms, status) of GET ``path``."""
    status = 0
    for _ in range(warm):
        status = client.get(path, headers={"Accept": "text/html"}).status_code
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        client.get(path, headers={"Accept": "text/html"})
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1], status


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.planner_pages")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=200_000)
    parser.add_argument("--schedules", type=int, default=1_000)
    opts = parser.parse_args()
    from jobserver.store import Store

    with pg_database("bench_ui") as url, tempfile.TemporaryDirectory() as data_dir:
        store = Store(url)
        store.upgrade()
        began = time.monotonic()
        queue_jobs(url, opts.jobs, finished=True)
        _schedules(store, opts.schedules, opts.jobs)
        _datasets(store, opts.partitions)
        _views(store)
        _batches(store)
        with store.tx.write() as conn:
            conn.execute(text("ANALYZE"))
        print(f"loaded in {time.monotonic() - began:.0f} s: {opts.jobs:,} jobs, "
              f"{opts.schedules:,} schedules, {opts.partitions:,} partitions")
        client = signed_in_client(store, Path(data_dir))
        print(f"{'page':48} {'median ms':>10} {'p95 ms':>8}  status")
        for label, path in _pages(store, opts.schedules):
            median, p95, status = measure(client, path)
            print(f"{label:48} {median:10.1f} {p95:8.1f}  {status}")
        store.dispose()


if __name__ == "__main__":
    main()
