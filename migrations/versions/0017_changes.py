"""changes and schedules.owner: who changed which definition, who asked for what

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05

A materialize, a batch run and every change of a schedule, dataset, consumer, view or
batch config is recorded with its requester (a token's name and id), the path it
changed and what the reply said it did: the definitions had no record of who
changed them, and planner actions none of who asked. ``schedules.owner`` names who
last saved a schedule's template: its launches are charged to that requester's submit
rate; ``batch_runs.requested_by`` who asked for a run, named on its stage jobs.
Nullable columns without defaults: adding them rewrites no rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId, UTCDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "changes",
        sa.Column("id", BigId, nullable=False, autoincrement=True),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("actor_token_id", sa.BigInteger(), nullable=True),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("resource", sa.String(1000), nullable=False),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("outcome", sa.String(100), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_changes"),
    )
    op.create_index("ix_changes_resource_id", "changes", ["resource", "id"])
    op.add_column("schedules", sa.Column("owner", sa.String(200), nullable=True))
    op.add_column("schedules", sa.Column("owner_token_id", sa.BigInteger(), nullable=True))
    op.add_column("batch_runs", sa.Column("requested_by", sa.String(200), nullable=True))
    op.add_column("batch_runs", sa.Column("requested_by_token_id", sa.BigInteger(),
                                          nullable=True))


def downgrade() -> None:
    op.drop_column("batch_runs", "requested_by_token_id")
    op.drop_column("batch_runs", "requested_by")
    op.drop_column("schedules", "owner_token_id")
    op.drop_column("schedules", "owner")
    op.drop_index("ix_changes_resource_id", table_name="changes")
    op.drop_table("changes")
