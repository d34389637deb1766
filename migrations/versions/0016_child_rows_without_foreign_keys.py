"""steps and job_events: no foreign key to jobs

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03

Every state change writes an audit row, and every submit writes a job's steps and its
first audit row. On PostgreSQL each such row's foreign key looked its job up again and
took a key-share lock on the job's row, in the statement that had just written that
row: three quarters of a 1,000-job bulk submit's time, and an eighth of a claim's and a
completion's. The keys guarded nothing the engine does not already keep: steps and
events are written only beside their job, in its transaction, and the one writer that
deletes jobs (``jobserver.store.retention``) deletes their steps and events by name in
the same transaction. ``step_logs`` and ``job_dependencies`` keep theirs: written far
less often, and deleted with their job by ``ON DELETE CASCADE``.

SQLite cannot drop a constraint in place: each table is copied (Alembic's batch mode)
with its indexes made again around the copy, and the dependency triggers, which write
``job_events`` and so refuse its renaming, made again after it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobserver.store import triggers
from jobserver.store.models import FINAL_EVENTS

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

#: (table, foreign key name, the indexes SQLite's copy must make again: name, columns, where)
CHILDREN = (
    ("steps", "fk_steps_job_id_jobs", ()),
    ("job_events", "fk_job_events_job_id_jobs",
     (("ix_job_events_job_id_id", ["job_id", "id"], None),
      ("ix_job_events_finals", ["txid", "id"], FINAL_EVENTS))),
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        for table, key, _indexes in CHILDREN:
            op.drop_constraint(key, table, type_="foreignkey")
        return
    _run(triggers.drop("sqlite"))
    for table, key, indexes in CHILDREN:
        _without_indexes(table, indexes)
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.drop_constraint(key, type_="foreignkey")
        _with_indexes(table, indexes)
    _run(triggers.create("sqlite"))


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        _run(triggers.drop("sqlite"))
    for table, key, indexes in CHILDREN:
        # Rows of jobs deleted while no key stood would refuse the key: they go first.
        op.execute(sa.text(f"DELETE FROM {table} WHERE job_id NOT IN (SELECT id FROM jobs)"))
        if not sqlite:
            op.create_foreign_key(key, table, "jobs", ["job_id"], ["id"], ondelete="CASCADE")
            continue
        _without_indexes(table, indexes)
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.create_foreign_key(key, "jobs", ["job_id"], ["id"], ondelete="CASCADE")
        _with_indexes(table, indexes)
    if sqlite:
        _run(triggers.create("sqlite"))


def _run(statements: list[str]) -> None:
    bind = op.get_bind()
    for statement in statements:
        bind.exec_driver_sql(statement)


def _without_indexes(table: str, indexes: tuple) -> None:
    for name, _columns, _where in indexes:
        op.drop_index(name, table_name=table)


def _with_indexes(table: str, indexes: tuple) -> None:
    for name, columns, where in indexes:
        partial = {} if where is None else {"sqlite_where": sa.text(where)}
        op.create_index(name, table, columns, **partial)
