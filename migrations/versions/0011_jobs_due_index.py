"""jobs: an index of READY jobs held back by ``not_before``

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

An idle scheduler sleeps until the earliest ``not_before`` of the READY jobs it might
claim, rather than until its next poll (a job due at T started up to
``scheduler.poll_interval`` late). Reading that time in ``ix_jobs_queue`` would pass
over the whole READY backlog; this partial index holds only READY jobs with a due time.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import DUE_JOBS

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_due", "jobs", ["not_before"],
                    postgresql_where=sa.text(DUE_JOBS), sqlite_where=sa.text(DUE_JOBS))


def downgrade() -> None:
    op.drop_index("ix_jobs_due", table_name="jobs")
