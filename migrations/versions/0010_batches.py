"""batches: batch configs, the control table (batches, batch_stages) and batch runs

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

See ``jobserver.batches``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId, UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batch_configs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("systems", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_batch_configs"),
        sa.UniqueConstraint("name", name="uq_batch_configs_name"),
    )
    op.create_table(
        "batches",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("system", sa.String(64), nullable=False),
        sa.Column("location", sa.String(64), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("context_key", sa.Text(), nullable=False),
        sa.Column("business_date", sa.Date(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_batches"),
        sa.UniqueConstraint("system", "location", "context_key", "business_date",
                            name="uq_batches_system_location_context_key_business_date"),
    )
    op.create_index("ix_batches_status_business_date", "batches", ["status", "business_date"])
    op.create_table(
        "batch_stages",
        sa.Column("batch_id", BigId, nullable=False),
        sa.Column("stage", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.BigInteger(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"],
                                name="fk_batch_stages_batch_id_batches", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "stage", name="pk_batch_stages"),
    )
    op.create_index("ix_batch_stages_status", "batch_stages", ["status"])
    op.create_index("ix_batch_stages_job_id", "batch_stages", ["job_id"])
    op.create_table(
        "batch_runs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("system", sa.String(64), nullable=False),
        sa.Column("location", sa.String(64), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("stage", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_batch_runs"),
    )
    op.create_index("ix_batch_runs_status", "batch_runs", ["status"])


def downgrade() -> None:
    op.drop_table("batch_runs")
    op.drop_table("batch_stages")
    op.drop_table("batches")
    op.drop_table("batch_configs")
