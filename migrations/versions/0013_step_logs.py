"""step_logs: the full output of every step attempt, in compressed chunks

Revision ID: 0013
Revises: 0012
Create Date: 2027-01-10

Steps kept only the head and tail of their output (``steps.output``). Each attempt's
whole output now goes to ``step_logs`` as it is produced, in zlib-compressed chunks,
up to ``steps.log_limit_bytes`` (see ``jobserver.store.logs``). The chunks belong to
their job (ON DELETE CASCADE), as its steps and events do.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_logs",
        sa.Column("job_id", BigId, nullable=False),
        sa.Column("step", sa.String(100), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_step_logs_job_id_jobs",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "step", "attempt", "seq", name="pk_step_logs"),
    )


def downgrade() -> None:
    op.drop_table("step_logs")
