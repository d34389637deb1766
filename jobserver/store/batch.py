"""Set-based statements for the hot path: many completions in one round trip.

A group commit (see :mod:`jobserver.completer`) writes a whole batch as one JSON
parameter, unpacked by the database (``json_to_recordset`` on PostgreSQL,
``json_each`` on SQLite), so a batch of any size is one statement whose text never
changes: nothing is compiled per batch, and PostgreSQL can keep the statement
prepared. The statements are ``complete`` and ``complete_steps.sqlite`` /
``complete_jobs.sqlite`` in ``queries.sql``.

The compare-and-set is the same as the single-row one in :mod:`jobserver.store.runs`:
a step is written only while it is RUNNING and its job still carries the writer's
claim token; the job only while it is RUNNING under that token.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text
from sqlalchemy.sql.expression import TextualSelect

from jobserver.states import State
from jobserver.store.queries import driver_rows, query
from jobserver.store.records import Completion
from jobserver.store.tables import AuditEvent, record_events, steps

if TYPE_CHECKING:
    from jobserver.planners.hooks import JobInputs


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
            "job_error": completion.job_error, "has_next": bool(completion.start_next)}


def _next_rows(completions: Sequence[Completion]) -> list[dict[str, Any]]:
    """The steps to start, each with the batch index of the completion that starts it."""
    return [{"i": index, "step_id": step.id}
            for index, completion in enumerate(completions) for step in completion.start_next]


class Written:
    """Which completions of a batch got through: indexes into the batch."""

    def __init__(self) -> None:
        self.steps: set[int] = set()
        self.jobs: set[int] = set()
        #: completions whose ``start_next`` steps were started
        self.started: set[int] = set()


def statement() -> str:
    """The PostgreSQL group commit statement, with pyformat placeholders (for EXPLAIN)."""
    return query("complete")


def postgresql_params(completions: Sequence[Completion]) -> dict[str, Any]:
    """The parameters of :func:`statement` for ``completions``."""
    rows = [_row(index, completion) for index, completion in enumerate(completions)]
    following = _next_rows(completions)
    return {"rows": json.dumps(rows), "step_ids": [row["step_id"] for row in rows],
            "job_ids": [row["job_id"] for row in rows], "next": json.dumps(following),
            "next_ids": [row["step_id"] for row in following]}


def complete(conn: Connection, completions: Sequence[Completion],
             inputs: JobInputs | None) -> Written:
    """Write every completion's step outcome (and the job's final state where set)
    with their audit rows; report which compare-and-sets matched. ``inputs``: what
    the ended runs took goes with their end (SQLite; ``complete`` does it on
    PostgreSQL)."""
    if conn.dialect.name == "postgresql":
        return _complete_postgresql(conn, postgresql_params(completions))
    written = _complete_sqlite(conn, [_row(index, completion)
                                      for index, completion in enumerate(completions)],
                               inputs)
    _start_next_sqlite(conn, completions, written)
    return written


def _complete_postgresql(conn: Connection, params: dict[str, Any]) -> Written:
    written = Written()
    for kind, index in driver_rows(conn, "complete", params):
        {"step": written.steps, "job": written.jobs, "next": written.started}[kind].add(index)
    return written


def _start_next_sqlite(conn: Connection, completions: Sequence[Completion],
                       written: Written) -> None:
    """Start the next steps of the written completions that have any (their write
    matched only while the job was RUNNING under the token), with their audit rows."""
    by_step = {row["step_id"]: row["i"] for row in _next_rows(completions)
               if row["i"] in written.steps}
    if not by_step:
        return
    events = []
    for step_id, attempt, _started_at in start_steps(conn, list(by_step)):
        index = by_step[step_id]
        completion = completions[index]
        step = next(s for s in completion.start_next if s.id == step_id)
        written.started.add(index)
        events.append(AuditEvent.of_run(completion.token, State.READY, State.RUNNING,
                                        step.name, attempt))
    record_events(conn, events)


def _complete_sqlite(conn: Connection, rows: list[dict[str, Any]],
                     inputs: JobInputs | None) -> Written:
    # SQLite's json_extract hands nested objects back as JSON text, which is what
    # the metrics column stores.
    written = Written()
    by_step = {row["step_id"]: row for row in rows}
    for (step_id,) in conn.exec_driver_sql(query("complete_steps.sqlite"),
                                           (json.dumps(rows),)).all():
        written.steps.add(by_step[step_id]["i"])
    finishing = [row for row in rows if row["i"] in written.steps and row["job_state"]]
    if finishing:
        by_job = {row["job_id"]: row for row in finishing}
        for (job_id,) in conn.exec_driver_sql(query("complete_jobs.sqlite"),
                                              (json.dumps(finishing),)).all():
            written.jobs.add(by_job[job_id]["i"])
        if inputs is not None:
            _settle_consumed(inputs, conn,
                             [row for row in finishing if row["i"] in written.jobs])
    record_events(conn, [_step_event(row) for row in rows if row["i"] in written.steps]
                  + [_job_event(row) for row in rows if row["i"] in written.jobs])
    return written


def _settle_consumed(inputs: JobInputs, conn: Connection,
                     ended: list[dict[str, Any]]) -> None:
    """What the runs that just ended took: what ``complete`` does on PostgreSQL, in
    the same transaction as their final state."""
    inputs.consumed(conn, [(row["job_id"], row["attempt"]) for row in ended
                           if row["job_state"] == State.SUCCEED.value])
    inputs.settle(conn, [row["job_id"] for row in ended
                         if row["job_state"] != State.SUCCEED.value])


def _step_event(row: dict[str, Any]) -> AuditEvent:
    return AuditEvent(row["job_id"], State.RUNNING, State(row["state"]), row["step"],
                      row["node"], row["fence"], row["step_attempt"], row["message"])


def _job_event(row: dict[str, Any]) -> AuditEvent:
    return AuditEvent(row["job_id"], State.RUNNING, State(row["job_state"]), None,
                      row["node"], row["fence"], row["attempt"], row["job_error"])


# -- claims on SQLite ---------------------------------------------------------------------
def steps_of(conn: Connection, job_ids: Sequence[int]) -> Sequence[Any]:
    """Every step row of ``job_ids``, by job then position, typed as the table says."""
    return conn.execute(_typed_statements()[0], {"ids": json.dumps(list(job_ids))}).all()


def start_steps(conn: Connection, step_ids: Sequence[int]) -> Sequence[Any]:
    """READY -> RUNNING for ``step_ids`` (a claim's first steps); returns
    ``(id, attempt, started_at)`` of those started."""
    return conn.execute(_typed_statements()[1], {"ids": json.dumps(list(step_ids))}).all()


@functools.cache
def _typed_statements() -> tuple[TextualSelect, TextualSelect]:
    # Built once: every SQLite claim runs both, and their texts never change.
    return (text(query("steps_of.sqlite")).columns(*steps.c),
            text(query("start_steps.sqlite")).columns(steps.c.id, steps.c.attempt,
                                                      steps.c.started_at))
