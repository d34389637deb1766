"""The runtime audit (Guzzle's queryable audit), read from the engine's own audit.

One row per work unit: a batch, each of its stages, and each job (step) of a stage's
newest engine job. Nothing is copied: stage rows come from the control table, job rows
from the engine's ``steps`` (start, end, error, cpu seconds, the metrics the step
reported), joined through the stage's ``job_id``. An ``instance_id`` is its parent's
plus a suffix, as the seed's "2018030101010101-dedup": batch ``17``, stage ``17-FND``,
job ``17-FND-load_orders``. A stage's earlier runs (reruns) are the engine's jobs under
the launch keys ``batch/…/<stage>/<run#>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import select

from jobserver.batches.records import BatchRecord, StageRecord
from jobserver.batches.store import BatchFilter, BatchStore
from jobserver.store import Transactions
from jobserver.store.records import StepRecord
from jobserver.store.tables import steps

WORK_UNITS = ("batch", "stage", "job")
#: A step's engine state in the audit's words.
STEP_STATUS = {"READY": "NOT_STARTED", "RUNNING": "RUNNING", "SUCCEED": "SUCCESS",
               "ERROR": "FAILED", "STOPPED": "STOPPED", "DISCARDED": "DISCARDED"}
AUDIT_STATUSES = ("NOT_STARTED", "RUNNING", "SUCCESS", "FAILED", "STOPPED", "DISCARDED")


@dataclass(frozen=True)
class AuditFilter:
    system: str | None = None
    location: str | None = None
    since: date | None = None
    until: date | None = None
    stage: str | None = None
    work_unit: str | None = None
    status: str | None = None
    limit: int = 100  # batches


@dataclass(frozen=True)
class AuditRow:
    instance_id: str
    system: str
    location: str
    business_date: date
    work_unit: str
    work_unit_name: str
    parent_id: str | None
    parent_unit: str | None
    status: str
    start_time: datetime | None
    end_time: datetime | None
    message: str | None
    metrics: dict[str, Any]
    job_id: int | None


class BatchAudit:
    def __init__(self, tx: Transactions, batches: BatchStore) -> None:
        self._tx = tx
        self._batches = batches

    def rows(self, where: AuditFilter) -> list[AuditRow]:
        """The work units of the batches ``where`` selects, newest business date first,
        each batch followed by its stages, each stage by its jobs."""
        found = self._batches.list(BatchFilter(system=where.system, location=where.location,
                                               since=where.since, until=where.until,
                                               limit=where.limit))
        return self._units(found, where)

    def of_batch(self, batch: BatchRecord) -> list[AuditRow]:
        """The work units of one batch (as :meth:`BatchStore.get` reads it): it, its
        stages, their jobs."""
        return self._units([batch], AuditFilter())

    def _units(self, found: list[BatchRecord], where: AuditFilter) -> list[AuditRow]:
        job_steps = self._steps([s.job_id for b in found for s in b.stages if s.job_id])
        rows: list[AuditRow] = []
        for batch in found:
            rows.append(_batch_row(batch))
            for stage in batch.stages:
                if where.stage is not None and stage.stage != where.stage:
                    continue
                rows.append(_stage_row(batch, stage))
                rows += [_job_row(batch, stage, step)
                         for step in job_steps.get(stage.job_id or 0, [])]
        return [row for row in rows
                if (where.work_unit is None or row.work_unit == where.work_unit)
                and (where.status is None or row.status == where.status)]

    def _steps(self, job_ids: list[int]) -> dict[int, list[StepRecord]]:
        found: dict[int, list[StepRecord]] = {}
        if not job_ids:
            return found
        with self._tx.read() as conn:
            for row in conn.execute(select(steps).where(steps.c.job_id.in_(job_ids))
                                    .order_by(steps.c.job_id, steps.c.position)).mappings():
                found.setdefault(row["job_id"], []).append(StepRecord.from_row(row))
        return found


def _common(batch: BatchRecord) -> dict[str, Any]:
    return {"system": batch.system, "location": batch.location,
            "business_date": batch.business_date}


def _batch_row(batch: BatchRecord) -> AuditRow:
    starts = [s.started_at for s in batch.stages if s.started_at]
    ends = [s.finished_at for s in batch.stages if s.finished_at]
    done = batch.status.value in ("SUCCESS", "FAILED")
    name = f"{batch.system}/{batch.location}/{batch.business_date.isoformat()}"
    if batch.context:
        name += "/" + ",".join(f"{k}={v}" for k, v in sorted(batch.context.items()))
    return AuditRow(str(batch.id), work_unit="batch", work_unit_name=name, parent_id=None,
                    parent_unit=None, status=batch.status.value,
                    start_time=min(starts) if starts else None,
                    end_time=max(ends) if ends and done else None, message=None,
                    metrics={}, job_id=None, **_common(batch))


def _stage_row(batch: BatchRecord, stage: StageRecord) -> AuditRow:
    return AuditRow(f"{batch.id}-{stage.stage}", work_unit="stage",
                    work_unit_name=stage.stage, parent_id=str(batch.id), parent_unit="batch",
                    status=stage.status.value, start_time=stage.started_at,
                    end_time=stage.finished_at, message=stage.message,
                    metrics={"runs": stage.runs}, job_id=stage.job_id, **_common(batch))


def _job_row(batch: BatchRecord, stage: StageRecord, step: StepRecord) -> AuditRow:
    metrics: dict[str, Any] = {}
    if step.cpu_seconds is not None:
        metrics["cpu_milliseconds"] = round(step.cpu_seconds * 1000)
    if step.wall_seconds is not None:
        metrics["wall_milliseconds"] = round(step.wall_seconds * 1000)
    if step.peak_rss_kb is not None:
        metrics["peak_rss_kb"] = step.peak_rss_kb
    metrics.update(step.metrics or {})
    parent = f"{batch.id}-{stage.stage}"
    return AuditRow(f"{parent}-{step.name}", work_unit="job", work_unit_name=step.name,
                    parent_id=parent, parent_unit="stage",
                    status=STEP_STATUS.get(step.state.value, step.state.value),
                    start_time=step.started_at, end_time=step.finished_at,
                    message=step.error, metrics=metrics, job_id=stage.job_id,
                    **_common(batch))
