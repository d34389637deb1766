"""View routes: definitions, ``materialize``, ``invalidate`` and the ``views`` query.

* ``/api/v1/view-definitions`` and ``/api/v1/view-definitions/<package>/<View>``: list,
  read, create or replace (``PUT``, a ``kind: View`` body; ``?dry_run=true`` only says
  what would change), delete;
* ``POST /api/v1/views/materialize`` ``{pattern, mode, plan}`` and Schedoscope's
  ``GET /api/v1/materialize/<pattern>?mode=&plan=``: every partition's action and why,
  and the jobs made or joined (none with ``plan``);
* ``POST /api/v1/views/invalidate`` ``{pattern}``;
* ``GET /api/v1/views?pattern=&status=&dependencies=&overview=&limit=&offset=``: a
  page of a pattern's partitions, ``next_offset`` naming the next one.

What one request expands is bounded by ``views.max_partitions``, dependencies included
(:mod:`jobserver.views.limits`, bound to every request of the app here): a pattern over
it is a 422 naming ``pattern`` and the limit, before the partitions are built.

Scopes as the schedules' (``jobserver.api.auth``): reads need ``read``; saving a
definition and materializing ``submit`` (and ``shell`` or ``sql`` for a template with such
steps); deleting a definition and invalidating ``operate``. A malformed pattern is a
422 whose message says where it failed and what was expected; an unknown mode a 422
naming ``mode``.
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, current_app, g, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobserver.api import api
from jobserver.api.auth import check_step_types
from jobserver.api.caller import requester
from jobserver.api.requests import json_object as _body
from jobserver.api.requests import parse_query as _query
from jobserver.api.serialize import time_text
from jobserver.exceptions import Forbidden, InvalidRequest
from jobserver.spec import field_path
from jobserver.views import limits
from jobserver.views.catalog import CREATED, PutResult, ViewCatalog
from jobserver.views.materialize import Materializer, Outcome, collector_paused
from jobserver.views.model import Action, Mode, ViewState
from jobserver.views.repos import view_repository
from jobserver.views.status import PartitionStatus, view_status
from jobserver.views.store import Definition

blueprint = Blueprint("views", __name__, url_prefix="/api/v1")

DEFINITION = "/view-definitions/<package>/<view>"
MATERIALIZE_PREFIX = "/api/v1/materialize/"
MAX_PATTERN = 10_000
MAX_LISTED = 10_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PutQuery(_Strict):
    dry_run: bool = False


class MaterializeQuery(_Strict):
    mode: Mode = Mode.DEFAULT
    plan: bool = False


class MaterializeBody(MaterializeQuery):
    pattern: str = Field(min_length=1, max_length=MAX_PATTERN)


class InvalidateBody(_Strict):
    pattern: str = Field(min_length=1, max_length=MAX_PATTERN)


class ViewsQuery(_Strict):
    pattern: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN)
    status: ViewState | None = None
    dependencies: bool = False
    overview: bool = False
    limit: int = Field(default=1000, ge=1, le=MAX_LISTED)
    offset: int = Field(default=0, ge=0)


def _parsed(model: type[Any], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        details = [{"field": field_path(e["loc"]),
                    "message": "unknown field" if e["type"] == "extra_forbidden"
                    else e["msg"]} for e in exc.errors()]
        raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}",
                             details) from None


@blueprint.before_app_request
def _bind_limit() -> None:
    """Every request of the app (the API's and the dashboard's) plans under the
    configured ``views.max_partitions``; the binding ends with the request."""
    stack = ExitStack()
    stack.enter_context(limits.bound(api().config.views.max_partitions))
    g.views_limit = stack


@blueprint.teardown_app_request
def _unbind_limit(_error: BaseException | None) -> None:
    stack = g.pop("views_limit", None)
    if stack is not None:
        try:
            stack.close()
        except ValueError:  # bound in another context (a copied one): gone with it
            pass


def _catalog() -> ViewCatalog:
    return ViewCatalog(api().store, api().policy)


def materializer() -> Materializer:
    """The application's one materializer (the API's and the dashboard's): it keeps
    the parsed definitions between requests."""
    found = current_app.extensions.get("jobserver.views")
    if found is None:
        found = current_app.extensions["jobserver.views"] = Materializer(
            api().store, api().policy, data_root=api().config.views_root)
    return found


def definition_json(definition: Definition) -> dict[str, Any]:
    return {"name": definition.name, "spec": definition.spec,
            "structure_checksum": definition.structure_checksum,
            "version_checksum": definition.version_checksum,
            "spec_hash": definition.spec_hash,
            "created_at": time_text(definition.created_at),
            "updated_at": time_text(definition.updated_at)}


def outcome_json(pattern: str, mode: Mode, outcome: Outcome) -> dict[str, Any]:
    """The reply to a request: one object per decision (100,000 for a large lattice).

    Built for that size: each action's text looked up once (an enum's ``value`` is a
    Python-level property), and no upstream list where there is none, so that each
    object holds only strings and None and the garbage collector stops tracking it."""
    texts = {action: action.value for action in Action}
    jobs, empty = outcome.jobs, ()
    counts = Counter(decision.action for decision in outcome.decisions)
    return {"pattern": pattern, "mode": mode.value, "plan": outcome.planned_only,
            "counts": {texts[action]: count for action, count in counts.items()},
            "attempts": outcome.attempts,
            "decisions": [{"view": d.address.path, "action": texts[d.action],
                           "reason": d.reason, "job_id": jobs.get(d.address) if jobs else None,
                           "upstream": [a.path for a in d.upstream] if d.upstream else empty}
                          for d in outcome.decisions]}


def partition_json(item: PartitionStatus) -> dict[str, Any]:
    row = item.stored
    found: dict[str, Any] = {
        "view": item.address.name, "path": item.address.path,
        "values": list(item.address.values), "status": item.state.value,
        "version_checksum": row.version_checksum if row else None,
        "transformed_at": time_text(row.transformed_at) if row else None,
        "job_id": row.job_id if row else None, "retries": row.retries if row else 0}
    if item.dependencies is not None:
        found["dependencies"] = [a.path for a in item.dependencies]
    return found


@blueprint.get("/view-definitions")
def list_view_definitions() -> ResponseReturnValue:
    return {"views": [definition_json(d) for d in _catalog().list()]}


@blueprint.get(DEFINITION)
def get_view_definition(package: str, view: str) -> ResponseReturnValue:
    return definition_json(_catalog().get(f"{package}/{view}"))


@blueprint.put(DEFINITION)
def put_view_definition(package: str, view: str) -> ResponseReturnValue:
    """Create or replace the definition; the body's ``name``, when given, must be the
    URL's."""
    dry_run = _query(PutQuery).dry_run
    body, name = _body(), f"{package}/{view}"
    if body.setdefault("name", name) != name:
        raise InvalidRequest(f"name: does not match the URL ({name!r})",
                             [{"field": "name", "message": f"must be {name!r} as in the "
                                                           "URL, or left out"}])
    catalog = _catalog()
    spec = catalog.parse(body)
    if spec.job is not None:
        _check_step_scopes(spec.job)
    result = catalog.put(spec, dry_run)
    created = result.change == CREATED and not dry_run
    return _put_json(result, dry_run), 201 if created else 200, {
        "Location": f"/api/v1/view-definitions/{name}"}


def _check_step_scopes(job: Any) -> None:
    try:
        check_step_types(g.principal, job)
    except Forbidden as exc:
        details = [{**item, "field": f"transformation.job.{item['field']}"}
                   for item in exc.details]
        raise Forbidden(f"transformation.job.{exc.message}", details) from None


def _put_json(result: PutResult, dry_run: bool) -> dict[str, Any]:
    return {"view": None if result.definition is None else definition_json(result.definition),
            "change": result.change, "partitions_reset": result.reset,
            "structure_changed": result.structure_changed, "dry_run": dry_run}


@blueprint.delete(DEFINITION)
def delete_view_definition(package: str, view: str) -> ResponseReturnValue:
    _catalog().delete(f"{package}/{view}")
    return "", 204


@blueprint.post("/views/materialize")
def materialize() -> ResponseReturnValue:
    body: MaterializeBody = _parsed(MaterializeBody, _body())
    return _materialized(body.pattern, body.mode, body.plan)


@blueprint.get("/materialize/<path:pattern>")
def materialize_path(pattern: str) -> ResponseReturnValue:
    """Schedoscope's form. The pattern is taken from the URL as sent, when the server
    says it, so that ``%2F`` is decoded once, by the pattern parser."""
    query = _query(MaterializeQuery)
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or ""
    path = urlsplit(raw).path
    if path.startswith(MATERIALIZE_PREFIX) and len(path) > len(MATERIALIZE_PREFIX):
        pattern = path[len(MATERIALIZE_PREFIX):]
    if len(pattern) > MAX_PATTERN:
        raise InvalidRequest("pattern: too long", [{"field": "pattern", "message":
                                                    f"at most {MAX_PATTERN} characters"}])
    return _materialized(pattern, query.mode, query.plan)


def _materialized(pattern: str, mode: Mode, plan: bool) -> dict[str, Any]:
    """The reply to a materialize request, built with the collector still paused: the
    decisions and their addresses are freed before it runs again."""
    with collector_paused():
        return outcome_json(pattern, mode, materializer().materialize(pattern, mode, plan,
                                                                      requester()))


@blueprint.post("/views/invalidate")
def invalidate() -> ResponseReturnValue:
    body: InvalidateBody = _parsed(InvalidateBody, _body())
    addresses = materializer().addresses(body.pattern)
    changed = view_repository(api().store).invalidate(addresses)
    return {"pattern": body.pattern, "addressed": len(addresses), "invalidated": changed}


@blueprint.get("/views")
def list_views() -> ResponseReturnValue:
    query = _query(ViewsQuery)
    if query.offset and query.pattern is None:
        raise InvalidRequest("offset: pages through a pattern's partitions; give a pattern",
                             [{"field": "offset", "message": "only with a pattern"}])
    report = view_status(materializer(), view_repository(api().store), query.pattern, query.status,
                         query.dependencies, query.limit, query.offset)
    reply: dict[str, Any] = {"overview": report.overview, "truncated": report.truncated,
                             "next_offset": report.next_offset}
    if not query.overview:
        reply["views"] = [partition_json(item) for item in report.partitions]
    return reply
