"""SQLite writers take turns on the database's one write lock.

The API's inserts and the node's claims and group commits all write to the embedded
store. A write that finds the lock taken must get it soon after it is freed, and fail
with the store's own error, not hang, when it is never freed.
"""

from __future__ import annotations

import sqlite3
import statistics
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from jobserver.exceptions import StoreUnavailable
from jobserver.store import Transactions, engine as engine_module
from jobserver.store.engine import make_engine


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def engine(database: Path) -> Engine:
    engine = make_engine(f"sqlite:///{database}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE marks (at REAL)")
    yield engine
    engine.dispose()


@pytest.fixture
def other_writer(database: Path, engine: Engine) -> sqlite3.Connection:
    """A connection of its own, as another process (the API, another node) has."""
    connection = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    yield connection
    connection.close()


def test_a_waiting_write_starts_within_a_few_ms_of_the_lock_being_freed(
        engine: Engine, other_writer: sqlite3.Connection) -> None:
    gaps = []
    for _ in range(5):
        other_writer.execute("BEGIN IMMEDIATE")
        freed: list[float] = []

        def commit() -> None:
            other_writer.execute("COMMIT")
            freed.append(time.monotonic())

        timer = threading.Timer(0.08, commit)
        timer.start()
        with engine.begin() as conn:
            started = time.monotonic()
            conn.exec_driver_sql("INSERT INTO marks VALUES (1)")
        timer.join()
        gaps.append(started - freed[0])
    # SQLite's own busy handler would try again 103 ms after the first try, 23 ms
    # after the lock was freed.
    assert statistics.median(gaps) < 0.010, gaps
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM marks").scalar() == 5


def test_a_write_that_never_gets_the_lock_fails_with_the_stores_error(
        engine: Engine, other_writer: sqlite3.Connection,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT", 0.3)
    other_writer.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="database is locked"):
        with Transactions(engine).write():
            pass
    assert 0.3 <= time.monotonic() - started < 5
    other_writer.execute("ROLLBACK")
    with engine.begin() as conn:  # the connection that gave up works as before
        conn.exec_driver_sql("INSERT INTO marks VALUES (1)")
        # Only the wait for the write lock is shortened; statements keep the timeout.
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 300
