"""Partition triggers on real datasets: a schedule fires once ``count`` new
partitions matching its filter have been added since it was enabled."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete

from jobserver.datasets.feed import NewPartitions
from jobserver.datasets.spec import parse_dataset
from jobserver.datasets.tables import datasets
from jobserver.schedules.spec import parse_schedule
from jobserver.store import Store
from tests.integration.test_schedule_evaluator import POLICY, TEMPLATE, Harness


@pytest.fixture
def h(store: Store) -> Harness:
    harness = Harness(store)
    harness.evaluator.partition_feeds.append(NewPartitions(store))
    store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "day", "type": "date"}, {"name": "shop", "type": "string"}]}))
    return harness


def add(h: Harness, *keys: tuple[str, str]) -> None:
    h.store.partitions.add("default", "raw", [{"key": {"day": day, "shop": shop},
                                               "location": f"/raw/{day}/{shop}"}
                                              for day, shop in keys])


def trigger(**fields: Any) -> dict[str, Any]:
    return {"type": "partition", "dataset": "raw", **fields}


def test_a_partition_trigger_fires_on_n_new_partitions_matching_its_filter(
        h: Harness) -> None:
    add(h, ("2026-11-01", "a"))  # before the schedule looked: not new to it
    sid = h.add("on-raw", trigger(count=3, filter=["shop = a", "day >= 2026-11-02"]),
                properties={"mode": "incremental"})
    h.round(seconds=1)
    add(h, ("2026-11-02", "a"), ("2026-11-02", "b"), ("2026-10-30", "a"))
    add(h, ("2026-11-03", "a"))
    h.round(seconds=2)
    (waiting,) = h.schedule_jobs(sid)
    assert waiting.state == "PENDING_TRIGGER" and h.jobs() == []
    (pending,) = h.evaluations(sid, "pending_trigger")
    assert "dataset raw 2/3" in pending.reason
    add(h, ("2026-11-04", "b"), ("2026-11-04", "a"))
    h.round(seconds=3)
    (launched,) = h.schedule_jobs(sid)
    (job,) = h.jobs()
    assert launched.state == "LAUNCHED" and launched.job_id == job.id
    assert job.params == {"region": "eu", "mode": "incremental"}
    assert [n["count"] for n in launched.notifications] == [2, 1]
    h.round(seconds=4)  # nothing new: nothing more
    assert len(h.jobs()) == 1


def test_without_a_filter_every_new_partition_counts(h: Harness) -> None:
    sid = h.add("any", trigger(count=2))
    h.round(seconds=1)
    add(h, ("2026-11-02", "a"), ("2026-11-02", "b"))
    h.round(seconds=2)
    assert [sj.state for sj in h.schedule_jobs(sid)] == ["LAUNCHED"]


def test_a_filter_on_a_field_the_dataset_lacks_is_an_error_of_that_schedule(
        h: Harness) -> None:
    broken = h.add("broken", trigger(filter=["region = eu"]))
    fine = h.add("fine", trigger())
    h.round(seconds=1)
    add(h, ("2026-11-02", "a"))
    h.round(seconds=2)
    (error,) = h.evaluations(broken, "error")
    assert "trigger.filter[0]" in error.reason and "region" in error.reason
    assert [sj.state for sj in h.schedule_jobs(fine)] == ["LAUNCHED"]


def test_a_trigger_on_a_consumer_counts_what_that_consumer_would_take(h: Harness) -> None:
    from jobserver.datasets.consumer_spec import parse_consumer

    h.store.consumers.put(parse_consumer({"dataset": "raw", "name": "cleanse",
                                          "filter": ["shop = a"]}))
    sid = h.add("on-cleanse", trigger(consumer="cleanse", count=2,
                                      filter=["day >= 2026-11-02"]))
    h.round(seconds=1)
    add(h, ("2026-11-02", "a"), ("2026-11-02", "b"), ("2026-11-01", "a"))
    h.round(seconds=2)
    assert [sj.state for sj in h.schedule_jobs(sid)] == ["PENDING_TRIGGER"]
    add(h, ("2026-11-03", "a"))
    h.round(seconds=3)
    assert [sj.state for sj in h.schedule_jobs(sid)] == ["LAUNCHED"]
    missing = h.add("no-consumer", trigger(consumer="nobody"))
    h.round(seconds=4)
    add(h, ("2026-11-04", "a"))
    h.round(seconds=5)
    (error,) = h.evaluations(missing, "error")
    assert "has no consumer nobody" in error.reason


def enabled(h: Harness, name: str, **fields: Any) -> int:
    """A schedule created enabled through the catalog, as ``PUT`` with ``enabled:
    true`` makes one; its id."""
    spec = parse_schedule({"name": name, "template": TEMPLATE, "trigger": trigger(**fields)},
                          POLICY)
    return h.store.schedules.create(spec, enabled=True).id


def test_partitions_committed_after_the_enabling_count_before_the_evaluator_looks(
        h: Harness) -> None:
    add(h, ("2026-11-01", "a"))  # before the enabling: not new to it
    sid = enabled(h, "fresh")
    add(h, ("2026-11-02", "a"))  # after it, before the evaluator's first look at raw
    h.round(seconds=1)
    (launched,) = h.schedule_jobs(sid)
    assert launched.state == "LAUNCHED"
    assert [n["count"] for n in launched.notifications] == [1]


def test_a_dataset_declared_again_is_read_from_the_enabling_of_its_schedules(
        h: Harness) -> None:
    sid = enabled(h, "redeclared")
    with h.store.tx.write() as conn:  # the API refuses to delete it while it is watched
        conn.execute(delete(datasets).where(datasets.c.name == "raw"))
    h.store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "day", "type": "date"}, {"name": "shop", "type": "string"}]}))
    add(h, ("2026-11-02", "a"))
    h.round(seconds=1)
    assert [sj.state for sj in h.schedule_jobs(sid)] == ["LAUNCHED"]


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_a_schedule_enabled_while_the_evaluator_reads_gets_what_it_read(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL only, where the evaluator's reads and an enabling interleave: the
    enabling and a partition both commit after the evaluator read who watches raw,
    before it reads raw's new partitions (SQLite's writers cannot interleave)."""
    enabled(h, "early")
    h.round(seconds=1)  # raw's cursor exists
    feed = h.evaluator.partition_feeds[0]
    read = feed.read
    late: list[int] = []  # the schedule enabled during the read

    def read_after_an_enabling(conn: Any, limit: int, names: set[str]) -> list[Any]:
        if not late:
            late.append(enabled(h, "late"))
            add(h, ("2026-11-02", "a"))
        return read(conn, limit, names)

    monkeypatch.setattr(feed, "read", read_after_an_enabling)
    h.round(seconds=2)
    assert [sj.state for sj in h.schedule_jobs(late[0])] == ["LAUNCHED"]
