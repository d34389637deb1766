"""Ordered feeds: read what other transactions wrote, in commit order, exactly once.

A reader that remembers "the highest id I have seen" loses rows on PostgreSQL: ids
come from a sequence when a row is inserted, but rows become visible when their
transaction commits, so a transaction holding id 7 may commit after one holding id
8 was read, and 7 is then behind the cursor for good.

Here every row of a feed table (``job_events``, ``partitions``) carries the id of the
transaction that wrote it (``txid``, a column default: ``models.txid_default``), and
a reader takes only rows whose transaction is older than the oldest one of this
database still running (the *horizon*, :func:`horizon`, ``feed_horizon`` in
queries.sql): all of those have ended, so no row can appear later below it. Rows are
read in (txid, id) order and the cursor is the (txid, id) of the last row taken. A
row of a long transaction is not skipped, only read once that transaction has ended.
On SQLite writers are serialised (``BEGIN IMMEDIATE``), so a row's id is handed out
while its transaction holds the database's one write lock, and every row with a
lower id was committed before: id order is commit order and the cursor's ``txid``
stays 0.

The cursor lives in ``feed_cursors`` and is saved in the caller's transaction, the
one that acts on what it read: a crash before its commit reads the same rows again,
and a commit acts on them once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from jobserver.store.engine import store_now
from jobserver.store.models import as_utc
from jobserver.store.queries import query
from jobserver.store.tables import feed_cursors


@dataclass(frozen=True, order=True)
class Cursor:
    """The (txid, id) of the last row a reader took; rows after it come next."""

    txid: int
    position: int


@dataclass(frozen=True)
class FinalEvent:
    """A job reaching SUCCEED, ERROR, DISCARDED or STOPPED."""

    id: int
    txid: int
    job_id: int
    job_name: str
    idempotency_key: str | None
    state: str
    at: datetime

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.txid, self.id)


def horizon(conn: Connection) -> int:
    """PostgreSQL: the id of the oldest transaction of this database still running
    (or the next one to start). Every transaction below it has ended, so a statement
    run after this one sees all the rows they wrote: a feed reads only rows with a
    ``txid`` below it."""
    return int(conn.exec_driver_sql(query("feed_horizon")).scalar_one())


def final_events(conn: Connection, after: Cursor, limit: int) -> list[FinalEvent]:
    """Up to ``limit`` final job events after ``after``, in commit order."""
    if conn.dialect.name == "postgresql":
        rows = conn.exec_driver_sql(query("final_events"), {
            "txid": after.txid, "position": after.position, "horizon": horizon(conn),
            "limit": limit}).all()
    else:
        rows = conn.execute(text(query("final_events.sqlite")),
                            {"position": after.position, "limit": limit}).all()
    return [FinalEvent(int(r[0]), int(r[1]), int(r[2]), r[3], r[4], r[5], _time(r[6]))
            for r in rows]


def _time(value: datetime | str) -> datetime:
    if isinstance(value, str):  # SQLite through the raw driver: stored UTC text
        value = datetime.fromisoformat(value)
    stamp = as_utc(value)
    assert stamp is not None
    return stamp


def load_cursor(conn: Connection, name: str,
                head: Callable[[Connection], Cursor] | None = None) -> Cursor:
    """The saved cursor of the reader ``name``; a new reader starts at ``head`` (by
    default the final job events' :func:`head_of`: after every row already
    committed), and is saved there (:func:`start_cursor`: a cursor another
    transaction made meanwhile is kept, and returned)."""
    found = _saved(conn, name)
    if found is None:
        start_cursor(conn, name, head)
        found = _saved(conn, name)
        assert found is not None
    return found


def _saved(conn: Connection, name: str) -> Cursor | None:
    row = conn.execute(select(feed_cursors.c.txid, feed_cursors.c.position)
                       .where(feed_cursors.c.name == name)).first()
    return None if row is None else Cursor(int(row[0]), int(row[1]))


def start_cursor(conn: Connection, name: str,
                 head: Callable[[Connection], Cursor] | None = None) -> None:
    """Make the reader ``name``'s cursor at ``head`` (default :func:`head_of`) unless
    it has one: also for a writer whose rows' consequences that reader must see
    although it may not have run yet. Concurrent makers make one cursor (the insert
    waits for the other's transaction, then leaves its row); the others keep it."""
    start = (head or head_of)(conn)
    maker = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(maker(feed_cursors).values(
        name=name, txid=start.txid, position=start.position,
        updated_at=store_now()).on_conflict_do_nothing())


def head_of(conn: Connection) -> Cursor:
    """Where a reader of final job events that wants nothing already written starts."""
    if conn.dialect.name == "postgresql":
        return Cursor(horizon(conn), 0)
    txid, position = conn.exec_driver_sql(query("feed_head.sqlite")).one()
    return Cursor(int(txid), int(position))


def save_cursor(conn: Connection, name: str, cursor: Cursor) -> None:
    conn.execute(update(feed_cursors).where(feed_cursors.c.name == name)
                 .values(txid=cursor.txid, position=cursor.position, updated_at=store_now()))
