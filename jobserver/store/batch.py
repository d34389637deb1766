"""Set-based statements for the hot path: many completions in one round trip.

A group commit (see :mod:`jobserver.completer`) used to run two compare-and-set
UPDATEs per job; under load that was most of a node's time in the driver. Here the
whole batch travels as one JSON parameter, unpacked by the database
(``json_to_recordset`` on PostgreSQL, ``json_each`` on SQLite), so a batch of any size
is one statement whose text never changes: nothing is compiled per batch, and
PostgreSQL plans it once per connection.

The compare-and-set is the same as the single-row one in :mod:`jobserver.store.runs`:
a step is written only while it is RUNNING and its job still carries the writer's
claim token; the job only while it is RUNNING under that token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from jobserver.store.models import StepRow
from jobserver.store.records import Completion

steps = StepRow.__table__

#: The store clock in raw SQL (``engine.store_now`` renders the same expressions).
_NOW = {"postgresql": "clock_timestamp()",
        "sqlite": "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"}

_PG_COMPLETE = """
WITH v AS MATERIALIZED (
  SELECT * FROM json_to_recordset(CAST(%(rows)s AS json)) AS v(
    i int, step_id bigint, step text, job_id bigint, node text, fence bigint,
    attempt int, step_attempt int, state text, exit_code int, output text, error text,
    wall_seconds float8, cpu_seconds float8, peak_rss_kb bigint, metrics json,
    message text, job_state text, job_error text)
), s AS (
  UPDATE steps SET state = v.state, finished_at = clock_timestamp(),
         exit_code = v.exit_code, output = v.output, error = v.error,
         wall_seconds = v.wall_seconds, cpu_seconds = v.cpu_seconds,
         peak_rss_kb = v.peak_rss_kb, metrics = v.metrics
  FROM v JOIN jobs AS owner ON owner.id = v.job_id AND owner.node = v.node
                           AND owner.fence = v.fence AND owner.attempt = v.attempt
  WHERE steps.id = v.step_id AND steps.state = 'RUNNING'
    AND steps.id = ANY(%(step_ids)s) AND owner.id = ANY(%(job_ids)s)
  RETURNING v.i
), j AS (
  UPDATE jobs SET state = v.job_state, error = v.job_error,
         finished_at = clock_timestamp(), updated_at = clock_timestamp()
  FROM v
  WHERE v.job_state IS NOT NULL AND v.i IN (SELECT i FROM s)
    AND jobs.id = v.job_id AND jobs.node = v.node AND jobs.fence = v.fence
    AND jobs.attempt = v.attempt AND jobs.state = 'RUNNING'
    AND jobs.id = ANY(%(job_ids)s)
  RETURNING v.i
), e AS (
  INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                          message, at)
  SELECT job_id, step, 'RUNNING', state, node, fence, step_attempt, message,
         clock_timestamp() FROM v WHERE i IN (SELECT i FROM s)
  UNION ALL
  SELECT job_id, NULL, 'RUNNING', job_state, node, fence, attempt, job_error,
         clock_timestamp() FROM v WHERE i IN (SELECT i FROM j)
)
SELECT 'step', i FROM s UNION ALL SELECT 'job', i FROM j
"""
# The ``= ANY(ids)`` conditions repeat what the joins say. They are there for the
# planner, which cannot see how many rows a JSON document holds (it guesses 100) and
# may then prefer a sequential scan of steps and jobs; an array it can look up by key.

# SQLite has no data-modifying CTEs, and RETURNING may name only the updated table,
# so each half returns its own ids. Still one statement per half, not per job.
_SQLITE_V = ("(SELECT {columns} FROM json_each(?)) AS v")
_SQLITE_STEPS = """
UPDATE steps SET state = v.state, finished_at = {now}, exit_code = v.exit_code,
       output = v.output, error = v.error, wall_seconds = v.wall_seconds,
       cpu_seconds = v.cpu_seconds, peak_rss_kb = v.peak_rss_kb, metrics = v.metrics
FROM {v} JOIN jobs AS owner ON owner.id = v.job_id AND owner.node = v.node
                           AND owner.fence = v.fence AND owner.attempt = v.attempt
WHERE steps.id = v.step_id AND steps.state = 'RUNNING'
RETURNING steps.id
"""
_SQLITE_JOBS = """
UPDATE jobs SET state = v.job_state, error = v.job_error, finished_at = {now},
       updated_at = {now}
FROM {v}
WHERE jobs.id = v.job_id AND jobs.node = v.node AND jobs.fence = v.fence
  AND jobs.attempt = v.attempt AND jobs.state = 'RUNNING'
RETURNING jobs.id
"""
_EVENTS = """
INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                        message, at)
SELECT v.job_id, v.step, v.from_state, v.to_state, v.node, v.fence, v.attempt,
       v.message, {now} FROM {v}
"""
_PG_EVENTS_V = ("json_to_recordset(CAST(%s AS json)) AS v(job_id bigint, step text, "
                "from_state text, to_state text, node text, fence bigint, attempt int, "
                "message text)")
_STEP_FIELDS = ("step_id", "job_id", "node", "fence", "attempt", "state", "exit_code",
                "output", "error", "wall_seconds", "cpu_seconds", "peak_rss_kb", "metrics")
_JOB_FIELDS = ("job_id", "node", "fence", "attempt", "job_state", "job_error")
_EVENT_FIELDS = ("job_id", "step", "from_state", "to_state", "node", "fence", "attempt",
                 "message")


def _sqlite_rows(fields: Sequence[str]) -> str:
    columns = ", ".join(f"json_extract(value, '$.{name}') AS {name}" for name in fields)
    return _SQLITE_V.format(columns=columns)


def _row(index: int, completion: Completion) -> dict[str, Any]:
    token, outcome = completion.token, completion.outcome
    return {"i": index, "step_id": completion.step.id, "step": completion.step.name,
            "job_id": token.job_id, "node": token.node, "fence": token.fence,
            "attempt": token.attempt, "step_attempt": completion.attempt,
            "state": outcome.state.value, "exit_code": outcome.exit_code,
            "output": outcome.output, "error": outcome.error,
            "wall_seconds": outcome.wall_seconds, "cpu_seconds": outcome.cpu_seconds,
            "peak_rss_kb": outcome.peak_rss_kb, "metrics": outcome.metrics,
            "message": completion.note or outcome.error,
            "job_state": completion.job_state.value if completion.job_state else None,
            "job_error": completion.job_error}


class Written:
    """Which completions of a batch got through: indexes into the batch."""

    def __init__(self) -> None:
        self.steps: set[int] = set()
        self.jobs: set[int] = set()


def statement() -> str:
    """The PostgreSQL group commit statement, with pyformat placeholders (for EXPLAIN)."""
    return _PG_COMPLETE


def postgresql_params(completions: Sequence[Completion]) -> dict[str, Any]:
    """The parameters of :func:`statement` for ``completions``."""
    rows = [_row(index, completion) for index, completion in enumerate(completions)]
    return {"rows": json.dumps(rows), "step_ids": [row["step_id"] for row in rows],
            "job_ids": [row["job_id"] for row in rows]}


def complete(conn: Connection, completions: Sequence[Completion]) -> Written:
    """Write every completion's step outcome (and the job's final state where set)
    with their audit rows; report which compare-and-sets matched."""
    if conn.dialect.name == "postgresql":
        return _complete_postgresql(conn, postgresql_params(completions))
    return _complete_sqlite(conn, [_row(index, completion)
                                   for index, completion in enumerate(completions)])


def _complete_postgresql(conn: Connection, params: dict[str, Any]) -> Written:
    written = Written()
    for kind, index in conn.exec_driver_sql(_PG_COMPLETE, params):
        (written.steps if kind == "step" else written.jobs).add(index)
    return written


def _complete_sqlite(conn: Connection, rows: list[dict[str, Any]]) -> Written:
    now, written = _NOW["sqlite"], Written()
    steps_sql = _SQLITE_STEPS.format(now=now, v=_sqlite_rows(_STEP_FIELDS))
    by_step = {row["step_id"]: row for row in rows}
    for (step_id,) in conn.exec_driver_sql(steps_sql, (_dump(rows),)).all():
        written.steps.add(by_step[step_id]["i"])
    finishing = [row for row in rows if row["i"] in written.steps and row["job_state"]]
    if finishing:
        jobs_sql = _SQLITE_JOBS.format(now=now, v=_sqlite_rows(_JOB_FIELDS))
        by_job = {row["job_id"]: row for row in finishing}
        for (job_id,) in conn.exec_driver_sql(jobs_sql, (_dump(finishing),)).all():
            written.jobs.add(by_job[job_id]["i"])
    insert_events(conn, [_step_event(row) for row in rows if row["i"] in written.steps]
                  + [_job_event(row) for row in rows if row["i"] in written.jobs])
    return written


def insert_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Append audit rows (``job_events`` columns but ``id`` and ``at``), all in one
    statement whose text does not depend on how many there are."""
    if not rows:
        return
    dialect = conn.dialect.name
    source = _PG_EVENTS_V if dialect == "postgresql" else _sqlite_rows(_EVENT_FIELDS)
    conn.exec_driver_sql(_EVENTS.format(now=_NOW[dialect], v=source), (_dump(rows),))


def _dump(rows: list[dict[str, Any]]) -> str:
    # SQLite's json_extract hands nested objects back as JSON text, which is what
    # the metrics column stores.
    return json.dumps(rows)


def _step_event(row: dict[str, Any]) -> dict[str, Any]:
    return {"job_id": row["job_id"], "step": row["step"], "from_state": "RUNNING",
            "to_state": row["state"], "node": row["node"], "fence": row["fence"],
            "attempt": row["step_attempt"], "message": row["message"]}


def _job_event(row: dict[str, Any]) -> dict[str, Any]:
    return {"job_id": row["job_id"], "step": None, "from_state": "RUNNING",
            "to_state": row["job_state"], "node": row["node"], "fence": row["fence"],
            "attempt": row["attempt"], "message": row["job_error"]}


# -- claims -------------------------------------------------------------------------------
def _among(column: str, dialect: str) -> str:
    """SQL condition: ``column`` is one of the ids bound as ``:ids`` (see :func:`_ids`)."""
    if dialect == "postgresql":
        return f"{column} = ANY(CAST(:ids AS bigint[]))"
    return f"{column} IN (SELECT value FROM json_each(:ids))"


def _ids(dialect: str, ids: Sequence[int]) -> Any:
    # An array on PostgreSQL (an index lookup whatever its length), JSON on SQLite.
    return list(ids) if dialect == "postgresql" else json.dumps(list(ids))


def steps_of(conn: Connection, job_ids: Sequence[int]) -> Sequence[Any]:
    """Every step row of ``job_ids``, by job then position, typed as the table says."""
    dialect = conn.dialect.name
    names = ", ".join(column.name for column in steps.c)
    statement = text(f"SELECT {names} FROM steps WHERE {_among('job_id', dialect)} "
                     "ORDER BY job_id, position").columns(*steps.c)
    return conn.execute(statement, {"ids": _ids(dialect, job_ids)}).all()


def start_steps(conn: Connection, step_ids: Sequence[int]) -> Sequence[Any]:
    """READY -> RUNNING for ``step_ids`` (a claim's first steps); returns
    ``(id, attempt, started_at)`` of those started."""
    dialect = conn.dialect.name
    statement = text(
        f"UPDATE steps SET state = 'RUNNING', attempt = attempt + 1, "
        f"started_at = {_NOW[dialect]}, finished_at = NULL, exit_code = NULL, error = NULL "
        f"WHERE {_among('id', dialect)} AND state = 'READY' "
        "RETURNING id, attempt, started_at"
    ).columns(steps.c.id, steps.c.attempt, steps.c.started_at)
    return conn.execute(statement, {"ids": _ids(dialect, step_ids)}).all()
