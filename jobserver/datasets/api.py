"""Dataset routes: ``/api/v1/datasets``, ``/api/v1/datasets/<namespace>/<name>`` and
its ``/partitions``.

A dataset body is a :class:`~jobserver.datasets.spec.DatasetSpec`; ``PUT`` makes the
dataset match it (``?dry_run=true`` only says what would change), which is what
``jobserver apply`` sends. Partitions are added by ``POST …/partitions`` with one
partition as the body, or ``{"partitions": [...], "if_absent": bool}`` (up to
10,000, all or nothing); removed by ``DELETE …/partitions`` with ``{"keys": [...]}``;
listed with ``?where=`` conditions (:mod:`.filters`). Scopes
(``jobserver.api.auth``): reads need ``read``; creating, changing datasets and adding
partitions ``submit``; deleting datasets and partitions ``operate``.
"""

from __future__ import annotations

from typing import Any, Literal

from flask import Blueprint, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.requests import (ID_CURSOR, body_limit, id_cursor, json_object,
                                    named_as_url, parse_query)
from jobserver.datasets.catalog import CREATED, MAX_PAGE
from jobserver.datasets.filters import MAX_CONDITIONS
from jobserver.datasets.repos import dataset_catalog, partition_repository
from jobserver.datasets.serialize import dataset_json, partition_json
from jobserver.datasets.spec import parse_dataset
from jobserver.names import IDENT
from jobserver.spec import refuse

blueprint = Blueprint("datasets", __name__, url_prefix="/api/v1/datasets")

DATASET = "/<namespace>/<name>"
NAME_CURSOR = rf"^{IDENT}/{IDENT}$"
#: The largest body of a partition batch: 10,000 partitions with long locations or
#: metadata do not fit ``api.max_body_bytes``.
MAX_BATCH_BODY_BYTES = 32 * 1024 * 1024


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListQuery(StrictModel):
    namespace: str | None = Field(default=None, pattern=rf"^{IDENT}$")
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    cursor: str | None = Field(default=None, pattern=NAME_CURSOR)


class PutQuery(StrictModel):
    dry_run: bool = False


class PartitionsQuery(StrictModel):
    where: list[str] = Field(default_factory=list, max_length=MAX_CONDITIONS)
    order: Literal["newest", "oldest"] = "newest"
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    cursor: str | None = Field(default=None, pattern=ID_CURSOR)


def _location(namespace: str, name: str) -> dict[str, str]:
    return {"Location": f"/api/v1/datasets/{namespace}/{name}"}


@blueprint.get("")
def list_datasets() -> ResponseReturnValue:
    query = parse_query(ListQuery)
    after = tuple(query.cursor.split("/", 1)) if query.cursor else None
    page, following = dataset_catalog(api().store).list(query.namespace, query.limit,
                                                        after)  # type: ignore[arg-type]
    return {"datasets": [dataset_json(dataset) for dataset in page],
            "next_cursor": "/".join(following) if following else None}


@blueprint.post("")
def create_dataset() -> ResponseReturnValue:
    dataset = dataset_catalog(api().store).create(parse_dataset(json_object()))
    return dataset_json(dataset), 201, _location(dataset.namespace, dataset.name)


@blueprint.get(DATASET)
def get_dataset(namespace: str, name: str) -> ResponseReturnValue:
    return dataset_json(dataset_catalog(api().store).get(namespace, name))


@blueprint.put(DATASET)
def put_dataset(namespace: str, name: str) -> ResponseReturnValue:
    """Create or update the dataset to match the body; the body's namespace and name,
    when given, must be the URL's."""
    dry_run = parse_query(PutQuery).dry_run
    spec = parse_dataset(named_as_url(json_object(), namespace, name))
    result = dataset_catalog(api().store).put(spec, dry_run)
    reply = {"dataset": None if result.dataset is None else dataset_json(result.dataset),
             "change": result.change, "changed": result.changed, "dry_run": dry_run}
    created = result.change == CREATED and not dry_run
    return reply, 201 if created else 200, _location(namespace, name)


@blueprint.delete(DATASET)
def delete_dataset(namespace: str, name: str) -> ResponseReturnValue:
    dataset_catalog(api().store).delete(namespace, name)
    return "", 204


@blueprint.get(f"{DATASET}/partitions")
def list_partitions(namespace: str, name: str) -> ResponseReturnValue:
    """A page of partitions matching every ``where`` condition, newest first or oldest
    first (by when they were added)."""
    query = parse_query(PartitionsQuery, where=request.args.getlist("where"))
    dataset, page, following = partition_repository(api().store).list(
        namespace, name, query.where, query.order == "newest", query.limit,
        id_cursor(query.cursor))
    return {"dataset": dataset.full_name,
            "partitions": [partition_json(partition) for partition in page],
            "next_cursor": str(following) if following else None}


@blueprint.post(f"{DATASET}/partitions")
@body_limit(MAX_BATCH_BODY_BYTES)
def add_partitions(namespace: str, name: str) -> ResponseReturnValue:
    """One partition, or a batch ``{"partitions": [...], "if_absent": bool}``."""
    body = json_object()
    if_absent = body.pop("if_absent", False)
    if not isinstance(if_absent, bool):
        refuse([{"field": "if_absent", "message": "expected true or false"}])
    single = "partitions" not in body
    items, where = ([body], "") if single else (_batch(body), "partitions")
    result = partition_repository(api().store).add(namespace, name, items, if_absent, where, single)
    reply: dict[str, Any] = {
        "added": result.added, "skipped": result.skipped,
        "partition": None if result.partition is None else partition_json(result.partition)}
    return reply, 201 if result.added else 200


@blueprint.delete(f"{DATASET}/partitions")
def delete_partitions(namespace: str, name: str) -> ResponseReturnValue:
    """Remove partitions by key: ``{"keys": [...], "missing_ok": bool}``."""
    body = json_object()
    keys, missing_ok = body.get("keys"), body.get("missing_ok", False)
    problems = [{"field": field, "message": "unknown field"}
                for field in body if field not in ("keys", "missing_ok")]
    if not isinstance(keys, list) or not keys:
        problems.append({"field": "keys", "message": "required: a list of keys"})
    if not isinstance(missing_ok, bool):
        problems.append({"field": "missing_ok", "message": "expected true or false"})
    refuse(problems)
    deleted, missing = partition_repository(api().store).delete(namespace, name, body["keys"],
                                                                missing_ok)
    return {"deleted": deleted, "missing": missing}


def _batch(body: dict[str, Any]) -> list[Any]:
    problems = [{"field": field, "message": "unknown field"}
                for field in body if field != "partitions"]
    items = body["partitions"]
    if not isinstance(items, list) or not items:
        problems.append({"field": "partitions", "message": "expected a non-empty list"})
    refuse(problems)
    return items


# The consumer routes live on this blueprint too.
from jobserver.datasets import consumer_api as _consumer_api  # noqa: E402,F401
