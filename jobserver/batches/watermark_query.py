"""A watermark query: one read-only SELECT, bounded in time, whose errors never show
what it read.

A BatchConfig's ``watermark: {sql, connection}`` runs inside ``POST
/api/v1/batches/run``, for whoever may run batches (``submit``); saving it needs
``sql`` (:func:`jobserver.batches.watermarks.check_sources`). What the query may do is
what reading a date needs, and no more, on every run:

* its text is one statement that reads (:func:`problem_of`): it starts with SELECT,
  WITH, VALUES or TABLE, and holds no ``;`` but a last one. A driver that sends text
  as a simple query (psycopg2) would otherwise run a second statement after a COMMIT
  of its own, outside the read-only transaction;
* it runs read-only: on PostgreSQL in a ``READ ONLY`` transaction that is rolled back,
  never committed; on SQLite under ``PRAGMA query_only`` and an authorizer that allows
  reading only (no write, ATTACH or PRAGMA), both lifted before the connection goes
  back to its pool (or the connection is dropped). Other databases are refused;
* it is bounded in time (:data:`QUERY_TIMEOUT`): ``statement_timeout`` on PostgreSQL,
  a progress handler on SQLite;
* its error says what went wrong (no row, timed out, tried to write, the database's
  error class) and never what the query returned or what the database quoted of the
  data: PostgreSQL's messages are left out whole, as dynamic SQL (``query_to_xml``)
  can put data in any of them; of SQLite's only those about the query's own text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from jobserver.exceptions import WatermarkError

#: Seconds a watermark query may run; it runs inside an API request.
QUERY_TIMEOUT = 10.0
#: SQLite VM instructions between two looks at the clock.
PROGRESS_STEPS = 1000
_LEADING = re.compile(r"^(\s+|--[^\n]*(\n|$)|/\*.*?\*/|\()*", re.DOTALL)
_READING = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
#: PostgreSQL's SQLSTATEs: query_canceled (statement_timeout), read_only_sql_transaction.
_PG_TIMEOUT, _PG_READ_ONLY = "57014", "25006"
#: SQLite's result codes: what a progress handler's stop and the guards raise.
_SQLITE_TIMEOUT = "SQLITE_INTERRUPT"
_SQLITE_READ_ONLY = frozenset({"SQLITE_READONLY", "SQLITE_AUTH"})
#: SQLite messages that quote only the query's text (SQLite has no dynamic SQL).
_SQLITE_SHOWN = ("no such table", "no such column", "no such function", "near ",
                 "ambiguous column", "incomplete input", "wrong number of arguments")


def problem_of(sql: str) -> str | None:
    """Why ``sql`` is not one reading statement, or None: it must start (after comments
    and parentheses) with SELECT, WITH, VALUES or TABLE and hold no ';' but a last one
    (write chr(59) for one in a literal)."""
    body = sql.strip()
    if body.endswith(";"):
        body = body[:-1]
    if ";" in body:
        return "holds more than one statement (';'): it must be one SELECT of a date"
    rest = body[_LEADING.match(body).end():]  # type: ignore[union-attr]
    keyword = re.match(r"[A-Za-z]+", rest)
    if keyword is None or keyword.group().upper() not in _READING:
        return "is not a SELECT: a watermark query only reads (SELECT, WITH, VALUES)"
    return None


def first_value(engine: Engine, name: str, sql: str, values: Mapping[str, Any],
                timeout: float | None = None) -> Any:
    """The first column of the first row ``sql`` returns on the connection ``name``,
    read-only and within ``timeout`` seconds (:data:`QUERY_TIMEOUT`);
    :class:`WatermarkError` otherwise."""
    timeout = QUERY_TIMEOUT if timeout is None else timeout
    where = f"the watermark query on {name!r}"
    problem = problem_of(sql)
    if problem is not None:
        raise WatermarkError(f"{where} {problem}", {"connection": name})
    if engine.dialect.name not in ("postgresql", "sqlite"):
        raise WatermarkError(f"{where}: watermark queries run on PostgreSQL and SQLite "
                             f"connections only, not {engine.dialect.name}",
                             {"connection": name})
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                # Computed here, an integer: nothing of the config's is formatted in.
                return _first(conn, sql, values, where, name, [
                    "SET TRANSACTION READ ONLY",
                    f"SET LOCAL statement_timeout = {max(1, int(timeout * 1000))}"])
            with _sqlite_reading(conn, timeout):
                return _first(conn, sql, values, where, name, [])
    except SQLAlchemyError as exc:
        raise _failure(exc, where, name, timeout) from None


def _first(conn: Connection, sql: str, values: Mapping[str, Any], where: str, name: str,
           prelude: list[str]) -> Any:
    """The value, in a transaction that begins with ``prelude`` and is rolled back
    whatever happens: it is never committed."""
    with conn.begin() as transaction:
        for statement in prelude:
            conn.exec_driver_sql(statement)
        result = conn.execute(text(sql), dict(values))
        if not result.returns_rows:
            raise WatermarkError(f"{where} returns no rows: it should be a SELECT of one "
                                 "date", {"connection": name})
        row = result.first()
        transaction.rollback()
    if row is None:
        raise WatermarkError(f"{where} returned no row", {"connection": name})
    return row[0]


@contextmanager
def _sqlite_reading(conn: Connection, timeout: float) -> Iterator[None]:
    """The pooled connection reads only, and stops at the deadline, for the block;
    put back as it was after, or dropped from the pool if it cannot be."""
    raw: Any = conn.connection.dbapi_connection
    deadline = time.monotonic() + timeout
    raw.execute("PRAGMA query_only = ON")
    raw.set_authorizer(_reading_only)
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
    try:
        yield
    finally:
        try:
            raw.set_progress_handler(None, PROGRESS_STEPS)
            raw.set_authorizer(None)
            raw.execute("PRAGMA query_only = OFF")
        except Exception:  # noqa: BLE001 - never pool a connection left read-only
            conn.invalidate()


def _reading_only(action: int, *_names: Any) -> int:
    """SQLite authorizer: reading tables, calling functions, selecting; nothing else."""
    import sqlite3
    allowed = (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
               sqlite3.SQLITE_RECURSIVE)
    return sqlite3.SQLITE_OK if action in allowed else sqlite3.SQLITE_DENY


def _failure(exc: SQLAlchemyError, where: str, name: str, timeout: float) -> WatermarkError:
    """What went wrong, in words that quote no data."""
    orig = getattr(exc, "orig", None)
    state = (getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
             or getattr(orig, "sqlite_errorname", None))
    details = {"connection": name, "error": type(orig or exc).__name__, "code": state}
    message = (str(orig).strip().splitlines() or [""])[0] if orig is not None else ""
    sqlite = isinstance(state, str) and state.startswith("SQLITE_")
    if state in (_PG_TIMEOUT, _SQLITE_TIMEOUT):
        return WatermarkError(f"{where} timed out after {timeout:g} s", details)
    if state == _PG_READ_ONLY or state in _SQLITE_READ_ONLY or \
            (sqlite and message == "not authorized"):  # the authorizer's, whatever code
        return WatermarkError(f"{where} tried to change the database: a watermark query "
                              "runs read-only, one SELECT of a date", details)
    if sqlite and message.startswith(_SQLITE_SHOWN):
        return WatermarkError(f"{where} was refused: {message[:200]}", details)
    code = "" if not state else f" ({state})" if sqlite else f" (SQLSTATE {state})"
    return WatermarkError(f"{where} failed: {details['error']}{code}; the database's own "
                          "words are left out, as they may quote its data", details)


__all__ = ["QUERY_TIMEOUT", "first_value", "problem_of"]
