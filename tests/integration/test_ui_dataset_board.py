"""The datasets pages' data, through the real store (SQLite and PostgreSQL): a
dataset's partitions by the filter grammar and a key range, paged; its consumers'
lag, working sets and FAILED partitions made by real failing runs."""

from __future__ import annotations

import pytest

from jobserver.datasets.page_board import (PartitionQuery, dataset_page, dataset_rows,
                                           quoted, refused)
from jobserver.datasets.spec import parse_dataset
from jobserver.store import Store
from tests.integration.test_consumers import add, consume, consumer, harness  # noqa: F401
from tests.integration.test_runner import Harness


def hours(page: object) -> list[int]:
    return [p.key["hour"] for p in page.partitions]  # type: ignore[attr-defined]


def test_partitions_by_conditions_and_key_range_newest_first(harness: Harness) -> None:
    store = harness.store
    add(store, range(24))
    add(store, range(3), day="2026-11-02")
    page = dataset_page(store, "default", "raw", PartitionQuery(
        where=("date = 2026-11-01",), key_field="hour", low="6", high="9"))
    assert hours(page) == [9, 8, 7, 6] and page.problems == [] and page.next_cursor is None
    page = dataset_page(store, "default", "raw", PartitionQuery(
        key_field="date", low="2026-11-02", newest_first=False))
    assert [(p.key["date"], p.key["hour"]) for p in page.partitions] == [
        ("2026-11-02", 0), ("2026-11-02", 1), ("2026-11-02", 2)]


def test_partitions_page_on(harness: Harness) -> None:
    store = harness.store
    add(store, range(24))
    add(store, range(24), day="2026-11-02")
    add(store, range(24), day="2026-11-03")
    first = dataset_page(store, "default", "raw")
    assert len(first.partitions) == 50 and first.next_cursor is not None
    rest = dataset_page(store, "default", "raw", PartitionQuery(cursor=first.next_cursor))
    assert len(rest.partitions) == 22 and rest.next_cursor is None
    seen = {p.id for p in first.partitions} | {p.id for p in rest.partitions}
    assert len(seen) == 72


def test_refused_conditions_show_the_parsers_message(harness: Harness) -> None:
    store = harness.store
    add(store, range(3))
    page = dataset_page(store, "default", "raw", PartitionQuery(
        where=("hour >= 2", "shop = berlin", "hour >> 3"), key_field="hour", low="noon"))
    fields = [problem["field"] for problem in page.problems]
    assert fields == ["where[1]", "where[2]", "from"] and page.partitions == []
    assert "'shop' is not a key field" in page.problems[0]["message"]
    assert "hour (int)" in page.problems[2]["message"]
    assert [c.spec.name for c in page.consumers] == []  # the rest of the page is there
    assert refused(page.dataset, PartitionQuery(key_field="shop", low="a"))[0]["field"] == \
        "field"


def test_a_quoted_bound_reads_back_exactly(store: Store) -> None:
    store.datasets.create(parse_dataset({"name": "shops", "key": [
        {"name": "shop", "type": "string"}]}))
    names = ['new york, ny', 'say "hi"', "back\\slash", "plain"]
    store.partitions.add("default", "shops", [
        {"key": {"shop": name}, "location": f"/{index}"} for index, name in enumerate(names)])
    for name in names:
        page = dataset_page(store, "default", "shops", PartitionQuery(
            key_field="shop", low=name, high=name))
        assert [p.key["shop"] for p in page.partitions] == [name], quoted(name)


def test_consumers_with_lag_counts_and_failed_partitions(harness: Harness) -> None:
    store = harness.store
    consumer(store, filter=["hour >= 6"], processing_limit=2, max_retries=0)
    add(store, range(10))  # 6, 7, 8, 9 pass the filter
    consume(harness, fail=True, limit=2)  # 6 and 7 fail for good (no retries)
    page = dataset_page(store, "default", "raw")
    (cleanse,) = page.consumers
    assert cleanse.counts["FAILED"] == 2 and cleanse.lag == 2
    assert [item["key"]["hour"] for item in cleanse.failed] == [6, 7]
    assert all("cannot read the partition" in item["last_error"] for item in cleanse.failed)
    consume(harness, limit=2)
    (cleanse,) = dataset_page(store, "default", "raw").consumers
    assert cleanse.lag == 0 and cleanse.processed_total == 2


def test_datasets_list_by_name(store: Store) -> None:
    for name in ("b", "a", "c"):
        store.datasets.create(parse_dataset({"name": name, "description": f"dataset {name}",
                                             "key": [{"name": "day", "type": "date"}]}))
    rows, following = dataset_rows(store, limit=2)
    assert [d.name for d in rows] == ["a", "b"] and rows[0].description == "dataset a"
    rest, end = dataset_rows(store, after=following)
    assert [d.name for d in rest] == ["c"] and end is None


def test_a_lag_far_behind_is_counted_up_to_a_cap(harness: Harness,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = harness.store
    consumer(store)
    add(store, range(24))
    (exact,) = store.consumers.list("default", "raw")
    (capped,) = store.consumers.list("default", "raw", lag_cap=5)
    assert (exact.lag, exact.lag_capped) == (24, False)
    assert (capped.lag, capped.lag_capped) == (5, True)
    (at_cap,) = store.consumers.list("default", "raw", lag_cap=24)
    assert (at_cap.lag, at_cap.lag_capped) == (24, False)
    monkeypatch.setattr("jobserver.datasets.page_board.LAG_CAP", 10)
    (shown,) = dataset_page(store, "default", "raw").consumers
    assert (shown.lag, shown.lag_capped) == (10, True)


def test_a_capped_lag_reads_a_window_after_the_pointer_whatever_the_filter(
        harness: Harness) -> None:
    # One partition in four matches: a capped count reads the first cap + 1 after
    # the pointer and counts the matching ones there (a lower bound), instead of
    # reading on until cap of them match.
    store = harness.store
    consumer(store, filter=["meta.source = crawler"])
    for hour in range(24):
        add(store, range(hour, hour + 1), meta={"source": "crawler" if hour % 4 == 0
                                                else "feed"})
    (exact,) = store.consumers.list("default", "raw")
    (capped,) = store.consumers.list("default", "raw", lag_cap=8)
    assert (exact.lag, exact.lag_capped) == (6, False)
    assert (capped.lag, capped.lag_capped) == (3, True)  # hours 0, 4 and 8 of 0..8
