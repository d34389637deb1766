"""Batch routes under ``/api/v1/batches``.

``POST /run`` plans a run and launches its first stage (201 with the run; 200 with
status NOTHING when there is nothing to run, saying why); ``GET /runs/<id>`` is how
far it got (the tracker moves it on). ``GET ""`` is the control table, ``GET /audit``
the runtime audit. Configs: ``PUT|GET|DELETE /configs/<name>`` (what ``jobserver
apply`` sends for ``kind: BatchConfig``) and ``GET /configs``. Scopes: reads
``read``; runs and config puts ``submit`` (a config with shell steps also ``shell``,
with sql steps or a watermark that runs SQL also ``sql``); deleting a config
``operate``. A run reads its watermark under the rules of
:mod:`jobserver.batches.watermarks` (read-only, bounded, nothing read echoed).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from flask import Blueprint, current_app, g
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.auth import check_step_types
from jobserver.api.caller import requester
from jobserver.api.requests import MAX_ID
from jobserver.api.requests import json_object as _body
from jobserver.api.requests import parse_query as _query
from jobserver.batches.audit import AUDIT_STATUSES, WORK_UNITS, AuditFilter
from jobserver.batches.planner import RunRequest, plan_run
from jobserver.batches.records import RunStatus, Status
from jobserver.batches.repos import audit_repository, batch_config_catalog, batch_store
from jobserver.batches.serialize import (audit_json, batch_json, config_json, run_json)
from jobserver.batches.spec import BatchConfig, parse_batch_config
from jobserver.batches.watermarks import Sources, check_sources
from jobserver.batches.store import MAX_PAGE, BatchFilter
from jobserver.exceptions import Forbidden, InvalidRequest
from jobserver.resources import CREATED
from jobserver.schedules.spec import IDENT
from jobserver.spec import JobSpec, parse_model, validate_job

blueprint = Blueprint("batches", __name__, url_prefix="/api/v1/batches")
_IDENT = rf"^{IDENT}$"


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False)

    system: str | None = Field(default=None, pattern=_IDENT)
    location: str | None = Field(default=None, pattern=_IDENT)
    since: date | None = Field(default=None, alias="from")
    until: date | None = Field(default=None, alias="to")
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)


class ListQuery(_Query):
    status: Status | None = None


class AuditQuery(_Query):
    stage: str | None = Field(default=None, pattern=_IDENT)
    work_unit: str | None = Field(default=None, pattern="^(" + "|".join(WORK_UNITS) + ")$")
    status: str | None = Field(default=None, pattern="^(" + "|".join(AUDIT_STATUSES) + ")$")


class PutQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool = False


@blueprint.get("")
def list_batches() -> ResponseReturnValue:
    """The control table, newest business date first."""
    query = _query(ListQuery)
    found = batch_store(api().store).list(BatchFilter(query.system, query.location, query.status,
                                                      query.since, query.until, query.limit))
    return {"batches": [batch_json(batch) for batch in found]}


@blueprint.get("/audit")
def batch_audit() -> ResponseReturnValue:
    query = _query(AuditQuery)
    rows = audit_repository(api().store).rows(AuditFilter(
        query.system, query.location, query.since, query.until, query.stage,
        query.work_unit, query.status, query.limit))
    return {"audit": [audit_json(row) for row in rows]}


@blueprint.post("/run")
def run_batches() -> ResponseReturnValue:
    request = parse_model(RunRequest, _body())
    ctx = api()
    run = plan_run(ctx.store, request, ctx.policy, _sources(), requester())
    status = 200 if run.status is RunStatus.NOTHING else 201
    return run_json(run), status, {"Location": f"/api/v1/batches/runs/{run.id}"}


def _sources() -> Sources:
    """Where this app reads watermarks: its named connections, made once, on first use
    (their engines are made lazily too), and ``batches.watermark_dir``."""
    app = current_app
    if "jobserver.connections" not in app.extensions:
        from jobserver.connections import Connections
        configs = getattr(api().config, "connections", None) or {}
        app.extensions["jobserver.connections"] = Connections(configs)
    return Sources(app.extensions["jobserver.connections"], api().config.watermark_root)


@blueprint.get(f"/runs/<int(max={MAX_ID}):run_id>")
def get_batch_run(run_id: int) -> ResponseReturnValue:
    return run_json(batch_store(api().store).run(run_id))


@blueprint.get("/configs")
def list_batch_configs() -> ResponseReturnValue:
    return {"configs": [config_json(config) for config in batch_config_catalog(api().store).list()]}


@blueprint.get("/configs/<name>")
def get_batch_config(name: str) -> ResponseReturnValue:
    return config_json(batch_config_catalog(api().store).get(name))


@blueprint.put("/configs/<name>")
def put_batch_config(name: str) -> ResponseReturnValue:
    """Create or replace the config; the body's ``name``, when given, must be the URL's."""
    dry_run = _query(PutQuery).dry_run
    body = _body()
    if body.setdefault("name", name) != name:
        raise InvalidRequest(f"name: does not match the URL ({name!r})",
                             [{"field": "name", "message": f"must be {name!r} or left out"}])
    config = parse_batch_config(body)
    _check_jobs(config)
    check_sources(config, requester(), api().config.watermark_root)
    result = batch_config_catalog(api().store).put(config, dry_run)
    reply = {"config": None if result.config is None else config_json(result.config),
             "change": result.change, "changed": result.changed, "dry_run": dry_run}
    return reply, 201 if result.change == CREATED and not dry_run else 200


def _check_jobs(config: BatchConfig) -> None:
    """Each job group's jobs pass the node's policy (registered callables, allowed
    executables) and the caller's scopes (shell steps need ``shell``)."""
    for index, group in enumerate(config.spec.job_groups):
        jobs = config.groups.get(group.name, [])
        steps: list[dict[str, Any]] = [dict(job.step.model_dump(mode="json"), depends_on=[])
                                       for job in jobs]
        spec = parse_model(JobSpec, {"name": group.name, "steps": steps})
        where = f"job_groups[{index}]"
        try:
            validate_job(spec, api().policy)
            check_step_types(g.principal, spec)
        except (InvalidRequest, Forbidden) as exc:
            details = [{**item, "field": f"{where}.{item['field']}".replace(".steps[", ".jobs[")}
                       for item in exc.details if isinstance(item, dict) and "field" in item]
            raise type(exc)(f"{where}.{exc.message}".replace(".steps[", ".jobs["),
                            details) from None


@blueprint.delete("/configs/<name>")
def delete_batch_config(name: str) -> ResponseReturnValue:
    batch_config_catalog(api().store).delete(name)
    return "", 204
