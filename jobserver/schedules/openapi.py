"""The schedule routes in the OpenAPI document (``jobserver.api.openapi`` merges
these paths and schemas into the one it serves)."""

from __future__ import annotations

import copy
from typing import Any

from jobserver.api.openapi import (ACTOR, errors, exact, json_response, named_links, named_params,
                                   put_body, query_param, ref)
from jobserver.schedules.records import SCHEDULE_JOB_STATES
from jobserver.names import IDENT

_text = {"type": "string"}
_nullable_text = {"type": ["string", "null"]}
_time = {"type": ["string", "null"], "format": "date-time"}
_id_cursor = {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"}
_limit = {"type": "integer", "minimum": 1, "maximum": 500}

SCHEDULE_JOB = exact({
    "id": {"type": "integer"}, "generation": {"type": "integer"},
    "state": {"enum": list(SCHEDULE_JOB_STATES)}, "fire_time": _time,
    "notifications": {"type": "array"}, "properties": {"type": "object"},
    "created_at": _time, "updated_at": _time, "deadline_at": _time, "next_check_at": _time,
    "launch_key": _nullable_text, "job_id": {"type": ["integer", "null"]},
    "reason": _nullable_text})

SCHEDULE = exact({
    "namespace": _text, "name": _text, "id": {"type": "integer"},
    "generation": {"type": "integer"}, "enabled": {"type": "boolean"},
    "spec": {"type": "object"}, "spec_hash": _text, "trigger_text": _nullable_text,
    "next_fire_time": _time, "next_check_at": _time, "created_at": _time,
    "updated_at": _time, "enabled_at": _time, "owner": ACTOR,
    "pending": {"anyOf": [ref("ScheduleJob"), {"type": "null"}]}})

EVALUATION = exact({
    "id": {"type": "integer"}, "schedule_job_id": {"type": ["integer", "null"]},
    "at": _time, "outcome": _text, "fire_time": _time, "reason": _text,
    "details": {"type": "object"}, "next_check_at": _time})

PUT_RESULT = exact({
    "schedule": {"anyOf": [ref("Schedule"), {"type": "null"}]},
    "change": {"enum": ["created", "updated", "unchanged"]},
    "changed": {"type": "array", "items": _text}, "dry_run": {"type": "boolean"}})


def schemas(components: dict[str, Any]) -> dict[str, Any]:
    """The response schemas, and the request body: a ScheduleSpec (from
    ``components``, pydantic's) that may also carry ``enabled``."""
    request = copy.deepcopy(components["ScheduleSpec"])
    request["properties"]["enabled"] = {
        "type": "boolean", "description": "enable or disable the schedule as well; a new "
                                          "schedule is disabled unless this is true"}
    put = put_body(request)
    return {"Schedule": SCHEDULE, "ScheduleJob": SCHEDULE_JOB, "Evaluation": EVALUATION,
            "PutResult": PUT_RESULT, "ScheduleRequest": request, "SchedulePut": put}


_path_params = named_params


def _links() -> dict[str, Any]:
    """Where a returned schedule leads."""
    return named_links([("GetSchedule", "get_schedule"), ("EnableSchedule", "enable_schedule"),
                        ("DisableSchedule", "disable_schedule"),
                        ("ScheduleJobs", "schedule_jobs"),
                        ("ScheduleEvaluations", "schedule_evaluations"),
                        ("DeleteSchedule", "delete_schedule")])


def _schedule(description: str, with_location: bool = False) -> dict[str, Any]:
    response = {**json_response(ref("Schedule"), description), "links": _links()}
    if with_location:
        response["headers"] = {"Location": {"schema": _text, "required": True}}
    return response


#: A schedule as a request body; a PUT's namespace and name come from the URL.
EXAMPLE = {"template": {"name": "report", "steps": [{"name": "build", "type": "noop"}]},
           "trigger": {"type": "time", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
           "constraints": [{"type": "concurrency", "limit": 1}]}


def _body(schema: str = "ScheduleRequest") -> dict[str, Any]:
    example = EXAMPLE if schema == "SchedulePut" else {"name": "nightly-report", **EXAMPLE}
    return {"required": True, "content": {"application/json": {
        "schema": ref(schema), "example": example}}}


def _action(action: str) -> dict[str, Any]:
    return {"post": {
        "summary": f"{action.capitalize()} a schedule (scope: operate)",
        "operationId": f"{action}_schedule", "parameters": _path_params(),
        "requestBody": {"required": False, "description": "nothing, or {}", "content": {
            "application/json": {"schema": {"type": "object", "maxProperties": 0}}}},
        "responses": {"200": _schedule(f"the schedule, {action}d"),
                      **errors(404, 413, 422)}}}


def _page(key: str, item: str, description: str) -> dict[str, Any]:
    return json_response(exact({key: {"type": "array", "items": ref(item)},
                                "next_cursor": _nullable_text}), description)


def _one() -> dict[str, Any]:
    return {
        "get": {"summary": "A schedule with its pending schedule-job (scope: read)",
                "operationId": "get_schedule", "parameters": _path_params(),
                "responses": {"200": _schedule("the schedule"), **errors(404)}},
        "put": {"summary": "Create or update a schedule to match the body (scope: submit; "
                           "shell steps in the template also: shell)",
                "operationId": "put_schedule",
                "parameters": _path_params() + [query_param("dry_run", {"type": "boolean"})],
                "requestBody": _body("SchedulePut"),
                "responses": {
                    "201": json_response(ref("PutResult"), "created"),
                    "200": json_response(ref("PutResult"), "updated or unchanged, or what "
                                                           "a dry run would change"),
                    **errors(400, 409, 413, 422)}},
        "delete": {"summary": "Disable and delete a schedule (scope: operate)",
                   "operationId": "delete_schedule", "parameters": _path_params(),
                   "responses": {"204": {"description": "deleted"}, **errors(404)}}}


def paths() -> dict[str, Any]:
    base = "/api/v1/schedules"
    one = base + "/{namespace}/{name}"
    return {
        base: {
            "get": {"summary": "List schedules by namespace and name (scope: read)",
                    "operationId": "list_schedules",
                    "parameters": [query_param("namespace", {"type": "string",
                                                             "pattern": f"^{IDENT}$"}),
                                   query_param("enabled", {"type": "boolean"}),
                                   query_param("limit", _limit),
                                   query_param("cursor", {"type": "string",
                                                          "pattern": f"^{IDENT}/{IDENT}$"})],
                    "responses": {"200": _page("schedules", "Schedule", "a page of schedules"),
                                  **errors(422)}},
            "post": {"summary": "Create a schedule, disabled unless enabled is true "
                                "(scope: submit; shell steps in the template also: shell)",
                     "operationId": "create_schedule", "requestBody": _body(),
                     "responses": {"201": _schedule("created", with_location=True),
                                   **errors(400, 409, 413, 422)}}},
        one: _one(),
        one + "/enable": _action("enable"),
        one + "/disable": _action("disable"),
        one + "/jobs": {"get": {
            "summary": "The schedule's schedule-jobs, newest first (scope: read)",
            "operationId": "schedule_jobs",
            "parameters": _path_params() + [
                query_param("state", {"enum": list(SCHEDULE_JOB_STATES)}),
                query_param("limit", _limit), query_param("cursor", _id_cursor)],
            "responses": {"200": _page("schedule_jobs", "ScheduleJob",
                                       "a page of schedule-jobs"), **errors(404, 422)}}},
        one + "/evaluations": {"get": {
            "summary": "Why the schedule did or did not run, newest first (scope: read)",
            "operationId": "schedule_evaluations",
            "parameters": _path_params() + [query_param("limit", _limit),
                                            query_param("cursor", _id_cursor)],
            "responses": {"200": _page("evaluations", "Evaluation",
                                       "a page of evaluations"), **errors(404, 422)}}},
    }
