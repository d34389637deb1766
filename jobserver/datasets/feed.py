"""New partitions in commit order, for readers that keep a cursor: the seam that
partition triggers (``jobserver.schedules.partitions.PartitionFeed``) and consumers
build on.

:class:`NewPartitions` reads, for each dataset asked for, the partitions added after its saved
cursor (:meth:`PartitionRepository.read_after <jobserver.datasets.partitions.
PartitionRepository.read_after>`: commit order, below the feed horizon) and saves the
cursor in the caller's transaction, the one that acts on what it read; a new reader
starts after what exists. Cursors are rows of ``feed_cursors`` named
``<reader>:dataset:<id>``: a dataset deleted and declared again is a new dataset.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from sqlalchemy import Connection, select

from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.repos import partition_repository
from jobserver.datasets.tables import datasets
from jobserver.store import Store
from jobserver.store.feed import Cursor, load_cursor, save_cursor


class NewBatch(NamedTuple):
    """Partitions of one dataset new since the reader's last read, in commit order."""

    dataset: DatasetRecord
    partitions: list[PartitionRecord]


class NewPartitions:
    """The partitions of datasets new since the last read; the schedule evaluator's
    ``PartitionFeed``."""

    def __init__(self, store: Store, reader: str = "schedules") -> None:
        self._partitions = partition_repository(store)
        self._reader = reader

    def read(self, conn: Connection, limit: int, names: set[str]) -> list[NewBatch]:
        """The new partitions of each dataset of ``names`` ("namespace/name") that
        has any, at most ``limit`` of each; the cursors move past what was returned
        (saved in ``conn``). A dataset read for the first time starts after what it
        holds."""
        found = []
        rows = conn.execute(select(datasets).order_by(datasets.c.id)).mappings().all()
        for dataset in (DatasetRecord.from_row(row) for row in rows):
            if dataset.full_name not in names:
                continue
            name = f"{self._reader}:dataset:{dataset.id}"
            cursor = load_cursor(conn, name, functools.partial(self._head, dataset=dataset))
            new = self._partitions.read_after(conn, dataset, cursor, limit)
            if new:
                save_cursor(conn, name, new[-1].cursor)
                found.append(NewBatch(dataset, new))
        return found

    def _head(self, conn: Connection, dataset: DatasetRecord) -> Cursor:
        return self._partitions.head(conn, dataset)
