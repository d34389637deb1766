"""datasets: datasets and partitions, the partitions in commit order (partitions.txid)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08

``partitions.txid`` is the adding transaction's id on PostgreSQL (a column default,
as ``job_events.txid``): a reader that takes rows only below the oldest transaction
still running reads a dataset's partitions in commit order (``jobserver.store.feed``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.datasets.tables import FEED_ROWS, KEY_COLUMNS, KeyText
from jobserver.store.models import BigId, UTCDateTime, txid_default

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("key", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_datasets"),
        sa.UniqueConstraint("namespace", "name", name="uq_datasets_namespace_name"),
    )
    op.create_table(
        "partitions",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dataset_id", BigId, nullable=False),
        *[sa.Column(name, KeyText, nullable=False) for name in KEY_COLUMNS],
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("step", sa.String(100), nullable=True),
        sa.Column("txid", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"],
                                name="fk_partitions_dataset_id_datasets", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_partitions"),
        sa.UniqueConstraint("dataset_id", *KEY_COLUMNS, name="uq_partitions_key"),
        sqlite_autoincrement=True,
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(txid_default("partitions"))
    op.create_index("ix_partitions_dataset_id_id", "partitions", ["dataset_id", "id"])
    op.create_index("ix_partitions_feed", "partitions", ["dataset_id", "txid", "id"],
                    postgresql_where=sa.text(FEED_ROWS), sqlite_where=sa.text(FEED_ROWS))


def downgrade() -> None:
    op.drop_table("partitions")
    op.drop_table("datasets")
