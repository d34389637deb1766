"""The runtime audit (Guzzle's queryable audit): a row per work-unit instance, kept.

One row per batch, per launch of each of its stages, and per job (step) of each
launch's engine job. The seed's audit has an entry per instance, opened when it
starts and closed when it ends; a rerun of a FAILED stage is a new instance, and the
failed one stays, with its status, times, message and its jobs' metrics. Stage
launches are ``batch_stage_launches`` rows (:mod:`jobserver.batches.launches`); a
launch's jobs are the copy taken when it ended, or, while it runs (and for launches
from before migration 0018), its engine job's ``steps`` read live. A stage never
launched has no row yet (the control table shows it NOT_STARTED).

An ``instance_id`` is its parent's plus a suffix, as the seed's "2018030101010101-
dedup": batch ``17``, the second launch of its stage FND ``17-FND-2`` (the launch key's
``batch/…/FND/2``), a job of it ``17-FND-2-load_orders``; ``job_id`` is the engine job
that ran it (a resumed launch runs the same job again).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from jobserver.batches.launches import job_units, launches_of, read_steps
from jobserver.batches.records import BatchRecord, LaunchRecord
from jobserver.batches.store import BatchFilter, BatchStore
from jobserver.store import Transactions

WORK_UNITS = ("batch", "stage", "job")
AUDIT_STATUSES = ("NOT_STARTED", "RUNNING", "SUCCESS", "FAILED", "STOPPED", "DISCARDED")
#: Job metrics a stage launch's row totals over its jobs.
TOTALS = ("cpu_milliseconds", "records_out")

Launches = dict[tuple[int, str], list[LaunchRecord]]


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
    launch: int | None = None  # a stage's launch number (its rows' and its jobs')


class BatchAudit:
    def __init__(self, tx: Transactions, batches: BatchStore) -> None:
        self._tx = tx
        self._batches = batches

    def rows(self, where: AuditFilter) -> list[AuditRow]:
        """The work units of the batches ``where`` selects, newest business date first,
        each batch followed by its stages' launches (stage order, then launch order),
        each launch by its jobs."""
        found = self._batches.list(BatchFilter(system=where.system, location=where.location,
                                               since=where.since, until=where.until,
                                               limit=where.limit))
        return self._units(found, where)

    def of_batch(self, batch: BatchRecord) -> list[AuditRow]:
        """The work units of one batch (as :meth:`BatchStore.get` reads it): it, its
        stages' launches, their jobs."""
        return self._units([batch], AuditFilter())

    def _units(self, found: list[BatchRecord], where: AuditFilter) -> list[AuditRow]:
        launches, live = self._launches([batch.id for batch in found])
        rows: list[AuditRow] = []
        for batch in found:
            rows.append(_batch_row(batch, launches))
            for stage in batch.stages:
                if where.stage is not None and stage.stage != where.stage:
                    continue
                for launch in launches.get((batch.id, stage.stage), []):
                    units = launch.jobs if launch.jobs is not None else \
                        live.get(launch.job_id or 0, [])
                    rows.append(_launch_row(batch, launch, units))
                    rows += [_job_row(batch, launch, unit) for unit in units]
        return [row for row in rows
                if (where.work_unit is None or row.work_unit == where.work_unit)
                and (where.status is None or row.status == where.status)]

    def _launches(self, batch_ids: list[int]) -> tuple[Launches, dict[int, list[dict]]]:
        """The batches' launches, and the live job units of those not closed yet."""
        with self._tx.read() as conn:
            launches = launches_of(conn, batch_ids)
            open_jobs = [launch.job_id for found in launches.values() for launch in found
                         if launch.jobs is None and launch.job_id is not None]
            live = {job_id: job_units(records)
                    for job_id, records in read_steps(conn, open_jobs).items()}
        return launches, live


def _common(batch: BatchRecord) -> dict[str, Any]:
    return {"system": batch.system, "location": batch.location,
            "business_date": batch.business_date}


def _batch_row(batch: BatchRecord, launches: Launches) -> AuditRow:
    """The batch: from its first launch's start to its last one's end, once done."""
    ran = [launch for stage in batch.stages for launch in launches.get((batch.id, stage.stage), [])]
    starts = [launch.started_at for launch in ran if launch.started_at]
    ends = [launch.finished_at for launch in ran if launch.finished_at]
    done = batch.status.value in ("SUCCESS", "FAILED")
    name = f"{batch.system}/{batch.location}/{batch.business_date.isoformat()}"
    if batch.context:
        name += "/" + ",".join(f"{k}={v}" for k, v in sorted(batch.context.items()))
    return AuditRow(str(batch.id), work_unit="batch", work_unit_name=name, parent_id=None,
                    parent_unit=None, status=batch.status.value,
                    start_time=min(starts) if starts else None,
                    end_time=max(ends) if ends and done else None, message=None,
                    metrics={}, job_id=None, **_common(batch))


def _launch_row(batch: BatchRecord, launch: LaunchRecord,
                units: list[dict[str, Any]]) -> AuditRow:
    metrics: dict[str, Any] = {}
    for name in TOTALS:
        values = [unit["metrics"][name] for unit in units
                  if isinstance(unit["metrics"].get(name), (int, float))]
        if values:
            metrics[name] = sum(values)
    return AuditRow(f"{batch.id}-{launch.stage}-{launch.launch}", work_unit="stage",
                    work_unit_name=launch.stage, parent_id=str(batch.id), parent_unit="batch",
                    status=launch.status.value, start_time=launch.started_at,
                    end_time=launch.finished_at, message=launch.message, metrics=metrics,
                    job_id=launch.job_id, launch=launch.launch, **_common(batch))


def _job_row(batch: BatchRecord, launch: LaunchRecord, unit: dict[str, Any]) -> AuditRow:
    parent = f"{batch.id}-{launch.stage}-{launch.launch}"
    return AuditRow(f"{parent}-{unit['name']}", work_unit="job", work_unit_name=unit["name"],
                    parent_id=parent, parent_unit="stage", status=unit["status"],
                    start_time=_time(unit["start_time"]), end_time=_time(unit["end_time"]),
                    message=unit["message"], metrics=dict(unit["metrics"]),
                    job_id=launch.job_id, launch=launch.launch, **_common(batch))


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)
