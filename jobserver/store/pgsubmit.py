"""The PostgreSQL submit as one statement: job, steps, audit row and wake-up at once.

As separate statements a submit was six round trips between stamping the job's
``created_at`` and the COMMIT that makes it visible (and delivers the NOTIFY that
wakes idle schedulers); each delayed the job's start. Here the job, its steps, its
first audit row and the notification are one statement on an autocommit connection,
so the job is committed, and the schedulers woken, as the statement returns.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import JSON, Connection, text

from jobserver.store.pgclaim import step_from_json
from jobserver.store.records import JobRecord
from jobserver.store.tables import jobs

_SUBMIT = """
WITH job AS (
  INSERT INTO jobs (name, state, priority, lock_key, assigned_servers, params, parallelism,
                    not_before, idempotency_key, request_hash, fence, attempt, created_at,
                    updated_at)
  VALUES (:name, 'READY', :priority, :lock_key, :assigned_servers, CAST(:params AS json),
          :parallelism, :not_before, :idempotency_key, :request_hash, 0, 0,
          clock_timestamp(), clock_timestamp())
  RETURNING *
), step AS (
  INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries,
                     retry_backoff, retryable, state, attempt)
  SELECT job.id, v.position, v.name, v.type, v.spec, v.depends_on, v.retries,
         v.retry_backoff, v.retryable, 'READY', 0
  FROM job, json_to_recordset(CAST(:steps AS json)) AS v(
    position int, name text, type text, spec json, depends_on json, retries int,
    retry_backoff float8, retryable boolean)
  RETURNING *
), audit AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at)
  SELECT id, NULL, NULL, 'READY', NULL, NULL, NULL, 'submitted', clock_timestamp() FROM job
)
SELECT {columns}, (SELECT json_agg(step ORDER BY step.position) FROM step) AS step_rows{wake}
FROM job
"""
# pg_notify in the select list runs once, for the one row; the notification is
# delivered when the statement commits.
_WAKE = ", pg_notify(:channel, '') IS NULL AS woken"

_COLUMNS = ", ".join(f"job.{column.name}" for column in jobs.c)
_STATEMENTS = {
    notify: text(_SUBMIT.format(columns=_COLUMNS, wake=_WAKE if notify else "").strip())
    .columns(*jobs.c, step_rows=JSON)
    for notify in (True, False)}


def submit(conn: Connection, values: dict[str, Any], step_rows: list[dict[str, Any]],
           channel: str | None) -> JobRecord:
    """Insert one job (``values``: its ``jobs`` columns) with its steps, on an
    autocommit connection; NOTIFY ``channel`` unless None. Returns the job as stored."""
    params = dict(values, params=json.dumps(values["params"]), steps=json.dumps(step_rows))
    if channel is not None:
        params["channel"] = channel
    row = conn.execute(_STATEMENTS[channel is not None], params).one()
    steps = [step_from_json(item) for item in row.step_rows or []]
    return JobRecord.from_row(row._mapping, steps=steps, steps_total=len(steps))

