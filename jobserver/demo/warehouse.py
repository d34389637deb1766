"""Create the worked example's two SQLite databases: a *source* and a *warehouse*.

The source (``source.db``) holds ``orders`` per location and business date, as an
upstream system would deliver them (a few orders delivered twice), and a
``watermark`` table saying the newest business date it holds per system and
location. The warehouse (``warehouse.db``) holds the tables the ORDER stages fill:
``stg_orders`` (STG: the day's orders as delivered), ``fnd_orders`` (FND: one row per
order) and ``snapshot_orders`` (SNAPSHOT: the orders and amount up to each date).

Idempotent: tables are created if missing and the source is filled only when empty,
so a second run (a second ``make run``) keeps what the batches loaded.

    .venv/bin/python examples/batches/setup.py /tmp/orders --days 10

(that script runs :func:`main`; the demo of ``make run`` calls :func:`create`).

prints the environment a node needs for the ``source`` and ``warehouse`` connections.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path

START = date(2024, 1, 1)
DAYS = 10
LOCATIONS = ("IN", "US")
#: Every DUPLICATE_EVERY-th order of a day is delivered twice: FND's dedup removes it.
DUPLICATE_EVERY = 7

SOURCE_TABLES = """
CREATE TABLE IF NOT EXISTS orders (
    order_id INTEGER NOT NULL, location TEXT NOT NULL, business_date TEXT NOT NULL,
    customer TEXT NOT NULL, amount NUMERIC NOT NULL);
CREATE INDEX IF NOT EXISTS orders_by_date ON orders (business_date, location);
CREATE TABLE IF NOT EXISTS watermark (
    system TEXT NOT NULL, location TEXT NOT NULL, business_date TEXT NOT NULL,
    PRIMARY KEY (system, location));
"""

WAREHOUSE_TABLES = """
CREATE TABLE IF NOT EXISTS stg_orders (
    order_id INTEGER NOT NULL, location TEXT NOT NULL, business_date TEXT NOT NULL,
    customer TEXT NOT NULL, amount NUMERIC NOT NULL);
CREATE INDEX IF NOT EXISTS stg_orders_by_date ON stg_orders (business_date, location);
CREATE TABLE IF NOT EXISTS fnd_orders (
    order_id INTEGER PRIMARY KEY, location TEXT NOT NULL, business_date TEXT NOT NULL,
    customer TEXT NOT NULL, amount NUMERIC NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot_orders (
    location TEXT NOT NULL, business_date TEXT NOT NULL, orders INTEGER NOT NULL,
    amount NUMERIC NOT NULL, PRIMARY KEY (location, business_date));
"""


def source_rows(days: int, start: date) -> list[tuple[int, str, str, str, float]]:
    """The orders of ``days`` business dates from ``start``: a fixed pseudo-random set
    (the same on every machine), duplicates included."""
    pick = random.Random(20240101)
    rows, order_id = [], 1000
    for offset in range(days):
        day = (start + timedelta(days=offset)).isoformat()
        for location in LOCATIONS:
            for index in range(pick.randint(8, 16)):
                order_id += 1
                row = (order_id, location, day, f"customer-{pick.randint(1, 40):02d}",
                       round(pick.uniform(5, 500), 2))
                rows += [row, row] if index % DUPLICATE_EVERY == DUPLICATE_EVERY - 1 else [row]
    return rows


def create(directory: Path, days: int = DAYS, start: date = START) -> tuple[Path, Path]:
    """``directory/source.db`` and ``directory/warehouse.db``, created if missing;
    returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    source, warehouse = directory / "source.db", directory / "warehouse.db"
    with _open(source) as conn:
        conn.executescript(SOURCE_TABLES)
        if conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 0:
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                             source_rows(days, start))
            last = (start + timedelta(days=days - 1)).isoformat()
            conn.executemany("INSERT INTO watermark VALUES ('ORDER', ?, ?)",
                             [(location, last) for location in LOCATIONS])
    with _open(warehouse) as conn:
        conn.executescript(WAREHOUSE_TABLES)
    return source, warehouse


@contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection that commits and closes at the end."""
    conn = sqlite3.connect(path)
    try:
        # WAL: the CLI and the tests read while the nodes' steps write.
        conn.execute("PRAGMA journal_mode=WAL")
        with conn:
            yield conn
    finally:
        conn.close()


def connection_env(source: Path, warehouse: Path) -> dict[str, str]:
    """A node's ``connections.source`` and ``connections.warehouse``, the warehouse
    with the source attached as ``src`` (read by STG's INSERT ... SELECT)."""
    return {"JOBSERVER_CONNECTIONS__SOURCE__URL": f"sqlite:///{source.resolve()}",
            "JOBSERVER_CONNECTIONS__WAREHOUSE__URL": f"sqlite:///{warehouse.resolve()}",
            "JOBSERVER_CONNECTIONS__WAREHOUSE__ATTACH__SRC": str(source.resolve())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--days", type=int, default=DAYS)
    parser.add_argument("--start", type=date.fromisoformat, default=START)
    args = parser.parse_args()
    if not 1 <= args.days <= 3660:
        parser.error("--days must be between 1 and 3660")
    source, warehouse = create(args.directory, args.days, args.start)
    print("# the nodes' connections (export before jobserver serve):")
    for name, value in connection_env(source, warehouse).items():
        print(f"export {name}={value}")


if __name__ == "__main__":
    main()
