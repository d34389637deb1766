"""The ordered feed of final job events: every row read once, in commit order, even
when transactions commit out of id order (PostgreSQL)."""

from __future__ import annotations

import json
import threading

from sqlalchemy import text

from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.feed import (Cursor, final_events, head_of, load_cursor, save_cursor,
                                  start_cursor)
from jobserver.store.tables import AuditEvent, events, record_events
from tests.helpers import job_spec, wait_for

POLICY = Policy(lambda name: False, None)


def submit(store: Store, name: str) -> int:
    spec = parse_job(json.dumps(job_spec(name=name)))
    return store.jobs.submit(spec, validate_job(spec, POLICY))[0].id


def read_all(store: Store, reader: str) -> list[int]:
    """Read the whole feed as the reader ``reader``, saving its cursor; job ids."""
    with store.tx.write() as conn:
        cursor = load_cursor(conn, reader)
        rows = final_events(conn, cursor, 1000)
        if rows:
            save_cursor(conn, reader, rows[-1].cursor)
    return [row.job_id for row in rows]


def finish(conn, job_id: int) -> None:
    record_events(conn, [AuditEvent(job_id, State.READY, State.DISCARDED, message="test")])


def test_reads_final_job_events_once_in_order(store: Store) -> None:
    before = submit(store, "before")
    with store.tx.write() as conn:
        finish(conn, before)
    assert read_all(store, "r") == []  # a new reader starts after what is written
    first, second = submit(store, "first"), submit(store, "second")
    for job_id in (first, second):
        with store.tx.write() as conn:
            finish(conn, job_id)
    assert read_all(store, "r") == [first, second]
    assert read_all(store, "r") == []  # the saved cursor: nothing is read twice
    third = submit(store, "third")
    with store.tx.write() as conn:
        finish(conn, third)
    assert read_all(store, "r") == [third]


def test_step_and_non_final_events_are_not_in_the_feed(store: Store) -> None:
    read_all(store, "r")
    job_id = submit(store, "job")
    with store.tx.write() as conn:
        record_events(conn, [AuditEvent(job_id, State.READY, State.RUNNING),
                             AuditEvent(job_id, State.RUNNING, State.SUCCEED, step="s1")])
    assert read_all(store, "r") == []


def test_transactions_committing_out_of_id_order_lose_nothing(store_on_postgres: Store) -> None:
    """The hole a "highest id seen" reader falls into: the transaction holding the
    lower id commits after the higher one was readable. (SQLite serialises writers:
    its ids are handed out in commit order.)"""
    store = store_on_postgres
    read_all(store, "r")
    slow_job, fast_job = submit(store, "slow"), submit(store, "fast")
    slow = store.engine.connect()
    slow_tx = slow.begin()
    try:
        finish(slow, slow_job)  # takes the lower id, commits last
        slow_id = slow.execute(events.select().where(events.c.job_id == slow_job)
                               .order_by(events.c.id.desc())).first().id
        with store.tx.write() as fast:
            finish(fast, fast_job)
        with store.engine.connect() as probe:
            visible = probe.execute(events.select().where(
                events.c.to_state == "DISCARDED")).all()
        fast_id = max(row.id for row in visible)
        assert fast_id > slow_id and slow_id not in {row.id for row in visible}
        # The higher id is committed and visible, the lower one is not: the feed
        # waits for the older transaction rather than move past its row.
        assert read_all(store, "r") == []
        slow_tx.commit()
    finally:
        slow.close()
    assert read_all(store, "r") == [slow_job, fast_job]
    assert read_all(store, "r") == []


def test_head_is_after_everything_committed(store: Store) -> None:
    job_id = submit(store, "done")
    with store.tx.write() as conn:
        finish(conn, job_id)
    with store.tx.read() as conn:
        head = head_of(conn)
    with store.tx.write() as conn:
        assert final_events(conn, head, 10) == []
        assert [e.job_id for e in final_events(conn, Cursor(0, 0), 10)] == [job_id]


def test_a_new_reader_made_by_another_transaction_meanwhile_is_kept(
        store_on_postgres: Store) -> None:
    """A view tracker's first round and a materialize both making the reader
    ``views/jobs`` at once (PostgreSQL; SQLite runs one writer at a time): the second
    waits for the first, keeps its cursor, and neither fails."""
    store = store_on_postgres
    found: list[Cursor] = []
    with store.tx.write() as maker:
        start_cursor(maker, "r")  # not committed yet
        reader = threading.Thread(target=lambda: found.append(load_in_transaction(store)))
        reader.start()
        wait_for(lambda: waiting_on_a_lock(store), what="the reader to wait for the maker")
        made = load_cursor(maker, "r")
    reader.join(10)
    assert found == [made]


def load_in_transaction(store: Store) -> Cursor:
    with store.tx.write() as conn:
        return load_cursor(conn, "r")


def waiting_on_a_lock(store: Store) -> bool:
    with store.tx.read() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'")).scalar())
