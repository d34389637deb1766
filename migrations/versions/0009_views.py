"""views: view definitions, view partitions and their state changes

Revision ID: 0009
Revises: 0008
Create Date: 2027-01-10

``view_partitions`` holds each view partition's state, the version checksum and
timestamp of the transformation that last ran, and a ``row_version`` that every
write compares and bumps. ``view_events`` is read in commit order (``txid``, a
column default on PostgreSQL, as ``job_events.txid``). See ``jobserver.views.tables``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId, UTCDateTime, txid_default

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "views",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("structure_checksum", sa.String(64), nullable=False),
        sa.Column("version_checksum", sa.String(64), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_views"),
    )
    op.create_table(
        "view_partitions",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("view", sa.String(200), nullable=False),
        sa.Column("key", sa.String(500), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("version_checksum", sa.String(64), nullable=True),
        sa.Column("transformed_at", UTCDateTime(), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("row_version", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_view_partitions"),
        sa.UniqueConstraint("view", "key", name="uq_view_partitions_view_key"),
    )
    op.create_index("ix_view_partitions_state_job_id", "view_partitions", ["state", "job_id"])
    op.create_index("ix_view_partitions_job_id", "view_partitions", ["job_id"])
    op.create_table(
        "view_events",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("view", sa.String(200), nullable=False),
        sa.Column("key", sa.String(500), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("previous", sa.String(16), nullable=False),
        sa.Column("new", sa.String(16), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("txid", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_view_events"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(txid_default("view_events"))
    op.create_index("ix_view_events_txid_id", "view_events", ["txid", "id"])


def downgrade() -> None:
    op.drop_table("view_events")
    op.drop_table("view_partitions")
    op.drop_table("views")
