"""``GET /api/v1/openapi.json``: the OpenAPI 3.1 document of this API.

Request schemas come from the same pydantic models that validate requests, so the
document cannot drift from what the server accepts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from flask import Blueprint
from pydantic.json_schema import models_json_schema

from jobserver import __version__
from jobserver.spec import JobSpec
from jobserver.states import State

blueprint = Blueprint("openapi", __name__, url_prefix="/api/v1")

REF = "#/components/schemas/{model}"
STATES = [state.value for state in State]
_nullable_str = {"type": ["string", "null"]}
_time = {"type": ["string", "null"], "format": "date-time"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


STEP = {"type": "object", "properties": {
    "name": {"type": "string"}, "type": {"type": "string"},
    "state": {"enum": STATES}, "depends_on": {"type": "array", "items": {"type": "string"}},
    "spec": {"type": "object"}, "retries": {"type": "integer"},
    "retry_backoff": {"type": "number"}, "retryable": {"type": "boolean"},
    "attempt": {"type": "integer"}, "started_at": _time, "finished_at": _time,
    "exit_code": {"type": ["integer", "null"]}, "output": _nullable_str, "error": _nullable_str,
    "wall_seconds": {"type": ["number", "null"]}, "cpu_seconds": {"type": ["number", "null"]},
    "peak_rss_kb": {"type": ["integer", "null"]}, "metrics": {"type": ["object", "null"]}},
    "required": ["name", "type", "state", "attempt"]}

JOB = {"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "state": {"enum": STATES},
    "priority": {"type": "integer"}, "lock_key": _nullable_str,
    "assigned_servers": {"type": ["array", "null"], "items": {"type": "string"}},
    "params": {"type": "object"}, "parallelism": {"type": "integer"}, "not_before": _time,
    "node": _nullable_str, "fence": {"type": "integer"}, "attempt": {"type": "integer"},
    "error": _nullable_str, "created_at": _time, "updated_at": _time, "started_at": _time,
    "finished_at": _time,
    "progress": {"type": "object", "properties": {"done": {"type": "integer"},
                                                   "total": {"type": "integer"}}},
    "steps": {"type": "array", "items": _ref("Step")}},
    "required": ["id", "name", "state", "priority", "attempt", "fence", "progress"]}

EVENT = {"type": "object", "properties": {
    "id": {"type": "integer"}, "step": _nullable_str, "from_state": _nullable_str,
    "to_state": {"type": "string"}, "node": _nullable_str,
    "fence": {"type": ["integer", "null"]}, "attempt": {"type": ["integer", "null"]},
    "message": _nullable_str, "at": _time}, "required": ["id", "to_state", "at"]}

NODE = {"type": "object", "properties": {
    "id": {"type": "string"}, "host": {"type": "string"}, "pid": {"type": "integer"},
    "mode": {"type": "string"}, "role": {"type": "string"}, "state": {"type": "string"},
    "alive": {"type": "boolean"}, "capacity": {"type": "integer"},
    "running": {"type": "integer"}, "started_at": _time, "heartbeat_at": _time,
    "heartbeat_age_seconds": {"type": "number"}},
    "required": ["id", "alive", "role", "heartbeat_age_seconds"]}

ERROR = {"type": "object", "properties": {"error": {"type": "object", "properties": {
    "code": {"type": "string"}, "message": {"type": "string"}, "details": {}},
    "required": ["code", "message"]}}, "required": ["error"]}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "bad request", 401: "missing or invalid token", 404: "no such job",
            409: "conflict (illegal transition, idempotency key reuse)",
            413: "body too large", 422: "invalid request; details name the fields"}
    return {str(code): _json(_ref("Error"), text[code]) for code in codes}


def _job_id() -> dict[str, Any]:
    return {"name": "job_id", "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 1}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _paths() -> dict[str, Any]:
    operations = {
        f"/api/v1/jobs/{{job_id}}/{action}": {"post": {
            "summary": f"{action.capitalize()} a job", "operationId": f"{action}_job",
            "parameters": [_job_id()],
            "responses": {"200": _json(_ref("Job"), "the job after the change"),
                          **_errors(400, 401, 404, 409, 422)}}}
        for action in ("pause", "resume", "rerun", "discard")}
    return {
        "/healthz": {"get": {"summary": "Liveness", "operationId": "healthz", "security": [],
                             "responses": {"200": _json({"type": "object"}, "healthy"),
                                           "503": _json(_ref("Error"), "store unreachable")}}},
        "/api/v1/jobs": {
            "post": {"summary": "Submit a job", "operationId": "submit_job",
                     "parameters": [{"name": "Idempotency-Key", "in": "header",
                                     "required": False,
                                     "schema": {"type": "string", "maxLength": 200}}],
                     "requestBody": {"required": True, "content": {
                         "application/json": {"schema": _ref("JobSpec")}}},
                     "responses": {"201": _json(_ref("Job"), "created"),
                                   "200": _json(_ref("Job"), "replayed idempotent submit"),
                                   **_errors(400, 401, 409, 413, 422)}},
            "get": {"summary": "List jobs, newest first", "operationId": "list_jobs",
                    "parameters": [_query("state", {"enum": STATES}),
                                   _query("name", {"type": "string", "maxLength": 200}),
                                   _query("limit", {"type": "integer", "minimum": 1,
                                                    "maximum": 500}),
                                   _query("cursor", {"type": "string",
                                                     "pattern": "^[1-9][0-9]{0,18}$"})],
                    "responses": {"200": _json({"type": "object", "properties": {
                        "jobs": {"type": "array", "items": _ref("Job")},
                        "next_cursor": _nullable_str}}, "a page of jobs"),
                        **_errors(401, 422)}}},
        "/api/v1/jobs/{job_id}": {"get": {
            "summary": "A job with its steps", "operationId": "get_job",
            "parameters": [_job_id()],
            "responses": {"200": _json(_ref("Job"), "the job"), **_errors(401, 404)}}},
        "/api/v1/jobs/{job_id}/events": {"get": {
            "summary": "The job's audit trail", "operationId": "job_events",
            "parameters": [_job_id()],
            "responses": {"200": _json({"type": "object", "properties": {
                "events": {"type": "array", "items": _ref("Event")}}}, "events, oldest first"),
                **_errors(401, 404)}}},
        **operations,
        "/api/v1/cluster": {"get": {
            "summary": "Mode, lock backend, nodes", "operationId": "cluster",
            "responses": {"200": _json({"type": "object", "properties": {
                "mode": {"type": "string"}, "lock_backend": {"type": "string"},
                "active": _nullable_str, "nodes": {"type": "array", "items": _ref("Node")},
                "jobs": {"type": "object"}}}, "cluster state"), **_errors(401)}}},
        "/metrics": {"get": {
            "summary": "Prometheus metrics of this node", "operationId": "metrics",
            "responses": {"200": {"description": "Prometheus text exposition",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          **_errors(401)}}},
        "/api/v1/openapi.json": {"get": {
            "summary": "This document", "operationId": "openapi",
            "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1"), **_errors(401)}}},
    }


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    _, schemas = models_json_schema([(JobSpec, "validation")], ref_template=REF)
    components = dict(schemas.get("$defs", {}))
    components.update(Step=STEP, Job=JOB, Event=EVENT, Node=NODE, Error=ERROR)
    return {
        "openapi": "3.1.0",
        "info": {"title": "jobserver", "version": __version__},
        "paths": _paths(),
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }


@blueprint.get("/openapi.json")
def openapi_json():
    return document()
