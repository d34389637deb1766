"""Fill a PostgreSQL store with many jobs at once: one ``generate_series`` statement
per table (jobs, steps, events), so that a million jobs take a minute or two, not an
hour of API calls.

A :class:`Shape` says how the jobs vary with ``g``, their number 1..n: SQL expressions
over ``g`` for the name, state, node and creation time, and the steps every job has.
The rows are written as the engine would have left them: a job's steps and events
agree with its state (a SUCCEED job's steps all succeeded; an ERROR job's first step
succeeded, the next failed and the rest never started), and each job's events have
ids in the order they happened. Ids ascend with ``created_at``, as on a live store
(the dashboard's time filter relies on it).

Only jobs that no scheduler will pick up are written: finished ones (SUCCEED, ERROR,
DISCARDED), paused ones (STOPPED) and READY ones held back by a ``not_before`` days
away. A node started on the store afterwards stays idle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: The states a filled job may have (see the module's docstring).
FILL_STATES = ("SUCCEED", "ERROR", "DISCARDED", "STOPPED", "READY")
#: How far ahead a filled READY job's ``not_before`` lies.
HELD_BACK = "30 days"


@dataclass(frozen=True)
class Shape:
    """SQL expressions over ``g`` (1..n) for each filled job, and its steps in order:
    ``(name, depends_on)`` pairs, each step depending on steps before it."""

    name: str
    state: str
    node: str
    created: str
    #: How long the job ran, an interval (its steps share it evenly).
    run: str = "interval '2 ms'"
    steps: tuple[tuple[str, tuple[str, ...]], ...] = (("s", ()),)
    submitted_by: str = "'bench'"


def _jobs_statement(shape: Shape) -> str:
    return f"""
    INSERT INTO jobs (name, state, priority, params, parallelism, node, fence, attempt,
                      not_before, error, created_at, updated_at, started_at, finished_at,
                      submitted_by)
    SELECT name, state, 0, CAST('{{}}' AS json), 1, CASE WHEN held THEN NULL ELSE node END,
           1, CASE WHEN held THEN 0 ELSE 1 END,
           CASE WHEN held THEN t + interval '{HELD_BACK}' END,
           CASE WHEN state = 'ERROR' THEN 'step failed: exit code 1' END,
           t, t + run, CASE WHEN NOT held THEN t + interval '1 ms' END,
           CASE WHEN state IN ('SUCCEED', 'ERROR', 'DISCARDED') THEN t + run END,
           {shape.submitted_by}
    FROM (SELECT *, state = 'READY' AS held
          FROM (SELECT g, {shape.name} AS name, {shape.state} AS state, {shape.node} AS node,
                       {shape.created} AS t, {shape.run} AS run
                FROM generate_series(CAST(1 AS bigint), :n) AS g) AS raw) AS s
    ORDER BY g"""


def _step_state(position: int, last: int) -> str:
    """A step's state from its job's (``j.state``): the first step of a job that ran
    succeeded; an ERROR or STOPPED job stopped in its second step (the first when it
    has one step); the steps after that never started."""
    stopped_at = min(1, last)
    return f"""(CASE WHEN j.state = 'SUCCEED' THEN 'SUCCEED'
                 WHEN j.state = 'READY' THEN 'READY'
                 WHEN {position} < {stopped_at} THEN 'SUCCEED'
                 WHEN j.state = 'DISCARDED' THEN 'DISCARDED'
                 WHEN {position} = {stopped_at} THEN j.state
                 ELSE 'READY' END)"""


def _step_times(position: int, count: int) -> tuple[str, str]:
    """When step ``position`` of ``count`` started and ended: the job's run in equal
    parts among the steps that ran (NULL for a step that never started)."""
    stopped_at = min(1, count - 1)
    ran = f"{_step_state(position, count - 1)} IN ('SUCCEED', 'ERROR', 'STOPPED')"
    parts = (f"(CASE j.state WHEN 'SUCCEED' THEN {count} WHEN 'DISCARDED' THEN "
             f"{max(1, stopped_at)} ELSE {stopped_at + 1} END)")
    span = "(j.updated_at - j.started_at)"
    start = f"CASE WHEN {ran} THEN j.started_at + {span} * {position} / {parts} END"
    end = f"CASE WHEN {ran} THEN j.started_at + {span} * {position + 1} / {parts} END"
    return start, end


def _steps_statement(shape: Shape) -> str:
    count = len(shape.steps)
    rows = []
    for position, (name, depends_on) in enumerate(shape.steps):
        start, end = _step_times(position, count)
        deps = "[" + ", ".join(f'"{dep}"' for dep in depends_on) + "]"
        rows.append(f"SELECT {position} AS position, '{name}' AS name, '{deps}' AS deps, "
                    f"{_step_state(position, count - 1)} AS state, {start} AS started, "
                    f"{end} AS ended")
    return f"""
    INSERT INTO steps (job_id, position, name, type, spec, depends_on, retries,
                       retry_backoff, retryable, state, attempt, started_at, finished_at,
                       exit_code)
    SELECT j.id, s.position, s.name, 'noop', CAST('{{}}' AS json), CAST(s.deps AS json), 0,
           1.0, true, s.state, CASE WHEN s.started IS NULL THEN 0 ELSE 1 END, s.started,
           s.ended, CASE s.state WHEN 'SUCCEED' THEN 0 WHEN 'ERROR' THEN 1 END
    FROM jobs AS j CROSS JOIN LATERAL ({" UNION ALL ".join(rows)}) AS s
    WHERE j.id > :after"""


def _events_statement(shape: Shape) -> str:
    """Submitted, started, each step's start and end, the job's end: in that order."""
    count = len(shape.steps)
    ran = "j.started_at"
    rows = ["(0, NULL, NULL, 'READY', j.created_at)",
            f"(1, NULL, 'READY', 'RUNNING', {ran})"]
    for position, (name, _) in enumerate(shape.steps):
        start, end = _step_times(position, count)
        state = _step_state(position, count - 1)
        rows.append(f"({2 * position + 2}, '{name}', 'READY', 'RUNNING', {start})")
        rows.append(f"({2 * position + 3}, '{name}', 'RUNNING', {state}, {end})")
    rows.append(f"({2 * count + 2}, NULL, 'RUNNING', j.state, CASE WHEN j.state <> 'READY' "
                "THEN j.updated_at END)")
    return f"""
    INSERT INTO job_events (job_id, step, from_state, to_state, node, fence, attempt,
                            message, at)
    SELECT j.id, e.step, e.from_state, e.to_state, j.node, 1, 1, NULL, e.at
    FROM jobs AS j CROSS JOIN LATERAL (VALUES {", ".join(rows)})
         AS e(seq, step, from_state, to_state, at)
    WHERE j.id > :after AND e.at IS NOT NULL
    ORDER BY j.id, e.seq"""


def fill(url: str, count: int, shape: Shape) -> float:
    """``count`` jobs of ``shape`` with their steps and events, then ``VACUUM ANALYZE``
    and a checkpoint (so that what is measured next does not pay for the load); the
    seconds it took."""
    from sqlalchemy import create_engine, text

    began = time.monotonic()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            # The events are sorted into each job's order: in memory, not on disk.
            conn.execute(text("SET LOCAL work_mem = '256MB'"))
            after = int(conn.execute(text("SELECT coalesce(max(id), 0) FROM jobs")).scalar_one())
            for statement in (_jobs_statement(shape), _steps_statement(shape),
                              _events_statement(shape)):
                conn.execute(text(statement), {"n": count, "after": after})
        with engine.connect() as conn:
            auto = conn.execution_options(isolation_level="AUTOCOMMIT")
            auto.execute(text("VACUUM ANALYZE jobs, steps, job_events"))
            auto.execute(text("CHECKPOINT"))
    finally:
        engine.dispose()
    return time.monotonic() - began
