"""Consumers' lag at scale: ``/metrics`` and the dataset page with many filtered consumers.

    python -m bench.consumer_lag                         PostgreSQL, 100,000 partitions, 30 consumers
    python -m bench.consumer_lag --store sqlite          the same on SQLite
    python -m bench.consumer_lag --partitions 10000      a quick look

A dataset gets ``--partitions`` partitions (10 shops, each with a ``source`` metadata
entry) and ``--consumers`` consumers, each with a ``meta.source`` filter and its pointer
at the start, so that every partition after it is lag to count. The consumers are put
through the store, past the API's ``datasets.max_consumers``, as they stood before
there was one. Then ``GET /metrics`` and the dataset's page are asked for through the
app (Flask's test client: routing, the reads and the rendering, no network), after
an ``ANALYZE`` (as autovacuum soon runs after such a load): once cold, then ``--runs``
times; the table gives the first, the median and the slowest in
ms. Timing is reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.planner_pages import signed_in_client

TOKEN = "bench-consumer-lag-0123456789abcdef"
SOURCES = ("crawler", "feed", "manual")


def _dataset(store: Any, partitions: int, consumers: int) -> None:
    from jobserver.datasets.consumer_spec import parse_consumer
    from jobserver.datasets.spec import parse_dataset

    store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "n", "type": "int"}, {"name": "shop", "type": "string"}]}))
    for made in range(0, partitions, 10_000):
        store.partitions.add("default", "raw", [
            {"key": {"n": n, "shop": f"SHOP{n % 10:02d}"}, "location": f"s3://raw/{n}",
             "metadata": {"source": SOURCES[n % len(SOURCES)], "rows": n}}
            for n in range(made, min(made + 10_000, partitions))])
    for index in range(consumers):
        store.consumers.put(parse_consumer({
            "dataset": "raw", "name": f"c{index:02d}",
            "filter": [f"meta.source = {SOURCES[index % len(SOURCES)]}"]}))
    with store.tx.write() as conn:  # as autovacuum (PostgreSQL) soon would after a load
        conn.execute(text("ANALYZE"))


def measure(client: Any, path: str, runs: int) -> tuple[float, float, float, int]:
    """(first ms, median ms, slowest ms, status) of GET ``path``."""
    times, status = [], 0
    for _ in range(runs + 1):
        began = time.perf_counter()
        status = client.get(path, headers={"Accept": "text/html",
                                           "Authorization": f"Bearer {TOKEN}"}).status_code
        times.append((time.perf_counter() - began) * 1000)
    return times[0], statistics.median(times[1:]), max(times[1:]), status


@contextmanager
def _store_url(kind: str, work: Path) -> Iterator[str]:
    from bench.stores import store_for

    with store_for("sqlite" if kind == "sqlite" else "postgresql", work) as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.consumer_lag")
    parser.add_argument("--store", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--consumers", type=int, default=30)
    parser.add_argument("--runs", type=int, default=10)
    opts = parser.parse_args()
    from jobserver.store import Store

    with tempfile.TemporaryDirectory() as work, _store_url(opts.store, Path(work)) as url:
        store = Store(url)
        began = time.monotonic()
        _dataset(store, opts.partitions, opts.consumers)
        print(f"{opts.store}: {opts.partitions:,} partitions, {opts.consumers} consumers "
              f"with a meta. filter, loaded in {time.monotonic() - began:.0f} s")
        client = signed_in_client(store, Path(work) / "data", TOKEN)
        print(f"{'request':28} {'first ms':>9} {'median ms':>10} {'max ms':>8}  status")
        for label, path in (("GET /metrics", "/metrics"),
                            ("dataset page", "/ui/datasets/default/raw"),
                            ("GET consumers (API)", "/api/v1/datasets/default/raw/consumers")):
            first, median, slowest, status = measure(client, path, opts.runs)
            print(f"{label:28} {first:9.0f} {median:10.0f} {slowest:8.0f}  {status}")
        store.dispose()


if __name__ == "__main__":
    main()
