"""initial schema: jobs, steps, job_events, servers, lock_epochs

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("lock_key", sa.String(200), nullable=True),
        sa.Column("assigned_servers", sa.Text(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("parallelism", sa.Integer(), nullable=False),
        sa.Column("not_before", UTCDateTime(), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("node", sa.String(100), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("idempotency_key", name="uq_jobs_idempotency_key"),
    )
    op.create_index("ix_jobs_name_id", "jobs", ["name", "id"])
    op.create_index("ix_jobs_state_id", "jobs", ["state", "id"])
    op.create_index("ix_jobs_claim", "jobs",
                    ["state", sa.literal_column("priority DESC"), "id"])
    op.create_index("ix_jobs_state_node", "jobs", ["state", "node"])

    op.create_table(
        "steps",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("job_id", BigId, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("depends_on", sa.JSON(), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("retry_backoff", sa.Float(), nullable=False),
        sa.Column("retryable", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("wall_seconds", sa.Float(), nullable=True),
        sa.Column("cpu_seconds", sa.Float(), nullable=True),
        sa.Column("peak_rss_kb", sa.BigInteger(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_steps_job_id_jobs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_steps"),
        sa.UniqueConstraint("job_id", "name", name="uq_steps_job_id_name"),
    )
    op.create_index("ix_steps_job_id", "steps", ["job_id"])

    op.create_table(
        "job_events",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("job_id", BigId, nullable=False),
        sa.Column("step", sa.String(100), nullable=True),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("node", sa.String(100), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_events_job_id_jobs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])

    op.create_table(
        "servers",
        sa.Column("id", sa.String(100), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_servers"),
    )

    op.create_table(
        "lock_epochs",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_lock_epochs"),
    )


def downgrade() -> None:
    op.drop_table("lock_epochs")
    op.drop_table("servers")
    op.drop_table("job_events")
    op.drop_table("steps")
    op.drop_table("jobs")
