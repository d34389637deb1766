"""The PostgreSQL claim as one statement: one round trip from READY to a running step.

A claim moves READY jobs to RUNNING, starts each one's first runnable step, appends
the audit rows and hands back the jobs with their steps. Written as separate
statements that was five round trips (four statements and the commit); here it is one
statement of data-modifying CTEs run outside an explicit transaction, so the claim
commits as it returns. The dialect-neutral path in :mod:`jobserver.store.runs` stays
for SQLite, where a statement costs no round trip.

The rules are those of the neutral path: candidates are locked with ``SKIP LOCKED``
in a materialized CTE (limited once, never rescanned); the UPDATE matches only while
the caller's lease is the newest of its key; a job's first runnable step is its
lowest-positioned READY step whose dependencies have all succeeded.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, Connection, text

from jobserver.states import State
from jobserver.store.records import JobRecord, StepRecord
from jobserver.store.tables import jobs

_CLAIM = """
WITH candidates AS MATERIALIZED (
  SELECT id FROM jobs WHERE {candidates}
  ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED
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
SELECT {columns}, (
  SELECT json_agg(json_build_object(
    'id', s.id, 'job_id', s.job_id, 'position', s.position, 'name', s.name,
    'type', s.type, 'spec', s.spec, 'depends_on', s.depends_on, 'retries', s.retries,
    'retry_backoff', s.retry_backoff, 'retryable', s.retryable,
    'state', CASE WHEN started.id IS NULL THEN s.state ELSE 'RUNNING' END,
    'attempt', COALESCE(started.attempt, s.attempt),
    'started_at', COALESCE(started.started_at, s.started_at),
    'finished_at', CASE WHEN started.id IS NULL THEN s.finished_at END,
    'exit_code', CASE WHEN started.id IS NULL THEN s.exit_code END,
    'error', CASE WHEN started.id IS NULL THEN s.error END,
    'output', s.output, 'wall_seconds', s.wall_seconds, 'cpu_seconds', s.cpu_seconds,
    'peak_rss_kb', s.peak_rss_kb, 'metrics', s.metrics) ORDER BY s.position)
  FROM steps AS s LEFT JOIN started ON started.id = s.id
  WHERE s.job_id = claimed.id) AS step_rows
FROM claimed
"""

#: Any node's claim: unassigned, due, allowed here; only under the newest lease.
_OPEN = dict(
    candidates="state = 'READY' AND node IS NULL "
               "AND (not_before IS NULL OR not_before <= clock_timestamp()) "
               "AND (assigned_servers IS NULL OR assigned_servers LIKE :pattern "
               "ESCAPE '\\')",
    owner="node = :node, fence = :fence,",
    guard="EXISTS (SELECT 1 FROM lock_epochs WHERE key = :key AND epoch = :fence)")
#: Leader mode: the jobs the leader assigned to this node (node and fence are set).
_ASSIGNED = dict(candidates="state = 'READY' AND node = :node", owner="",
                 guard="jobs.node = :node")

# Named in the model's order: the textual result is matched to ``jobs.c`` by position.
_COLUMNS = ", ".join(f"claimed.{column.name}" for column in jobs.c)
_OPEN["columns"] = _ASSIGNED["columns"] = _COLUMNS

_STATEMENTS = {
    "open": text(_CLAIM.format(**_OPEN)).columns(*jobs.c, step_rows=JSON),
    "open-ids": text(_CLAIM.format(**dict(
        _OPEN, candidates=_OPEN["candidates"] + " AND id = ANY(CAST(:job_ids AS bigint[]))")))
    .columns(*jobs.c, step_rows=JSON),
    "open-keyless": text(_CLAIM.format(**dict(
        _OPEN, candidates=_OPEN["candidates"] + " AND lock_key IS NULL")))
    .columns(*jobs.c, step_rows=JSON),
    "assigned": text(_CLAIM.format(**_ASSIGNED)).columns(*jobs.c, step_rows=JSON),
}


def claim(conn: Connection, variant: str, **params: Any) -> list[JobRecord]:
    """Run the claim ``variant`` (``open``, ``open-ids``, ``open-keyless``,
    ``assigned``) with ``params``
    on an autocommit connection; the claimed jobs with their steps."""
    rows = conn.execute(_STATEMENTS[variant], params).all()
    return [JobRecord.from_row(row._mapping,
                               steps=[step_from_json(item) for item in row.step_rows or []])
            for row in rows]


def step_from_json(item: dict[str, Any]) -> StepRecord:
    """A step row aggregated with ``json_agg``/``json_build_object`` (timestamps are
    ISO strings there) as a record."""
    item["state"] = State(item["state"])
    for name in ("started_at", "finished_at"):
        if item[name] is not None:
            item[name] = datetime.fromisoformat(item[name]).astimezone(timezone.utc)
    return StepRecord(**item)
