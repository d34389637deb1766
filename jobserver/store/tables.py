"""Table handles and the audit-trail writer shared by the repositories."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Connection, Table

from jobserver.store import batch
from jobserver.store.models import (ApiTokenRow, JobEventRow, JobRow, LockEpochRow, ServerRow,
                                    StepRow)

# Declarative models type __table__ as a FromClause; each of these is a Table.
jobs = cast(Table, JobRow.__table__)
steps = cast(Table, StepRow.__table__)
events = cast(Table, JobEventRow.__table__)
servers = cast(Table, ServerRow.__table__)
epochs = cast(Table, LockEpochRow.__table__)
api_tokens = cast(Table, ApiTokenRow.__table__)

_EVENT_FIELDS = ("job_id", "step", "from_state", "to_state", "node", "fence", "attempt",
                 "message")


def record_events(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Append audit rows (one per state change) in the caller's transaction."""
    if not rows:
        return
    batch.insert_events(conn, [{name: _plain(row.get(name)) for name in _EVENT_FIELDS}
                               for row in rows])


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)
