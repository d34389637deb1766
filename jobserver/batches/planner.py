"""``batch run``: validate, create batches up to the watermark, plan the catch-up, launch.

A run is planned where the request lands (:func:`plan_run`) and then moved on by the
tracker (:func:`advance`), never looped over in a request: its plan is the list of
(batch, stage) it goes through, earliest business date first, at most
``catch_up_limit`` dates, with the stages of a pair (FND+SNAPSHOT) together per date
before the next date. Without ``stage`` a run goes through all the system's stages,
stage by stage (pairs together per date).

Only a run that includes the system's first stage reads the watermark and adds a batch
for each business date after the newest in the control table, up to it (daily: every
day; monthly: every month end); a later stage runs for dates whose stage before it is
SUCCESS. A run given a ``business_date`` (a period's own date: a month end for monthly)
runs that date only; one after the newest adds the dates before it too, not run, so
the next catch-up does not skip them. Each item is launched by :func:`launch`: a
compare-and-set of its stage row to RUNNING with the engine submit (key
``batch/…/<stage>/<run#>``) in one transaction, so two runs of the same system and
location launch a stage once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date

from pydantic import Field
from sqlalchemy import Connection

from jobserver.batches.compose import launch_key, period_end, periods, stage_job
from jobserver.batches.records import (BatchRecord, PlanItem, RunRecord, RunStatus,
                                       StageRecord, Status)
from jobserver.batches.repos import batch_config_catalog, batch_store
from jobserver.batches.sources import read_source
from jobserver.batches.spec import BatchConfig, Period, SystemStages
from jobserver.batches.watermarks import Sources
from jobserver.exceptions import IllegalTransition, InvalidRequest
from jobserver.requester import PLANNER_ITSELF, Requester
from jobserver.schedules.spec import Ident
from jobserver.spec import Policy, StrictModel, refuse, validate_job
from jobserver.states import Operation
from jobserver.store import Store
from jobserver.store.jobs import KeyedSubmit

log = logging.getLogger(__name__)


class RunRequest(StrictModel):
    """The body of ``POST /api/v1/batches/run``."""

    system: Ident
    location: Ident
    stage: Ident | None = Field(default=None, description="left out: every stage in order")
    context: dict[str, Ident] = Field(default_factory=dict, max_length=16)
    business_date: date | None = Field(default=None, description="this date only")
    watermark: date | None = Field(default=None, description="for {given: true} sources")


@dataclass(frozen=True)
class Scope:
    """What a run covers: the config, the system's entry and the stages, in order."""

    config: BatchConfig
    system: SystemStages
    stages: list[str]

    @property
    def first(self) -> bool:
        return self.stages[0] == self.system.stages[0]


def _field(field: str, message: str) -> None:
    refuse([{"field": field, "message": message}])


def scope_of(store: Store, request: RunRequest, policy: Policy) -> Scope:
    """Check the request against its system's config; the stages it runs."""
    config = batch_config_catalog(store).for_system(request.system)
    entry = config.system(request.system) if config else None
    if config is None or entry is None:
        _field("system", f"unknown system {request.system!r}: no batch config maps it")
        raise AssertionError("unreachable")
    valid = config.spec.valid_locations
    if valid is not None and request.location not in valid:
        _field("location", f"unknown location {request.location!r}; expected one of {valid}")
    _check_context(config, request)
    if request.stage is None:
        stages = list(entry.stages)
    elif request.stage not in entry.stages:
        known = request.stage in config.spec.valid_stages
        _field("stage", f"stage {request.stage!r} is not mapped to system {request.system!r}"
               if known else f"unknown stage {request.stage!r}")
        raise AssertionError("unreachable")
    else:
        pair = config.pair_of(request.system, request.stage)
        stages = [s for s in entry.stages if s in pair]
    for stage in stages:  # every stage job must compose and pass the node's policy
        validate_job(stage_job(config, request.system, request.location, request.context,
                               date(2000, 1, 1), stage, 0), policy)
    return Scope(config, entry, stages)


def _check_context(config: BatchConfig, request: RunRequest) -> None:
    columns = config.context_columns(request.system)
    for name, value in request.context.items():
        if name not in columns:
            _field(f"context.{name}", f"system {request.system!r} has no context column "
                   f"{name!r}; expected one of {sorted(columns)}")
        column = columns[name]
        if column is not None and column.values is not None and value not in column.values:
            _field(f"context.{name}", f"unknown value {value!r}; expected one of "
                   f"{column.values}")


def plan_run(store: Store, request: RunRequest, policy: Policy,
             sources: Sources | None = None,
             requester: Requester = PLANNER_ITSELF) -> RunRecord:
    """Plan and start a run (see the module) for ``requester``; a run with nothing to
    do says why. ``sources``: where this node reads file and SQL watermarks (None: only
    watermarks given with the run); the watermark is read before any write, outside
    the store's transaction. Every stage job the plan will launch is charged to the
    requester's submit budget before the run is written, and names the requester."""
    scope = scope_of(store, request, policy)
    watermark = None
    if scope.first:
        params = {"system": request.system, "location": request.location,
                  **request.context}
        watermark = read_source(scope.system.watermark, request.watermark
                                or request.business_date, sources, params)
        if watermark is None:
            _field("watermark", f"no watermark for system {request.system!r}: pass one "
                   "with the run (--watermark) or fix its source")
            raise AssertionError("unreachable")
        if request.business_date is not None and request.business_date > watermark:
            _field("business_date", f"{request.business_date} is after the watermark "
                   f"{watermark}")
        period = _period(scope, request)
        if request.business_date is not None and \
                period_end(request.business_date, period) != request.business_date:
            _field("business_date", f"{request.business_date} is not a business date of "
                   f"a {period.value} system: month ends only")
    with batch_store(store).write() as conn:
        note = _add_batches(store, conn, scope, request, watermark)
        found = batch_store(store).open_batches(conn, request.system, request.location,
                                                request.context, request.business_date)
        plan = _plan(scope, found)
        if not plan:
            return _nothing(store, conn, request, note)
        requester.charge(len(plan))
        run_id = batch_store(store).insert_run(conn, request.system, request.location,
                                               request.context, request.stage, plan,
                                               RunStatus.RUNNING, requester=requester.actor)
        advance(store, conn, scope.config, batch_store(store).run_in(conn, run_id), policy)
        return batch_store(store).run_in(conn, run_id)


def _add_batches(store: Store, conn: Connection, scope: Scope, request: RunRequest,
                 watermark: date | None) -> str:
    """Add the new business dates' batches; says what it found."""
    if not scope.first or watermark is None:
        return "only the system's first stage adds business dates"
    period = _period(scope, request)
    last = batch_store(store).last_business_date(conn, request.system, request.location,
                                                 request.context)
    if request.business_date is not None:
        dates = [request.business_date]
        if last is None or request.business_date > last:
            # The periods before it are added too (NOT_STARTED, not run now): later
            # runs add dates after the newest only, and would never add these.
            dates = sorted(set(periods(last, scope.system.start_date,
                                       request.business_date, period)) | set(dates))
    else:
        dates = periods(last, scope.system.start_date, watermark, period)
    added = batch_store(store).create_batches(conn, request.system, request.location,
                                              request.context, dates, list(scope.system.stages))
    return (f"{added} new business date(s) up to the watermark {watermark}" if added else
            f"no new business date after {last} (watermark {watermark})")


def _period(scope: Scope, request: RunRequest) -> Period:
    """The system's frequency, or the run's ``frequency`` context column's."""
    period = scope.system.frequency
    if request.context.get("frequency") in ("daily", "monthly"):
        period = Period(request.context["frequency"])
    return period


def _plan(scope: Scope, found: list[BatchRecord]) -> list[PlanItem]:
    """The run's items: per group of stages (a pair, or one stage) in the system's
    order, per eligible date, the group's stages not SUCCESS yet."""
    order = list(scope.system.stages)
    before = order[order.index(scope.stages[0]) - 1] if not scope.first else None
    eligible = [batch for batch in found
                if any(_status(batch, s) is not Status.SUCCESS for s in scope.stages)
                and (before is None or _status(batch, before) is Status.SUCCESS)]
    eligible = eligible[:scope.config.spec.catch_up_limit]
    items: list[PlanItem] = []
    for group in _stage_groups(scope):
        for batch in eligible:
            items += [PlanItem(batch.id, batch.business_date, stage) for stage in group
                      if _status(batch, stage) is not Status.SUCCESS]
    return items


def _stage_groups(scope: Scope) -> list[list[str]]:
    groups: list[list[str]] = []
    for stage in scope.stages:
        pair = scope.config.pair_of(scope.system.system, stage)
        if groups and stage in pair and groups[-1][0] in pair:
            groups[-1].append(stage)
        else:
            groups.append([stage])
    return groups


def _status(batch: BatchRecord, stage: str) -> Status:
    record = batch.stage(stage)
    return record.status if record else Status.NOT_STARTED


def _nothing(store: Store, conn: Connection, request: RunRequest, note: str) -> RunRecord:
    message = f"nothing to run: {note}; every batch in scope is SUCCESS or waits for an " \
              "earlier stage"
    run_id = batch_store(store).insert_run(conn, request.system, request.location, request.context,
                                           request.stage, [], RunStatus.NOTHING, message)
    return batch_store(store).run_in(conn, run_id)


def advance(store: Store, conn: Connection, config: BatchConfig | None, run: RunRecord,
            policy: Policy) -> None:
    """Move ``run`` past its finished items and launch the next one; a stage that this
    run launched and that FAILED ends the run FAILED."""
    position, status, message = run.position, RunStatus.RUNNING, None
    while position < len(run.plan):
        item = run.plan[position]
        stage = batch_store(store).stage(conn, item.batch_id, item.stage)
        if stage.status is Status.SUCCESS:
            position += 1
            continue
        if stage.status is Status.FAILED and stage.run_id == run.id:
            status = RunStatus.FAILED
            message = f"{item.stage} of {item.business_date} FAILED: {stage.message}"
        elif stage.status is not Status.RUNNING:
            problem = launch(store, conn, config, run, item, stage, policy)
            if problem:
                status, message = RunStatus.FAILED, problem
        break
    else:
        status = RunStatus.SUCCESS
    if (position, status) != (run.position, run.status):
        batch_store(store).move_run(conn, run, position, status, message)


def launch(store: Store, conn: Connection, config: BatchConfig | None, run: RunRecord,
           item: PlanItem, stage: StageRecord, policy: Policy) -> str | None:
    """Start the item's stage (again) for ``run``, once; a problem that stops the run."""
    if config is None:
        return f"no batch config maps system {run.system!r} any more"
    try:
        spec = stage_job(config, run.system, run.location, run.context, item.business_date,
                         item.stage, item.batch_id)
        dependencies = validate_job(spec, policy)
    except InvalidRequest as exc:
        return f"{item.stage} of {item.business_date} cannot start: {exc.message}"
    if not batch_store(store).claim_stage(conn, stage, run.id):
        return None  # another run or node moved it: the next round sees where it is
    actor = Requester(run.requester).on_behalf(f"batch {run.system}/{run.location}")
    if (stage.status is Status.FAILED and stage.job_id is not None
            and config.resume_from_failure(run.system, item.stage)):
        try:  # the engine's resume: succeeded steps are skipped
            store.jobs.apply_in(conn, stage.job_id, Operation.RESUME, actor)
            return None
        except IllegalTransition:
            pass  # the job is no longer resumable: start the stage over
    key = launch_key(run.system, run.location, run.context, item.business_date, item.stage,
                     stage.runs + 1)
    job_ids = store.jobs.submit_keyed([KeyedSubmit(spec, dependencies, key, None, actor)],
                                      conn=conn)
    batch_store(store).set_stage_job(conn, item.batch_id, item.stage, job_ids[key])
    log.info("batch %s/%s %s: stage %s launched as job %s (run %s)", run.system, run.location,
             item.business_date, item.stage, job_ids[key], run.id)
    return None

