"""The fence check: is a job's claim under a fence (and attempt) still current?

A step calls it before an effect outside the job server (``jobserver fence-check``
does, with the ``JOBSERVER_*`` variables of its step); see docs/jobs.md, "Guarding
outside effects". One read of the job's row by its primary key.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.requests import MAX_ID, parse_query
from jobserver.exceptions import InvalidRequest

blueprint = Blueprint("fences", __name__, url_prefix="/api/v1/jobs")

#: A fence in a path: a non-negative BIGINT in plain decimal.
FENCE = re.compile(r"^(0|[1-9][0-9]{0,18})$")


class FenceQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int | None = Field(default=None, ge=0, le=MAX_ID)


@blueprint.get(f"/<int(max={MAX_ID}):job_id>/fence/<fence>")
def check_fence(job_id: int, fence: str) -> ResponseReturnValue:
    """``{"current", "job", "fence", "attempt", "state", "claim"}``: current iff the
    job is RUNNING under ``fence`` (and ``?attempt=`` when given) in the store now."""
    if not FENCE.match(fence) or int(fence) > MAX_ID:
        raise InvalidRequest(f"fence: {fence!r} is not a fence (a non-negative integer)",
                             [{"field": "fence", "message": "expected a non-negative integer"}])
    query = parse_query(FenceQuery)
    return api().store.fences.check(job_id, int(fence), query.attempt).as_json()


def paths() -> dict[str, Any]:
    """This route in the OpenAPI document (:mod:`jobserver.api.openapi`)."""
    from jobserver.api.openapi import STATES, errors, exact, json_response, query_param

    integer = {"type": "integer", "minimum": 0}
    answer = exact({
        "current": {"type": "boolean"}, "job": {"type": "integer"}, "fence": integer,
        "attempt": {"type": ["integer", "null"]},
        "state": {"enum": STATES},
        "claim": exact({"node": {"type": ["string", "null"]}, "fence": integer,
                        "attempt": integer})})
    return {"/api/v1/jobs/{job_id}/fence/{fence}": {"get": {
        "summary": "Whether the job's claim under this fence (and attempt) is current "
                   "(scope: fence, or read)",
        "operationId": "check_fence",
        "parameters": [
            {"name": "job_id", "in": "path", "required": True,
             "schema": {"type": "integer", "minimum": 1}},
            {"name": "fence", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": FENCE.pattern}},
            query_param("attempt", {"type": "integer", "minimum": 0,
                                    "maximum": MAX_ID})],
        "responses": {"200": json_response(answer, "current: RUNNING under this fence "
                                                   "(and attempt) now; the job's claim"),
                      **errors(404, 422)}}}}
