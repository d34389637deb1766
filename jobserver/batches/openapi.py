"""The batch routes in the OpenAPI document (``jobserver.api.openapi`` merges these
paths and schemas into the one it serves)."""

from __future__ import annotations

from typing import Any

from jobserver.api.openapi import errors, exact, json_response, query_param, ref
from jobserver.batches.audit import AUDIT_STATUSES, WORK_UNITS
from jobserver.batches.records import RunStatus, Status
from jobserver.schedules.spec import IDENT

_text = {"type": "string"}
_nullable_text = {"type": ["string", "null"]}
_time = {"type": ["string", "null"], "format": "date-time"}
_date = {"type": "string", "format": "date"}
_id = {"type": "integer"}
_nullable_id = {"type": ["integer", "null"]}
_ident = {"type": "string", "pattern": f"^{IDENT}$"}
_statuses = [status.value for status in Status]
_context = {"type": "object", "additionalProperties": _text}

STAGE = exact({"stage": _text, "status": {"enum": _statuses}, "job_id": _nullable_id,
               "runs": _id, "run_id": _nullable_id, "message": _nullable_text,
               "started_at": _time, "finished_at": _time})

BATCH = exact({"id": _id, "system": _text, "location": _text, "context": _context,
               "business_date": _date, "status": {"enum": _statuses},
               "created_at": _time, "updated_at": _time,
               "stages": {"type": "array", "items": ref("BatchStage")}})

RUN = exact({"id": _id, "system": _text, "location": _text, "context": _context,
             "stage": _nullable_text, "status": {"enum": [s.value for s in RunStatus]},
             "plan": {"type": "array", "items": exact({"batch_id": _id, "business_date": _date,
                                                       "stage": _text})},
             "position": _id, "message": _nullable_text, "created_at": _time,
             "updated_at": _time, "finished_at": _time})

AUDIT_ROW = exact({"instance_id": _text, "system": _text, "location": _text,
                   "business_date": _date, "work_unit": {"enum": list(WORK_UNITS)},
                   "work_unit_name": _text, "parent_id": _nullable_text,
                   "parent_unit": _nullable_text, "status": {"enum": list(AUDIT_STATUSES)},
                   "start_time": _time, "end_time": _time, "message": _nullable_text,
                   "metrics": {"type": "object"}, "job_id": _nullable_id,
                   "launch": _nullable_id})

CONFIG = exact({"name": _text, "id": _id, "spec": {"type": "object"}, "spec_hash": _text,
                "systems": {"type": "array", "items": _text}, "created_at": _time,
                "updated_at": _time})

PUT_RESULT = exact({"config": {"anyOf": [ref("BatchConfig"), {"type": "null"}]},
                    "change": {"enum": ["created", "updated", "unchanged"]},
                    "changed": {"type": "array", "items": _text},
                    "dry_run": {"type": "boolean"}})


def schemas(components: dict[str, Any]) -> dict[str, Any]:
    """The response schemas; the request bodies (BatchConfigSpec, RunRequest) are
    pydantic's, in ``components`` already."""
    return {"BatchStage": STAGE, "Batch": BATCH, "BatchRun": RUN, "BatchAuditRow": AUDIT_ROW,
            "BatchConfig": CONFIG, "BatchConfigPutResult": PUT_RESULT}


def _filters() -> list[dict[str, Any]]:
    return [query_param("system", _ident), query_param("location", _ident),
            query_param("from", _date), query_param("to", _date),
            query_param("limit", {"type": "integer", "minimum": 1, "maximum": 500})]


def _name() -> list[dict[str, Any]]:
    return [{"name": "name", "in": "path", "required": True, "schema": _ident}]


RUN_EXAMPLE = {"system": "ORDER", "location": "IN", "stage": "STG", "watermark": "2024-01-03"}


def _configs() -> dict[str, Any]:
    one = {
        "get": {"summary": "A batch config (scope: read)", "operationId": "get_batch_config",
                "parameters": _name(),
                "responses": {"200": json_response(ref("BatchConfig"), "the config"),
                              **errors(404)}},
        "put": {"summary": "Create or replace a batch config (scope: submit; shell steps "
                           "also: shell)", "operationId": "put_batch_config",
                "parameters": _name() + [query_param("dry_run", {"type": "boolean"})],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": ref("BatchConfigSpec")}}},
                "responses": {"201": json_response(ref("BatchConfigPutResult"), "created"),
                              "200": json_response(ref("BatchConfigPutResult"),
                                                   "replaced or unchanged, or what a dry "
                                                   "run would change"),
                              **errors(400, 409, 413, 422)}},
        "delete": {"summary": "Delete a batch config; its batches stay (scope: operate)",
                   "operationId": "delete_batch_config", "parameters": _name(),
                   "responses": {"204": {"description": "deleted"}, **errors(404)}}}
    return {
        "/api/v1/batches/configs": {"get": {
            "summary": "Batch configs by name (scope: read)",
            "operationId": "list_batch_configs",
            "responses": {"200": json_response(exact({"configs": {
                "type": "array", "items": ref("BatchConfig")}}), "the configs"),
                **errors()}}},
        "/api/v1/batches/configs/{name}": one}


def paths() -> dict[str, Any]:
    base = "/api/v1/batches"
    run_response = {**json_response(ref("BatchRun"), "the run, its first stage launched"),
                    "headers": {"Location": {"schema": _text, "required": True}}}
    return {
        base: {"get": {
            "summary": "The control table, newest business date first (scope: read)",
            "operationId": "list_batches",
            "parameters": _filters() + [query_param("status", {"enum": _statuses})],
            "responses": {"200": json_response(exact({"batches": {
                "type": "array", "items": ref("Batch")}}), "batches"), **errors(422)}}},
        base + "/audit": {"get": {
            "summary": "The runtime audit: a row per batch, per launch of each stage (a "
                       "failed run stays after its rerun) and per job of a launch "
                       "(scope: read)",
            "operationId": "batch_audit",
            "parameters": _filters() + [
                query_param("stage", _ident), query_param("work_unit", {"enum": list(WORK_UNITS)}),
                query_param("status", {"enum": list(AUDIT_STATUSES)})],
            "responses": {"200": json_response(exact({"audit": {
                "type": "array", "items": ref("BatchAuditRow")}}), "audit rows"),
                **errors(422)}}},
        base + "/run": {"post": {
            "summary": "Run a system's stage (or every stage) for its new business dates "
                       "(scope: submit)", "operationId": "run_batches",
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": ref("RunRequest"), "example": RUN_EXAMPLE}}},
            "responses": {"201": run_response,
                          "200": {**json_response(ref("BatchRun"), "nothing to run (status "
                                                  "NOTHING; message says why)"),
                                  "headers": run_response["headers"]},
                          **errors(400, 404, 409, 413, 422)}}},
        base + "/runs/{run_id}": {"get": {
            "summary": "How far a batch run got (scope: read)", "operationId": "get_batch_run",
            "parameters": [{"name": "run_id", "in": "path", "required": True,
                            "schema": {"type": "integer", "minimum": 1}}],
            "responses": {"200": json_response(ref("BatchRun"), "the run"), **errors(404)}}},
        **_configs(),
    }
