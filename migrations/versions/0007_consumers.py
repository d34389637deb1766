"""consumers: dataset consumers and their working sets; the inputs jobs consume

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-15

A consumer reads its dataset's partitions in commit order from a pointer into a
working set (``consumer_partitions``); a job that declares an input takes a share of
it (``jobs.inputs``). See ``jobserver.datasets.working_set``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId, UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("inputs", sa.JSON(), nullable=True))
    op.create_table(
        "consumers",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("dataset_id", BigId, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("pointer_txid", sa.BigInteger(), nullable=False),
        sa.Column("pointer_position", sa.BigInteger(), nullable=False),
        sa.Column("processed", sa.BigInteger(), nullable=False),
        sa.Column("failed_reset", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"],
                                name="fk_consumers_dataset_id_datasets", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_consumers"),
        sa.UniqueConstraint("dataset_id", "name", name="uq_consumers_dataset_id_name"),
    )
    op.create_table(
        "consumer_partitions",
        sa.Column("consumer_id", BigId, nullable=False),
        sa.Column("partition_id", BigId, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("job_attempt", sa.Integer(), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("added_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["consumer_id"], ["consumers.id"],
                                name="fk_consumer_partitions_consumer_id_consumers",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["partition_id"], ["partitions.id"],
                                name="fk_consumer_partitions_partition_id_partitions",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("consumer_id", "partition_id", name="pk_consumer_partitions"),
    )
    op.create_index("ix_consumer_partitions_consumer_id_state", "consumer_partitions",
                    ["consumer_id", "state", "partition_id"])
    op.create_index("ix_consumer_partitions_job_id", "consumer_partitions", ["job_id"])
    op.create_index("ix_consumer_partitions_partition_id", "consumer_partitions",
                    ["partition_id"])


def downgrade() -> None:
    op.drop_table("consumer_partitions")
    op.drop_table("consumers")
    op.drop_column("jobs", "inputs")
