"""A dataset's partitions in commit order: a reader that has read up to a position
never later finds a partition at or before it that it did not see, even when the
transactions adding them commit in the reverse order of their ids."""

from __future__ import annotations

import threading

from jobserver.datasets.records import DatasetRecord
from jobserver.datasets.spec import check_partitions, parse_dataset
from jobserver.datasets.tables import partitions
from jobserver.store import Store
from jobserver.store.feed import Cursor


def dataset(store: Store) -> DatasetRecord:
    return store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "n", "type": "int"}]}))


def batch(raw: DatasetRecord, *numbers: int) -> list:
    found, problems = check_partitions([{"key": {"n": n}, "location": f"/p/{n}"}
                                        for n in numbers], raw.partition_key)
    assert problems == []
    return found


class Reader:
    """A consumer's view: reads after its cursor and moves it to the last row read."""

    def __init__(self, store: Store, raw: DatasetRecord) -> None:
        self.store, self.raw = store, raw
        with store.tx.read() as conn:
            self.cursor = store.partitions.head(conn, raw)

    def read(self) -> list[int]:
        with self.store.tx.read() as conn:
            rows = self.store.partitions.read_after(conn, self.raw, self.cursor, 1000)
        if rows:
            self.cursor = rows[-1].cursor
        return [row.key["n"] for row in rows]


def test_a_reader_reads_each_partition_once_in_commit_order(store: Store) -> None:
    raw = dataset(store)
    store.partitions.add("default", "raw", [{"key": {"n": 0}, "location": "/p/0"}])
    reader = Reader(store, raw)
    assert reader.read() == []  # a new reader starts after what is there
    store.partitions.add("default", "raw", [{"key": {"n": n}, "location": "/x"}
                                            for n in (1, 2)])
    store.partitions.add("default", "raw", [{"key": {"n": 3}, "location": "/x"}])
    assert reader.read() == [1, 2, 3]
    assert reader.read() == []
    with store.tx.read() as conn:  # from the start: everything, in the order added
        everything = store.partitions.read_after(conn, raw, Cursor(0, 0), 10)
    assert [row.key["n"] for row in everything] == [0, 1, 2, 3]


def test_transactions_committing_in_reverse_order_lose_nothing(
        store_on_postgres: Store) -> None:
    """PostgreSQL: the transaction holding the lower id (and the lower txid) commits
    after the one holding the higher id was visible. The reader waits for the older
    transaction rather than move past its partition, then reads both, once."""
    store = store_on_postgres
    raw = dataset(store)
    reader = Reader(store, raw)
    slow = store.engine.connect()
    slow_tx = slow.begin()
    try:
        store.partitions.add_checked(slow, raw, batch(raw, 1))  # id 1, commits last
        with store.tx.write() as fast:
            store.partitions.add_checked(fast, raw, batch(raw, 2))
        with store.engine.connect() as probe:
            visible = {row.k0: row.id for row in probe.execute(partitions.select())}
        assert len(visible) == 1 and min(visible.values()) > 1  # only the higher id
        assert reader.read() == []  # 2 is committed, but 1 might still come before it
        slow_tx.commit()
    finally:
        slow.close()
    assert reader.read() == [1, 2]
    assert reader.read() == []


def test_sqlite_serialises_adding_transactions(tmp_path) -> None:
    """SQLite: a second adding transaction cannot even begin (``BEGIN IMMEDIATE``)
    until the first has committed, so ids are handed out in commit order and the
    reverse order cannot happen: the second add waits, takes the higher id, and the
    reader sees both once, in id order."""
    store = Store(f"sqlite:///{tmp_path / 'feed.db'}")
    store.upgrade()
    try:
        raw = dataset(store)
        reader = Reader(store, raw)
        slow = store.engine.connect()
        slow_tx = slow.begin()
        store.partitions.add_checked(slow, raw, batch(raw, 1))
        second = threading.Thread(target=store.partitions.add, args=(
            "default", "raw", [{"key": {"n": 2}, "location": "/p/2"}]))
        second.start()
        second.join(0.5)
        assert second.is_alive(), "a second writer began while the first was open"
        assert reader.read() == []  # nothing committed yet
        slow_tx.commit()
        slow.close()
        second.join(10)
        assert not second.is_alive()
        with store.engine.connect() as probe:
            ids = {row.k0: row.id for row in probe.execute(partitions.select())}
        first_key, second_key = (raw.partition_key.fields[0].encode(n) for n in (1, 2))
        assert ids[first_key] < ids[second_key]
        assert reader.read() == [1, 2]
        assert reader.read() == []
    finally:
        store.dispose()


def test_a_deleted_newest_partition_never_lends_its_id_on_sqlite(tmp_path) -> None:
    """SQLite reuses the rowid of a deleted newest row unless the table is
    AUTOINCREMENT: a reader past it would then miss the next partition."""
    store = Store(f"sqlite:///{tmp_path / 'ids.db'}")
    store.upgrade()
    try:
        raw = dataset(store)
        store.partitions.add("default", "raw", [{"key": {"n": 1}, "location": "/p"}])
        reader = Reader(store, raw)
        store.partitions.add("default", "raw", [{"key": {"n": 2}, "location": "/p"}])
        assert reader.read() == [2]
        store.partitions.delete("default", "raw", [{"n": 2}])
        store.partitions.add("default", "raw", [{"key": {"n": 3}, "location": "/p"}])
        assert reader.read() == [3]
    finally:
        store.dispose()


def test_new_partitions_keep_a_cursor_per_dataset(store: Store) -> None:
    """The reader a partition trigger plugs into the schedule evaluator: partitions
    added since its last read of the datasets asked for, its cursors saved in the
    caller's transaction (a rolled-back read returns them again)."""
    from jobserver.datasets.feed import NewPartitions

    raw = dataset(store)
    store.partitions.add("default", "raw", [{"key": {"n": 0}, "location": "/p"}])
    feed = NewPartitions(store, "test")

    def read(limit: int = 100, names: frozenset[str] = frozenset({"default/raw"})
             ) -> list[tuple[str, list[int]]]:
        with store.tx.write() as conn:
            return [(batch.dataset.full_name, [p.key["n"] for p in batch.partitions])
                    for batch in feed.read(conn, limit, set(names))]

    assert read() == []  # what existed before its first read is not new
    store.partitions.add("default", "raw", [{"key": {"n": n}, "location": "/p"}
                                            for n in (1, 2, 3)])
    assert read(names=frozenset({"default/other"})) == []  # not asked for: not read
    with store.tx.write() as conn:  # a read whose transaction rolls back
        assert len(feed.read(conn, 100, {"default/raw"})[0].partitions) == 3
        conn.rollback()
    assert read(2) == [("default/raw", [1, 2])]
    assert read() == [("default/raw", [3])]
    assert read() == []
    assert raw.full_name == "default/raw"