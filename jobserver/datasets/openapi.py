"""The dataset routes in the OpenAPI document (``jobserver.api.openapi`` merges these
paths and schemas into the one it serves)."""

from __future__ import annotations

import copy
from typing import Any

from jobserver.api.openapi import (errors, exact, json_response, named_links, named_params,
                                   put_body, query_param, ref)
from jobserver.datasets.filters import MAX_CONDITIONS
from jobserver.datasets.keys import MAX_FIELDS
from jobserver.datasets.spec import MAX_BATCH, MAX_LOCATION_BYTES
from jobserver.names import IDENT

_text = {"type": "string"}
_nullable_text = {"type": ["string", "null"]}
_time = {"type": ["string", "null"], "format": "date-time"}
_limit = {"type": "integer", "minimum": 1, "maximum": 500}
_key_value = {"type": ["string", "integer", "boolean"]}
_key = {"type": "object", "maxProperties": MAX_FIELDS, "additionalProperties": _key_value,
        "description": "a value for each of the dataset's key fields, of its type "
                       "(date: 'YYYY-MM-DD', datetime: ISO 8601 with an offset)"}

DATASET = exact({
    "namespace": _text, "name": _text, "id": {"type": "integer"},
    "description": _nullable_text,
    "key": {"type": "array", "items": exact({"name": _text, "type": _text})},
    "spec": {"type": "object"}, "spec_hash": _text,
    "partition_count": {"type": ["integer", "null"],
                        "description": "null in lists; counted when one dataset is read"},
    "created_at": _time, "updated_at": _time})

PARTITION = exact({
    "id": {"type": "integer"}, "key": {"type": "object", "additionalProperties": _key_value},
    "location": _text, "metadata": {"type": "object"}, "created_at": _time,
    "job_id": {"type": ["integer", "null"]}, "step": _nullable_text})

NEW_PARTITION = {
    "type": "object", "required": ["key", "location"], "additionalProperties": False,
    "properties": {
        "key": _key,
        "location": {"type": "string", "minLength": 1, "maxLength": MAX_LOCATION_BYTES,
                     "description": f"at most {MAX_LOCATION_BYTES} bytes of UTF-8"},
        "metadata": {"type": "object", "description": "at most 4096 bytes of JSON"}}}

_SINGLE: dict[str, Any] = {**copy.deepcopy(NEW_PARTITION), "title": "one partition"}
_SINGLE["properties"]["if_absent"] = {"type": "boolean"}
ADD = {"oneOf": [
    _SINGLE,
    {"type": "object", "title": "a batch", "required": ["partitions"],
     "additionalProperties": False, "properties": {
         "partitions": {"type": "array", "minItems": 1, "maxItems": MAX_BATCH,
                        "items": ref("NewPartition")},
         "if_absent": {"type": "boolean", "description": "skip keys that exist (and "
                                                         "report them) instead of a 409"}}}]}

ADD_RESULT = exact({
    "added": {"type": "integer"},
    "skipped": {"type": "array", "items": {"type": "object"}},
    "partition": {"anyOf": [ref("Partition"), {"type": "null"}]}})

PUT_RESULT = exact({
    "dataset": {"anyOf": [ref("Dataset"), {"type": "null"}]},
    "change": {"enum": ["created", "updated", "unchanged"]},
    "changed": {"type": "array", "items": _text}, "dry_run": {"type": "boolean"}})

DELETE = {"type": "object", "required": ["keys"], "additionalProperties": False,
          "properties": {"keys": {"type": "array", "minItems": 1, "maxItems": MAX_BATCH,
                                  "items": _key},
                         "missing_ok": {"type": "boolean"}}}


def schemas(components: dict[str, Any]) -> dict[str, Any]:
    """The response schemas and request bodies; DatasetSpec is pydantic's."""
    return {"Dataset": DATASET, "Partition": PARTITION, "NewPartition": NEW_PARTITION,
            "PartitionAdd": ADD, "PartitionAddResult": ADD_RESULT,
            "DatasetPutResult": PUT_RESULT, "DatasetPut": put_body(components["DatasetSpec"]),
            "PartitionDelete": DELETE}


_path_params = named_params


def _links() -> dict[str, Any]:
    """Where a returned dataset leads."""
    return named_links([("GetDataset", "get_dataset"), ("ListPartitions", "list_partitions"),
                        ("AddPartitions", "add_partitions"),
                        ("DeleteDataset", "delete_dataset")])


EXAMPLE = {"name": "raw", "description": "raw orders by day and shop",
           "key": [{"name": "date", "type": "date"}, {"name": "shop", "type": "string"}]}


def _body(schema: str, example: Any = None) -> dict[str, Any]:
    content: dict[str, Any] = {"schema": ref(schema)}
    if example is not None:
        content["example"] = example
    return {"required": True, "content": {"application/json": content}}


def _one() -> dict[str, Any]:
    put_example = {key: value for key, value in EXAMPLE.items() if key != "name"}
    return {
        "get": {"summary": "A dataset with its partition count (scope: read)",
                "operationId": "get_dataset", "parameters": _path_params(),
                "responses": {"200": {**json_response(ref("Dataset"), "the dataset"),
                                      "links": _links()}, **errors(404)}},
        "put": {"summary": "Create or update a dataset to match the body (scope: submit); "
                           "a key with partitions cannot change (409)",
                "operationId": "put_dataset",
                "parameters": _path_params() + [query_param("dry_run", {"type": "boolean"})],
                "requestBody": _body("DatasetPut", put_example),
                "responses": {
                    "201": json_response(ref("DatasetPutResult"), "created"),
                    "200": json_response(ref("DatasetPutResult"), "updated or unchanged, "
                                                                  "or what a dry run would do"),
                    **errors(400, 409, 413, 422)}},
        "delete": {"summary": "Delete a dataset with its partitions (scope: operate)",
                   "operationId": "delete_dataset", "parameters": _path_params(),
                   "responses": {"204": {"description": "deleted"}, **errors(404, 409)}}}


def _partitions() -> dict[str, Any]:
    where = {"name": "where", "in": "query", "required": False, "style": "form",
             "explode": True, "description": "a condition such as 'date >= 2026-11-01', "
             "'shop in (a, b)' or 'meta.source = x'; all must hold",
             "schema": {"type": "array", "maxItems": MAX_CONDITIONS, "items": _text}}
    return {
        "get": {"summary": "A dataset's partitions, filtered, newest or oldest first "
                           "(scope: read)",
                "operationId": "list_partitions",
                "parameters": _path_params() + [
                    where, query_param("order", {"enum": ["newest", "oldest"]}),
                    query_param("limit", _limit),
                    query_param("cursor", {"type": "string",
                                           "pattern": "^[1-9][0-9]{0,18}$"})],
                "responses": {"200": json_response(exact({
                    "dataset": _text, "partitions": {"type": "array",
                                                     "items": ref("Partition")},
                    "next_cursor": _nullable_text}), "a page of partitions"),
                    **errors(404, 422)}},
        "post": {"summary": "Add one partition or a batch, all or nothing (scope: submit)",
                 "operationId": "add_partitions", "parameters": _path_params(),
                 "requestBody": _body("PartitionAdd", {
                     "key": {"date": "2026-11-01", "shop": "berlin"},
                     "location": "s3://bucket/raw/2026-11-01/berlin/"}),
                 "responses": {
                     "201": json_response(ref("PartitionAddResult"), "added"),
                     "200": json_response(ref("PartitionAddResult"),
                                          "nothing added: every key existed (if_absent)"),
                     **errors(400, 404, 409, 413, 422)}},
        "delete": {"summary": "Remove partitions by key, all or nothing (scope: operate)",
                   "operationId": "delete_partitions", "parameters": _path_params(),
                   "requestBody": _body("PartitionDelete"),
                   "responses": {"200": json_response(exact({
                       "deleted": {"type": "integer"},
                       "missing": {"type": "array", "items": {"type": "object"}}}),
                       "removed"), **errors(400, 404, 413, 422)}}}


def paths() -> dict[str, Any]:
    base = "/api/v1/datasets"
    one = base + "/{namespace}/{name}"
    return {
        base: {
            "get": {"summary": "List datasets by namespace and name (scope: read)",
                    "operationId": "list_datasets",
                    "parameters": [query_param("namespace", {"type": "string",
                                                             "pattern": f"^{IDENT}$"}),
                                   query_param("limit", _limit),
                                   query_param("cursor", {"type": "string",
                                                          "pattern": f"^{IDENT}/{IDENT}$"})],
                    "responses": {"200": json_response(exact({
                        "datasets": {"type": "array", "items": ref("Dataset")},
                        "next_cursor": _nullable_text}), "a page of datasets"),
                        **errors(422)}},
            "post": {"summary": "Create a dataset (scope: submit)",
                     "operationId": "create_dataset",
                     "requestBody": _body("DatasetSpec", EXAMPLE),
                     "responses": {"201": {**json_response(ref("Dataset"), "created"),
                                           "links": _links(), "headers": {
                                               "Location": {"schema": _text,
                                                            "required": True}}},
                                   **errors(400, 409, 413, 422)}}},
        one: _one(),
        one + "/partitions": _partitions(),
    }
