"""The PostgreSQL claim as one statement: one round trip from READY to a running step.

A claim moves READY jobs to RUNNING, starts each one's first runnable step, appends
the audit rows and hands back the jobs with their steps. Written as separate
statements that was five round trips (four statements and the commit); here it is one
statement of data-modifying CTEs run outside an explicit transaction, so the claim
commits as it returns. The dialect-neutral path in :mod:`jobserver.store.runs` stays
for SQLite, where a statement costs no round trip.

The rules are those of the neutral path: candidates are read in ``ix_jobs_queue``'s
order (``node`` is constant there; see the index) and locked with ``SKIP LOCKED``
in a materialized CTE (limited once, never rescanned); the UPDATE matches only while
the caller's lease is the newest of its key; a job's first runnable step is its
lowest-positioned READY step whose dependencies have all succeeded.

The result is one row per step, the job's columns beside each step's, in plain
column types: aggregating each job's steps as JSON cost the server a JSON object per
step and the node a JSON decode per job, and joining the started steps inside that
aggregate was quadratic in the batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from jobserver.states import State
from jobserver.store.models import as_utc
from jobserver.store.records import JobRecord, StepRecord
from jobserver.store.tables import jobs

_CLAIM = """
WITH candidates AS MATERIALIZED (
  SELECT id FROM jobs WHERE {candidates}
  ORDER BY node, priority DESC, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), claimed AS (
  UPDATE jobs SET state = 'RUNNING', {owner} attempt = jobs.attempt + 1, error = NULL,
         started_at = clock_timestamp(), finished_at = NULL, updated_at = clock_timestamp()
  WHERE jobs.id IN (SELECT id FROM candidates) AND jobs.state = 'READY' AND {guard}
  RETURNING jobs.*
), first AS (
  SELECT step.id FROM claimed CROSS JOIN LATERAL (
    SELECT s.id FROM steps AS s
    WHERE s.job_id = claimed.id AND s.state = 'READY' AND NOT EXISTS (
      SELECT 1 FROM json_array_elements_text(s.depends_on) AS dependency(name)
      WHERE NOT EXISTS (SELECT 1 FROM steps AS done WHERE done.job_id = s.job_id
                        AND done.name = dependency.name AND done.state = 'SUCCEED'))
    ORDER BY s.position LIMIT 1) AS step
), started AS (
  UPDATE steps SET state = 'RUNNING', attempt = steps.attempt + 1,
         started_at = clock_timestamp(), finished_at = NULL, exit_code = NULL, error = NULL
  WHERE steps.id IN (SELECT id FROM first) AND steps.state = 'READY'
  RETURNING steps.id, steps.job_id, steps.name, steps.attempt, steps.started_at
), audit AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at)
  SELECT id, NULL, 'READY', 'RUNNING', node, fence, attempt, NULL, clock_timestamp()
  FROM claimed
  UNION ALL
  SELECT started.job_id, started.name, 'READY', 'RUNNING', claimed.node, claimed.fence,
         started.attempt, NULL, clock_timestamp()
  FROM started JOIN claimed ON claimed.id = started.job_id
)
SELECT {job_columns},
  s.id, s.job_id, s.position, s.name, s.type, s.spec, s.depends_on, s.retries,
  s.retry_backoff, s.retryable,
  CASE WHEN started.id IS NULL THEN s.state ELSE 'RUNNING' END,
  COALESCE(started.attempt, s.attempt), COALESCE(started.started_at, s.started_at),
  CASE WHEN started.id IS NULL THEN s.finished_at END,
  CASE WHEN started.id IS NULL THEN s.exit_code END, s.output,
  CASE WHEN started.id IS NULL THEN s.error END,
  s.wall_seconds, s.cpu_seconds, s.peak_rss_kb, s.metrics
FROM claimed LEFT JOIN steps AS s ON s.job_id = claimed.id
LEFT JOIN started ON started.id = s.id
ORDER BY claimed.priority DESC, claimed.id, s.position
"""
# The statement sees the steps as they were before ``started`` changed them (all CTEs
# share one snapshot), hence the overrides from ``started`` in the select list.

#: Any node's claim: unassigned, due, allowed here; only under the newest lease.
_OPEN = dict(
    candidates="state = 'READY' AND node IS NULL "
               "AND (not_before IS NULL OR not_before <= clock_timestamp()) "
               "AND (assigned_servers IS NULL OR assigned_servers LIKE %(pattern)s "
               "ESCAPE '\\')",
    owner="node = %(node)s, fence = %(fence)s,",
    guard="EXISTS (SELECT 1 FROM lock_epochs WHERE key = %(key)s AND epoch = %(fence)s)")
#: Leader mode: the jobs the leader assigned to this node (node and fence are set).
_ASSIGNED = dict(candidates="state = 'READY' AND node = %(node)s", owner="",
                 guard="jobs.node = %(node)s")

_JOB_NAMES = [column.name for column in jobs.c]
# Named in the model's order: each row is the job's columns, then one step's (in
# StepRecord's field order, which the select list follows).
_JOB_COLUMNS = ", ".join(f"claimed.{name}" for name in _JOB_NAMES)

_STATEMENTS = {
    "open": _CLAIM.format(job_columns=_JOB_COLUMNS, **_OPEN),
    "open-ids": _CLAIM.format(job_columns=_JOB_COLUMNS, **dict(
        _OPEN, candidates=_OPEN["candidates"] + " AND id = ANY(CAST(%(job_ids)s AS bigint[]))")),
    "open-keyless": _CLAIM.format(job_columns=_JOB_COLUMNS, **dict(
        _OPEN, candidates=_OPEN["candidates"] + " AND lock_key IS NULL")),
    "assigned": _CLAIM.format(job_columns=_JOB_COLUMNS, **_ASSIGNED),
}


def statement(variant: str) -> str:
    """The SQL of the claim ``variant``, with pyformat placeholders (for EXPLAIN)."""
    return _STATEMENTS[variant]


def claim(conn: Connection, variant: str, **params: Any) -> list[JobRecord]:
    """Run the claim ``variant`` (``open``, ``open-ids``, ``open-keyless``,
    ``assigned``) with ``params`` on an autocommit connection; the claimed jobs with
    their steps, highest priority first.

    The rows come straight from the driver's cursor: a claim can return hundreds of
    rows, and building records from plain tuples costs a fraction of what a result
    object per row does.
    """
    cursor = conn.connection.cursor()
    try:
        cursor.execute(_STATEMENTS[variant], params)
        rows = cursor.fetchall()
    finally:
        cursor.close()
    return _records(rows)


def _records(rows: Sequence[tuple[Any, ...]]) -> list[JobRecord]:
    width = len(_JOB_NAMES)
    claimed: dict[int, JobRecord] = {}
    steps_of: dict[int, list[StepRecord]] = {}
    for row in rows:
        steps = steps_of.get(row[0])
        if steps is None:
            steps = steps_of[row[0]] = []
            claimed[row[0]] = JobRecord.from_row(dict(zip(_JOB_NAMES, row[:width])),
                                                 steps=steps)
        if row[width] is not None:  # LEFT JOIN: a job without steps has none
            step = StepRecord(*row[width:])
            step.state = State(step.state)
            steps.append(step)
    return list(claimed.values())


def step_from_json(item: dict[str, Any]) -> StepRecord:
    """A step row aggregated with ``json_agg``/``json_build_object`` (timestamps are
    ISO strings there) as a record."""
    item["state"] = State(item["state"])
    for name in ("started_at", "finished_at"):
        if item[name] is not None:
            item[name] = as_utc(datetime.fromisoformat(item[name]))
    return StepRecord(**item)
