"""Job routes: submit, read, list, events and operator actions."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from flask import Blueprint, g, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobserver.api import api
from jobserver.api.auth import check_step_types
from jobserver.api.serialize import event_json, job_json, not_running_json
from jobserver.exceptions import InvalidRequest
from jobserver.spec import field_path, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.store import Store
from jobserver.store.jobs import MAX_PAGE

blueprint = Blueprint("jobs", __name__, url_prefix="/api/v1/jobs")

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
MAX_ID = 2**63 - 1  # ids are BIGINT; larger numbers in a path or cursor match nothing
JOB = f"/<int(max={MAX_ID}):job_id>"


class ListQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: State | None = None
    name: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    name_contains: str | None = Field(default=None, min_length=1, max_length=200,
                                      pattern=r"^[^\x00]*$")
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    cursor: str | None = Field(default=None, pattern=r"^[1-9][0-9]{0,18}$")


def _require_json() -> bytes:
    if not request.is_json:
        raise InvalidRequest("Content-Type must be application/json",
                             [{"field": "Content-Type", "message": "expected application/json"}])
    return request.get_data(cache=False)


def _idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise InvalidRequest("Idempotency-Key must be 1-200 printable ASCII characters",
                             [{"field": "Idempotency-Key", "message": "invalid header value"}])
    return key


def check_inputs(store: Store, inputs: list[Any] | None) -> None:
    """A submitted job's ``inputs`` against the store, before it is stored, by the
    installed planner that takes job inputs (:meth:`JobInputs.check
    <jobserver.planners.hooks.JobInputs.check>`): a 422 naming ``inputs[i].<field>``.
    A job without inputs costs nothing; one with inputs when no installed planner
    takes them is refused naming ``inputs``, as it could never run."""
    if not inputs:
        return
    taker = store.hooks.inputs
    if taker is None:
        message = "no installed planner takes job inputs"
        raise InvalidRequest(f"inputs: {message}", [{"field": "inputs", "message": message}])
    taker.check(inputs)


@blueprint.post("")
def submit() -> ResponseReturnValue:
    ctx = api()
    ctx.limiter.check(g.principal)
    key = _idempotency_key()
    spec = parse_job(_require_json())
    check_step_types(g.principal, spec)
    dependencies = validate_job(spec, ctx.policy)
    check_inputs(ctx.store, spec.inputs)
    # The request's digest tells a retry from a different request under the same key;
    # without a key there is nothing to compare it with.
    digest = None if key is None else hashlib.sha256(
        json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
    job, created = ctx.store.jobs.submit(spec, dependencies, key, digest, g.principal.actor)
    headers = {"Location": f"/api/v1/jobs/{job.id}"}
    if created:
        ctx.metrics.submitted.inc()
    else:
        headers["Idempotent-Replayed"] = "true"
    return job_json(job), 201 if created else 200, headers


@blueprint.get("")
def list_jobs() -> ResponseReturnValue:
    try:
        query = ListQuery.model_validate(request.args.to_dict())
    except ValidationError as exc:
        details = [{"field": field_path(e["loc"]),
                    "message": "unknown query parameter" if e["type"] == "extra_forbidden"
                    else e["msg"]} for e in exc.errors()]
        raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details) from None
    before = min(int(query.cursor), MAX_ID) if query.cursor else None
    jobs, next_id = api().store.jobs.list(query.state, query.name, query.limit, before,
                                          query.name_contains)
    return {"jobs": [job_json(job) for job in jobs],
            "next_cursor": str(next_id) if next_id else None}


@blueprint.get(JOB)
def get_job(job_id: int) -> ResponseReturnValue:
    ctx = api()
    job = ctx.store.jobs.get(job_id)
    body = job_json(job)
    if job.state is State.READY:  # read on request: a few short reads, one job
        body["not_running"] = not_running_json(ctx.store.jobs.not_running(
            job, ctx.config.scheduler.mode.value, ctx.config.server.dead_after))
    return body


@blueprint.get(f"{JOB}/events")
def job_events(job_id: int) -> ResponseReturnValue:
    store = api().store
    store.jobs.get(job_id, with_steps=False)  # 404 for an unknown job
    return {"events": [event_json(event) for event in store.jobs.events(job_id)]}


@blueprint.post(f"{JOB}/<any(pause, resume, rerun, discard):action>")
def operate(job_id: int, action: str) -> ResponseReturnValue:
    body = request.get_data(cache=False)
    if body.strip() not in (b"", b"{}"):
        raise InvalidRequest(f"{action} takes no request body",
                             [{"field": "body", "message": "must be empty or {}"}])
    return job_json(api().store.jobs.apply(job_id, Operation(action), g.principal.actor))
