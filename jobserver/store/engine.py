"""Engine creation for both dialects and the store's clock.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and every write
transaction starts with ``BEGIN IMMEDIATE`` so that a read-then-write transaction never
fails on lock upgrade; read-only transactions use a plain deferred ``BEGIN``. A write
waits for the lock in short steps of its own (see :func:`_begin_immediate`).
"""

from __future__ import annotations

import random
import select
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, bindparam, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from jobserver.store.models import UTCDateTime

READONLY = "jobserver_readonly"
#: How long a SQLite statement or write transaction waits for the database's lock.
SQLITE_BUSY_TIMEOUT = 30.0
#: The longest pause between two tries for SQLite's write lock.
SQLITE_LOCK_STEP = 0.002


#: The planner settings of a :func:`make_engine` with ``keyed=True``; see there.
KEYED_PLANS = "-c plan_cache_mode=auto -c enable_seqscan=off"


def make_engine(url: str, pool_size: int = 5, stall_timeout: float | None = None,
                keyed: bool = False) -> Engine:
    """``stall_timeout`` (PostgreSQL): end a transaction left idle that long. A node
    stopped inside a transaction (SIGSTOP, a long pause) would otherwise keep its row
    locks, and the node taking over from it would block on them until it woke.

    ``keyed`` (PostgreSQL): an engine for statements that find every row they touch
    by key (an array of ids against a primary key or an index), such as the group
    commit. Their best plan is the same whatever the parameters and the tables' size,
    so PostgreSQL may keep one generic plan per prepared statement instead of
    planning each run, which was half of the group commit's database CPU. Sequential
    scans are ruled out, so that a plan made while the tables were small, when a scan
    costs less than an index, cannot stay in use as they grow. A plan made before a
    table's first ANALYZE may still look a key up through an index that leads with
    another column; PostgreSQL plans again once autovacuum has analyzed the table."""
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    if url.startswith("postgresql"):
        url = _with_driver(url)
        # psycopg 3 prepares a statement a connection runs often; PostgreSQL may then
        # settle on one generic plan for it and keep that plan until the table's next
        # ANALYZE. A plan made while the tables were small would stay in use as they
        # grow, and on a new database under load claims slow down until the queue
        # grows without bound. Planned on every run with the tables as they are, as
        # psycopg2 always did; the statements' parse is still saved. The claim
        # statement relies on it: its unused branches fold away only when planned
        # with the parameters known.
        # The session's time zone is UTC whatever the server's default: timestamps
        # then arrive in UTC already (as_utc keeps them as they are, instead of a
        # conversion per value: 5 us each, half a second for 100,000 rows), and a
        # timestamp cast to a date names the UTC day on every server.
        plans = KEYED_PLANS if keyed else "-c plan_cache_mode=force_custom_plan"
        options = plans + " -c timezone=UTC"
        if stall_timeout:
            options += (" -c idle_in_transaction_session_timeout="
                        f"{max(1, int(stall_timeout * 1000))}")
        connect_args = {"options": options}
        # No pool_pre_ping: it costs a round trip per transaction, a third of the hot
        # path's. A connection found dead fails its one statement instead; SQLAlchemy
        # then drops every pooled connection made before it, and the caller's retry
        # (each store user has one) reconnects.
        # A keyed engine serves one writer thread: one connection, no overflow, so
        # that it adds a single session per node to the server's max_connections.
        engine = create_engine(url, pool_size=pool_size,
                               max_overflow=0 if keyed else pool_size,
                               pool_recycle=1800, connect_args=connect_args)
        # Not every store user retries (an API request, a job's step writes), so a
        # restart of the server or a terminated session answered each of them with
        # one error per pooled connection (a 500 for the first submits after a
        # PostgreSQL restart). A connection the server has ended can be told without
        # a round trip: see _ended_by_server.
        event.listen(engine, "checkout", _replace_if_ended_by_server)
        return engine
    return create_engine(url)


def _ended_by_server(dbapi_connection: Any) -> bool:
    """True when the server has ended this idle pooled connection (a restart,
    ``pg_terminate_backend``, ``idle_session_timeout``): it sends its FATAL message
    and closes the socket, so there is something to read. An idle connection that is
    still good has nothing to read (store connections never LISTEN). One ``poll``
    system call, no round trip."""
    if getattr(dbapi_connection, "closed", 0):
        return True
    try:
        poller = select.poll()
        poller.register(dbapi_connection.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _replace_if_ended_by_server(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    if _ended_by_server(dbapi_connection):
        # The pool drops this connection and checks out a new one in its place.
        raise DisconnectionError("the server ended this pooled connection")


def _with_driver(url: str) -> str:
    """A plain ``postgresql://`` URL gets psycopg 3, which prepares the statements a
    connection runs repeatedly: the hot path's statements are planned once per
    connection instead of on every claim and completion (planning was most of
    PostgreSQL's time per job). An explicit ``postgresql+driver://`` is kept."""
    scheme, rest = url.split("://", 1)
    if scheme != "postgresql":
        return url
    try:
        import psycopg  # noqa: F401
    except ImportError:
        from jobserver.exceptions import ConfigError

        raise ConfigError("database.url is PostgreSQL but psycopg is missing: "
                          "pip install 'jobserver[postgres]'") from None
    return f"postgresql+psycopg://{rest}"


def libpq_params(url: str) -> dict[str, Any]:
    """A PostgreSQL URL as libpq's connection parameters, for the connections the
    store's engine does not pool: the lock session and the LISTEN connection."""
    parsed = make_url(url)
    params = {"host": parsed.host, "port": parsed.port, "user": parsed.username,
              "password": parsed.password, "dbname": parsed.database}
    return {name: value for name, value in params.items() if value is not None}


def sqlite_path(url: str) -> str | None:
    """The database file of a ``sqlite:///`` URL; None for an in-memory database."""
    path = url.split("///", 1)[-1].split("?", 1)[0]
    return path if path and path != ":memory:" else None


def _sqlite_engine(url: str) -> Engine:
    path = sqlite_path(url)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT,
                                              "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to SQLAlchemy's "begin" hook below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(_busy_timeout())
        cursor.execute("PRAGMA foreign_keys=ON")
        # A job failed by its upstream's failure fails its own dependents through the
        # same trigger (jobserver.store.triggers): a trigger firing itself.
        cursor.execute("PRAGMA recursive_triggers=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(READONLY, False):
            connection.exec_driver_sql("BEGIN")
        else:
            _begin_immediate(connection)

    return engine


def _busy_timeout() -> str:
    return f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT * 1000)}"


def _begin_immediate(connection: Any) -> None:
    """``BEGIN IMMEDIATE``, trying again in short, growing pauses (up to
    ``SQLITE_LOCK_STEP``) while another writer holds the lock. SQLite's own busy
    handler sleeps ever longer between tries, so a waiter keeps missing a lock that
    fresh writers take at once: under a steady stream of API inserts the node's group
    commits would wait and the queue grow. The busy timeout stays for every other
    statement."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT
    pause = 0.0002
    # The two pragmas run on the driver's connection, skipping SQLAlchemy's
    # per-statement work twice per write transaction.
    raw = connection.connection.dbapi_connection
    raw.execute("PRAGMA busy_timeout=0")
    try:
        while True:
            try:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                return
            except OperationalError as exc:
                if "locked" not in str(exc.orig) or time.monotonic() > deadline:
                    raise
            time.sleep(random.uniform(pause / 2, pause))  # spread: no lockstep retries
            pause = min(pause * 2, SQLITE_LOCK_STEP)
    finally:
        raw.execute(_busy_timeout())


class store_now(FunctionElement[Any]):
    """The store's clock, optionally shifted by ``offset`` seconds.

    Node clocks are never compared with each other: heartbeats, timestamps and
    dead-node checks all use the database server's time.
    """

    type = UTCDateTime()
    inherit_cache = True

    def __init__(self, offset: float = 0.0) -> None:
        super().__init__(bindparam("clock_offset", float(offset), unique=True))


@compiles(store_now, "postgresql")
def _now_postgresql(element: store_now, compiler: Any, **kw: Any) -> str:
    offset = compiler.process(element.clauses, **kw)
    return f"(clock_timestamp() + ({offset}) * interval '1 second')"


@compiles(store_now, "sqlite")
def _now_sqlite(element: store_now, compiler: Any, **kw: Any) -> str:
    offset = compiler.process(element.clauses, **kw)
    # strftime gives milliseconds; pad to the microseconds SQLAlchemy writes so that
    # text comparison between the two stays chronological.
    return (f"(strftime('%Y-%m-%d %H:%M:%f', 'now', ({offset}) || ' seconds') || '000')")


class seconds_since(FunctionElement[Any]):
    """Seconds elapsed on the store's clock since a timestamp column."""

    inherit_cache = True

    def __init__(self, column: Any) -> None:
        super().__init__(column)


@compiles(seconds_since, "postgresql")
def _since_postgresql(element: seconds_since, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"extract(epoch from (clock_timestamp() - {column}))"


@compiles(seconds_since, "sqlite")
def _since_sqlite(element: seconds_since, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"((julianday('now') - julianday({column})) * 86400.0)"


class epoch_minute(FunctionElement[Any]):
    """Whole minutes since the Unix epoch of a timestamp (the floor)."""

    inherit_cache = True

    def __init__(self, column: Any) -> None:
        super().__init__(column)


@compiles(epoch_minute, "postgresql")
def _minute_postgresql(element: epoch_minute, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"CAST(floor(extract(epoch from {column}) / 60) AS bigint)"


@compiles(epoch_minute, "sqlite")
def _minute_sqlite(element: epoch_minute, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    # Integer division of the (never negative) seconds is the floor.
    return f"(CAST(strftime('%s', {column}) AS INTEGER) / 60)"
