"""Partitions in the store: added in batches, removed by key, queried, and read in
commit order.

An add is all or nothing. It is checked whole first (:mod:`.spec`: every problem
named, nothing stored), then written by one statement on PostgreSQL
(``partitions_add`` in queries.sql: the batch travels as one JSON parameter) and in
one transaction on SQLite. A key the dataset already holds makes the whole add a
:class:`Conflict` naming it, unless ``if_absent`` (then it is skipped and reported),
or unless the same job step added it before (:meth:`PartitionRepository.add_checked`
with a producer: a step run again finds its own partitions).

:meth:`PartitionRepository.read_after` is the ordered read a consumer builds on:
partitions after a (txid, id) cursor, in commit order (:mod:`jobserver.store.feed`).
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, func, select, text, tuple_

from jobserver.datasets.catalog import DatasetCatalog
from jobserver.datasets.feed_read import read_after
from jobserver.datasets.filters import Filter
from jobserver.datasets.keys import PartitionKey
from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.spec import MAX_BATCH, NewPartition, check_partitions
from jobserver.spec import refuse
from jobserver.datasets.tables import KEY_COLUMNS, partitions
from jobserver.exceptions import Conflict, NotFound
from jobserver.store import Transactions
from jobserver.store.bulk import json_rows
from jobserver.store.feed import Cursor, horizon
from jobserver.store.queries import query

MAX_PAGE = 500
#: Keys named in a conflict's details at most (the message names the first).
MAX_REPORTED = 100


@dataclass(frozen=True)
class Producer:
    """The job step whose output adds partitions."""

    job_id: int
    step: str


@dataclass
class AddResult:
    """What an add stored: how many, the keys skipped (already there), and the
    partitions added when the add was a single one."""

    added: int
    skipped: list[dict[str, Any]] = field(default_factory=list)
    partition: PartitionRecord | None = None


class PartitionRepository:
    def __init__(self, tx: Transactions, catalog: DatasetCatalog) -> None:
        self._tx = tx
        self._catalog = catalog

    # -- adding -------------------------------------------------------------------------
    def add(self, namespace: str, name: str, items: list[Any], if_absent: bool = False,
            where: str = "partitions", single: bool = False) -> AddResult:
        """Check and add ``items`` (``{"key", "location", "metadata"}`` objects);
        ``where`` prefixes the fields of problems (``partitions[2].key.date``);
        ``single``: the body was one partition (its record is returned)."""
        dataset = self._dataset(namespace, name)
        if len(items) > MAX_BATCH:
            refuse([{"field": where or "body", "message": f"{len(items)} partitions; at "
                                                          f"most {MAX_BATCH} in one request"}])
        found, problems = check_partitions(items, dataset.partition_key, where)
        refuse(problems)
        with self._tx.write() as conn:
            result = self.add_checked(conn, dataset, found, if_absent, where=where)
            if single and result.added:
                result.partition = self._by_key(conn, dataset, found[0].columns)
            return result

    def add_checked(self, conn: Connection, dataset: DatasetRecord,
                    batch: builtins.list[NewPartition], if_absent: bool = False,
                    producer: Producer | None = None, where: str = "partitions",
                    ) -> AddResult:
        """Add partitions already checked against ``dataset``'s key, in the caller's
        write transaction. A key there already is skipped when ``if_absent`` or when
        ``producer`` added it; otherwise a :class:`Conflict` (the caller's transaction
        then rolls back: nothing is added)."""
        if not batch:
            return AddResult(0)
        rows = [_row(item, producer) for item in batch]
        added = self._insert(conn, dataset, rows)
        if len(added) == len(batch):
            return AddResult(len(added))
        existing = self._existing(conn, dataset.id, rows)
        skipped, conflicts = [], []
        for index, item in enumerate(batch):
            owner = existing.get(item.columns)
            if owner is None or owner[0] in added:  # added just now
                continue
            if if_absent or (producer is not None and owner[1:] == (producer.job_id,
                                                                  producer.step)):
                skipped.append(dataset.partition_key.from_columns(item.columns))
            else:
                conflicts.append((index, item, owner))
        if conflicts:
            raise _conflict(dataset, conflicts, where)
        return AddResult(len(added), skipped)

    def _insert(self, conn: Connection, dataset: DatasetRecord,
                rows: builtins.list[dict[str, Any]]) -> set[int]:
        """Insert what is not there yet; returns the ids of the rows added."""
        if self._tx.dialect == "postgresql":
            result = json_rows(conn, "partitions_add", rows, dataset_id=dataset.id,
                               key=json.dumps(dataset.key))
            if not result or not result[0][0]:
                raise _changed(dataset)
            return {int(row[1]) for row in result if row[1] is not None}
        current = self._catalog.find(conn, dataset.namespace, dataset.name)
        if current.id != dataset.id or current.key != dataset.key:
            raise _changed(dataset)
        return {int(row[0]) for row in conn.execute(
            text(query("partitions_add.sqlite")),
            {"dataset_id": dataset.id, "rows": json.dumps(rows)})}

    def _existing(self, conn: Connection, dataset_id: int, rows: builtins.list[dict[str, Any]]
                  ) -> dict[tuple[str, ...], tuple[int, int | None, str | None]]:
        """The stored partitions with the keys of ``rows``: ``{columns: (id, job_id,
        step)}``, rows added by this transaction included."""
        keys = [{name: row[name] for name in KEY_COLUMNS} for row in rows]
        if self._tx.dialect == "postgresql":
            found = json_rows(conn, "partitions_existing", keys, dataset_id=dataset_id)
        else:
            found = list(conn.execute(text(query("partitions_existing.sqlite")),
                                      {"dataset_id": dataset_id, "rows": json.dumps(keys)}))
        return {tuple(row[1:9]): (int(row[0]), row[9], row[10]) for row in found}

    # -- removing -----------------------------------------------------------------------
    def delete(self, namespace: str, name: str, keys: list[Any],
               missing_ok: bool = False) -> tuple[int, list[dict[str, Any]]]:
        """Remove the partitions with ``keys``, all or nothing: a key the dataset does
        not hold is a :class:`NotFound` naming it unless ``missing_ok``. Returns how
        many were removed and the keys that were missing."""
        dataset = self._dataset(namespace, name)
        key = dataset.partition_key
        if len(keys) > MAX_BATCH:
            refuse([{"field": "keys", "message": f"at most {MAX_BATCH} keys"}])
        columns, problems = [], []
        for index, value in enumerate(keys):
            typed, trouble = key.check(value, f"keys[{index}]")
            problems += trouble
            if not trouble:
                columns.append(key.columns(typed))
        refuse(problems)
        with self._tx.write() as conn:
            self._catalog.find(conn, namespace, name, share=True)
            removed: builtins.list[tuple[str, ...]] = []
            for chunk in _chunks(sorted(set(columns)), 500):
                removed += [tuple(row) for row in conn.execute(
                    delete(partitions).where(partitions.c.dataset_id == dataset.id,
                                             _key_in(chunk))
                    .returning(*(partitions.c[name] for name in KEY_COLUMNS)))]
            missing = [key.from_columns(item) for item in columns if item not in set(removed)]
            if missing and not missing_ok:
                raise NotFound(f"keys: dataset {dataset.full_name} has no partition "
                               f"{_describe(missing[0])}",
                               [{"field": "keys", "message": "no such partition", "key": k}
                                for k in missing[:MAX_REPORTED]])
            return len(removed), missing

    # -- reading ------------------------------------------------------------------------
    def list(self, namespace: str, name: str, conditions: builtins.list[str],
             newest_first: bool = True, limit: int = 50, cursor: int | None = None,
             ) -> tuple[DatasetRecord, builtins.list[PartitionRecord], int | None]:
        """A page of the dataset's partitions matching ``conditions`` (the filter
        grammar, :mod:`.filters`), by id, newest or oldest first; returns the dataset,
        the page and the ``cursor`` of the next page (None on the last)."""
        limit = max(1, min(limit, MAX_PAGE))
        with self._tx.read() as conn:
            dataset = self._catalog.find(conn, namespace, name)
            key = dataset.partition_key
            where = [partitions.c.dataset_id == dataset.id,
                     *Filter.parse(conditions, key).sql(partitions)]
            if cursor is not None:
                where.append(partitions.c.id < cursor if newest_first
                             else partitions.c.id > cursor)
            order = partitions.c.id.desc() if newest_first else partitions.c.id
            rows = conn.execute(select(partitions).where(*where).order_by(order)
                                .limit(limit + 1)).mappings().all()
        page = [PartitionRecord.from_row(row, key) for row in rows[:limit]]
        return dataset, page, (page[-1].id if len(rows) > limit else None)

    def read_after(self, conn: Connection, dataset: DatasetRecord, after: Cursor,
                   limit: int) -> builtins.list[PartitionRecord]:
        """Up to ``limit`` partitions of ``dataset`` after the position ``after``, in
        commit order, in the caller's transaction: a reader that saves the last one's
        :attr:`~PartitionRecord.cursor` never finds a partition before it later."""
        return read_after(conn, dataset, after, limit)

    def head(self, conn: Connection, dataset: DatasetRecord) -> Cursor:
        """Where a reader of ``dataset`` that wants none of the partitions already
        added starts."""
        if conn.dialect.name == "postgresql":
            return Cursor(horizon(conn), 0)
        newest = conn.execute(select(func.max(partitions.c.id))
                              .where(partitions.c.dataset_id == dataset.id)).scalar()
        return Cursor(0, int(newest or 0))

    def _dataset(self, namespace: str, name: str) -> DatasetRecord:
        with self._tx.read() as conn:
            return self._catalog.find(conn, namespace, name)

    def _by_key(self, conn: Connection, dataset: DatasetRecord,
                columns: tuple[str, ...]) -> PartitionRecord:
        row = conn.execute(select(partitions).where(
            partitions.c.dataset_id == dataset.id, _key_in([columns]))).mappings().one()
        return PartitionRecord.from_row(row, dataset.partition_key)


def _row(item: NewPartition, producer: Producer | None) -> dict[str, Any]:
    row: dict[str, Any] = dict(zip(KEY_COLUMNS, item.columns))
    row.update(location=item.location, meta=item.metadata,
               job_id=producer.job_id if producer else None,
               step=producer.step if producer else None)
    return row


def _key_in(keys: builtins.list[tuple[str, ...]]) -> Any:
    columns = tuple_(*(partitions.c[name] for name in KEY_COLUMNS))
    return columns.in_([tuple_(*key) for key in keys])


def _chunks(items: builtins.list[Any], size: int) -> builtins.list[builtins.list[Any]]:
    return [items[start:start + size] for start in range(0, len(items), size)]


def _describe(key: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{name}={value}" for name, value in key.items()) + ")"


def _conflict(dataset: DatasetRecord, conflicts: builtins.list[Any], where: str) -> Conflict:
    key = dataset.partition_key
    details: builtins.list[dict[str, Any]] = []
    for index, item, owner in conflicts[:MAX_REPORTED]:
        by = f"job {owner[1]} step {owner[2]}" if owner[1] is not None else "the API"
        details.append({"field": f"{where}[{index}].key" if where else "key",
                        "message": f"exists (added by {by})",
                        "key": key.from_columns(item.columns)})
    first = details[0]
    return Conflict(f"{first['field']}: dataset {dataset.full_name} already has the "
                    f"partition {_describe(first['key'])}; nothing was added "
                    "(if_absent: true skips existing keys)", details)


def _changed(dataset: DatasetRecord) -> Conflict:
    return Conflict(f"dataset {dataset.full_name} was changed or deleted while the "
                    "partitions were being added; nothing was added, try again",
                    {"field": "dataset", "dataset": dataset.full_name})


__all__ = ["AddResult", "PartitionKey", "PartitionRepository", "Producer"]
