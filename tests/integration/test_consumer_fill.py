"""A consumer's fill over long stretches of partitions its filter skips, past a
transaction still open, and what a failing run does to each of its partitions; on
SQLite and PostgreSQL with real job runs (the fixtures of test_consumers)."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest

from jobserver.datasets import consumers as consumer_module
from jobserver.datasets import working_set
from jobserver.datasets.consumer_api import consumer_json
from jobserver.states import State
from jobserver.store import Store
from tests.helpers import wait_for
from tests.integration.test_consumers import (PYTHON_STEPS, SEEN, Harness, consume, consumer,
                                              harness, hours_of, view)
from tests.integration.test_runner import submit

__all__ = ["harness"]  # the fixture, shared with test_consumers


def _poison(ctx: Any) -> dict[str, Any]:
    """Fails when its run holds the partition of hour 1."""
    hours = [p["key"]["hour"] for p in ctx.inputs["raw"]["partitions"]]
    SEEN[ctx.job_id] = [p["id"] for p in ctx.inputs["raw"]["partitions"]]
    if 1 in hours:
        raise RuntimeError("hour 1 is corrupt")
    return {"consumed": len(hours)}


PYTHON_STEPS.register("test.poison", _poison)


def add_many(store: Store, count: int, source: str, first_day: int = 0) -> None:
    """``count`` partitions of ``source``, 24 a day from day ``first_day``, through the
    store in batches (no HTTP request each)."""
    items = [{"key": {"date": _day(first_day + n // 24), "hour": n % 24},
              "location": f"/raw/{n}", "metadata": {"source": source}} for n in range(count)]
    for start in range(0, count, 10_000):
        store.partitions.add("default", "raw", items[start:start + 10_000])


def _day(n: int) -> str:
    return (date(2000, 1, 1) + timedelta(days=n)).isoformat()


def messages(store: Store, job_id: int) -> list[str]:
    return [e.message or "" for e in store.jobs.events(job_id) if e.step is None]


def test_a_fill_reaches_matching_partitions_past_a_long_skipped_stretch(
        harness: Harness) -> None:
    """10,050 partitions the filter rejects, then 50 it matches: one run takes the 50
    (its fill commits every MAX_SCAN skipped partitions and reads on)."""
    store = harness.store
    consumer(store, filter=["meta.source = crawler"])
    add_many(store, 10_050, "manual")
    add_many(store, 50, "crawler", first_day=1000)
    job = consume(harness)
    assert store.jobs.get(job).state is State.SUCCEED
    assert len(SEEN[job]) == 50
    state = view(store)
    assert state.lag == 0 and state.processed_total == 50


def test_a_start_that_stops_early_says_how_far_and_reads_on(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start whose fills skipped their bound in every round consumes nothing: the
    job is READY again at once, its audit naming how far the fill got, and its next
    start reads on to the matching partitions."""
    store = harness.store
    monkeypatch.setattr(working_set, "MAX_SCAN", 100)
    monkeypatch.setattr(consumer_module, "MAX_ROUNDS", 1)
    consumer(store, filter=["meta.source = crawler"])
    add_many(store, 150, "manual")
    add_many(store, 5, "crawler", first_day=100)
    job = consume(harness, wait=False)
    wait_ready = wait_for(lambda: any("reads on" in m for m in messages(store, job))
                          and store.jobs.get(job), 10, what="the start to stop early")
    assert wait_ready.state is State.READY and job not in SEEN
    [said] = [m for m in messages(store, job) if "reads on" in m]
    assert "skipped 100 partitions" in said and "default/raw" in said
    assert view(store).lag == 5
    harness.claim()
    assert harness.finished(job).state is State.SUCCEED
    assert len(SEEN[job]) == 5 and view(store).lag == 0


def test_processing_limit_above_ten_thousand_is_not_capped(harness: Harness) -> None:
    store = harness.store
    consumer(store, max_working_set_size=12_000, processing_limit=12_000)
    add_many(store, 10_050, "crawler")
    job = consume(harness)
    assert store.jobs.get(job).state is State.SUCCEED
    assert len(SEEN[job]) == 10_050 and view(store).lag == 0


@pytest.mark.parametrize("store", ["postgres"], indirect=True)  # SQLite's feed has no horizon
def test_nothing_to_consume_behind_an_open_transaction_says_why(harness: Harness) -> None:
    """PostgreSQL reads partitions only below the oldest open transaction: a start
    that finds nothing because of it says so, and a later one takes them."""
    store = harness.store
    consumer(store)
    with store.engine.connect() as open_one:
        open_one.exec_driver_sql("SELECT pg_current_xact_id()")  # holds the horizon
        add_many(store, 3, "crawler")
        job = consume(harness)
        assert store.jobs.get(job).state is State.SUCCEED and job not in SEEN
        [said] = [m for m in messages(store, job) if "nothing to consume" in m]
        assert "3 partition(s) of default/raw wait behind a transaction open since" in said
        open_one.rollback()
    later = consume(harness)
    assert len(SEEN[later]) == 3 and view(store).lag == 0


def test_a_failed_run_counts_against_each_of_its_partitions(harness: Harness) -> None:
    """A failing run gives back all its partitions with one more failed attempt each,
    shown as ``retrying``; with processing_limit 1 a poison partition fails alone."""
    store = harness.store
    consumer(store, max_retries=1)
    add_many(store, 3, "crawler")
    first = _poison_run(harness)
    assert store.jobs.get(first).state is State.ERROR
    shown = consumer_json(view(store))
    assert [(p["key"]["hour"], p["attempts"]) for p in shown["retrying"]] == [
        (0, 1), (1, 1), (2, 1)]
    assert "hour 1 is corrupt" in shown["retrying"][0]["last_error"]
    consumer(store, max_retries=1, processing_limit=1)
    runs = [_poison_run(harness) for _ in range(4)]
    assert [store.jobs.get(j).state for j in runs] == [
        State.SUCCEED, State.ERROR, State.SUCCEED, State.SUCCEED]
    state = view(store)
    assert [p["key"]["hour"] for p in state.failed] == [1]
    assert state.processed_total == 2 and state.retrying == []
    assert hours_of(store, SEEN[runs[2]]) == [2]


def _poison_run(harness: Harness) -> int:
    job_id = submit(harness.store, inputs=[{"dataset": "raw", "consumer": "cleanse"}],
                    steps=[{"name": "read", "type": "python", "callable": "test.poison"}])
    harness.claim()
    harness.finished(job_id)
    return job_id
