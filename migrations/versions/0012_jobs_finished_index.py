"""jobs: an index of finished jobs by age, for retention

Revision ID: 0012
Revises: 0011
Create Date: 2027-01-10

Retention (``retention.finished_jobs``, ``jobserver purge``) deletes the oldest
finished jobs of a state in small batches, reading them in (finished_at, id) order
after a keyset position. The partial index holds only jobs in a state retention may
delete (SUCCEED, DISCARDED, ERROR): a claim, READY -> RUNNING, never writes to it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import FINISHED_JOBS

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_finished", "jobs", ["state", "finished_at", "id"],
                    postgresql_where=sa.text(FINISHED_JOBS),
                    sqlite_where=sa.text(FINISHED_JOBS))


def downgrade() -> None:
    op.drop_index("ix_jobs_finished", table_name="jobs")
