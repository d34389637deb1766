"""The datasets' schema; Alembic migrations 0006 (datasets, partitions) and 0007
(consumers and their working sets) match it."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import (JSON, BigInteger, ForeignKey, Index, Integer, String, Table, Text,
                        UniqueConstraint, text)
from sqlalchemy.orm import Mapped, mapped_column

from jobserver.datasets.keys import MAX_FIELDS, MAX_STRING
from jobserver.store.models import Base, BigId, UTCDateTime, commit_ordered

#: A key column: bytewise order on both dialects (SQLite's default BINARY collation;
#: on PostgreSQL "C"), so that each type's encoding (jobserver.datasets.keys) sorts
#: as its values do, whatever the database's locale.
KeyText = String(MAX_STRING).with_variant(String(MAX_STRING, collation="C"), "postgresql")
KEY_COLUMNS = tuple(f"k{index}" for index in range(MAX_FIELDS))
#: Rows of the commit-ordered feed; spelled the same wherever a query must use
#: ix_partitions_feed.
FEED_ROWS = "txid IS NOT NULL"


class DatasetRow(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str | None] = mapped_column(Text)
    # The partition key's fields in order: [{"name": ..., "type": ...}, ...].
    key: Mapped[list] = mapped_column(JSON)
    # The validated spec as JSON and its digest, which tells ``apply`` whether a
    # document changes anything.
    spec: Mapped[dict] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("namespace", "name"),)


class PartitionRow(Base):
    """One partition: a key (one column per declared field, ``k0`` first; unused
    columns hold ''), a location and metadata."""

    __tablename__ = "partitions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    k0: Mapped[str] = mapped_column(KeyText)
    k1: Mapped[str] = mapped_column(KeyText)
    k2: Mapped[str] = mapped_column(KeyText)
    k3: Mapped[str] = mapped_column(KeyText)
    k4: Mapped[str] = mapped_column(KeyText)
    k5: Mapped[str] = mapped_column(KeyText)
    k6: Mapped[str] = mapped_column(KeyText)
    k7: Mapped[str] = mapped_column(KeyText)
    location: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The job and step whose output added it (NULL: added through the API): a step
    # run again adds its partitions again, and finds them already there.
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    step: Mapped[str | None] = mapped_column(String(100))
    # PostgreSQL: the id of the transaction that added the row (its column default),
    # which orders the dataset's feed in commit order (jobserver.store.feed). SQLite
    # leaves it NULL: its writers are serialised, so ``id`` order is commit order.
    txid: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        UniqueConstraint("dataset_id", *KEY_COLUMNS, name="uq_partitions_key"),
        Index("ix_partitions_dataset_id_id", "dataset_id", "id"),
        Index("ix_partitions_feed", "dataset_id", "txid", "id",
              postgresql_where=text(FEED_ROWS), sqlite_where=text(FEED_ROWS)),
        # AUTOINCREMENT: SQLite would otherwise hand the id of a deleted newest row
        # out again, behind a feed reader's cursor.
        {"sqlite_autoincrement": True},
    )


commit_ordered(PartitionRow.__table__)


class ConsumerRow(Base):
    """A consumer of a dataset (CDAP's PartitionConsumer): its settings and its
    pointer, the commit-order position (``pointer_txid``, ``pointer_position``) after
    which partitions have not been read into its working set yet."""

    __tablename__ = "consumers"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64))
    pointer_txid: Mapped[int] = mapped_column(BigInteger, default=0)
    pointer_position: Mapped[int] = mapped_column(BigInteger, default=0)
    # Partitions that left the working set processed (DONE rows purged by a fill),
    # and FAILED ones an operator put back to NEW: the monotonic totals are these
    # plus the DONE and FAILED rows still in the working set.
    processed: Mapped[int] = mapped_column(BigInteger, default=0)
    failed_reset: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("dataset_id", "name"),)


class WorkingSetRow(Base):
    """One partition in a consumer's working set: NEW, IN_PROGRESS (``job_id`` at
    ``job_attempt`` holds it until ``lease_expires_at``), FAILED (after
    ``max_retries`` + 1 failed attempts) or DONE (processed; purged by the next fill).
    ``attempts`` counts the failed ones."""

    __tablename__ = "consumer_partitions"

    consumer_id: Mapped[int] = mapped_column(
        ForeignKey("consumers.id", ondelete="CASCADE"), primary_key=True)
    partition_id: Mapped[int] = mapped_column(
        ForeignKey("partitions.id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    job_attempt: Mapped[int | None] = mapped_column(Integer)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    added_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_consumer_partitions_consumer_id_state", "consumer_id", "state",
              "partition_id"),
        Index("ix_consumer_partitions_job_id", "job_id"),
        Index("ix_consumer_partitions_partition_id", "partition_id"),
    )

# Declarative models type __table__ as a FromClause; each of these is a Table.
datasets = cast(Table, DatasetRow.__table__)
partitions = cast(Table, PartitionRow.__table__)
consumers = cast(Table, ConsumerRow.__table__)
working_sets = cast(Table, WorkingSetRow.__table__)
