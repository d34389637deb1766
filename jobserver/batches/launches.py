"""The runtime audit's stage launches: a row per launch of a stage, never overwritten.

Guzzle's runtime audit (seed 003) has an entry per work-unit instance, made when it
starts (RUNNING, its start time) and closed when it ends (end time, SUCCESS or FAILED,
the failure's message, its stats); rerunning a FAILED stage processes it again as a new
instance. The control table's stage row is the stage's present (a rerun clears its
message and names the new job); ``batch_stage_launches`` keeps every launch:

* :func:`open_launch` adds the row (``launch``: the stage's new ``runs``, the launch
  key's last part) in the compare-and-set that launches the stage, and
  :func:`name_job` names its engine job, in the same transaction;
* :func:`close_launch` closes it in the compare-and-set that settles the stage, and
  copies its job's steps as its job units (:func:`job_units`): a resumed job runs its
  steps again in place and retention deletes old jobs, so the engine's rows describe
  only the newest launch, and only while its job lasts.

Invariant: a closed launch row is never written again.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from jobserver.batches.records import LaunchRecord, Status
from jobserver.batches.tables import batch_stage_launches, batch_stages
from jobserver.store.engine import store_now
from jobserver.store.records import StepRecord
from jobserver.store.tables import steps

#: A step's engine state in the audit's words.
STEP_STATUS = {"READY": "NOT_STARTED", "RUNNING": "RUNNING", "SUCCEED": "SUCCESS",
               "ERROR": "FAILED", "STOPPED": "STOPPED", "DISCARDED": "DISCARDED"}
_launches = batch_stage_launches


def open_launch(conn: Connection, batch_id: int, stage: str, launch: int, run_id: int,
                job_id: int | None) -> None:
    """The row of a launch just claimed, RUNNING. ``job_id``: the job it runs when
    known (a resume runs the stage's job again); a new job is named by :func:`name_job`."""
    conn.execute(insert(_launches).values(
        batch_id=batch_id, stage=stage, launch=launch, job_id=job_id, run_id=run_id,
        status=Status.RUNNING.value, started_at=store_now()))


def name_job(conn: Connection, batch_id: int, stage: str, job_id: int) -> None:
    """The stage's newest launch runs engine job ``job_id``."""
    newest = select(batch_stages.c.runs).where(
        batch_stages.c.batch_id == batch_id, batch_stages.c.stage == stage).scalar_subquery()
    conn.execute(update(_launches).where(
        _launches.c.batch_id == batch_id, _launches.c.stage == stage,
        _launches.c.launch == newest, _launches.c.finished_at.is_(None)).values(job_id=job_id))


def close_launch(conn: Connection, batch_id: int, stage: str, launch: int, job_id: int,
                 status: Status, message: str | None, finished_at: datetime | None) -> None:
    """End launch ``launch`` as its stage was settled, its job's steps copied."""
    units = job_units(read_steps(conn, [job_id]).get(job_id, []))
    conn.execute(update(_launches).where(
        _launches.c.batch_id == batch_id, _launches.c.stage == stage,
        _launches.c.launch == launch, _launches.c.status == Status.RUNNING.value)
        .values(status=status.value, message=message, job_id=job_id,
                finished_at=finished_at if finished_at is not None else store_now(),
                jobs=units))


def launches_of(conn: Connection,
                batch_ids: list[int]) -> dict[tuple[int, str], list[LaunchRecord]]:
    """The launches of these batches by (batch, stage), first launch first."""
    found: dict[tuple[int, str], list[LaunchRecord]] = {}
    if batch_ids:
        query = select(_launches).where(_launches.c.batch_id.in_(batch_ids)).order_by(
            _launches.c.batch_id, _launches.c.stage, _launches.c.launch)
        for row in conn.execute(query).mappings():
            record = LaunchRecord.from_row(row)
            found.setdefault((record.batch_id, record.stage), []).append(record)
    return found


def read_steps(conn: Connection, job_ids: Iterable[int]) -> dict[int, list[StepRecord]]:
    """The engine's steps of these jobs, in position order."""
    wanted = sorted(set(job_ids))
    found: dict[int, list[StepRecord]] = {}
    if wanted:
        for row in conn.execute(select(steps).where(steps.c.job_id.in_(wanted))
                                .order_by(steps.c.job_id, steps.c.position)).mappings():
            found.setdefault(row["job_id"], []).append(StepRecord.from_row(row))
    return found


def job_units(records: list[StepRecord]) -> list[dict[str, Any]]:
    """A job's steps as the audit's job units (JSON: times in ISO 8601), in order."""
    return [{"name": step.name, "status": STEP_STATUS.get(step.state.value, step.state.value),
             "start_time": _iso(step.started_at), "end_time": _iso(step.finished_at),
             "message": step.error, "metrics": step_metrics(step)} for step in records]


def step_metrics(step: StepRecord) -> dict[str, Any]:
    """What a step used (cpu and wall milliseconds, peak RSS) and the metrics it reported."""
    metrics: dict[str, Any] = {}
    if step.cpu_seconds is not None:
        metrics["cpu_milliseconds"] = round(step.cpu_seconds * 1000)
    if step.wall_seconds is not None:
        metrics["wall_milliseconds"] = round(step.wall_seconds * 1000)
    if step.peak_rss_kb is not None:
        metrics["peak_rss_kb"] = step.peak_rss_kb
    metrics.update(step.metrics or {})
    return metrics


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
