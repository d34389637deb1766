"""Writing many rows at once inside a transaction.

psycopg 3 runs ``executemany`` in pipeline mode, and a client stopped in the middle of
a pipeline (SIGSTOP, a VM paused) leaves its server session *active*, reading from the
client, where ``idle_in_transaction_session_timeout`` does not apply: its transaction
and row locks then last until the process wakes. A planner's fenced transaction holds
its lease's ``lock_epochs`` row in share mode, so a successor's fence draw waited on it
for as long as the stopped node slept. On PostgreSQL a batch is therefore written by
one statement that takes the rows as one JSON document (:func:`json_rows`; the
statement's text, in ``queries.sql``, does not depend on how many rows there are, so
it is prepared once); a stopped client then leaves its session idle in its
transaction, which the stall timeout ends. SQLite has no pipeline: ``executemany``
(:func:`update_many`) is the cheap way there.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Table, bindparam, update

from jobserver.store.queries import query


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def json_rows(conn: Connection, name: str, rows: list[dict[str, Any]],
              **params: Any) -> list[Any]:
    """Run the PostgreSQL statement ``name`` with ``rows`` as the JSON document
    ``%(rows)s`` (datetimes as ISO 8601) and ``params``; the rows it returns, if any."""
    document = json.dumps(rows, default=_json_default)
    result = conn.exec_driver_sql(query(name), {"rows": document, **params})
    return list(result.all()) if result.returns_rows else []


def update_many(conn: Connection, table: Table, rows: list[dict[str, Any]],
                *where: ColumnElement[bool]) -> None:
    """UPDATE the rows of ``table`` whose ``id`` each dict of ``rows`` gives, setting
    the dict's other keys (the same in every dict), where ``where`` holds too; by
    ``executemany`` (SQLite)."""
    if not rows:
        return
    names = [name for name in rows[0] if name != "id"]
    conn.execute(update(table).where(table.c.id == bindparam("b_id"), *where)
                 .values({name: bindparam(f"b_{name}") for name in names}),
                 [{f"b_{key}": value for key, value in row.items()} for row in rows])
