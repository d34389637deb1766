"""The ordered read of a dataset's partitions: after a (txid, id) cursor, in commit
order (:mod:`jobserver.store.feed`), below the feed horizon on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Connection, select, text, tuple_

from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.tables import FEED_ROWS, partitions
from jobserver.store.feed import Cursor, horizon


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
