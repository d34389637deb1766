"""The schedules' schema; Alembic migration 0005 matches it."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import (JSON, BigInteger, Boolean, ForeignKey, Index, Integer, String, Table,
                        Text, UniqueConstraint, text)
from sqlalchemy.orm import Mapped, mapped_column

from jobserver.store.models import Base, BigId, UTCDateTime

#: A schedule-job still waiting for its trigger or its constraints: at most one per
#: schedule, which the partial unique index below makes the store enforce.
PENDING = "state IN ('PENDING_TRIGGER', 'PENDING_CONSTRAINTS')"


class ScheduleRow(Base):
    __tablename__ = "schedules"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    # Bumped by every update: launches of an older generation are refused, and the
    # generation is part of every launch's idempotency key.
    generation: Mapped[int] = mapped_column(Integer, default=1)
    # The validated spec as JSON (jobserver.schedules.spec) and its digest, which
    # tells ``apply`` whether a document changes anything.
    spec: Mapped[dict] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64))
    enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    # What the evaluator remembers between rounds: each time trigger's last fire time
    # considered, keyed by the trigger's path in the tree ("" for a lone trigger).
    trigger_state: Mapped[dict] = mapped_column(JSON, default=dict)
    # When the evaluator must look at this schedule next (its earliest fire time);
    # NULL while nothing timed is due (event triggers only, or disabled).
    next_check_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    enabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Who last saved the template (added by 0017): its launches are charged to this
    # requester's submit rate, as its own submits are. NULL: saved before owners were
    # recorded, or by the node itself; such a schedule is charged on its own.
    owner: Mapped[str | None] = mapped_column(String(200))
    owner_token_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (UniqueConstraint("namespace", "name"),
                      Index("ix_schedules_enabled_next_check_at", "enabled", "next_check_at"))


class ScheduleJobRow(Base):
    """CDAP's *job*: one firing of a schedule on its way to an engine job."""

    __tablename__ = "schedule_jobs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    schedule_id: Mapped[int] = mapped_column(ForeignKey("schedules.id", ondelete="CASCADE"))
    generation: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(24))
    # The fire time of the time trigger that created it, if one did.
    fire_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Every trigger event it holds (CDAP: one job holds every notification that
    # arrived while it was pending), and the and/or tree's satisfied parts.
    notifications: Mapped[list] = mapped_column(JSON, default=list)
    trigger_state: Mapped[dict] = mapped_column(JSON, default=dict)
    # The firing's own params, over the schedule's properties.
    properties: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Aborted with reason "timeout" if not PENDING_LAUNCH by then.
    deadline_at: Mapped[datetime] = mapped_column(UTCDateTime)
    next_check_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The launch's Idempotency-Key, fixed before the launch is tried.
    launch_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_schedule_jobs_schedule_id_id", "schedule_id", "id"),
        Index("ix_schedule_jobs_state_next_check_at", "state", "next_check_at"),
        Index("ix_schedule_jobs_pending", "schedule_id", unique=True,
              postgresql_where=text(PENDING), sqlite_where=text(PENDING)),
    )


class ScheduleEvaluationRow(Base):
    """Why a schedule did or did not run: one row per evaluation that decided
    something (fired, skipped a fire time, waited, aborted, launched)."""

    __tablename__ = "schedule_evaluations"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    schedule_id: Mapped[int] = mapped_column(ForeignKey("schedules.id", ondelete="CASCADE"))
    schedule_job_id: Mapped[int | None] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    outcome: Mapped[str] = mapped_column(String(24))
    fire_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(Text)
    details: Mapped[dict] = mapped_column(JSON, default=dict)
    next_check_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_schedule_evaluations_schedule_id_id", "schedule_id", "id"),
                      Index("ix_schedule_evaluations_at", "at"))


class ScheduleWatchRow(Base):
    """What a schedule's event triggers listen to (``job`` name, ``schedule``
    "namespace/name", ``dataset``): the evaluator finds the schedules an event
    concerns by index instead of reading every schedule."""

    __tablename__ = "schedule_watches"

    schedule_id: Mapped[int] = mapped_column(
        ForeignKey("schedules.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    target: Mapped[str] = mapped_column(String(200), primary_key=True)

    __table_args__ = (Index("ix_schedule_watches_kind_target", "kind", "target"),)


# Declarative models type __table__ as a FromClause; each of these is a Table.
schedules = cast(Table, ScheduleRow.__table__)
schedule_jobs = cast(Table, ScheduleJobRow.__table__)
evaluations = cast(Table, ScheduleEvaluationRow.__table__)
watches = cast(Table, ScheduleWatchRow.__table__)
