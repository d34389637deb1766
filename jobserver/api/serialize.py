"""JSON shapes of API responses (documented in the OpenAPI document)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jobserver.store.not_running import NotRunning
from jobserver.store.records import (EventRecord, JobRecord, ServerRecord, StepRecord,
                                     actor_of)


def time_text(value: datetime | None) -> str | None:
    """A time as every route writes it: ISO 8601 in UTC with a ``Z``."""
    return value.isoformat().replace("+00:00", "Z") if value else None


_time = time_text


def step_json(step: StepRecord) -> dict[str, Any]:
    return {
        "name": step.name, "type": step.type, "state": step.state.value,
        "depends_on": step.depends_on, "spec": step.spec, "retries": step.retries,
        "retry_backoff": step.retry_backoff, "retryable": step.retryable,
        "attempt": step.attempt, "started_at": _time(step.started_at),
        "finished_at": _time(step.finished_at), "exit_code": step.exit_code,
        "output": step.output, "error": step.error, "wall_seconds": step.wall_seconds,
        "cpu_seconds": step.cpu_seconds, "peak_rss_kb": step.peak_rss_kb,
        "metrics": step.metrics,
    }


def job_json(job: JobRecord) -> dict[str, Any]:
    body = {
        "id": job.id, "name": job.name, "state": job.state.value, "priority": job.priority,
        "lock_key": job.lock_key, "assigned_servers": job.assigned_servers,
        "params": job.params, "parallelism": job.parallelism,
        "not_before": _time(job.not_before), "node": job.node, "fence": job.fence,
        "attempt": job.attempt, "error": job.error, "created_at": _time(job.created_at),
        "updated_at": _time(job.updated_at), "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "progress": {"done": job.steps_done, "total": job.steps_total},
        "inputs": job.inputs or [],
        "waiting_on": job.waiting_on,
        "submitted_by": actor_json(job.submitted_by, job.submitted_by_token_id),
    }
    if job.after is not None:
        body["after"] = [{"job": up.job, "when": up.when, "state": up.state.value,
                          "met": up.met} for up in job.after]
    if job.steps is not None:
        body["steps"] = [step_json(step) for step in job.steps]
    return body


def not_running_json(reason: NotRunning) -> dict[str, Any]:
    """Why a READY job is not running now: ``{"code", "reason", "details"}``."""
    return {"code": reason.code, "reason": reason.reason, "details": reason.details}


def actor_json(name: str | None, token_id: int | None) -> dict[str, Any] | None:
    """``{"name", "token_id"}`` of whoever asked (``token_id`` null for a config token,
    a planner or the system); null where nobody is recorded."""
    actor = actor_of(name, token_id)
    return None if actor is None else {"name": actor.name, "token_id": actor.token_id}


def event_json(event: EventRecord) -> dict[str, Any]:
    return {"id": event.id, "step": event.step, "from_state": event.from_state,
            "to_state": event.to_state, "node": event.node, "fence": event.fence,
            "attempt": event.attempt, "message": event.message, "at": _time(event.at),
            "actor": actor_json(event.actor, event.actor_token_id)}


def server_json(server: ServerRecord, alive: bool, role: str, state: str,
                running: int) -> dict[str, Any]:
    """A node as the cluster view shows it; whether it is ``alive``, its ``role``, its
    ``state`` and the jobs ``running`` on it are judged by the caller
    (``jobserver.api.cluster``)."""
    return {"id": server.id, "host": server.host, "pid": server.pid, "mode": server.mode,
            "role": role, "state": state,
            "alive": alive, "capacity": server.capacity, "running": running,
            "started_at": _time(server.started_at),
            "heartbeat_at": _time(server.heartbeat_at),
            "heartbeat_age_seconds": round(server.heartbeat_age, 3)}
