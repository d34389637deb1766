"""The consumer routes in the OpenAPI document (merged by :mod:`.openapi`)."""

from __future__ import annotations

import copy
from typing import Any

from jobserver.api.openapi import errors, exact, json_response, named_params, query_param, ref
from jobserver.names import IDENT

_int = {"type": "integer"}
_text = {"type": "string"}
_counts = exact({"NEW": _int, "IN_PROGRESS": _int, "FAILED": _int})

CONSUMER = exact({
    "dataset": _text, "name": _text, "spec": {"type": "object"},
    "pointer": exact({"txid": _int, "position": _int}),
    "working_set": _counts, "processed_total": _int, "failed_total": _int,
    "lag": {"type": "integer", "description": "NEW and IN_PROGRESS partitions plus those "
            "after the pointer that match the filter and window (in a list, among the "
            "first 1,000 after the pointer)"},
    "lag_capped": {"type": "boolean", "description": "more partitions lie after the "
                   "pointer than were read to count the lag: it is a lower bound"},
    "overdue": {"type": "integer", "description": "IN_PROGRESS past their lease"},
    "failed": {"type": "array", "items": {"type": "object"}},
    "retrying": {"type": "array", "items": {"type": "object"}, "description": (
        "NEW partitions that failed before (the first 100): key, attempts, last_error")},
    "in_progress": {"type": "array", "items": {"type": "object"}}})

PUT_RESULT = exact({
    "consumer": {"anyOf": [ref("Consumer"), {"type": "null"}]},
    "change": {"enum": ["created", "updated", "unchanged"]},
    "changed": {"type": "array", "items": _text}, "dry_run": {"type": "boolean"}})


def schemas(components: dict[str, Any]) -> dict[str, Any]:
    put = copy.deepcopy(components["ConsumerSpec"])
    put["required"] = [name for name in put.get("required", [])
                       if name not in ("namespace", "dataset", "name")]
    put["description"] = "namespace, dataset and name default to the URL's"
    return {"Consumer": CONSUMER, "ConsumerPutResult": PUT_RESULT, "ConsumerPut": put}


def _params() -> list[dict[str, Any]]:
    return named_params() + [{"name": "consumer", "in": "path", "required": True,
                              "schema": {"type": "string", "pattern": f"^{IDENT}$"}}]


def paths() -> dict[str, Any]:
    base = "/api/v1/datasets/{namespace}/{name}/consumers"
    one = base + "/{consumer}"
    return {
        base: {"get": {
            "summary": "A dataset's consumers with their state (scope: read)",
            "operationId": "list_consumers", "parameters": named_params(),
            "responses": {"200": json_response(exact({
                "dataset": _text, "consumers": {"type": "array", "items": ref("Consumer")}}),
                "the consumers"), **errors(404)}}},
        one: {
            "get": {"summary": "A consumer: pointer, working set, FAILED partitions, lag "
                               "(scope: read)",
                    "operationId": "get_consumer", "parameters": _params(),
                    "responses": {"200": json_response(ref("Consumer"), "the consumer"),
                                  **errors(404)}},
            "put": {"summary": "Create or update a consumer to match the body (scope: "
                               "submit); a dataset has at most datasets.max_consumers "
                               "(one more is a 409 naming name)",
                    "operationId": "put_consumer",
                    "parameters": _params() + [query_param("dry_run", {"type": "boolean"})],
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": ref("ConsumerPut"),
                        "example": {"processing_limit": 100, "filter": ["hour >= 6"]}}}},
                    "responses": {
                        "201": json_response(ref("ConsumerPutResult"), "created"),
                        "200": json_response(ref("ConsumerPutResult"), "updated, unchanged, "
                                                                       "or a dry run"),
                        **errors(400, 404, 409, 413, 422)}},
            "delete": {"summary": "Delete a consumer with its working set (scope: operate)",
                       "operationId": "delete_consumer", "parameters": _params(),
                       "responses": {"204": {"description": "deleted"}, **errors(404, 409)}}},
        one + "/reset-failed": {"post": {
            "summary": "Put the consumer's FAILED partitions back to NEW (scope: operate)",
            "operationId": "reset_failed", "parameters": _params(),
            "responses": {"200": json_response(exact({"reset": _int}), "how many"),
                          **errors(404)}}},
    }
