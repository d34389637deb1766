"""Plain records of batches, their stages, runs and configs, and their statuses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any

from jobserver.store.records import SYSTEM, Actor, actor_of


class Status(str, enum.Enum):
    """A stage's status, and a batch's overall one (RUNNING: started, not all done)."""

    NOT_STARTED = "NOT_STARTED"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class RunStatus(str, enum.Enum):
    """A ``batch run``: going on, done, stopped at a failed stage, or nothing to do."""

    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    NOTHING = "NOTHING"


RUN_FINAL = frozenset({RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.NOTHING})


def overall(statuses: list[Status]) -> Status:
    """A batch's status from its stages'."""
    if statuses and all(s is Status.SUCCESS for s in statuses):
        return Status.SUCCESS
    if Status.FAILED in statuses:
        return Status.FAILED
    if all(s is Status.NOT_STARTED for s in statuses):
        return Status.NOT_STARTED
    return Status.RUNNING


def _values(cls: type, mapping: Any) -> dict[str, Any]:
    names = {f.name for f in fields(cls) if f.init}
    return {name: value for name, value in dict(mapping).items() if name in names}


def as_date(value: date | str) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)


@dataclass(frozen=True)
class StageRecord:
    batch_id: int
    stage: str
    position: int
    status: Status
    job_id: int | None
    runs: int
    run_id: int | None
    message: str | None
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_row(cls, mapping: Any) -> StageRecord:
        values = _values(cls, mapping)
        values["status"] = Status(values["status"])
        return cls(**values)


@dataclass(frozen=True)
class LaunchRecord:
    """One launch of a stage, as the runtime audit keeps it (``batch_stage_launches``).
    ``jobs``: its job units (JSON, see :func:`jobserver.batches.launches.job_units`),
    copied when it ended; None while it runs, or for a launch from before 0018."""

    batch_id: int
    stage: str
    launch: int
    job_id: int | None
    run_id: int | None
    status: Status
    message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    jobs: list[dict[str, Any]] | None

    @classmethod
    def from_row(cls, mapping: Any) -> LaunchRecord:
        values = _values(cls, mapping)
        values["status"] = Status(values["status"])
        return cls(**values)


@dataclass(frozen=True)
class BatchRecord:
    id: int
    system: str
    location: str
    context: dict[str, str]
    business_date: date
    status: Status
    created_at: datetime
    updated_at: datetime
    stages: list[StageRecord] = field(default_factory=list)

    @classmethod
    def from_row(cls, mapping: Any, stages: list[StageRecord] | None = None) -> BatchRecord:
        values = _values(cls, mapping)
        values.update(status=Status(values["status"]),
                      business_date=as_date(values["business_date"]), stages=stages or [])
        return cls(**values)

    def stage(self, name: str) -> StageRecord | None:
        return next((s for s in self.stages if s.stage == name), None)


@dataclass(frozen=True)
class PlanItem:
    """One stage of one batch that a run goes through, in the run's order."""

    batch_id: int
    business_date: date
    stage: str

    def as_json(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "business_date": self.business_date.isoformat(),
                "stage": self.stage}

    @classmethod
    def of(cls, item: dict[str, Any]) -> PlanItem:
        return cls(int(item["batch_id"]), as_date(item["business_date"]), item["stage"])


@dataclass(frozen=True)
class RunRecord:
    id: int
    system: str
    location: str
    context: dict[str, str]
    stage: str | None
    status: RunStatus
    plan: list[PlanItem]
    position: int
    message: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    requested_by: str | None = None
    requested_by_token_id: int | None = None

    @property
    def requester(self) -> Actor:
        """Who asked for the run (the system, for runs from before it was recorded)."""
        return actor_of(self.requested_by, self.requested_by_token_id) or SYSTEM

    @classmethod
    def from_row(cls, mapping: Any) -> RunRecord:
        values = _values(cls, mapping)
        values.update(status=RunStatus(values["status"]),
                      plan=[PlanItem.of(item) for item in values["plan"]])
        return cls(**values)


@dataclass(frozen=True)
class ConfigRecord:
    id: int
    name: str
    spec: dict[str, Any]
    spec_hash: str
    systems: list[str]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, mapping: Any) -> ConfigRecord:
        return cls(**_values(cls, mapping))


@dataclass(frozen=True)
class PutResult:
    config: ConfigRecord | None
    change: str
    changed: list[str]
