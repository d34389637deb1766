"""schedules: schedules, schedule_jobs, schedule_evaluations, schedule_watches; the
ordered feed of final job events (job_events.txid, feed_cursors)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``job_events.txid`` is the writing transaction's id on PostgreSQL (a column default,
so no insert names it): a reader that takes rows only below the oldest transaction
still running sees them in commit order, which a sequence alone does not give
(``jobserver.store.feed``). Existing rows keep NULL and are not part of the feed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.schedules.tables import PENDING
from jobserver.store.models import FINAL_EVENTS, TXID_DEFAULT, BigId, UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job_events", sa.Column("txid", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(TXID_DEFAULT)
    op.create_index("ix_job_events_finals", "job_events", ["txid", "id"],
                    postgresql_where=sa.text(FINAL_EVENTS), sqlite_where=sa.text(FINAL_EVENTS))
    op.create_table(
        "feed_cursors",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("txid", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_feed_cursors"),
    )
    _schedules()
    _schedule_jobs()
    _evaluations_and_watches()


def _schedules() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("trigger_state", sa.JSON(), nullable=False),
        sa.Column("next_check_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("enabled_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_schedules"),
        sa.UniqueConstraint("namespace", "name", name="uq_schedules_namespace_name"),
    )
    op.create_index("ix_schedules_enabled_next_check_at", "schedules",
                    ["enabled", "next_check_at"])


def _schedule_jobs() -> None:
    op.create_table(
        "schedule_jobs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("schedule_id", BigId, nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("fire_time", UTCDateTime(), nullable=True),
        sa.Column("notifications", sa.JSON(), nullable=False),
        sa.Column("trigger_state", sa.JSON(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("deadline_at", UTCDateTime(), nullable=False),
        sa.Column("next_check_at", UTCDateTime(), nullable=True),
        sa.Column("launch_key", sa.String(200), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"],
                                name="fk_schedule_jobs_schedule_id_schedules",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_schedule_jobs"),
        sa.UniqueConstraint("launch_key", name="uq_schedule_jobs_launch_key"),
    )
    op.create_index("ix_schedule_jobs_schedule_id_id", "schedule_jobs", ["schedule_id", "id"])
    op.create_index("ix_schedule_jobs_state_next_check_at", "schedule_jobs",
                    ["state", "next_check_at"])
    op.create_index("ix_schedule_jobs_pending", "schedule_jobs", ["schedule_id"], unique=True,
                    postgresql_where=sa.text(PENDING), sqlite_where=sa.text(PENDING))


def _evaluations_and_watches() -> None:
    op.create_table(
        "schedule_evaluations",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("schedule_id", BigId, nullable=False),
        sa.Column("schedule_job_id", sa.BigInteger(), nullable=True),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("outcome", sa.String(24), nullable=False),
        sa.Column("fire_time", UTCDateTime(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("next_check_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"],
                                name="fk_schedule_evaluations_schedule_id_schedules",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_schedule_evaluations"),
    )
    op.create_index("ix_schedule_evaluations_schedule_id_id", "schedule_evaluations",
                    ["schedule_id", "id"])
    op.create_index("ix_schedule_evaluations_at", "schedule_evaluations", ["at"])
    op.create_table(
        "schedule_watches",
        sa.Column("schedule_id", BigId, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"],
                                name="fk_schedule_watches_schedule_id_schedules",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("schedule_id", "kind", "target", name="pk_schedule_watches"),
    )
    op.create_index("ix_schedule_watches_kind_target", "schedule_watches", ["kind", "target"])


def downgrade() -> None:
    for table in ("schedule_watches", "schedule_evaluations", "schedule_jobs", "schedules",
                  "feed_cursors"):
        op.drop_table(table)
    op.drop_index("ix_job_events_finals", table_name="job_events")
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("txid")
