"""What users do with datasets: create, update, delete and read.

A dataset's key may change only while it has no partitions: stored keys would no
longer fit it. A description changes at any time. Deleting a dataset deletes its
partitions (ON DELETE CASCADE).

Every write is one transaction that first locks the dataset's row (``FOR UPDATE`` on
PostgreSQL); adding partitions takes the same row in share mode
(:mod:`.partitions`), so a key never changes under an add.
"""

from __future__ import annotations

import builtins
from typing import NamedTuple

from sqlalchemy import Connection, RowMapping, and_, delete, func, insert, or_, select, update

from jobserver.datasets.records import DatasetRecord
from jobserver.datasets.spec import DatasetSpec, digest
from jobserver.datasets.tables import datasets, partitions
from jobserver.exceptions import Conflict, ConstraintViolation, NotFound
from jobserver.schedules.catalog import CREATED, UNCHANGED, plan_put
from jobserver.store import Transactions
from jobserver.store.engine import store_now

MAX_PAGE = 500


class PutResult(NamedTuple):
    """What :meth:`DatasetCatalog.put` did or, on a dry run, would do: the dataset
    after the put (on a dry run: as it is, None if it does not exist yet),
    ``created``, ``updated`` or ``unchanged``, and the top-level fields that change."""

    dataset: DatasetRecord | None
    change: str
    changed: builtins.list[str]


class DatasetCatalog:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    # -- writes -----------------------------------------------------------------------
    def create(self, spec: DatasetSpec) -> DatasetRecord:
        """Store a new dataset; :class:`Conflict` if the namespace has one of that name."""
        try:
            with self._tx.write() as conn:
                if self._row(conn, spec.namespace, spec.name) is not None:
                    raise _exists(spec)
                return self._get(conn, self._insert(conn, spec))
        except ConstraintViolation:
            raise _exists(spec) from None  # a concurrent create won the insert

    def put(self, spec: DatasetSpec, dry_run: bool = False) -> PutResult:
        """Create or update to match ``spec``; nothing is written when nothing
        changes, or on a ``dry_run``. A changed key of a dataset with partitions is a
        :class:`Conflict` (on a dry run too)."""
        document = spec.model_dump(mode="json")
        try:
            with self._tx.read() if dry_run else self._tx.write() as conn:
                row = self._row(conn, spec.namespace, spec.name, lock=not dry_run)
                change, changed = plan_put(row, document, digest(document), None)
                if row is None:
                    created = None if dry_run else self._get(conn, self._insert(conn, spec))
                    return PutResult(created, change, changed)
                if change != UNCHANGED:
                    self._check_key_change(conn, row, spec)
                if not dry_run and change != UNCHANGED:
                    self._update(conn, row["id"], spec)
                return PutResult(self._get(conn, row["id"]), change, changed)
        except ConstraintViolation:
            raise _exists(spec) from None

    def delete(self, namespace: str, name: str) -> None:
        """Remove the dataset with all its partitions."""
        with self._tx.write() as conn:
            row = self._found(conn, namespace, name)
            conn.execute(delete(datasets).where(datasets.c.id == row["id"]))

    # -- reads ------------------------------------------------------------------------
    def get(self, namespace: str, name: str, count: bool = True) -> DatasetRecord:
        """The dataset with its partition count (unless not ``count``: a count reads
        every partition's index entry); :class:`NotFound` if none."""
        with self._tx.read() as conn:
            row = self._found(conn, namespace, name, lock=False)
            return self._get(conn, row["id"]) if count else DatasetRecord.from_row(row)

    def find(self, conn: Connection, namespace: str, name: str,
             share: bool = False) -> DatasetRecord:
        """The dataset in the caller's transaction (``share``: locked against key
        changes and deletion until it ends, on PostgreSQL), without its count."""
        query = select(datasets).where(datasets.c.namespace == namespace,
                                       datasets.c.name == name)
        if share and self._tx.dialect == "postgresql":
            query = query.with_for_update(read=True)
        row = conn.execute(query).mappings().first()
        if row is None:
            raise _missing(namespace, name)
        return DatasetRecord.from_row(row)

    def find_or_none(self, conn: Connection, namespace: str,
                     name: str) -> DatasetRecord | None:
        row = self._row(conn, namespace, name, lock=False)
        return None if row is None else DatasetRecord.from_row(row)

    def list(self, namespace: str | None = None, limit: int = 50,
             after: tuple[str, str] | None = None,
             ) -> tuple[builtins.list[DatasetRecord], tuple[str, str] | None]:
        """Ordered by (namespace, name); returns the page and the ``after`` of the next
        page (None on the last)."""
        limit = max(1, min(limit, MAX_PAGE))
        query = select(datasets).order_by(datasets.c.namespace, datasets.c.name).limit(limit + 1)
        if namespace is not None:
            query = query.where(datasets.c.namespace == namespace)
        if after is not None:
            query = query.where(or_(datasets.c.namespace > after[0],
                                    and_(datasets.c.namespace == after[0],
                                         datasets.c.name > after[1])))
        with self._tx.read() as conn:
            rows = conn.execute(query).mappings().all()
        page = [DatasetRecord.from_row(row) for row in rows[:limit]]
        following = (page[-1].namespace, page[-1].name) if len(rows) > limit else None
        return page, following

    # -- inside a transaction ---------------------------------------------------------
    def _row(self, conn: Connection, namespace: str, name: str,
             lock: bool = True) -> RowMapping | None:
        query = select(datasets).where(datasets.c.namespace == namespace,
                                       datasets.c.name == name)
        if lock and self._tx.dialect == "postgresql":
            query = query.with_for_update()
        return conn.execute(query).mappings().first()

    def _found(self, conn: Connection, namespace: str, name: str,
               lock: bool = True) -> RowMapping:
        row = self._row(conn, namespace, name, lock)
        if row is None:
            raise _missing(namespace, name)
        return row

    @staticmethod
    def _insert(conn: Connection, spec: DatasetSpec) -> int:
        document = spec.model_dump(mode="json")
        return int(conn.execute(insert(datasets).values(
            namespace=spec.namespace, name=spec.name, description=spec.description,
            key=document["key"], spec=document, spec_hash=digest(document),
            created_at=store_now(), updated_at=store_now()).returning(datasets.c.id)
        ).scalar_one())

    @staticmethod
    def _update(conn: Connection, dataset_id: int, spec: DatasetSpec) -> None:
        document = spec.model_dump(mode="json")
        conn.execute(update(datasets).where(datasets.c.id == dataset_id).values(
            description=spec.description, key=document["key"], spec=document,
            spec_hash=digest(document), updated_at=store_now()))

    @staticmethod
    def _check_key_change(conn: Connection, row: RowMapping, spec: DatasetSpec) -> None:
        new_key = spec.model_dump(mode="json")["key"]
        if list(row["key"]) == new_key:
            return
        count = _count(conn, row["id"])
        if count:
            raise Conflict(
                f"key: dataset {spec.qualified_name} has {count} partition(s), so its "
                "key cannot change; delete the dataset (or its partitions) first",
                [{"field": "key", "message": f"{count} partition(s) have the old key",
                  "old": list(row["key"])}])

    def _get(self, conn: Connection, dataset_id: int) -> DatasetRecord:
        row = conn.execute(select(datasets).where(datasets.c.id == dataset_id)
                           ).mappings().one()
        return DatasetRecord.from_row(row, _count(conn, dataset_id))


def _count(conn: Connection, dataset_id: int) -> int:
    return int(conn.execute(select(func.count()).select_from(partitions)
                            .where(partitions.c.dataset_id == dataset_id)).scalar_one())


def _exists(spec: DatasetSpec) -> Conflict:
    return Conflict(f"dataset {spec.qualified_name} already exists",
                    {"field": "name", "namespace": spec.namespace, "name": spec.name})


def _missing(namespace: str, name: str) -> NotFound:
    return NotFound(f"dataset {namespace}/{name} does not exist",
                    {"namespace": namespace, "name": name})


__all__ = ["CREATED", "DatasetCatalog", "PutResult"]
