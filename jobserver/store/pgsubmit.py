"""The PostgreSQL submit as one statement: job, steps, audit row and wake-up at once.

As separate statements a submit was six round trips between stamping the job's
``created_at`` and the COMMIT that makes it visible (and delivers the NOTIFY that
wakes idle schedulers); each delayed the job's start. Here the job, its steps, its
first audit row and the notification are one statement on an autocommit connection,
so the job is committed, and the schedulers woken, as the statement returns.

As the claim does (:mod:`jobserver.store.pgclaim`), it runs on the driver's cursor:
through SQLAlchemy's parameter and result processing a submit cost 0.93 ms of CPU,
on the cursor 0.53 (one process, submits back to back), and the API is CPU-bound
under load. The driver gives timestamps in the session's time zone, so they are
turned to UTC here by the store's column type's own conversion.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection

from jobserver.store.models import UTCDateTime, as_utc
from jobserver.store.pgclaim import step_from_json
from jobserver.store.records import JobRecord
from jobserver.store.tables import jobs

_SUBMIT = """
WITH job AS (
  INSERT INTO jobs (name, state, priority, lock_key, assigned_servers, params, parallelism,
                    not_before, idempotency_key, request_hash, fence, attempt, created_at,
                    updated_at)
  VALUES (%(name)s, 'READY', %(priority)s, %(lock_key)s, %(assigned_servers)s,
          CAST(%(params)s AS json), %(parallelism)s, %(not_before)s, %(idempotency_key)s,
          %(request_hash)s, 0, 0, clock_timestamp(), clock_timestamp())
  RETURNING *
), step AS (
  INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries,
                     retry_backoff, retryable, state, attempt)
  SELECT job.id, v.position, v.name, v.type, v.spec, v.depends_on, v.retries,
         v.retry_backoff, v.retryable, 'READY', 0
  FROM job, json_to_recordset(CAST(%(steps)s AS json)) AS v(
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
_WAKE = ", pg_notify(%(channel)s, '') IS NULL AS woken"

_JOB_NAMES = [column.name for column in jobs.c]
_COLUMNS = ", ".join(f"job.{name}" for name in _JOB_NAMES)
_TIMES = [column.name for column in jobs.c if isinstance(column.type, UTCDateTime)]
_STATEMENTS = {notify: _SUBMIT.format(columns=_COLUMNS, wake=_WAKE if notify else "").strip()
               for notify in (True, False)}


def submit(conn: Connection, values: dict[str, Any], step_rows: list[dict[str, Any]],
           channel: str | None) -> JobRecord:
    """Insert one job (``values``: its ``jobs`` columns) with its steps, on an
    autocommit connection; NOTIFY ``channel`` unless None. Returns the job as stored."""
    params = dict(values, params=json.dumps(values["params"]), steps=json.dumps(step_rows))
    if channel is not None:
        params["channel"] = channel
    cursor = conn.connection.cursor()
    try:
        cursor.execute(_STATEMENTS[channel is not None], params)
        row = cursor.fetchone()
    finally:
        cursor.close()
    assert row is not None  # the INSERT's RETURNING gives the new job's row
    job = dict(zip(_JOB_NAMES, row))
    for name in _TIMES:  # the session's time zone may not be UTC; the API speaks UTC
        job[name] = as_utc(job[name])
    steps = [step_from_json(item) for item in row[len(_JOB_NAMES)] or []]
    return JobRecord.from_row(job, steps=steps, steps_total=len(steps))
