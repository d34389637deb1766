"""The store's error boundary: driver errors leave it as jobserver's own, and only an
outage is a :class:`StoreUnavailable` (worth a retry); a bug is a plain StoreError."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import psycopg2
import pytest
from sqlalchemy.exc import DisconnectionError, OperationalError

from jobserver.api import error_reply
from jobserver.exceptions import (ConstraintViolation, FencedOff, StoreError,
                                  StoreUnavailable)
from jobserver.store import Store
from jobserver.store.errors import translate


class FakePgError(psycopg2.OperationalError):
    """psycopg2 sets ``pgcode`` only on errors it raised; this one carries one."""

    def __init__(self, pgcode: str | None) -> None:
        super().__init__("server says no")
        self._code = pgcode

    @property
    def pgcode(self) -> str | None:  # type: ignore[override]
        return self._code


@pytest.mark.parametrize("error,kind", [
    (psycopg.errors.AdminShutdown("terminating connection"), StoreUnavailable),
    (psycopg.errors.CannotConnectNow("the database system is starting up"), StoreUnavailable),
    (psycopg.errors.SerializationFailure("could not serialize"), StoreUnavailable),
    (psycopg.errors.IdleInTransactionSessionTimeout("idle too long"), StoreUnavailable),
    (psycopg.OperationalError("connection refused"), StoreUnavailable),  # no SQLSTATE
    (psycopg.InterfaceError("the connection is closed"), StoreUnavailable),
    (psycopg.errors.UndefinedTable("relation does not exist"), StoreError),
    (psycopg.errors.SyntaxError("syntax error"), StoreError),
    (psycopg.errors.UniqueViolation("duplicate key"), ConstraintViolation),
    (FakePgError("57P01"), StoreUnavailable),
    (FakePgError("42P01"), StoreError),
    (FakePgError(None), StoreUnavailable),
    (psycopg2.errors.UniqueViolation("duplicate key"), ConstraintViolation),
])
def test_postgresql_errors_are_told_by_their_sqlstate(error: Exception,
                                                      kind: type[StoreError]) -> None:
    translated = translate(error)
    assert type(translated) is kind
    wrapped = translate(OperationalError("SELECT secret", {"p": 1}, error))
    assert type(wrapped) is kind and "secret" not in wrapped.message


def test_a_connection_sqlalchemy_found_dead_is_an_outage() -> None:
    assert type(translate(DisconnectionError("gone"))) is StoreUnavailable
    invalidated = OperationalError("SELECT 1", {}, psycopg.errors.UndefinedTable("x"),
                                   connection_invalidated=True)
    assert type(translate(invalidated)) is StoreUnavailable


def sqlite_store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.create_all()
    return store


def test_sqlite_bugs_and_constraints_are_not_outages(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    with pytest.raises(StoreError) as missing:
        with store.tx.read() as conn:
            conn.exec_driver_sql("SELECT * FROM no_such_table")
    assert type(missing.value) is StoreError
    assert isinstance(missing.value.__cause__, OperationalError)
    with pytest.raises(ConstraintViolation):
        with store.tx.write() as conn:
            for _ in range(2):
                conn.exec_driver_sql("INSERT INTO lock_epochs (key, epoch) VALUES ('k', 1)")
    store.dispose()


def test_sqlite_busy_is_an_outage_on_the_drivers_own_cursor_too(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    other = sqlite3.connect(tmp_path / "store.db", isolation_level=None,
                            check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            with store.tx.statement() as conn:
                raw = conn.connection.cursor()
                raw.execute("PRAGMA busy_timeout=0")
                raw.execute("INSERT INTO lock_epochs (key, epoch) VALUES ('k', 1)")
    finally:
        other.execute("ROLLBACK")
        other.close()
        store.dispose()


def test_errors_of_our_own_pass_the_boundary_unchanged(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    with pytest.raises(FencedOff):
        with store.tx.write():
            raise FencedOff("taken over")
    store.dispose()


def test_the_api_answers_an_outage_with_503_and_hides_a_bug() -> None:
    reply = error_reply(StoreUnavailable("connection refused to 10.0.0.5"))
    assert reply is not None and reply.status == 503 and reply.code == "store_unavailable"
    assert "10.0.0.5" not in reply.message
    assert error_reply(StoreError("no such table: jobs")) is None  # logged, a plain 500
    assert error_reply(ConstraintViolation("duplicate key")) is None
