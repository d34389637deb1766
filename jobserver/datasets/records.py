"""Plain records of datasets and partitions as read from the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobserver.datasets.keys import PartitionKey
from jobserver.datasets.tables import KEY_COLUMNS
from jobserver.store.feed import Cursor


@dataclass(frozen=True)
class DatasetRecord:
    """A dataset as stored; ``partition_count`` when read with it."""

    id: int
    namespace: str
    name: str
    description: str | None
    key: list[dict[str, str]]
    spec: dict[str, Any]
    spec_hash: str
    created_at: datetime
    updated_at: datetime
    partition_count: int | None = None

    @classmethod
    def from_row(cls, row: Any, partition_count: int | None = None) -> DatasetRecord:
        return cls(row["id"], row["namespace"], row["name"], row["description"],
                   list(row["key"]), dict(row["spec"]), row["spec_hash"], row["created_at"],
                   row["updated_at"], partition_count)

    @property
    def full_name(self) -> str:
        """``namespace/name``: how a dataset is named in messages and triggers."""
        return f"{self.namespace}/{self.name}"

    @property
    def partition_key(self) -> PartitionKey:
        return PartitionKey.of(self.key)


@dataclass(frozen=True)
class PartitionRecord:
    """A partition as stored: its key as JSON (declared order), where it came from
    (``job_id`` and ``step``, None when added through the API) and its position in
    the dataset's commit order (``txid`` is 0 on SQLite)."""

    id: int
    dataset_id: int
    key: dict[str, Any]
    columns: tuple[str, ...]
    location: str
    metadata: dict[str, Any]
    created_at: datetime
    job_id: int | None
    step: str | None
    txid: int

    @classmethod
    def from_row(cls, row: Any, key: PartitionKey) -> PartitionRecord:
        columns = tuple(row[name] for name in KEY_COLUMNS)
        return cls(row["id"], row["dataset_id"], key.from_columns(columns), columns,
                   row["location"], dict(row["meta"] or {}), row["created_at"],
                   row["job_id"], row["step"], int(row["txid"] or 0))

    @property
    def cursor(self) -> Cursor:
        """The commit-order position of this partition, as a feed reader's cursor."""
        return Cursor(self.txid, self.id)
