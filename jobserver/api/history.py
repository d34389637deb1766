"""Who changed what: every request that changed something, recorded after it did, and
``GET /api/v1/changes`` to read them (scope ``read``).

One hook for every route (API and dashboard forms alike), so that a planner's route,
present or added later, is recorded without doing anything: a request is recorded when
its method changes something (or its route creates jobs: Schedoscope's ``GET``
materialize), it succeeded, and its reply does not say that nothing
changed (``dry_run``, ``plan``, ``change: unchanged``). Jobs are not recorded here:
their submits and operator actions are in their own trail (``job_events``), with the
same actor. A failure to record is logged and never fails the change it follows.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, g, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.auth import Cost, endpoint_costs
from jobserver.api.serialize import actor_json, time_text
from jobserver.api.requests import parse_query
from jobserver.exceptions import JobServerError
from jobserver.store.changes import MAX_PAGE, ChangeRecord
from jobserver.store.records import Actor

log = logging.getLogger(__name__)

blueprint = Blueprint("history", __name__, url_prefix="/api/v1")

CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Recorded elsewhere (a job's trail) or changing nothing but a browser's session.
NOT_RECORDED = frozenset({"jobs.submit", "bulk.submit_batch", "jobs.operate", "ui.operate",
                          "ui.sign_in_post", "ui.sign_out"})
#: Routes whose subject is a field of the request's body (or form), not its path:
#: recorded under their path followed by that value, so that the history says which
#: partitions a materialize or an invalidate addressed.
ADDRESSED_IN_BODY = {"views.materialize": "pattern", "views.invalidate": "pattern",
                     "ui.views_materialize": "pattern", "ui.views_invalidate": "pattern"}


def _actor() -> Actor | None:
    principal = getattr(g, "principal", None)
    if principal is None and request.blueprint == "ui":
        from jobserver.ui.session import visitor

        who = visitor()
        principal = None if who is None else who.principal
    return None if principal is None else principal.actor


def _outcome(response: Response) -> str | None:
    """What the reply says was done, or None when it says nothing changed."""
    if request.args.get("dry_run", "").lower() in ("1", "true", "yes"):
        return None
    reply: Any = response.get_json(silent=True) if response.is_json else None
    if isinstance(reply, dict):
        if reply.get("dry_run") is True or reply.get("plan") is True:
            return None
        change = reply.get("change")
        if change == "unchanged":
            return None
        if isinstance(change, str):
            return change
    return str(response.status_code)


def record_change(response: Response) -> Response:
    """The after-request hook: one ``changes`` row per recorded request."""
    endpoint = request.endpoint
    changing = request.method in CHANGES or endpoint_costs().get(endpoint or "") is Cost.PER_JOB
    if (not changing or endpoint is None or endpoint in NOT_RECORDED
            or response.status_code >= 400):
        return response
    actor, outcome = _actor(), _outcome(response)
    if actor is None or outcome is None:
        return response
    resource = _resource(response, endpoint)
    try:
        api().store.changes.record(actor, request.method, resource, endpoint, outcome)
    except JobServerError as exc:
        log.warning("%s %s by %s was not recorded in the change history: %s",
                    request.method, request.path, actor.name, exc)
    return response


def _resource(response: Response, endpoint: str) -> str:
    """What the request changed, as a path one ``?resource=`` read finds it under.

    What a request created is where its reply's ``Location`` says (``POST
    /api/v1/batches/run``: ``/api/v1/batches/runs/7``; ``POST /api/v1/schedules``:
    the schedule). A route in :data:`ADDRESSED_IN_BODY` adds its subject to its path.
    A dashboard form is recorded under the API path it mirrors
    (``/ui/schedules/ns/n/enable``: ``/api/v1/schedules/ns/n/enable``), so that one
    read of a resource shows the changes made either way."""
    location = response.headers.get("Location", "")
    if response.status_code == 201 and location.startswith("/api/v1/"):
        return location
    resource = request.path
    if request.blueprint == "ui" and resource.startswith("/ui/"):
        resource = "/api/v1/" + resource[len("/ui/"):]
    field = ADDRESSED_IN_BODY.get(endpoint)
    subject = _field(field) if field is not None else ""
    return f"{resource}/{subject.strip('/')}" if subject.strip("/") else resource


def _field(name: str) -> str:
    """A text field of the request's JSON body (already parsed by the route) or form."""
    body: Any = request.get_json(silent=True) if request.is_json else None
    value = body.get(name) if isinstance(body, dict) else request.form.get(name)
    return value.strip() if isinstance(value, str) else ""


class ChangesQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resource: str | None = Field(default=None, min_length=1, max_length=1000,
                                 pattern=r"^/[^\x00-\x1f]*$")
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    before: int | None = Field(default=None, ge=1, le=2 ** 63 - 1)


def change_json(change: ChangeRecord) -> dict[str, Any]:
    return {"id": change.id, "at": time_text(change.at),
            "actor": actor_json(change.actor.name, change.actor.token_id),
            "method": change.method, "resource": change.resource, "action": change.action,
            "outcome": change.outcome}


@blueprint.get("/changes")
def list_changes() -> ResponseReturnValue:
    """Newest first; ``resource`` narrows to a path and what lies under it
    (``/api/v1/schedules/default``)."""
    query = parse_query(ChangesQuery)
    found = api().store.changes.list(query.resource, query.limit, query.before)
    return {"changes": [change_json(change) for change in found],
            "next_before": found[-1].id if len(found) == query.limit else None}


def paths() -> dict[str, Any]:
    """This route's part of the OpenAPI document."""
    from jobserver.api.openapi import ACTOR, errors, exact, json_response, query_param

    change = exact({"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
                    "actor": ACTOR, "method": {"type": "string"},
                    "resource": {"type": "string"}, "action": {"type": "string"},
                    "outcome": {"type": "string"}})
    reply = exact({"changes": {"type": "array", "items": change},
                   "next_before": {"type": ["integer", "null"]}})
    return {"/api/v1/changes": {"get": {
        "summary": "Who changed which definition, and which planner actions they asked "
                   "for, newest first (scope: read)",
        "operationId": "list_changes",
        "parameters": [
            query_param("resource", {"type": "string", "minLength": 1, "maxLength": 1000,
                                     "pattern": r"^/[^\x00-\x1f]*$"}),
            query_param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}),
            query_param("before", {"type": "integer", "minimum": 1,
                                   "maximum": 2 ** 63 - 1})],
        "responses": {"200": json_response(reply, "the changes"), **errors(422)}}}}
