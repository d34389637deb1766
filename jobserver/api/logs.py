"""``GET /api/v1/jobs/<id>/steps/<name>/log``: a step attempt's full log, streamed.

The body is the log's bytes as the step wrote them (from ``?offset=`` on), read from
the store chunk by chunk, so any node serves any step's log, running or not. Two
headers tell a follower what it got: ``X-Log-Attempt`` (the attempt served; the
newest unless ``?attempt=``) and ``X-Log-Complete`` (``true`` when the attempt had
ended before the body was read: the body is then the whole rest of the log; ``false``
while it runs: ask again from the new offset).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobserver.api import api
from jobserver.api.jobs import JOB
from jobserver.exceptions import InvalidRequest, NotFound
from jobserver.spec import field_path
from jobserver.store import Store
from jobserver.store.logs import LogKey

blueprint = Blueprint("logs", __name__, url_prefix="/api/v1/jobs")

MAX_ATTEMPT = 2**31 - 1
MAX_OFFSET = 2**62


class LogQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int | None = Field(default=None, ge=1, le=MAX_ATTEMPT)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)


def _query() -> LogQuery:
    try:
        return LogQuery.model_validate(request.args.to_dict())
    except ValidationError as exc:
        details = [{"field": field_path(e["loc"]),
                    "message": "unknown query parameter" if e["type"] == "extra_forbidden"
                    else e["msg"]} for e in exc.errors()]
        raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details) from None


@blueprint.get(f"{JOB}/steps/<name>/log")
def step_log(job_id: int, name: str) -> ResponseReturnValue:
    query = _query()
    return log_response(api().store, job_id, name, query.attempt, query.offset)


def log_response(store: Store, job_id: int, name: str, attempt: int | None,
                 offset: int = 0) -> Response:
    """The log of step ``name``'s ``attempt`` (the newest if None) from ``offset``,
    streamed, with its ``X-Log-*`` headers (also the dashboard's log route)."""
    progress = store.step_logs.progress(job_id, name)
    attempt = attempt or progress.attempt
    where = {"job_id": job_id, "step": name, "attempt": attempt}
    if progress.attempt == 0:
        raise NotFound(f"step {name!r} of job {job_id} has not run yet", where)
    if attempt > progress.attempt:
        raise NotFound(f"step {name!r} of job {job_id} has no attempt {attempt} "
                       f"(its newest is {progress.attempt})", where)
    # Read before the body: an attempt that had ended then has all its chunks stored.
    complete = progress.complete(attempt)
    body = store.step_logs.read(LogKey(job_id, name, attempt), offset)
    return Response(body, content_type="text/plain; charset=utf-8", headers={
        "X-Log-Attempt": str(attempt), "X-Log-Complete": "true" if complete else "false"})


def paths() -> dict[str, Any]:
    """This route's part of the OpenAPI document."""
    from jobserver.api.openapi import errors, query_param
    from jobserver.spec import Name

    step_pattern = Name.__metadata__[0].pattern  # type: ignore[attr-defined]
    header = {"schema": {"type": "string"}, "required": True}
    return {"/api/v1/jobs/{job_id}/steps/{name}/log": {"get": {
        "summary": "A step attempt's full log, streamed (scope: read)",
        "operationId": "step_log",
        "parameters": [
            {"name": "job_id", "in": "path", "required": True,
             "schema": {"type": "integer", "minimum": 1}},
            {"name": "name", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": step_pattern}},
            query_param("attempt", {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPT}),
            query_param("offset", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET})],
        "responses": {
            "200": {"description": "the log's bytes from offset on, as the step wrote them "
                                   "(up to steps.log_limit_bytes, then a line saying how "
                                   "much was dropped)",
                    "headers": {"X-Log-Attempt": {**header, "description": "the attempt"},
                                "X-Log-Complete": {
                                    **header, "schema": {"enum": ["true", "false"]},
                                    "description": "false while the attempt runs: more "
                                                   "may follow from the new offset"}},
                    "content": {"text/plain": {"schema": {"type": "string"}}}},
            **errors(404, 422)}}}}
