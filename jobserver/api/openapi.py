"""``GET /api/v1/openapi.json``: the OpenAPI 3.1 document of this API.

Request schemas come from the same pydantic models that validate requests, so the
document cannot drift from what the server accepts.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

from flask import Blueprint
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from jobserver import __version__
from jobserver.names import IDENT
from jobserver.spec import JobSpec
from jobserver.states import State
from jobserver.store.not_running import CODES as NOT_RUNNING_CODES

blueprint = Blueprint("openapi", __name__, url_prefix="/api/v1")

REF = "#/components/schemas/{model}"
STATES = [state.value for state in State]
_nullable_str = {"type": ["string", "null"]}
_time = {"type": ["string", "null"], "format": "date-time"}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def exact(properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object with exactly these properties (all required but ``optional``), so that
    the schemathesis run in CI checks every response field, not just some."""
    return {"type": "object", "properties": properties,
            "required": [name for name in properties if name not in optional],
            "additionalProperties": False}


STEP = exact({
    "name": {"type": "string"}, "type": {"type": "string"},
    "state": {"enum": STATES}, "depends_on": {"type": "array", "items": {"type": "string"}},
    "spec": {"type": "object"}, "retries": {"type": "integer"},
    "retry_backoff": {"type": "number"}, "retryable": {"type": "boolean"},
    "attempt": {"type": "integer"}, "started_at": _time, "finished_at": _time,
    "exit_code": {"type": ["integer", "null"]}, "output": _nullable_str, "error": _nullable_str,
    "wall_seconds": {"type": ["number", "null"]}, "cpu_seconds": {"type": ["number", "null"]},
    "peak_rss_kb": {"type": ["integer", "null"]}, "metrics": {"type": ["object", "null"]}})

#: Who asked (a token, a planner, "system"): null where nobody is recorded.
ACTOR = {"oneOf": [{"type": "null"}, exact({
    "name": {"type": "string"}, "token_id": {"type": ["integer", "null"]}})]}

NOT_RUNNING = exact({
    "code": {"enum": list(NOT_RUNNING_CODES)}, "reason": {"type": "string"},
    "details": {"type": "object"}})

JOB = exact({
    "id": {"type": "integer"}, "name": {"type": "string"}, "state": {"enum": STATES},
    "priority": {"type": "integer"}, "lock_key": _nullable_str,
    "assigned_servers": {"type": ["array", "null"], "items": {"type": "string"}},
    "params": {"type": "object"}, "parallelism": {"type": "integer"}, "not_before": _time,
    "node": _nullable_str, "fence": {"type": "integer"}, "attempt": {"type": "integer"},
    "error": _nullable_str, "created_at": _time, "updated_at": _time, "started_at": _time,
    "finished_at": _time,
    "progress": exact({"done": {"type": "integer"}, "total": {"type": "integer"}}),
    "inputs": {"type": "array", "items": {"type": "object"}},
    "waiting_on": {"type": "integer", "minimum": 0},
    "submitted_by": ACTOR,
    # GET of one READY job: why no node runs it now.
    "not_running": NOT_RUNNING,
    "after": {"type": "array", "items": exact({
        "job": {"type": "integer"}, "when": {"enum": ["done", "succeeded"]},
        "state": {"enum": STATES}, "met": {"type": "boolean"}})},
    "steps": {"type": "array", "items": ref("Step")}},
    optional=("steps", "after", "not_running"))  # lists leave these out

EVENT = exact({
    "id": {"type": "integer"}, "step": _nullable_str, "from_state": _nullable_str,
    "to_state": {"type": "string"}, "node": _nullable_str,
    "fence": {"type": ["integer", "null"]}, "attempt": {"type": ["integer", "null"]},
    "message": _nullable_str, "at": _time, "actor": ACTOR})

NODE = exact({
    "id": {"type": "string"}, "host": {"type": "string"}, "pid": {"type": "integer"},
    "mode": {"type": "string"},
    "role": {"type": "string", "description": "active (the node `active` names), standby "
             "(single and leader modes), the role it recorded (distributed), none (not "
             "alive)"},
    "state": {"enum": ["alive", "stopped", "dead"], "description": "alive while `alive` "
              "is true; else stopped (it stopped cleanly) or dead"},
    "alive": {"type": "boolean", "description": "registered, heartbeat younger than "
              "server.dead_after, and its presence lock not known free"},
    "capacity": {"type": "integer"},
    "running": {"type": "integer", "description": "jobs running on the node: its last "
                "heartbeat's count while alive, else the jobs the store has RUNNING on "
                "it now (none once they are rescued)"},
    "started_at": _time, "heartbeat_at": _time,
    "heartbeat_age_seconds": {"type": "number"}})

ERROR = exact({"error": exact({
    "code": {"type": "string"}, "message": {"type": "string"}, "details": {}})})


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_HEADER_TEXT = {"type": "string"}
_ERROR_TEXT = {
    400: "malformed request: the body is not JSON, or nests deeper than 100 levels",
    401: "missing, unknown, revoked or expired token",
    403: "the token lacks the route's scope (details name it), or the 'shell' or 'sql' "
         "scope for a job with shell or sql steps",
    404: "no such job, schedule, dataset or partition (or no route matches the path)",
    409: "conflict (illegal transition, idempotency key reuse, a schedule, dataset or "
         "partition that exists, a key change of a dataset with partitions)",
    413: "body larger than api.max_body_bytes", 422: "invalid request; details name the fields",
    429: "the token submits faster than api.submit_rate; retry after Retry-After seconds"}
_ERROR_HEADERS = {
    401: {"WWW-Authenticate": {"schema": _HEADER_TEXT, "required": True}},
    429: {"Retry-After": {"description": "whole seconds, at least 1", "required": True,
                          "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"}}}}


def errors(*codes: int) -> dict[str, Any]:
    responses = {}
    for code in sorted({401, 403, *codes}):  # every route but /healthz needs a token
        responses[str(code)] = json_response(ref("Error"), _ERROR_TEXT[code])
        if code in _ERROR_HEADERS:
            responses[str(code)]["headers"] = _ERROR_HEADERS[code]
    return responses


def _job_links() -> dict[str, Any]:
    """Where a returned job leads: its page, its events and the operator actions
    (schemathesis' stateful phase follows these)."""
    job_id = {"job_id": "$response.body#/id"}
    return {name: {"operationId": operation, "parameters": job_id}
            for name, operation in (("GetJob", "get_job"), ("JobEvents", "job_events"),
                                    ("PauseJob", "pause_job"), ("ResumeJob", "resume_job"),
                                    ("RerunJob", "rerun_job"), ("DiscardJob", "discard_job"))}


def _job_response(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response = {**json_response(ref("Job"), description), "links": _job_links()}
    if headers:
        response["headers"] = headers
    return response


def _job_id() -> dict[str, Any]:
    return {"name": "job_id", "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 1}}


def query_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def named_params() -> list[dict[str, Any]]:
    """The ``{namespace}`` and ``{name}`` of a planner resource's path."""
    schema = {"type": "string", "pattern": f"^{IDENT}$"}
    return [{"name": name, "in": "path", "required": True, "schema": schema}
            for name in ("namespace", "name")]


def named_links(operations: list[tuple[str, str]]) -> dict[str, Any]:
    """Links from a returned planner resource (its ``namespace`` and ``name``) to the
    ``(link name, operationId)`` pairs; schemathesis' stateful phase follows them."""
    parameters = {"namespace": "$response.body#/namespace", "name": "$response.body#/name"}
    return {name: {"operationId": operation, "parameters": parameters}
            for name, operation in operations}


def put_body(schema: dict[str, Any]) -> dict[str, Any]:
    """A resource's spec schema as a PUT body: namespace and name come from the URL."""
    put = copy.deepcopy(schema)
    put["required"] = [name for name in put.get("required", [])
                       if name not in ("namespace", "name")]
    put["description"] = ("namespace and name default to the URL's; when given, they must "
                          "be the URL's")
    return put


def _paths() -> dict[str, Any]:
    operations: dict[str, Any] = {
        f"/api/v1/jobs/{{job_id}}/{action}": {"post": {
            "summary": f"{action.capitalize()} a job (scope: operate)",
            "operationId": f"{action}_job", "parameters": [_job_id()],
            "requestBody": {"required": False, "description": "nothing, or {}", "content": {
                "application/json": {"schema": {"type": "object", "maxProperties": 0}}}},
            "responses": {"200": _job_response("the job after the change"),
                          **errors(404, 409, 413, 422)}}}
        for action in ("pause", "resume", "rerun", "discard")}
    return {
        "/healthz": {"get": {"summary": "Liveness", "operationId": "healthz", "security": [],
                             "responses": {
                                 "200": json_response(exact({"status": {"const": "ok"}}),
                                                      "healthy"),
                                 "503": json_response(ref("Error"),
                                                      "store unreachable, or the node "
                                                      "is stopping after a failure")}}},
        "/api/v1/jobs": {
            "post": {"summary": "Submit a job (scope: submit; shell steps also: shell; sql steps also: sql)",
                     "operationId": "submit_job",
                     "parameters": [{"name": "Idempotency-Key", "in": "header",
                                     "required": False,
                                     "schema": {"type": "string", "minLength": 1,
                                                "maxLength": 200,
                                                "pattern": "^[\\x21-\\x7e]{1,200}$"}}],
                     "requestBody": {"required": True, "content": {
                         "application/json": {"schema": ref("JobSpec")}}},
                     "responses": {
                         "201": _job_response("created", {"Location": {
                             "schema": _HEADER_TEXT, "required": True}}),
                         "200": _job_response("replayed idempotent submit", {
                             "Location": {"schema": _HEADER_TEXT, "required": True},
                             "Idempotent-Replayed": {"schema": {"const": "true"},
                                                     "required": True}}),
                         **errors(400, 409, 413, 422, 429)}},
            "get": {"summary": "List jobs, newest first (scope: read)",
                    "operationId": "list_jobs",
                    "parameters": [query_param("state", {"enum": STATES}),
                                   query_param("name", {"type": "string", "maxLength": 200,
                                                        "pattern": "^[^\\x00]*$"}),
                                   query_param("name_contains", {
                                       "type": "string", "minLength": 1, "maxLength": 200,
                                       "pattern": "^[^\\x00]*$",
                                       "description": "jobs whose name holds this text, any "
                                                      "case (% and _ match themselves)"}),
                                   query_param("limit", {"type": "integer", "minimum": 1,
                                                         "maximum": 500}),
                                   query_param("cursor", {"type": "string",
                                                          "pattern": "^[1-9][0-9]{0,18}$"})],
                    "responses": {"200": json_response(exact({
                        "jobs": {"type": "array", "items": ref("Job")},
                        "next_cursor": _nullable_str}), "a page of jobs"),
                        **errors(422)}}},
        "/api/v1/jobs/{job_id}": {"get": {
            "summary": "A job with its steps; a READY one with why it is not running "
                       "(not_running) (scope: read)", "operationId": "get_job",
            "parameters": [_job_id()],
            "responses": {"200": _job_response("the job"), **errors(404)}}},
        "/api/v1/jobs/{job_id}/events": {"get": {
            "summary": "The job's audit trail (scope: read)", "operationId": "job_events",
            "parameters": [_job_id()],
            "responses": {"200": json_response(exact({
                "events": {"type": "array", "items": ref("Event")}}), "events, oldest first"),
                **errors(404)}}},
        **operations,
        "/api/v1/cluster": {"get": {
            "summary": "Mode, lock backend, nodes (scope: read)", "operationId": "cluster",
            "responses": {"200": json_response(exact({
                "mode": {"type": "string"}, "lock_backend": {"type": "string"},
                "active": {**_nullable_str, "description": "the one live node holding "
                           "the mode's scheduling lock; null in distributed mode or "
                           "between a holder's death and its successor"},
                "planner": {"oneOf": [{"type": "null"}, exact({
                    "node": {"type": "string"}, "since": _time})],
                    "description": "the live node whose planner loops (schedules, "
                    "retention) act, and since when: the active node in single and "
                    "leader mode, the planner lock's holder in distributed mode; null "
                    "between a holder's death and its successor"},
                "nodes": {"type": "array", "items": ref("Node")},
                "jobs": {"type": "object", "propertyNames": {"enum": STATES},
                         "additionalProperties": {"type": "integer"}}}), "cluster state"),
                **errors()}}},
        "/metrics": {"get": {
            "summary": "Prometheus metrics of this node (scope: read)", "operationId": "metrics",
            "responses": {"200": {"description": "Prometheus text exposition",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          **errors()}}},
        "/api/v1/openapi.json": {"get": {
            "summary": "This document (scope: read)", "operationId": "openapi",
            "responses": {"200": json_response({"type": "object"}, "OpenAPI 3.1"), **errors()}}},
    }


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    # Imported here: the planners' parts of the document are built from this module's
    # helpers.
    from jobserver.api import bulk, fences, history, logs
    from jobserver.planners import installed

    parts = [part for planner in installed() for part in planner.openapi()]
    models: list[type[BaseModel]] = [JobSpec, bulk.BatchRequest,
                                     *(model for part in parts for model in part.models)]
    _, schemas = models_json_schema([(model, "validation") for model in models],
                                    ref_template=REF)
    components = dict(schemas.get("$defs", {}))
    components.update(Step=STEP, Job=JOB, Event=EVENT, Node=NODE, Error=ERROR)
    paths = {**_paths(), **bulk.paths(), **fences.paths(), **logs.paths(), **history.paths()}
    for part in parts:
        components.update(part.schemas(components))
        paths.update(part.paths())
    return {
        "openapi": "3.1.0",
        "info": {"title": "jobserver", "version": __version__, "description": (
            "Every response carries an X-Jobserver-Node header: the server.id of the "
            "node that gave it (nodes may share one address).")},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": (
                "A token from api.tokens (every scope) or from `jobserver token create` "
                "with scopes: read (GET routes), fence (only the fence check, which read "
                "includes), submit (jobs; creating and updating "
                "schedules and datasets; adding partitions), shell (jobs and schedule "
                "templates with shell steps, with submit), sql (likewise for sql steps), "
                "operate (pause, resume, rerun, "
                "discard; enabling, disabling and deleting schedules; deleting datasets "
                "and partitions; deleting view definitions, invalidating views), admin. "
                "Saving view definitions and materializing need submit.")}}},
        "security": [{"bearer": []}],
    }


@blueprint.get("/openapi.json")
def openapi_json() -> dict[str, Any]:
    return document()
