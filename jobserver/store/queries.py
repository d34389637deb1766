"""The store's raw SQL statements, each whole and named, kept in ``queries.sql``.

A statement lives there as one complete text under a ``-- name: <name>`` line: what
runs is what is read, with no SQL assembled from fragments. ``<name>.sqlite`` is the
SQLite text of a query whose PostgreSQL text is ``<name>``. The comment lines under the
name say what the statement does and why it is written so; they are dropped on
reading, so that a placeholder or a percent sign in them never reaches a driver.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

_SOURCE = Path(__file__).with_name("queries.sql")
_NAME = re.compile(r"^-- name: (\S+)\s*$", re.MULTILINE)


def query(name: str) -> str:
    """The text of the statement ``name``; KeyError names a statement that does not exist."""
    return _statements()[name]


def driver_rows(conn: Connection, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run the statement ``name`` on ``conn``'s driver cursor and return its rows as
    plain tuples. The hot path's statements (claim, submit, group commit) go this way:
    SQLAlchemy's execution context and a result object per row cost about as much
    as the driver's call."""
    cursor = conn.connection.cursor()
    try:
        cursor.execute(query(name), params)
        return list(cursor.fetchall())  # the DB-API says a sequence; psycopg gives a list
    finally:
        cursor.close()


@functools.cache
def _statements() -> dict[str, str]:
    text = _SOURCE.read_text(encoding="utf-8")
    parts = _NAME.split(text)  # [preamble, name, body, name, body, ...]
    statements: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in statements:
            raise ValueError(f"{_SOURCE.name}: the statement {name} is defined twice")
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        statements[name] = "\n".join(lines).strip().rstrip(";").strip()
    return statements
