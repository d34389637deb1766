"""Schedule routes: ``/api/v1/schedules`` and ``/api/v1/schedules/<namespace>/<name>``.

A request body is a schedule spec (:class:`~jobserver.schedules.spec.ScheduleSpec`)
with an optional ``enabled`` beside its fields. ``PUT`` makes the schedule match the
body, creating or updating it (``?dry_run=true`` only says what would change); that is
what ``jobserver apply`` sends. Scopes (``jobserver.api.auth``): reads need ``read``;
create and update ``submit`` (and ``shell`` for a template with shell steps); enable,
disable and delete ``operate``, and so does an ``enabled`` in a body that would switch
the schedule on or off (a new one created enabled included).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.auth import check_step_types
from jobserver.api.caller import requester
from jobserver.schedules.repos import schedule_catalog
from jobserver.store.tokens import OPERATE
from jobserver.api.requests import ID_CURSOR, named_as_url
from jobserver.api.requests import id_cursor as _before
from jobserver.api.requests import json_object as _body
from jobserver.api.requests import no_body as _no_body
from jobserver.api.requests import parse_query as _query
from jobserver.exceptions import Forbidden, InvalidRequest
from jobserver.resources import CREATED, MAX_PAGE
from jobserver.schedules.records import SCHEDULE_JOB_STATES
from jobserver.schedules.serialize import evaluation_json, schedule_job_json, schedule_json
from jobserver.schedules.spec import IDENT, ScheduleSpec, parse_schedule

blueprint = Blueprint("schedules", __name__, url_prefix="/api/v1/schedules")

SCHEDULE = "/<namespace>/<name>"
#: A page of schedules continues after "namespace/name".
NAME_CURSOR = rf"^{IDENT}/{IDENT}$"


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=50, ge=1, le=MAX_PAGE)


class ListQuery(_Query):
    namespace: str | None = Field(default=None, pattern=rf"^{IDENT}$")
    enabled: bool | None = None
    cursor: str | None = Field(default=None, pattern=NAME_CURSOR)


class PutQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool = False


class JobsQuery(_Query):
    state: str | None = Field(default=None, pattern="^(" + "|".join(SCHEDULE_JOB_STATES) + ")$")
    cursor: str | None = Field(default=None, pattern=ID_CURSOR)


class EvaluationsQuery(_Query):
    cursor: str | None = Field(default=None, pattern=ID_CURSOR)


def _spec(body: dict[str, Any]) -> tuple[ScheduleSpec, bool | None]:
    """Parse a body into a spec and its ``enabled``, checking that the caller may
    submit the template."""
    enabled = body.pop("enabled", None)
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidRequest("enabled: expected true or false",
                             [{"field": "enabled", "message": "expected true or false"}])
    spec = parse_schedule(body, api().policy)
    try:
        check_step_types(g.principal, spec.template)
    except Forbidden as exc:
        details = [{**item, "field": f"template.{item['field']}"} for item in exc.details]
        raise Forbidden(f"template.{exc.message}", details) from None
    return spec, enabled


def _may_switch() -> None:
    """Switching a schedule on or off is an operator's act (as ``enable`` and
    ``disable`` are), whichever route carries it: ``enabled`` in a body that would
    change the flag needs ``operate``."""
    requester().require(OPERATE, "enabled", "switching a schedule on or off")


def _location(namespace: str, name: str) -> dict[str, str]:
    return {"Location": f"/api/v1/schedules/{namespace}/{name}"}


@blueprint.get("")
def list_schedules() -> ResponseReturnValue:
    query = _query(ListQuery)
    after = None
    if query.cursor:
        cursor_namespace, _, cursor_name = query.cursor.partition("/")
        after = (cursor_namespace, cursor_name)
    page, following = schedule_catalog(api().store).list(query.namespace, query.enabled,
                                                         query.limit, after)
    return {"schedules": [schedule_json(schedule) for schedule in page],
            "next_cursor": "/".join(following) if following else None}


@blueprint.post("")
def create_schedule() -> ResponseReturnValue:
    spec, enabled = _spec(_body())
    if enabled:
        _may_switch()
    schedule = schedule_catalog(api().store).create(spec, bool(enabled), owner=requester().actor)
    return schedule_json(schedule), 201, _location(schedule.namespace, schedule.name)


@blueprint.get(SCHEDULE)
def get_schedule(namespace: str, name: str) -> ResponseReturnValue:
    return schedule_json(schedule_catalog(api().store).get(namespace, name))


@blueprint.put(SCHEDULE)
def put_schedule(namespace: str, name: str) -> ResponseReturnValue:
    """Create or update the schedule to match the body; the body's namespace and name,
    when given, must be the URL's."""
    dry_run = _query(PutQuery).dry_run
    spec, enabled = _spec(named_as_url(_body(), namespace, name))
    result = schedule_catalog(api().store).put(spec, enabled, dry_run, may_switch=_may_switch,
                                               owner=requester().actor)
    reply = {"schedule": None if result.schedule is None else schedule_json(result.schedule),
             "change": result.change, "changed": result.changed, "dry_run": dry_run}
    created = result.change == CREATED and not dry_run
    return reply, 201 if created else 200, _location(namespace, name)


@blueprint.delete(SCHEDULE)
def delete_schedule(namespace: str, name: str) -> ResponseReturnValue:
    schedule_catalog(api().store).delete(namespace, name)
    return "", 204


@blueprint.post(f"{SCHEDULE}/<any(enable, disable):action>")
def operate_schedule(namespace: str, name: str, action: str) -> ResponseReturnValue:
    _no_body(action)
    catalog = schedule_catalog(api().store)
    operation = catalog.enable if action == "enable" else catalog.disable
    return schedule_json(operation(namespace, name))


@blueprint.get(f"{SCHEDULE}/jobs")
def schedule_jobs(namespace: str, name: str) -> ResponseReturnValue:
    """The schedule's schedule-jobs, pending and launched, newest first."""
    query = _query(JobsQuery)
    page, following = schedule_catalog(api().store).schedule_jobs(
        namespace, name, query.state, query.limit, _before(query.cursor))
    return {"schedule_jobs": [schedule_job_json(job) for job in page],
            "next_cursor": str(following) if following else None}


@blueprint.get(f"{SCHEDULE}/evaluations")
def schedule_evaluations(namespace: str, name: str) -> ResponseReturnValue:
    """Why the schedule did or did not run, newest first."""
    query = _query(EvaluationsQuery)
    page, following = schedule_catalog(api().store).evaluations(
        namespace, name, query.limit, _before(query.cursor))
    return {"evaluations": [evaluation_json(item) for item in page],
            "next_cursor": str(following) if following else None}
