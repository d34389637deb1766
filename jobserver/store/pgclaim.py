"""The PostgreSQL claim as one statement: one round trip from READY to a running step.

A claim moves READY jobs to RUNNING, starts each one's first runnable step, appends
the audit rows and hands back the jobs with their steps, all in the statement
``claim`` of ``queries.sql``, run outside an explicit transaction so that the claim
commits as it returns. The dialect-neutral path in :mod:`jobserver.store.runs` stays
for SQLite, where a statement costs no round trip; both follow the same rules (which
jobs are claimable, which step starts first: see
:func:`~jobserver.store.records.first_runnable`).

The result is one row per step, the job's columns beside each step's, in plain
column types: a JSON aggregate per job would cost the server a JSON object per step
and the node a JSON decode per job.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from jobserver.states import State
from jobserver.store.models import as_utc
from jobserver.store.queries import driver_rows, query
from jobserver.store.records import JobRecord, StepRecord
from jobserver.store.tables import jobs


class ClaimKind(enum.Enum):
    """Which jobs a claim takes: any node's (unassigned, under a lease), those the
    claiming node holds ahead under that lease (``scheduler.prefetch``) or, in leader
    mode, those the leader assigned to the claiming node."""

    OPEN = "open"
    HELD = "held"
    ASSIGNED = "assigned"


_JOB_NAMES = [column.name for column in jobs.c]


def params(kind: ClaimKind, node: str, limit: int, *, key: str | None = None,
           fence: int | None = None, pattern: str | None = None,
           job_ids: Sequence[int] | None = None, keyless: bool = False) -> dict[str, Any]:
    """The parameters of the ``claim`` statement. ``OPEN`` needs the lease's ``key``
    and ``fence`` and the ``assigned_servers`` LIKE ``pattern`` naming ``node``; only
    ``job_ids`` when given, only jobs without a ``lock_key`` when ``keyless``.
    ``HELD`` needs the ``key`` and ``fence`` the jobs were held under and their
    ``job_ids``."""
    return {"assigned": kind is ClaimKind.ASSIGNED, "held": kind is ClaimKind.HELD,
            "node": node, "limit": limit,
            "key": key, "fence": fence, "pattern": pattern,
            "job_ids": None if job_ids is None else list(job_ids), "keyless": keyless}


def statement() -> str:
    """The SQL of the claim, with pyformat placeholders (for EXPLAIN)."""
    return query("claim")


def claim(conn: Connection, claim_params: dict[str, Any]) -> list[JobRecord]:
    """Run the claim with ``claim_params`` (see :func:`params`) on an autocommit
    connection; the claimed jobs with their steps, highest priority first.

    The rows come straight from the driver's cursor: a claim can return hundreds of
    rows, and building records from plain tuples costs a fraction of what a result
    object per row does.
    """
    return _records(driver_rows(conn, "claim", claim_params))


def _records(rows: Sequence[tuple[Any, ...]]) -> list[JobRecord]:
    # Each row is the job's columns in the model's order, then one step's in
    # StepRecord's field order, as the statement's select list names them.
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
