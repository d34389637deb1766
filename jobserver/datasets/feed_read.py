"""The ordered read of a dataset's partitions: after a (txid, id) cursor, in commit
order (:mod:`jobserver.store.feed`), below the feed horizon on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Connection, func, select, text, tuple_

from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.tables import FEED_ROWS, partitions
from jobserver.store.feed import Cursor, horizon
from jobserver.store.models import as_utc


def read_after(conn: Connection, dataset: DatasetRecord, after: Cursor,
               limit: int) -> list[PartitionRecord]:
    """Up to ``limit`` partitions of ``dataset`` after the position ``after``, in
    commit order, in the caller's transaction: a reader that saves the last one's
    :attr:`~PartitionRecord.cursor` never finds a partition before it later."""
    table = partitions
    query = select(table).where(table.c.dataset_id == dataset.id)
    if conn.dialect.name == "postgresql":
        query = query.where(text(FEED_ROWS),
                            tuple_(table.c.txid, table.c.id) > tuple_(after.txid,
                                                                      after.position),
                            table.c.txid < horizon(conn)).order_by(table.c.txid, table.c.id)
    else:
        query = query.where(table.c.id > after.position).order_by(table.c.id)
    rows = conn.execute(query.limit(limit)).mappings().all()
    key = dataset.partition_key
    return [PartitionRecord.from_row(row, key) for row in rows]


def held_back(conn: Connection, dataset: DatasetRecord, after: Cursor) -> str | None:
    """PostgreSQL: why partitions of ``dataset`` committed after ``after`` cannot be
    read yet (their transactions are at or past the feed horizon, behind a transaction
    still open), naming the oldest open transaction's start; None when none waits
    (SQLite: never, its feed has no horizon). At most 10,001 partitions are counted."""
    if conn.dialect.name != "postgresql":
        return None
    table = partitions
    waiting = select(table.c.id).where(
        table.c.dataset_id == dataset.id, text(FEED_ROWS),
        tuple_(table.c.txid, table.c.id) > tuple_(after.txid, after.position),
        table.c.txid >= horizon(conn)).limit(10_001).subquery()
    count = int(conn.execute(select(func.count()).select_from(waiting)).scalar_one())
    if not count:
        return None
    oldest = conn.exec_driver_sql(
        "SELECT xact_start, pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
        "ORDER BY age(backend_xid) DESC LIMIT 1").first()
    since = ""
    if oldest is not None and (start := as_utc(oldest[0])) is not None:
        since = f" open since {start.isoformat().replace('+00:00', 'Z')} (pid {oldest[1]})"
    many = "more than 10000" if count > 10_000 else str(count)
    return (f"{many} partition(s) of {dataset.full_name} wait behind a transaction"
            f"{since}; they are read once it ends")
