"""Table handles and the audit-trail writer shared by the repositories."""

from __future__ import annotations

import json
from typing import NamedTuple, cast

from sqlalchemy import Connection, Table

from jobserver.states import State, check_transition
from jobserver.store.models import (ApiTokenRow, FeedCursorRow, JobDependencyRow, JobEventRow,
                                    JobRow, LockEpochRow, ServerRow, StepRow, UiSessionRow)
from jobserver.store.queries import query
from jobserver.store.records import Actor, ClaimToken

# Declarative models type __table__ as a FromClause; each of these is a Table.
jobs = cast(Table, JobRow.__table__)
steps = cast(Table, StepRow.__table__)
events = cast(Table, JobEventRow.__table__)
servers = cast(Table, ServerRow.__table__)
epochs = cast(Table, LockEpochRow.__table__)
api_tokens = cast(Table, ApiTokenRow.__table__)
ui_sessions = cast(Table, UiSessionRow.__table__)
feed_cursors = cast(Table, FeedCursorRow.__table__)
job_dependencies = cast(Table, JobDependencyRow.__table__)


class AuditEvent(NamedTuple):
    """One row of the audit trail (``job_events`` bar ``id`` and ``at``): a state change
    of a job, or of one of its steps when ``step`` is set. ``from_state`` None: the job
    was created."""

    job_id: int
    from_state: State | None
    to_state: State
    step: str | None = None
    node: str | None = None
    fence: int | None = None
    attempt: int | None = None
    message: str | None = None
    # Who asked for the change (an operator's token, a planner): see records.Actor.
    actor: str | None = None
    actor_token_id: int | None = None

    @classmethod
    def of_run(cls, token: ClaimToken, old: State, new: State, step: str | None = None,
               attempt: int | None = None, message: str | None = None) -> AuditEvent:
        """A change written by the run ``token`` names (``attempt``: a step's, when it
        differs from the job's)."""
        return cls(token.job_id, old, new, step, token.node, token.fence,
                   token.attempt if attempt is None else attempt, message)

    @classmethod
    def by(cls, actor: Actor, job_id: int, old: State | None, new: State,
           step: str | None = None, message: str | None = None) -> AuditEvent:
        """A change ``actor`` asked for (a submit, an operator action)."""
        return cls(job_id, old, new, step, message=message, actor=actor.name,
                   actor_token_id=actor.token_id)


def record_events(conn: Connection, rows: list[AuditEvent]) -> None:
    """Append audit rows in the caller's transaction, all in one statement.

    Each change is checked against the state machine first: an illegal one raises
    :class:`~jobserver.exceptions.IllegalTransition` and the caller's transaction,
    with the change it recorded, is rolled back.
    """
    if not rows:
        return
    for row in rows:
        if row.from_state is not None:
            check_transition(row.from_state, row.to_state, "job" if row.step is None
                             else f"step {row.step}")
    document = json.dumps([row._asdict() for row in rows])
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(query("insert_events"), {"rows": document})
    else:
        conn.exec_driver_sql(query("insert_events.sqlite"), (document,))
