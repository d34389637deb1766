"""jobs and job events: who submitted a job, and who asked for each change

Revision ID: 0014
Revises: 0013
Create Date: 2027-01-10

``jobs.submitted_by`` and ``job_events.actor`` name the API token (with its id in
``*_token_id``; none for a token of the config) or the planner behind a submit or an
operator action. Nullable columns without defaults: adding them rewrites no rows,
and the engine's own events leave them NULL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("submitted_by", sa.String(200), nullable=True))
    op.add_column("jobs", sa.Column("submitted_by_token_id", sa.BigInteger(), nullable=True))
    op.add_column("job_events", sa.Column("actor", sa.String(200), nullable=True))
    op.add_column("job_events", sa.Column("actor_token_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+): a batch copy of ``jobs`` would drop the
    # dependency trigger with the old table.
    op.drop_column("job_events", "actor_token_id")
    op.drop_column("job_events", "actor")
    op.drop_column("jobs", "submitted_by_token_id")
    op.drop_column("jobs", "submitted_by")
