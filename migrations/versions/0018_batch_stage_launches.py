"""batch_stage_launches: the runtime audit keeps every launch of a stage

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

The audit read a stage's row of the control table and its newest engine job: a rerun
cleared the failed run's message and pointed the stage at a new job (or ran the same
job's steps again, on resume), so the failed run left no trace. Guzzle's runtime
audit (seed 003) keeps a row per work-unit instance, opened when it starts and closed
when it ends. Each stage launch now gets a row here; the stages launched before this
migration get one for their newest launch (the earlier ones were not recorded), whose
jobs are read from the engine as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId, UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batch_stage_launches",
        sa.Column("batch_id", BigId, nullable=False),
        sa.Column("stage", sa.String(64), nullable=False),
        sa.Column("launch", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("run_id", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("jobs", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"],
                                name="fk_batch_stage_launches_batch_id_batches",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "stage", "launch",
                                name="pk_batch_stage_launches"),
    )
    op.execute("INSERT INTO batch_stage_launches (batch_id, stage, launch, job_id, run_id, "
               "status, message, started_at, finished_at) SELECT batch_id, stage, runs, "
               "job_id, run_id, status, message, started_at, finished_at FROM batch_stages "
               "WHERE runs > 0")


def downgrade() -> None:
    op.drop_table("batch_stage_launches")
