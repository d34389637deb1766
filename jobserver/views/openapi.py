"""The view routes in the OpenAPI document (``jobserver.api.openapi`` merges these
paths and schemas into the one it serves)."""

from __future__ import annotations

import copy
from typing import Any

from jobserver.api.openapi import errors, exact, json_response, query_param, ref
from jobserver.views.api import MAX_LISTED, MAX_PATTERN
from jobserver.views.model import Action, Mode, ViewState

_text = {"type": "string"}
_nullable_text = {"type": ["string", "null"]}
_time = {"type": ["string", "null"], "format": "date-time"}
_MODES = [mode.value for mode in Mode]
_STATES = [state.value for state in ViewState]
_ACTIONS = [action.value for action in Action]
_pattern = {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN,
            "description": "Schedoscope's view pattern: /package/View(/value)*, e.g. "
                           "app.eci.datamart/SearchExport/SHOP10/ym(201505); no control "
                           "characters; at most views.max_partitions partitions with "
                           "their dependencies (a 422 naming pattern and the limit)"}
_counts = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}

DEFINITION = exact({
    "name": _text, "spec": {"type": "object"}, "structure_checksum": _text,
    "version_checksum": _text, "spec_hash": _text, "created_at": _time,
    "updated_at": _time})

PUT_RESULT = exact({
    "view": {"anyOf": [ref("ViewDefinition"), {"type": "null"}]},
    "change": {"enum": ["created", "updated", "unchanged"]},
    "partitions_reset": {"type": "integer", "minimum": 0},
    "structure_changed": {"type": "boolean"}, "dry_run": {"type": "boolean"}})

DECISION = exact({
    "view": _text, "action": {"enum": _ACTIONS}, "reason": _text,
    "job_id": {"type": ["integer", "null"]}, "upstream": {"type": "array", "items": _text}})

OUTCOME = exact({
    "pattern": _text, "mode": {"enum": _MODES}, "plan": {"type": "boolean"},
    "counts": {**_counts, "propertyNames": {"enum": _ACTIONS}},
    "attempts": {"type": "integer", "minimum": 1},
    "decisions": {"type": "array", "items": ref("ViewDecision")}})

PARTITION = exact({
    "view": _text, "path": _text, "values": {"type": "array", "items": _nullable_text},
    "status": {"enum": _STATES}, "version_checksum": _nullable_text,
    "transformed_at": _time, "job_id": {"type": ["integer", "null"]},
    "retries": {"type": "integer", "minimum": 0},
    "dependencies": {"type": "array", "items": _text}}, optional=("dependencies",))

VIEWS = exact({
    "overview": {**_counts, "propertyNames": {"enum": _STATES}},
    "truncated": {"type": "boolean"},
    "next_offset": {"type": ["integer", "null"], "minimum": 0,
                    "description": "the offset of the next page; null on the last"},
    "views": {"type": "array", "items": ref("ViewPartition")}}, optional=("views",))

MATERIALIZE = {"type": "object", "required": ["pattern"], "additionalProperties": False,
               "properties": {"pattern": _pattern, "mode": {"enum": _MODES},
                              "plan": {"type": "boolean",
                                       "description": "only say what would be done"}}}
INVALIDATE = {"type": "object", "required": ["pattern"], "additionalProperties": False,
              "properties": {"pattern": _pattern}}


def schemas(components: dict[str, Any]) -> dict[str, Any]:
    """The response schemas and request bodies; ViewSpec is pydantic's."""
    put = copy.deepcopy(components["ViewSpec"])
    put["required"] = [name for name in put.get("required", []) if name != "name"]
    put["properties"]["kind"] = {"const": "View"}
    put["description"] = "name defaults to the URL's; when given, it must be the URL's"
    return {"ViewDefinition": DEFINITION, "ViewPutResult": PUT_RESULT, "ViewPut": put,
            "ViewDecision": DECISION, "ViewMaterializeResult": OUTCOME,
            "ViewPartition": PARTITION, "ViewsResult": VIEWS,
            "ViewMaterialize": MATERIALIZE, "ViewInvalidate": INVALIDATE}


def _name_params() -> list[dict[str, Any]]:
    package = r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,15}$"
    return [{"name": "package", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": package}},
            {"name": "view", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"}}]


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


def _materialize_query() -> list[dict[str, Any]]:
    return [query_param("mode", {"enum": _MODES}), query_param("plan", {"type": "boolean"})]


def _definitions() -> dict[str, Any]:
    one = {
        "get": {"summary": "A view definition (scope: read)",
                "operationId": "get_view_definition", "parameters": _name_params(),
                "responses": {"200": json_response(ref("ViewDefinition"), "the definition"),
                              **errors(404)}},
        "put": {"summary": "Create or replace a view definition (scope: submit; shell "
                           "steps also: shell); a structure change resets its partitions",
                "operationId": "put_view_definition",
                "parameters": _name_params() + [query_param("dry_run", {"type": "boolean"})],
                "requestBody": _body("ViewPut"),
                "responses": {"201": json_response(ref("ViewPutResult"), "created"),
                              "200": json_response(ref("ViewPutResult"),
                                                   "updated or unchanged, or a dry run"),
                              **errors(400, 413, 422)}},
        "delete": {"summary": "Delete a view definition and its partitions' states "
                              "(scope: operate); 409 while another view depends on it",
                   "operationId": "delete_view_definition", "parameters": _name_params(),
                   "responses": {"204": {"description": "deleted"}, **errors(404, 409)}}}
    return {
        "/api/v1/view-definitions": {"get": {
            "summary": "Every view definition (scope: read)",
            "operationId": "list_view_definitions",
            "responses": {"200": json_response(exact({
                "views": {"type": "array", "items": ref("ViewDefinition")}}),
                "the definitions by name"), **errors()}}},
        "/api/v1/view-definitions/{package}/{view}": one}


def paths() -> dict[str, Any]:
    outcome = json_response(ref("ViewMaterializeResult"),
                            "each partition's action and reason, and the jobs made or "
                            "joined (none with plan)")
    return {
        **_definitions(),
        "/api/v1/views/materialize": {"post": {
            "summary": "Materialize the view partitions a pattern addresses (scope: submit)",
            "operationId": "materialize", "requestBody": _body("ViewMaterialize"),
            "responses": {"200": outcome, **errors(400, 409, 413, 422)}}},
        "/api/v1/materialize/{pattern}": {"get": {
            "summary": "Schedoscope's materialize/<pattern> (scope: submit)",
            "operationId": "materialize_path",
            "parameters": [{"name": "pattern", "in": "path", "required": True,
                            "schema": _pattern}] + _materialize_query(),
            "responses": {"200": outcome, **errors(404, 409, 422)}}},
        "/api/v1/views/invalidate": {"post": {
            "summary": "Put view partitions back to receive (scope: operate)",
            "operationId": "invalidate", "requestBody": _body("ViewInvalidate"),
            "responses": {"200": json_response(exact({
                "pattern": _text, "addressed": {"type": "integer", "minimum": 0},
                "invalidated": {"type": "integer", "minimum": 0}}), "how many changed"),
                **errors(400, 409, 413, 422)}}},
        "/api/v1/views": {"get": {
            "summary": "View partitions and their states (scope: read)",
            "operationId": "list_views",
            "parameters": [query_param("pattern", _pattern),
                           query_param("status", {"enum": _STATES}),
                           query_param("dependencies", {"type": "boolean"}),
                           query_param("overview", {"type": "boolean"}),
                           query_param("limit", {"type": "integer", "minimum": 1,
                                                 "maximum": MAX_LISTED}),
                           query_param("offset", {"type": "integer", "minimum": 0})],
            "responses": {"200": json_response(ref("ViewsResult"), "partitions, dependencies "
                                                                   "first"),
                          **errors(422)}}},
    }
