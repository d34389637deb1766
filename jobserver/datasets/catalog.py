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
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy import Connection, RowMapping, delete, func, insert, select, update

from jobserver.datasets.records import DatasetRecord
from jobserver.datasets.spec import DatasetSpec
from jobserver.datasets.tables import datasets, partitions
from jobserver.exceptions import Conflict, ConstraintViolation, NotFound
from jobserver.resources import (CREATED, MAX_PAGE, UNCHANGED, digest, find_row, found_row,
                                 name_page, next_after, page_size, plan_put)
from jobserver.planners.hooks import Deletion
from jobserver.store import Transactions
from jobserver.store.engine import store_now

if TYPE_CHECKING:
    from jobserver.store.hooks import PlannerHooks


class PutResult(NamedTuple):
    """What :meth:`DatasetCatalog.put` did or, on a dry run, would do: the dataset
    after the put (on a dry run: as it is, None if it does not exist yet),
    ``created``, ``updated`` or ``unchanged``, and the top-level fields that change."""

    dataset: DatasetRecord | None
    change: str
    changed: builtins.list[str]


class DatasetCatalog:
    """``hooks``: the store's, whose deletion guards (other planners' say, as a
    schedule naming a dataset) a delete asks; read at each delete, as they are
    installed after the repositories are built."""

    def __init__(self, tx: Transactions, hooks: PlannerHooks) -> None:
        self._tx = tx
        self._hooks = hooks

    # -- writes -----------------------------------------------------------------------
    def create(self, spec: DatasetSpec) -> DatasetRecord:
        """Store a new dataset; :class:`Conflict` if the namespace has one of that name."""
        try:
            with self._tx.write() as conn:
                if find_row(conn, datasets, namespace=spec.namespace,
                            name=spec.name) is not None:
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
                row = find_row(conn, datasets, not dry_run, namespace=spec.namespace,
                               name=spec.name)
                change, changed = plan_put(row, document, digest(document))
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
        """Remove the dataset with all its partitions; a :class:`Conflict` naming
        them while another planner's rows name it (a schedule's trigger or template:
        the installed planners' deletion guards, asked with the row locked)."""
        with self._tx.write() as conn:
            row = self._found(conn, namespace, name)
            self.refuse_deletion(conn, Deletion("dataset", namespace, name))
            conn.execute(delete(datasets).where(datasets.c.id == row["id"]))

    def refuse_deletion(self, conn: Connection, deletion: Deletion) -> None:
        """Ask the installed planners' deletion guards about ``deletion`` (a dataset or
        one of its consumers), in the caller's deleting transaction, which has locked
        the dataset's row exclusively; a :class:`Conflict` when one refuses."""
        self._hooks.refuse_deletion(conn, deletion)

    # -- reads ------------------------------------------------------------------------
    def get(self, namespace: str, name: str, count: bool = True) -> DatasetRecord:
        """The dataset with its partition count (unless not ``count``: a count reads
        every partition's index entry); :class:`NotFound` if none."""
        with self._tx.read() as conn:
            row = self._found(conn, namespace, name, lock=False)
            return self._get(conn, row["id"]) if count else DatasetRecord.from_row(row)

    def find(self, conn: Connection, namespace: str, name: str,
             share: bool = False, exclusive: bool = False) -> DatasetRecord:
        """The dataset in the caller's transaction (``share``: locked against key
        changes and deletion until it ends, on PostgreSQL; ``exclusive``: against
        other writers that lock it so too, as a count of its consumers before one is
        added), without its count."""
        query = select(datasets).where(datasets.c.namespace == namespace,
                                       datasets.c.name == name)
        if exclusive and self._tx.dialect == "postgresql":
            query = query.with_for_update(key_share=True)
        elif share and self._tx.dialect == "postgresql":
            query = query.with_for_update(read=True)
        row = conn.execute(query).mappings().first()
        if row is None:
            raise _missing(namespace, name)
        return DatasetRecord.from_row(row)

    def find_or_none(self, conn: Connection, namespace: str,
                     name: str) -> DatasetRecord | None:
        row = find_row(conn, datasets, False, namespace=namespace, name=name)
        return None if row is None else DatasetRecord.from_row(row)

    def list(self, namespace: str | None = None, limit: int = 50,
             after: tuple[str, str] | None = None,
             ) -> tuple[builtins.list[DatasetRecord], tuple[str, str] | None]:
        """Ordered by (namespace, name); returns the page and the ``after`` of the next
        page (None on the last)."""
        limit = page_size(limit)
        with self._tx.read() as conn:
            rows = conn.execute(name_page(datasets, limit, namespace, after)).mappings().all()
        return [DatasetRecord.from_row(row) for row in rows[:limit]], next_after(rows, limit)

    # -- inside a transaction ---------------------------------------------------------
    @staticmethod
    def _found(conn: Connection, namespace: str, name: str, lock: bool = True) -> RowMapping:
        return found_row(conn, datasets, _missing(namespace, name), lock,
                         namespace=namespace, name=name)

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


__all__ = ["CREATED", "MAX_PAGE", "DatasetCatalog", "PutResult"]
