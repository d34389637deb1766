"""jobs: dependencies between jobs (``after``); the queue index skips waiting jobs

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-20

A job may wait for upstream jobs (``job_dependencies``). ``jobs.waiting_on`` counts
the upstreams not yet final for its purpose, kept by a trigger on the upstreams'
state writes (``jobserver.store.triggers``: every path that ends or reopens a job,
on both dialects, in the writer's transaction); ``jobs.has_dependents`` lets only
jobs with dependents fire it. The queue index gains ``waiting_on`` before its order
columns, so that a claim (``waiting_on = 0``) stays one short ordered range scan
however many jobs wait: they sit in another part of the index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store import triggers
from jobserver.store.models import BigId

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("waiting_on", sa.Integer(), nullable=False,
                                    server_default=sa.text("0")))
    op.add_column("jobs", sa.Column("has_dependents", sa.Boolean(), nullable=False,
                                    server_default=sa.false()))
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", BigId, nullable=False),
        sa.Column("upstream_id", BigId, nullable=False),
        sa.Column("awaits", sa.String(16), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"],
                                name="fk_job_dependencies_job_id_jobs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["upstream_id"], ["jobs.id"],
                                name="fk_job_dependencies_upstream_id_jobs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "upstream_id", name="pk_job_dependencies"),
    )
    op.create_index("ix_job_dependencies_upstream_id", "job_dependencies", ["upstream_id"])
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index("ix_jobs_queue", "jobs", ["state", "node", "waiting_on",
                                              sa.literal_column("priority DESC"), "id"])
    bind = op.get_bind()
    for statement in triggers.create(bind.dialect.name):
        bind.exec_driver_sql(statement)


def downgrade() -> None:
    bind = op.get_bind()
    for statement in triggers.drop(bind.dialect.name):
        bind.exec_driver_sql(statement)
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index("ix_jobs_queue", "jobs",
                    ["state", "node", sa.literal_column("priority DESC"), "id"])
    op.drop_table("job_dependencies")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("has_dependents")
        batch.drop_column("waiting_on")
