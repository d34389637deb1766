"""The metadata schema. Alembic migrations in ``migrations/`` must match it exactly
(``tests/unit/test_migrations.py`` diffs the two)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (DDL, JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index,
                        Integer, LargeBinary, MetaData, String, Text, TypeDecorator,
                        UniqueConstraint, event, false, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jobserver.store import triggers

# A BIGINT primary key autoincrements on PostgreSQL; SQLite only does so for INTEGER.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on the way out, whatever the dialect stores.

    PostgreSQL stores ``timestamptz``; SQLite stores naive UTC text. Values written by
    the store's own clock (see ``engine.store_now``) and by Python compare correctly
    on both.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use UTC-aware values")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return as_utc(value)

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        """SQLite's text is parsed with its zone at once: parsing it naive and then
        giving it one (``replace``) cost four times the parse, per timestamp read."""
        if dialect.name == "sqlite":
            return _utc_from_sqlite
        return super().result_processor(dialect, coltype)


def _utc_from_sqlite(value: str | None) -> datetime | None:
    # The store writes naive UTC text, "2026-01-01 00:00:00.000000" (SQLAlchemy and
    # store_now alike).
    return None if value is None else datetime.fromisoformat(value + "+00:00")


def as_utc(value: datetime | None) -> datetime | None:
    """A stored timestamp as an aware UTC datetime: naive values (SQLite) are UTC, aware
    ones (PostgreSQL, in the session's time zone) are converted."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    if value.tzinfo is timezone.utc:  # psycopg 3 in a UTC session (store.engine)
        return value
    return value.astimezone(timezone.utc)


NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    lock_key: Mapped[str | None] = mapped_column(String(200))
    # JSON text of the server ids allowed to run the job; NULL means any node.
    assigned_servers: Mapped[str | None] = mapped_column(Text)
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    parallelism: Mapped[int] = mapped_column(Integer, default=1)
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    request_hash: Mapped[str | None] = mapped_column(String(64))
    # The claim token: which node runs the job, under which lease (fence), which run.
    node: Mapped[str | None] = mapped_column(String(100))
    fence: Mapped[int] = mapped_column(BigInteger, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The datasets the job consumes (JobSpec.inputs as JSON; NULL: none). Last, as
    # migration 0007 added it: the claim returns the columns in this order.
    inputs: Mapped[list | None] = mapped_column(JSON)
    # How many of the job's upstreams (``job_dependencies``) are not yet final for its
    # purpose; a claim takes only jobs at 0. Kept by the trigger of
    # ``jobserver.store.triggers`` on the upstreams' state writes. Added by 0008, as is
    # ``has_dependents``: whether any job waits for this one (the trigger's filter).
    waiting_on: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    has_dependents: Mapped[bool] = mapped_column(Boolean, default=False,
                                                 server_default=false())
    # Who submitted the job (0014): the API token's name and id (no id for a token
    # of the config), or the planner that launched it ("schedule ns/name", "views",
    # "batch SYSTEM/LOCATION"; "system" otherwise). Last, as 0012 added them.
    submitted_by: Mapped[str | None] = mapped_column(String(200))
    submitted_by_token_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        Index("ix_jobs_state_id", "state", "id"),
        Index("ix_jobs_name_id", "name", "id"),
    )


# The queue: a claim reads ``state = 'READY' AND node IS NULL`` (leader mode: ``node =
# <this node>``) in (priority DESC, id) order, and orphan checks read (state, node). In
# this one index a claim is a short ordered range scan however many finished or READY
# jobs the table holds, with nothing to sort. Claims order by ``node`` first (constant
# there) so that PostgreSQL sees the index's order as the query's: it does not treat
# ``node IS NULL`` as fixing the column. With (state, node) and (state, priority, id)
# as two indexes, PostgreSQL underestimated READY-and-unassigned rows (it multiplies
# the two fractions) and sorted the whole READY backlog on every claim (migration
# 0004). A partial index would be smaller, but SQLite only uses one when the query
# spells the same literal predicate. ``waiting_on`` (0008) comes before the order
# columns: a claim reads ``waiting_on = 0``, so jobs waiting for upstreams sit in
# another part of the index and the claim's range scan never passes over them.
Index("ix_jobs_queue", JobRow.state, JobRow.node, JobRow.waiting_on, JobRow.priority.desc(),
      JobRow.id)

# Jobs held back by ``not_before``: an idle scheduler reads the earliest due time to
# sleep until it (``RunRepository.seconds_until_due``). In ix_jobs_queue those jobs sit
# among the claimable ones in priority order, so finding the earliest would read the
# whole READY backlog; this index holds only READY jobs with a due time (SQLite uses a
# partial index only when the query spells its predicate, which that read does).
DUE_JOBS = "state = 'READY' AND not_before IS NOT NULL"
Index("ix_jobs_due", JobRow.not_before, postgresql_where=text(DUE_JOBS),
      sqlite_where=text(DUE_JOBS))

# Finished jobs by age, for retention (``jobserver.store.retention``): it reads the
# oldest jobs of one final state, (finished_at, id) after a keyset position, and
# deletes them. ix_jobs_state_id would pass over every younger finished job of the
# state on each look for more; this index holds only jobs in a state retention may
# delete, so claims (READY -> RUNNING) never write to it. SQLite uses it only when a
# query spells the predicate, which retention's scan does.
FINISHED_JOBS = "state IN ('SUCCEED', 'DISCARDED', 'ERROR')"
Index("ix_jobs_finished", JobRow.state, JobRow.finished_at, JobRow.id,
      postgresql_where=text(FINISHED_JOBS), sqlite_where=text(FINISHED_JOBS))


class JobDependencyRow(Base):
    """One edge of the job graph: ``job_id`` waits for ``upstream_id`` to be done
    (``awaits`` = ``done``) or to succeed (``succeeded``). An upstream always existed
    before its dependent, so the graph has no cycles."""

    __tablename__ = "job_dependencies"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                        primary_key=True)
    upstream_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                             primary_key=True)
    awaits: Mapped[str] = mapped_column(String(16))

    # The trigger finds an upstream's dependents by this index.
    __table_args__ = (Index("ix_job_dependencies_upstream_id", "upstream_id"),)


def _create_triggers(dialect: str) -> None:
    for statement in triggers.create(dialect):
        event.listen(JobDependencyRow.__table__, "after_create",
                     DDL(statement.replace("%", "%%")).execute_if(dialect=dialect))


_create_triggers("postgresql")
_create_triggers("sqlite")


class StepRow(Base):
    __tablename__ = "steps"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # No foreign key (migration 0016): a step is written only with its job, in its
    # transaction, and retention deletes a job's steps with it by name.
    job_id: Mapped[int] = mapped_column(BigId)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(100))
    type: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict] = mapped_column(JSON, default=dict)
    depends_on: Mapped[list] = mapped_column(JSON, default=list)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    retry_backoff: Mapped[float] = mapped_column(Float, default=1.0)
    retryable: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    output: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    wall_seconds: Mapped[float | None] = mapped_column(Float)
    cpu_seconds: Mapped[float | None] = mapped_column(Float)
    peak_rss_kb: Mapped[int | None] = mapped_column(BigInteger)
    metrics: Mapped[dict | None] = mapped_column(JSON)

    __table_args__ = (UniqueConstraint("job_id", "name"), Index("ix_steps_job_id", "job_id"))


class StepLogRow(Base):
    """One chunk of a step attempt's full output (``jobserver.store.logs``): zlib-
    compressed bytes, written in ``seq`` order while the step runs. ``start`` is the
    offset of the chunk's first byte in the attempt's log and ``size`` its length, both
    uncompressed, so a reader can resume from a byte offset. Like ``job_events`` the
    rows name their step and belong to the job: deleting a job deletes them (ON DELETE
    CASCADE; ``steps`` and ``job_events`` have no such key since migration 0016, and
    retention deletes them itself), and a rerun, which starts the step's attempts again at 1, deletes its
    steps' chunks."""

    __tablename__ = "step_logs"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                        primary_key=True)
    step: Mapped[str] = mapped_column(String(100), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    start: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)


#: Rows of the final-events feed: a job (not a step) reaching a state a run ends in.
#: Spelled the same wherever a query must use ``ix_job_events_finals``.
FINAL_EVENTS = ("txid IS NOT NULL AND step IS NULL "
                "AND to_state IN ('SUCCEED', 'ERROR', 'DISCARDED', 'STOPPED')")


class JobEventRow(Base):
    """The audit trail: one row for every job and step state change."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # No foreign key (migration 0016), as ``steps.job_id``: audit rows are written
    # beside their job's own write, and retention deletes them with the job by name.
    job_id: Mapped[int] = mapped_column(BigId)
    step: Mapped[str | None] = mapped_column(String(100))
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    node: Mapped[str | None] = mapped_column(String(100))
    fence: Mapped[int | None] = mapped_column(BigInteger)
    attempt: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # PostgreSQL: the id of the transaction that wrote the row (its column default,
    # TXID_DEFAULT), which orders the feed of final job events in commit order (see
    # jobserver.store.feed). SQLite leaves it NULL: its writers are serialised, so
    # ``id`` order is commit order there.
    txid: Mapped[int | None] = mapped_column(BigInteger)
    # Who asked for the change (0014), as ``jobs.submitted_by``: set on a job's submit
    # and on operator actions; NULL on the engine's own writes (claims, step attempts,
    # rescues), which ``node`` names.
    actor: Mapped[str | None] = mapped_column(String(200))
    actor_token_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        Index("ix_job_events_job_id_id", "job_id", "id"),
        # The feed reads final job events by (txid, id); one entry per finished job,
        # and none on SQLite, where txid is NULL.
        Index("ix_job_events_finals", "txid", "id",
              postgresql_where=text(FINAL_EVENTS), sqlite_where=text(FINAL_EVENTS)),
    )


def txid_default(table: str) -> str:
    """The PostgreSQL column default of ``<table>.txid``: every writer's rows carry its
    transaction id without any insert naming the column. The tables read as ordered
    feeds (``jobserver.store.feed``) have it: ``job_events`` and ``partitions``."""
    return (f"ALTER TABLE {table} ALTER COLUMN txid "
            "SET DEFAULT CAST(CAST(pg_current_xact_id() AS text) AS bigint)")


def commit_ordered(table: Any) -> None:
    """Give ``table``'s ``txid`` column its PostgreSQL default when the models create
    the table (migrations run :func:`txid_default` themselves)."""
    event.listen(table, "after_create",
                 DDL(txid_default(table.name)).execute_if(dialect="postgresql"))


TXID_DEFAULT = txid_default("job_events")
commit_ordered(JobEventRow.__table__)


class FeedCursorRow(Base):
    """How far a reader of an ordered feed has read (``jobserver.store.feed``): the
    (txid, id) of the last row it took. Written in the transaction that acts on what
    it read, so that a row is acted on once across restarts and failovers."""

    __tablename__ = "feed_cursors"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    txid: Mapped[int] = mapped_column(BigInteger, default=0)
    position: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ServerRow(Base):
    __tablename__ = "servers"

    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(16), default="standby")
    state: Mapped[str] = mapped_column(String(16), default="alive")
    capacity: Mapped[int] = mapped_column(Integer)
    running: Mapped[int] = mapped_column(Integer, default=0)
    tags: Mapped[dict] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)


class LockEpochRow(Base):
    """The newest fence of every lock key (see ``jobserver.store.epochs``)."""

    __tablename__ = "lock_epochs"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    # Who took the newest lease and when: leaders and lock holders at a glance.
    holder: Mapped[str | None] = mapped_column(String(100))
    acquired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ApiTokenRow(Base):
    """API tokens kept in the store (``jobserver token create``); only a hash is kept.

    ``token_hash`` is the SHA-256 of the secret. The secrets are 256-bit random values
    made by ``secrets``, not passwords chosen by people: nothing can be guessed, so a
    slow, salted password hash would add nothing but cost on every request, and an
    unsalted digest lets a request find its row by an indexed lookup.
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # JSON list of scope names: read, submit, operate, admin, shell.
    scopes: Mapped[list] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)



class UiSessionRow(Base):
    """A signed-in session of the web dashboard (``jobserver.ui``), added by 0015.

    The browser's cookie holds a random 256-bit id; the store keeps only its SHA-256
    (``id_hash``), for the reason :class:`ApiTokenRow` keeps a plain digest. The
    session stands for the token it was opened with and never holds that token:
    a stored token by ``token_id`` (a revoked or expired token ends its sessions at
    the next request; deleting the token deletes them), a token of the config by
    ``config_token_hash`` (a session ends when its token leaves ``api.tokens``).
    Both NULL: opened while ``api.auth`` was off, valid only while it stays off.
    """

    __tablename__ = "ui_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"))
    config_token_hash: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        # Sign-in deletes the expired sessions by this index.
        Index("ix_ui_sessions_expires_at", "expires_at"),
        Index("ix_ui_sessions_token_id", "token_id"),
    )

class ChangeRow(Base):
    """One change asked for through the API or the dashboard, other than a job's own
    (jobs keep theirs in ``job_events``), added by 0017: a definition created,
    replaced, switched or deleted, partitions added, a materialize, a batch run. The
    history of who changed what; written after the change, by the request that made
    it (:mod:`jobserver.store.changes`)."""

    __tablename__ = "changes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(200))
    actor_token_id: Mapped[int | None] = mapped_column(BigInteger)
    method: Mapped[str] = mapped_column(String(8))
    # The request's path: what was changed (/api/v1/schedules/ns/name).
    resource: Mapped[str] = mapped_column(String(1000))
    # The route (schedules.put_schedule) and what it said it did (created, updated,
    # deleted, 201), as the reply told the caller.
    action: Mapped[str] = mapped_column(String(100))
    outcome: Mapped[str] = mapped_column(String(100))

    __table_args__ = (Index("ix_changes_resource_id", "resource", "id"),)
