"""Plain records of schedules, their schedule-jobs and their evaluations, as read
from the store: nothing outside the store sees a SQLAlchemy row."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

#: A schedule-job's states (CDAP's job life cycle): PENDING_TRIGGER →
#: PENDING_CONSTRAINTS → PENDING_LAUNCH → LAUNCHED, or ABORTED from any pending one.
PENDING_TRIGGER = "PENDING_TRIGGER"
PENDING_CONSTRAINTS = "PENDING_CONSTRAINTS"
PENDING_LAUNCH = "PENDING_LAUNCH"
LAUNCHED = "LAUNCHED"
ABORTED = "ABORTED"
SCHEDULE_JOB_STATES = (PENDING_TRIGGER, PENDING_CONSTRAINTS, PENDING_LAUNCH, LAUNCHED, ABORTED)
#: Not yet launched nor aborted: what disabling, updating or deleting a schedule aborts.
PENDING_STATES = (PENDING_TRIGGER, PENDING_CONSTRAINTS, PENDING_LAUNCH)


def _values(cls: type, mapping: Any) -> dict[str, Any]:
    """The columns of ``mapping`` that are init fields of ``cls`` (a row may carry
    more columns than the record has fields)."""
    names = {f.name for f in fields(cls) if f.init}
    return {name: value for name, value in dict(mapping).items() if name in names}


@dataclass(frozen=True)
class ScheduleJobRecord:
    """CDAP's *job*: one firing of a schedule on its way to an engine job; every
    column of ``schedule_jobs``."""

    id: int
    schedule_id: int
    generation: int
    state: str
    fire_time: datetime | None
    notifications: list[Any]
    trigger_state: dict[str, Any]
    properties: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    deadline_at: datetime
    next_check_at: datetime | None
    launch_key: str | None
    job_id: int | None
    reason: str | None

    @classmethod
    def from_row(cls, mapping: Any) -> ScheduleJobRecord:
        return cls(**_values(cls, mapping))


@dataclass(frozen=True)
class EvaluationRecord:
    """One recorded decision about a schedule (fired, skipped, waited, aborted,
    launched) with its reason; every column of ``schedule_evaluations``."""

    id: int
    schedule_id: int
    schedule_job_id: int | None
    at: datetime
    outcome: str
    fire_time: datetime | None
    reason: str
    details: dict[str, Any]
    next_check_at: datetime | None

    @classmethod
    def from_row(cls, mapping: Any) -> EvaluationRecord:
        return cls(**_values(cls, mapping))


@dataclass(frozen=True)
class ScheduleRecord:
    """A schedule as stored. ``spec`` is the validated spec as JSON
    (:mod:`jobserver.schedules.spec`); ``pending`` is its newest schedule-job not yet
    launched nor aborted, when read with it (None otherwise, or when there is none)."""

    id: int
    namespace: str
    name: str
    generation: int
    spec: dict[str, Any]
    spec_hash: str
    enabled: bool
    next_check_at: datetime | None
    created_at: datetime
    updated_at: datetime
    enabled_at: datetime | None
    pending: ScheduleJobRecord | None = None
    #: Who last saved the template (its launches are charged to them), if known.
    owner: str | None = None
    owner_token_id: int | None = None

    @classmethod
    def from_row(cls, mapping: Any, pending: ScheduleJobRecord | None = None) -> ScheduleRecord:
        values = _values(cls, mapping)
        values["enabled"] = bool(values["enabled"])
        return cls(**values, pending=pending)

    @property
    def full_name(self) -> str:
        """``namespace/name``: how a schedule is named in messages and watches."""
        return f"{self.namespace}/{self.name}"
