"""Partition triggers on real datasets: a schedule fires once ``count`` new
partitions matching its filter have been added since it was enabled."""

from __future__ import annotations

from typing import Any

import pytest

from jobserver.datasets.feed import NewPartitions
from jobserver.datasets.spec import parse_dataset
from jobserver.store import Store
from tests.integration.test_schedule_evaluator import Harness


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
