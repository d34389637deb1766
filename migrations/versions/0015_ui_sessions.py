"""ui_sessions: signed-in sessions of the web dashboard

Revision ID: 0015
Revises: 0014
Create Date: 2027-01-20

The dashboard (``/ui``) signs a browser in with an API token and keeps, instead of
the token, a random session id in an HttpOnly cookie; the store keeps the id's
SHA-256 and a reference to the token (``jobserver.store.ui_sessions``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store.models import BigId, UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("token_id", BigId, nullable=True),
        sa.Column("config_token_hash", sa.String(64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"],
                                name="fk_ui_sessions_token_id_api_tokens", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id_hash", name="pk_ui_sessions"),
    )
    op.create_index("ix_ui_sessions_expires_at", "ui_sessions", ["expires_at"])
    op.create_index("ix_ui_sessions_token_id", "ui_sessions", ["token_id"])


def downgrade() -> None:
    op.drop_table("ui_sessions")
