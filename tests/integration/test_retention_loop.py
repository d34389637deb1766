"""The retention loop: rounds under the planner seat's lease, fenced, on real stores; and
on real in-process nodes, where only the node holding the seat deletes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from prometheus_client import CollectorRegistry, Counter

from jobserver.config import RetentionConfig
from jobserver.exceptions import FencedOff
from jobserver.node import Node
from jobserver.retention import PACING, ROUND_BATCHES, Purge, RetentionLoop
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from tests.helpers import FakeLease, wait_for
from jobserver.store.changes import changes
from jobserver.store.records import Actor
from jobserver.store.tables import jobs
from tests.integration.test_retention import OLD, newest_young, old_job, present, submit
from tests.integration.test_supervision import config_for


def counter() -> Counter:
    return Counter("deleted", "jobs deleted", registry=CollectorRegistry())


def test_a_round_deletes_old_jobs_under_the_lease_and_counts_them(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    old = [old_job(store) for _ in range(5)]
    tail = newest_young(store)
    deleted = counter()
    loop = RetentionLoop(store, None, RetentionConfig(interval=30, batch_size=2, pause=0),
                         deleted)
    with caplog.at_level(logging.INFO, logger="jobserver.retention"):
        wait = loop.round(FakeLease(store))  # type: ignore[arg-type]
    assert present(store) == {tail} and wait == 30
    assert deleted._value.get() == len(old)
    assert "retention: deleted 5 jobs (5 steps" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jobserver.retention"):
        assert loop.round(FakeLease(store)) == 30  # type: ignore[arg-type]
    assert "retention" not in caplog.text  # a round that deletes nothing says nothing


def test_a_round_with_more_left_hands_over_after_the_pause(store: Store) -> None:
    old = [old_job(store) for _ in range(ROUND_BATCHES + 1)]
    tail = newest_young(store)
    loop = RetentionLoop(store, None, RetentionConfig(batch_size=1, pause=0.01))
    lease = FakeLease(store)
    assert 0.01 <= loop.round(lease) < 1  # type: ignore[arg-type]
    assert present(store) == {old[-1], tail}
    assert loop.round(lease) == 60  # type: ignore[arg-type]
    assert present(store) == {tail}


SLOW_BATCH = 0.02


def test_the_loop_rests_three_times_as_long_as_a_slow_batch_took(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    old = [old_job(store) for _ in range(ROUND_BATCHES + 1)]
    newest_young(store)
    step = Purge.step

    def slow_step(self: Purge, *args: Any) -> Any:
        time.sleep(SLOW_BATCH)
        return step(self, *args)

    monkeypatch.setattr(Purge, "step", slow_step)
    loop = RetentionLoop(store, None, RetentionConfig(batch_size=1, pause=0.01))
    began = time.monotonic()
    wait = loop.round(FakeLease(store))  # type: ignore[arg-type]
    assert wait >= PACING * SLOW_BATCH
    # every batch but the first after a rest of at least three times a batch
    assert time.monotonic() - began >= SLOW_BATCH * (ROUND_BATCHES + (ROUND_BATCHES - 1) * PACING)
    assert old[-1] in present(store)


def test_a_round_under_a_lease_taken_over_deletes_nothing(store: Store) -> None:
    old = old_job(store)
    newest_young(store)
    stale = FakeLease(store)
    FakeLease(store)  # another node took the seat since
    loop = RetentionLoop(store, None, RetentionConfig())
    with pytest.raises(FencedOff):
        loop.round(stale)  # type: ignore[arg-type]
    assert old in present(store)


def insert_old(store: Store, count: int) -> list[int]:
    """Jobs that ended long ago, as rows (a claim here would take the nodes' lease)."""
    with store.tx.write() as conn:
        return list(conn.execute(insert(jobs).returning(jobs.c.id), [
            {"name": "old", "state": "SUCCEED", "params": {}, "created_at": OLD,
             "updated_at": OLD, "finished_at": OLD} for _ in range(count)]).scalars())


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"


def test_only_the_node_holding_the_seat_deletes(data_dir: Path) -> None:
    settings = {"JOBSERVER_RETENTION__INTERVAL": "0.2"}
    first = Node(config_for(data_dir, "n1", **settings), PythonSteps())
    first.start()
    nodes = [first]
    try:
        wait_for(lambda: first.scheduler.active, 10, what="n1 active")
        second = Node(config_for(data_dir, "n2", **settings), PythonSteps())
        second.start()
        nodes.append(second)
        old = insert_old(first.store, 3)
        tail = submit(first.store, name="tail")
        wait_for(lambda: not present(first.store) & set(old), 15,
                 what="the old jobs deleted")
        assert tail in present(first.store)
        counts = [node.metrics.retention_deleted._value.get() for node in nodes]
        assert counts == [len(old), 0]
    finally:
        for node in nodes:
            node.stop(drain_timeout=0)


def recorded_changes(store: Store) -> set[str]:
    return {change.resource for change in store.changes.list(limit=500)}


def old_changes(store: Store, count: int, days: float) -> None:
    """Rows of the change history recorded ``days`` ago on the store's clock."""
    at = store.retention.cutoff(days * 86400)
    with store.tx.write() as conn:
        conn.execute(insert(changes), [
            {"at": at, "actor": "ops", "actor_token_id": None, "method": "PUT",
             "resource": f"/api/v1/schedules/default/old-{i}", "action": "put_schedule",
             "outcome": "updated"} for i in range(count)])


def test_old_rows_of_the_change_history_go_once_no_old_job_is_left(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    old_changes(store, 5, days=400)
    old_changes(store, 1, days=300)  # younger than a year: kept by default
    store.changes.record(Actor("ops", None), "PUT", "/api/v1/datasets/default/raw",
                         "put_dataset", "created")
    old_job(store)
    tail = newest_young(store)
    loop = RetentionLoop(store, None, RetentionConfig(interval=30, batch_size=2, pause=0))
    with caplog.at_level(logging.INFO, logger="jobserver.retention"):
        assert loop.round(FakeLease(store)) == 30  # type: ignore[arg-type]
    assert present(store) == {tail}
    assert recorded_changes(store) == {"/api/v1/schedules/default/old-0",
                                       "/api/v1/datasets/default/raw"}
    assert "deleted 5 rows of the change history" in caplog.text


def test_the_change_history_is_kept_as_configured(store: Store) -> None:
    old_changes(store, 3, days=400)
    RetentionLoop(store, None, RetentionConfig(changes=0)).round(
        FakeLease(store))  # type: ignore[arg-type]
    assert len(recorded_changes(store)) == 3
    RetentionLoop(store, None, RetentionConfig(changes="30d", finished_jobs=0)).round(
        FakeLease(store))  # type: ignore[arg-type]
    assert recorded_changes(store) == set()


def test_a_stale_lease_deletes_no_change(store: Store) -> None:
    old_changes(store, 3, days=400)
    stale = FakeLease(store)
    FakeLease(store)  # another node took the seat since
    with pytest.raises(FencedOff):
        RetentionLoop(store, None, RetentionConfig(finished_jobs=0)).round(
            stale)  # type: ignore[arg-type]
    assert len(recorded_changes(store)) == 3
