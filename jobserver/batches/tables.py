"""The batches' schema (control table, stage rows, runs, configs): migration 0010; the
stage launches of the runtime audit: migration 0018."""

from __future__ import annotations

from datetime import date, datetime
from typing import cast

from sqlalchemy import (JSON, BigInteger, Date, ForeignKey, Index, Integer, String, Table,
                        Text, UniqueConstraint)
from sqlalchemy.orm import Mapped, mapped_column

from jobserver.store.models import Base, BigId, UTCDateTime


class BatchConfigRow(Base):
    """A ``BatchConfig`` resource; ``systems`` lists the systems it declares, which no
    other config may declare (a run names a system, not a config)."""

    __tablename__ = "batch_configs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    spec: Mapped[dict] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64))
    systems: Mapped[list] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BatchRow(Base):
    """The control table: one batch per system, location, context and business date.
    ``status`` is the overall status, SUCCESS once every stage is."""

    __tablename__ = "batches"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    system: Mapped[str] = mapped_column(String(64))
    location: Mapped[str] = mapped_column(String(64))
    context: Mapped[dict] = mapped_column(JSON, default=dict)
    # The context as "k=v,k=v" sorted by key ('' when none): what makes batches distinct.
    context_key: Mapped[str] = mapped_column(Text)
    business_date: Mapped[date] = mapped_column(Date)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        UniqueConstraint("system", "location", "context_key", "business_date"),
        Index("ix_batches_status_business_date", "status", "business_date"),
    )


class BatchStageRow(Base):
    """A stage of a batch. ``job_id`` is the engine job of its newest run; ``runs``
    counts its launches (the last part of the launch key); ``run_id`` is the batch run
    that launched it last. Written by compare-and-set on (status, runs) only."""

    __tablename__ = "batch_stages"

    batch_id: Mapped[int] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"),
                                          primary_key=True)
    stage: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    runs: Mapped[int] = mapped_column(Integer, default=0)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    message: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_batch_stages_status", "status"),
                      Index("ix_batch_stages_job_id", "job_id"))


class BatchStageLaunchRow(Base):
    """One launch of a stage (the runtime audit's stage instance), kept after a rerun.
    ``launch`` is the stage's ``runs`` when it was launched (the launch key's last
    part); ``jobs`` the stage job's steps as audit rows, copied when the launch ended
    (None while it runs: read from the engine's ``steps``). Opened by the launch's
    compare-and-set, closed by the settle's (:mod:`jobserver.batches.launches`)."""

    __tablename__ = "batch_stage_launches"

    batch_id: Mapped[int] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"),
                                          primary_key=True)
    stage: Mapped[str] = mapped_column(String(64), primary_key=True)
    launch: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    jobs: Mapped[list | None] = mapped_column(JSON)


class BatchRunRow(Base):
    """One ``batch run``: its plan (batch, stage) in order and how far it got. The
    tracker moves it on as the stages' jobs finish."""

    __tablename__ = "batch_runs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    system: Mapped[str] = mapped_column(String(64))
    location: Mapped[str] = mapped_column(String(64))
    context: Mapped[dict] = mapped_column(JSON, default=dict)
    stage: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    plan: Mapped[list] = mapped_column(JSON, default=list)
    position: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Who asked for the run (added by 0017): its stage jobs, launched by the request
    # and later by the tracker, name this requester beside the batch.
    requested_by: Mapped[str | None] = mapped_column(String(200))
    requested_by_token_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_batch_runs_status", "status"),)


batch_configs = cast(Table, BatchConfigRow.__table__)
batches = cast(Table, BatchRow.__table__)
batch_stages = cast(Table, BatchStageRow.__table__)
batch_runs = cast(Table, BatchRunRow.__table__)
batch_stage_launches = cast(Table, BatchStageLaunchRow.__table__)
