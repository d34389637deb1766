"""JSON shapes of the schedule routes' responses (documented in
:mod:`jobserver.schedules.openapi`)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from jobserver.api.serialize import actor_json
from jobserver.schedules.catalog import utcnow
from jobserver.schedules.records import EvaluationRecord, ScheduleJobRecord, ScheduleRecord
from jobserver.exceptions import JobServerError
from jobserver.schedules.spec import ScheduleSpec, TimeTrigger, leaves, load_spec
from jobserver.schedules.words import trigger_words

log = logging.getLogger(__name__)


def _time(value: datetime | None) -> str | None:
    """As the job routes write times: ISO 8601 in UTC with a ``Z``."""
    return value.isoformat().replace("+00:00", "Z") if value else None


def schedule_json(schedule: ScheduleRecord) -> dict[str, Any]:
    spec = stored_spec(schedule)
    return {
        "namespace": schedule.namespace, "name": schedule.name, "id": schedule.id,
        "generation": schedule.generation, "enabled": schedule.enabled,
        "spec": schedule.spec, "spec_hash": schedule.spec_hash,
        "trigger_text": _trigger_text(spec),
        "next_fire_time": _time(next_fire_time(schedule, spec)),
        "next_check_at": _time(schedule.next_check_at),
        "created_at": _time(schedule.created_at), "updated_at": _time(schedule.updated_at),
        "enabled_at": _time(schedule.enabled_at),
        "owner": actor_json(schedule.owner, schedule.owner_token_id),
        "pending": None if schedule.pending is None else schedule_job_json(schedule.pending),
    }


def schedule_job_json(job: ScheduleJobRecord) -> dict[str, Any]:
    return {
        "id": job.id, "generation": job.generation, "state": job.state,
        "fire_time": _time(job.fire_time), "notifications": job.notifications,
        "properties": job.properties, "created_at": _time(job.created_at),
        "updated_at": _time(job.updated_at), "deadline_at": _time(job.deadline_at),
        "next_check_at": _time(job.next_check_at), "launch_key": job.launch_key,
        "job_id": job.job_id, "reason": job.reason,
    }


def evaluation_json(evaluation: EvaluationRecord) -> dict[str, Any]:
    return {
        "id": evaluation.id, "schedule_job_id": evaluation.schedule_job_id,
        "at": _time(evaluation.at), "outcome": evaluation.outcome,
        "fire_time": _time(evaluation.fire_time), "reason": evaluation.reason,
        "details": evaluation.details, "next_check_at": _time(evaluation.next_check_at),
    }


def next_fire_time(schedule: ScheduleRecord, spec: ScheduleSpec | None,
                   now: datetime | None = None) -> datetime | None:
    """The earliest next fire time of the schedule's time triggers, counted from
    when it was enabled; None while disabled or without a time trigger."""
    if spec is None or not schedule.enabled:
        return None
    from jobserver.schedules.timing import FireTimes

    now = now or utcnow()
    anchor = schedule.enabled_at or schedule.created_at
    try:
        times = [FireTimes.of(leaf, anchor).next_after(now)
                 for _, leaf in leaves(spec.trigger) if isinstance(leaf, TimeTrigger)]
    except JobServerError as exc:  # fire times that stopped advancing: shown as none
        log.warning("schedule %s: no next fire time: %s", schedule.full_name, exc.message)
        return None
    return min((time for time in times if time is not None), default=None)


def stored_spec(schedule: ScheduleRecord) -> ScheduleSpec | None:
    """The stored spec as a model again. One that no longer validates (a time zone
    dropped from the system's database) is shown without its derived fields."""
    try:
        return load_spec(schedule.spec)
    except ValidationError as exc:
        log.warning("schedule %s: the stored spec no longer validates: %s",
                    schedule.full_name, exc)
        return None


def _trigger_text(spec: ScheduleSpec | None) -> str | None:
    if spec is None:
        return None
    return trigger_words(spec.trigger)
