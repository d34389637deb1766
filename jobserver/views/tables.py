"""The views' schema; Alembic migration 0009 matches it.

* ``views``: the stored definitions (the spec as JSON and its two checksums);
* ``view_partitions``: what the store knows of each view partition (Schedoscope kept it
  in the Hive metastore): its state, the version checksum and timestamp of the
  transformation that last ran, the job transforming it, and ``row_version``, which
  every write compares and bumps (two nodes planning together write once);
* ``view_events``: every state change, written in the transaction that makes it and
  read in commit order (``txid``, as ``job_events``) by the tracker on the planner node,
  which hands them to the view scheduling listeners.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Table, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from jobserver.store.models import Base, BigId, UTCDateTime, commit_ordered


class ViewRow(Base):
    __tablename__ = "views"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec: Mapped[dict] = mapped_column(JSON)
    structure_checksum: Mapped[str] = mapped_column(String(64))
    version_checksum: Mapped[str] = mapped_column(String(64))
    # Digest of the canonical spec: tells ``apply`` whether a document changes anything.
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ViewPartitionRow(Base):
    __tablename__ = "view_partitions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    view: Mapped[str] = mapped_column(String(200))
    # ViewAddress.key: the values as one text ("SHOP10/2015/05/03"); "" for none.
    key: Mapped[str] = mapped_column(String(500))
    values: Mapped[list] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    version_checksum: Mapped[str | None] = mapped_column(String(64))
    transformed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    row_version: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    message: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("view", "key"),
                      Index("ix_view_partitions_state_job_id", "state", "job_id"),
                      Index("ix_view_partitions_job_id", "job_id"))


class ViewEventRow(Base):
    """One state change of one view partition (the listeners' feed)."""

    __tablename__ = "view_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    view: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(500))
    values: Mapped[list] = mapped_column(JSON)
    previous: Mapped[str] = mapped_column(String(16))
    new: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    message: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # PostgreSQL: the writing transaction's id (column default), for commit order.
    txid: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_view_events_txid_id", "txid", "id"),)


commit_ordered(ViewEventRow.__table__)

# Declarative models type __table__ as a FromClause; each of these is a Table.
views = cast(Table, ViewRow.__table__)
view_partitions = cast(Table, ViewPartitionRow.__table__)
view_events = cast(Table, ViewEventRow.__table__)
