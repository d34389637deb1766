"""``POST /api/v1/jobs/batch``: up to 1,000 jobs in one request, all or nothing.

The body is ``{"jobs": [job, ...]}``, each item a job body as ``POST /api/v1/jobs``
takes it plus an optional ``idempotency_key`` (the single submit's header, per
item). Every item is checked as the single submit checks its body, and an error
names ``jobs[i].<field>``; a key used before with the same request replays that job
(``created`` false), with a different one it is a 409 and nothing is stored. The
answer lists ``{"id", "created"}`` per item in request order: 201 when the batch
created a job, 200 when every item was a replay. Each item counts against the
token's submit rate; the store writes the batch at once (:mod:`jobserver.store.intake`).

An ``after`` names jobs that exist already: the ids of this batch's own jobs are
not known to the client when it sends it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flask import Blueprint, g, request
from flask.typing import ResponseReturnValue
from pydantic import Field

from jobserver.api import api
from jobserver.api.auth import check_step_types
from jobserver.api.jobs import check_inputs
from jobserver.api.requests import body_limit
from jobserver.exceptions import Forbidden, InvalidRequest, JobServerError
from jobserver.spec import JobSpec, StrictModel, job_problem, parse_model, refuse, validate_job
from jobserver.store.intake import MAX_BATCH, BatchItem

blueprint = Blueprint("bulk", __name__, url_prefix="/api/v1/jobs")

#: A batch's body may be larger than a single submit's (``api.max_body_bytes``).
MAX_BATCH_BODY_BYTES = 16 << 20
#: The single submit's ``Idempotency-Key`` header: 1 to 200 printable ASCII characters.
KEY_PATTERN = r"^[\x21-\x7e]{1,200}$"


class BatchJob(JobSpec):
    """A job of a batch: a job body with its own optional idempotency key."""

    idempotency_key: str | None = Field(default=None, pattern=KEY_PATTERN, description=(
        "as the single submit's Idempotency-Key header: the same key with the same job "
        "returns the first job; with another job, the batch is a 409"))


class BatchRequest(StrictModel):
    """The body of ``POST /api/v1/jobs/batch``."""

    jobs: list[BatchJob] = Field(min_length=1, max_length=MAX_BATCH)


@blueprint.post("/batch")
@body_limit(MAX_BATCH_BODY_BYTES)
def submit_batch() -> ResponseReturnValue:
    ctx = api()
    if not request.is_json:
        raise InvalidRequest("Content-Type must be application/json",
                             [{"field": "Content-Type", "message": "expected application/json"}])
    batch = parse_model(BatchRequest, request.get_data(cache=False), job_problem)
    ctx.limiter.check(g.principal, cost=len(batch.jobs))
    items = _checked(batch.jobs)
    submitted = ctx.store.jobs.submit_batch(items)
    created = sum(1 for job in submitted if job.created)
    if created:
        ctx.metrics.submitted.inc(created)
    return ({"jobs": [{"id": job.id, "created": job.created} for job in submitted]},
            201 if created else 200)


def _checked(jobs: list[BatchJob]) -> list[BatchItem]:
    """Each job checked as ``POST /api/v1/jobs`` checks its body; one
    :class:`InvalidRequest` naming every bad ``jobs[i].<field>``, or the first item's
    :class:`Forbidden` (a step type outside the token's scopes)."""
    problems: list[dict[str, Any]] = []
    items: list[BatchItem] = []
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        key = job.idempotency_key
        if key is not None and key in seen:
            problems.append({"field": f"jobs[{index}].idempotency_key",
                             "message": f"repeats the key of jobs[{seen[key]}]"})
        elif key is not None:
            seen[key] = index
        try:
            items.append(_item(job))
        except Forbidden as exc:
            raise Forbidden(_prefixed_message(exc, index), _prefixed(exc.details, index)) \
                from None
        except InvalidRequest as exc:
            problems += _prefixed(exc.details, index)
    refuse(problems)
    return items


def _item(job: BatchJob) -> BatchItem:
    check_step_types(g.principal, job)
    ctx = api()
    dependencies = validate_job(job, ctx.policy)
    check_inputs(ctx.store, job.inputs)  # a read of the store, only for jobs with inputs
    key = job.idempotency_key
    # The single submit's digest of the same job, so that a key first used there
    # replays here and the other way round.
    digest = None if key is None else hashlib.sha256(json.dumps(
        job.model_dump(mode="json", exclude={"idempotency_key"}),
        sort_keys=True).encode()).hexdigest()
    return BatchItem(job, dependencies, key, digest, g.principal.actor)


def _prefixed(details: Any, index: int) -> list[dict[str, Any]]:
    """A job's error details (``[{"field": "steps[0].argv", ...}]``) as its batch
    item's (``jobs[3].steps[0].argv``)."""
    entries = details if isinstance(details, list) else [details or {}]
    return [dict(entry, field=f"jobs[{index}].{entry['field']}" if entry.get("field")
                 else f"jobs[{index}]") for entry in entries]


def _prefixed_message(exc: JobServerError, index: int) -> str:
    return f"jobs[{index}].{exc.message}"


def paths() -> dict[str, Any]:
    """This route in the OpenAPI document (:mod:`jobserver.api.openapi`)."""
    from jobserver.api.openapi import errors, exact, json_response, ref

    answer = exact({"jobs": {"type": "array", "items": exact({
        "id": {"type": "integer", "minimum": 1},
        "created": {"type": "boolean"}})}})
    return {"/api/v1/jobs/batch": {"post": {
        "summary": "Submit up to 1,000 jobs at once, all or nothing (scope: submit; shell "
                   "steps also: shell; sql steps also: sql)",
        "description": (
            "Each item is a job body plus an optional idempotency_key, checked as "
            "POST /api/v1/jobs checks its body; errors name jobs[i].<field>. Each job "
            "counts against api.submit_rate; a batch larger than api.submit_burst is "
            "always a 429. The answer lists each item's job id (its URL is "
            "/api/v1/jobs/{id}) and whether this request created it, in request order. "
            "An after names existing jobs only. The body may be up to 16 MiB."),
        "operationId": "submit_batch",
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": ref("BatchRequest")}}},
        "responses": {
            "201": json_response(answer, "stored; at least one job was created"),
            "200": json_response(answer, "every item replayed an earlier submit"),
            **errors(400, 409, 413, 422, 429)}}}}
