"""The PostgreSQL submit as one statement: job, steps, audit row and wake-up at once.

Every round trip between stamping a job's ``created_at`` and the COMMIT that makes it
visible (and delivers the NOTIFY that wakes idle schedulers) delays the job's start.
The statement ``submit`` of ``queries.sql`` writes the job, its steps, its first audit
row and the notification on an autocommit connection, so the job is committed, and
the schedulers woken, as the statement returns.

As the claim does (:mod:`jobserver.store.pgclaim`), it runs on the driver's cursor,
skipping SQLAlchemy's per-parameter and per-row processing: the API is CPU-bound
under load. The driver gives timestamps in the session's time zone, so they are
turned to UTC here by the store's column type's own conversion.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection

from jobserver.store.models import UTCDateTime, as_utc
from jobserver.store.pgclaim import step_from_json
from jobserver.store.queries import driver_rows
from jobserver.store.records import JobRecord
from jobserver.store.tables import jobs

# The statement returns the job's columns in the model's order, then its steps.
_JOB_NAMES = [column.name for column in jobs.c]
_TIMES = [column.name for column in jobs.c if isinstance(column.type, UTCDateTime)]


def submit(conn: Connection, values: dict[str, Any], step_rows: list[dict[str, Any]],
           channel: str | None) -> JobRecord:
    """Insert one job (``values``: its ``jobs`` columns) with its steps, on an
    autocommit connection; NOTIFY ``channel`` unless None. Returns the job as stored."""
    params = dict(values, params=json.dumps(values["params"]), steps=json.dumps(step_rows),
                  channel=channel, inputs=(None if values["inputs"] is None
                                           else json.dumps(values["inputs"])))
    rows = driver_rows(conn, "submit", params)
    assert rows  # the INSERT's RETURNING gives the new job's row
    row = rows[0]
    job = dict(zip(_JOB_NAMES, row))
    for name in _TIMES:  # the session's time zone may not be UTC; the API speaks UTC
        job[name] = as_utc(job[name])
    steps = [step_from_json(item) for item in row[len(_JOB_NAMES)] or []]
    # A job with upstreams takes another path (jobserver.store.dependencies).
    return JobRecord.from_row(job, steps=steps, steps_total=len(steps), after=[])


def submit_keyed(conn: Connection, rows: list[dict[str, Any]],
                 channel: str | None) -> dict[str, int]:
    """Insert jobs (``rows``: their ``jobs`` columns, each with ``steps``) under their
    idempotency keys, on an autocommit connection; returns ``{key: id}`` of the jobs
    created (a key in use creates nothing)."""
    found = driver_rows(conn, "submit_keyed", {"jobs": _document(rows), "channel": channel})
    return {key: int(job_id) for job_id, key, _woken in found}


def submit_batch(conn: Connection, rows: list[dict[str, Any]],
                 channel: str | None) -> list[tuple[int, int, bool, bool]]:
    """Insert a batch of jobs (``rows``: their ``jobs`` columns, each with ``ord``, its
    index in the batch, and ``steps``) by the statement ``submit_batch``, on an
    autocommit connection, all or nothing; returns ``(ord, id, created, conflict)`` of
    each item, or only of those found under their keys when any of them conflicts
    (then nothing was inserted)."""
    found = driver_rows(conn, "submit_batch", {"jobs": _document(rows), "channel": channel})
    return [(int(ordinal), int(job_id), bool(created), bool(conflict))
            for ordinal, job_id, created, conflict, _woken in found]


def _document(rows: list[dict[str, Any]]) -> str:
    """Jobs' columns as the JSON array a many-job statement unpacks."""
    return json.dumps([dict(row, not_before=(row["not_before"].isoformat()
                                             if row["not_before"] else None))
                       for row in rows])
