"""JSON shapes of the batch routes' responses (documented in
:mod:`jobserver.batches.openapi`)."""

from __future__ import annotations

from typing import Any

from jobserver.api.serialize import time_text
from jobserver.batches.audit import AuditRow
from jobserver.batches.records import BatchRecord, ConfigRecord, RunRecord, StageRecord


def stage_json(stage: StageRecord) -> dict[str, Any]:
    return {"stage": stage.stage, "status": stage.status.value, "job_id": stage.job_id,
            "runs": stage.runs, "run_id": stage.run_id, "message": stage.message,
            "started_at": time_text(stage.started_at),
            "finished_at": time_text(stage.finished_at)}


def batch_json(batch: BatchRecord) -> dict[str, Any]:
    return {"id": batch.id, "system": batch.system, "location": batch.location,
            "context": batch.context, "business_date": batch.business_date.isoformat(),
            "status": batch.status.value, "created_at": time_text(batch.created_at),
            "updated_at": time_text(batch.updated_at),
            "stages": [stage_json(stage) for stage in batch.stages]}


def run_json(run: RunRecord) -> dict[str, Any]:
    return {"id": run.id, "system": run.system, "location": run.location,
            "context": run.context, "stage": run.stage, "status": run.status.value,
            "plan": [item.as_json() for item in run.plan], "position": run.position,
            "message": run.message, "created_at": time_text(run.created_at),
            "updated_at": time_text(run.updated_at),
            "finished_at": time_text(run.finished_at)}


def audit_json(row: AuditRow) -> dict[str, Any]:
    return {"instance_id": row.instance_id, "system": row.system, "location": row.location,
            "business_date": row.business_date.isoformat(), "work_unit": row.work_unit,
            "work_unit_name": row.work_unit_name, "parent_id": row.parent_id,
            "parent_unit": row.parent_unit, "status": row.status,
            "start_time": time_text(row.start_time), "end_time": time_text(row.end_time),
            "message": row.message, "metrics": row.metrics, "job_id": row.job_id,
            "launch": row.launch}


def config_json(config: ConfigRecord) -> dict[str, Any]:
    return {"name": config.name, "id": config.id, "spec": config.spec,
            "spec_hash": config.spec_hash, "systems": config.systems,
            "created_at": time_text(config.created_at),
            "updated_at": time_text(config.updated_at)}
