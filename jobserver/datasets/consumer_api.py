"""Consumer routes: ``/api/v1/datasets/<namespace>/<name>/consumers[/<consumer>]``
and ``…/<consumer>/reset-failed``, on the datasets blueprint.

A consumer body is a :class:`~jobserver.datasets.consumer_spec.ConsumerSpec` without
its dataset (the URL's); ``PUT`` makes the consumer match it (``?dry_run=true`` says
what would change). ``GET`` shows its state (:func:`consumer_json`). Scopes: reads
need ``read``; creating and changing ``submit``; deleting and retrying FAILED
partitions ``operate``.

A dataset has at most ``datasets.max_consumers`` consumers (one more is a 409 naming
``name``). The list counts each consumer's lag over at most :data:`LAG_CAP`
partitions after its pointer (``lag_capped`` says when more lie there); one
consumer's ``GET`` counts all of them.
"""

from __future__ import annotations

from typing import Any

from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.requests import json_object, parse_query
from jobserver.api.serialize import time_text
from jobserver.datasets.api import DATASET, PutQuery, blueprint
from jobserver.datasets.consumer_spec import parse_consumer
from jobserver.datasets.consumers import CREATED, LAG_CAP, ConsumerView
from jobserver.datasets.repos import consumer_catalog
from jobserver.exceptions import InvalidRequest

CONSUMER = f"{DATASET}/consumers/<consumer>"


def consumer_json(view: ConsumerView) -> dict[str, Any]:
    """A consumer with its state: pointer, working-set counts, totals, lag, FAILED
    partitions (the first 100) with their last error, NEW ones that failed before
    (``retrying``, the first 100) with their failed attempts and last error,
    IN_PROGRESS ones with their job."""
    spec = view.spec.model_dump(mode="json", exclude={"namespace", "dataset", "name"})
    return {
        "dataset": view.dataset.full_name, "name": view.spec.name, "spec": spec,
        "pointer": {"txid": view.pointer[0], "position": view.pointer[1]},
        "working_set": view.counts, "processed_total": view.processed_total,
        "failed_total": view.failed_total, "lag": view.lag,
        "lag_capped": view.lag_capped, "overdue": view.overdue,
        "failed": view.failed, "retrying": view.retrying,
        "in_progress": [dict(item, lease_expires_at=time_text(item["lease_expires_at"]))
                        for item in view.in_progress]}


def _body(namespace: str, name: str, consumer: str) -> dict[str, Any]:
    body = json_object()
    for field, value in (("namespace", namespace), ("dataset", name), ("name", consumer)):
        if body.setdefault(field, value) != value:
            raise InvalidRequest(f"{field}: does not match the URL ({value!r})",
                                 [{"field": field, "message": f"must be {value!r} as in "
                                                              "the URL, or left out"}])
    return body


@blueprint.get(f"{DATASET}/consumers")
def list_consumers(namespace: str, name: str) -> ResponseReturnValue:
    views = consumer_catalog(api().store).list(namespace, name, lag_cap=LAG_CAP)
    return {"dataset": f"{namespace}/{name}", "consumers": [consumer_json(v) for v in views]}


@blueprint.get(CONSUMER)
def get_consumer(namespace: str, name: str, consumer: str) -> ResponseReturnValue:
    return consumer_json(consumer_catalog(api().store).get(namespace, name, consumer))


@blueprint.put(CONSUMER)
def put_consumer(namespace: str, name: str, consumer: str) -> ResponseReturnValue:
    """Create or update the consumer to match the body."""
    dry_run = parse_query(PutQuery).dry_run
    spec = parse_consumer(_body(namespace, name, consumer))
    view, change, changed = consumer_catalog(api().store).put(
        spec, dry_run, max_consumers=api().config.datasets.max_consumers)
    reply = {"consumer": None if view is None else consumer_json(view), "change": change,
             "changed": changed, "dry_run": dry_run}
    location = {"Location": f"/api/v1/datasets/{namespace}/{name}/consumers/{consumer}"}
    return reply, 201 if change == CREATED and not dry_run else 200, location


@blueprint.delete(CONSUMER)
def delete_consumer(namespace: str, name: str, consumer: str) -> ResponseReturnValue:
    consumer_catalog(api().store).delete(namespace, name, consumer)
    return "", 204


@blueprint.post(f"{CONSUMER}/reset-failed")
def reset_failed(namespace: str, name: str, consumer: str) -> ResponseReturnValue:
    """Put the consumer's FAILED partitions back to NEW, to be consumed again."""
    return {"reset": consumer_catalog(api().store).reset_failed(namespace, name, consumer)}
