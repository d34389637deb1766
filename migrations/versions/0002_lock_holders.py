"""lock_epochs records who took the newest lease and when

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lock_epochs") as batch:
        batch.add_column(sa.Column("holder", sa.String(100), nullable=True))
        batch.add_column(sa.Column("acquired_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lock_epochs") as batch:
        batch.drop_column("acquired_at")
        batch.drop_column("holder")
