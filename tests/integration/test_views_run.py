"""The stored and running side of views on SQLite and PostgreSQL: definitions and the
structure-change reset, compare-and-set writes, one job per view partition however
many requests plan it, and the tracker turning real job runs into view states and
listener events (the planning side is stood in for by hand-made decisions)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from jobserver.config import ViewsConfig
from jobserver.exceptions import RetryableListenerError
from jobserver.listeners import ListenerWorker
from jobserver.spec import JobSpec, Policy, parse_job
from jobserver.store import Store
from jobserver.views.listeners import ViewSchedulingEvent
from jobserver.views.materialize import Materializer
from jobserver.views.model import Action, Decision, ViewAddress, ViewState
from jobserver.views.store import CasConflict
from jobserver.views.tracker import ViewTracker
from tests.helpers import FakeLease, wait_for
from tests.integration.test_runner import PYTHON_STEPS, Harness

STAGE = ViewAddress("app.eci.stage", "Search", ("SHOP10", "2015", "05", "03"))
MART = ViewAddress("app.eci.datamart", "SearchExport", ("SHOP10", "2015", "05"))
OUTCOMES: dict[str, bool] = {}


def _transform(ctx: Any, view: str = "", fail: bool = False) -> dict[str, Any]:
    if fail:
        raise RuntimeError(f"{view} cannot be transformed")
    return {"view": view}


PYTHON_STEPS.register("test.view_transform", _transform)


def render(spec: Any, address: ViewAddress, version_checksum: str | None = None) -> JobSpec:
    """What the planning side's render_job makes: the template, params filled."""
    return parse_job(JobSpec(name=f"view {address.path}", steps=[{  # type: ignore[list-item]
        "name": "t", "type": "python", "callable": "test.view_transform",
        "args": {"view": address.path, "fail": spec.get("fail", False)}, "retries": 0}],
        params={"view": address.name, "partition": address.key,
                "version_checksum": spec.get("version", "v1")}).model_dump_json())


class SeatOf:
    """A planner seat holding one lease."""

    def __init__(self, store: Store) -> None:
        self.lease_ = FakeLease(store, "planner")

    def lease(self, wait: float) -> Any:
        return self.lease_

    def release(self) -> None:
        pass


@pytest.fixture
def harness(store: Store) -> Iterator[Harness]:
    h = Harness(store)
    yield h
    h.close()


def materializer(store: Store) -> Materializer:
    return Materializer(store, Policy(PYTHON_STEPS.is_registered, None), render=render,
                        parse=lambda spec: spec)


def transform(*addresses: ViewAddress, upstream: dict[ViewAddress, tuple] | None = None
              ) -> list[Decision]:
    return [Decision(a, Action.TRANSFORM, "never transformed", (upstream or {}).get(a, ()),
                     version_checksum="v1") for a in addresses]


def tracker(store: Store, config: ViewsConfig | None = None,
            events: list[ViewSchedulingEvent] | None = None) -> tuple[ViewTracker, SeatOf]:
    seat = SeatOf(store)
    sink = events.append if events is not None else None
    return ViewTracker(store, seat, config or ViewsConfig(), materializer(store),  # type: ignore[arg-type]
                       publish=sink), seat


def track(view_tracker: ViewTracker, seat: SeatOf) -> None:
    view_tracker.track(seat.lease_.key, seat.lease_.fence)


def test_definition_put_is_unchanged_then_a_structure_change_resets_partitions(
        store: Store) -> None:
    views = store.views
    assert views.put("app.eci.stage/Search", {"a": 1}, "s1", "v1", "h1") == ("created", 0)
    assert views.put("app.eci.stage/Search", {"a": 1}, "s1", "v1", "h1") == ("unchanged", 0)
    stamp = datetime(2015, 5, 4, 1, tzinfo=timezone.utc)
    with views.writing() as conn:
        views.apply(conn, [c for c in [_set(STAGE, stamp)]])
    assert views.put("app.eci.stage/Search", {"a": 2}, "s1", "v2", "h2") == ("updated", 0)
    assert views.read([STAGE])[STAGE].transformed_at == stamp
    assert views.put("app.eci.stage/Search", {"a": 3}, "s2", "v2", "h3") == ("updated", 1)
    row = views.read([STAGE])[STAGE]
    assert (row.state, row.transformed_at, row.version_checksum) == (ViewState.RECEIVE, None,
                                                                   None)


def _set(address: ViewAddress, stamp: datetime) -> Any:
    from jobserver.views.store import Change

    return Change(address, 0, ViewState.RECEIVE, ViewState.MATERIALIZED,
                  {"transformed_at": stamp, "version_checksum": "v1"}, "SET_ONLY")


def test_read_finds_stored_partitions_among_many_addresses(store: Store) -> None:
    addresses = [ViewAddress("p", "V", (str(day),)) for day in range(3000)]
    with store.views.writing() as conn:
        store.views.apply(conn, [_set(a, datetime(2020, 1, 1, tzinfo=timezone.utc))
                                 for a in addresses[::3]])
    found = store.views.read(addresses)
    assert set(found) == set(addresses[::3])


def test_a_stale_plan_is_refused_and_writes_nothing(store: Store) -> None:
    m = materializer(store)
    views = {STAGE.name: {}}
    m.write(views, transform(STAGE), {})
    with pytest.raises(CasConflict):
        m.write(views, transform(STAGE), {})  # planned from a read before the first write
    assert store.jobs.count_by_state().get("READY") == 1


def test_two_requests_planning_together_make_one_job_per_partition(store: Store) -> None:
    m = materializer(store)
    views = {STAGE.name: {}, MART.name: {}}
    decisions = transform(STAGE, MART, upstream={MART: (STAGE,)})
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def request() -> None:
        stored = store.views.read([STAGE, MART])
        barrier.wait()
        try:
            outcomes.append(m.write(views, decisions, stored))
        except CasConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=request) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(isinstance(o, CasConflict) for o in outcomes) == 1
    # A job per partition, and the gate of STAGE that MART's job waits for.
    assert sorted(job.name for job in store.jobs.list(limit=10)[0]) == [
        f"view {MART.path}", f"view {STAGE.path}", f"view gate {STAGE.path}"]
    assert store.jobs.count_by_state() == {"READY": 3}
    stored = store.views.read([STAGE, MART])
    assert {row.state for row in stored.values()} == {ViewState.WAITING}


def test_success_records_the_version_that_ran_and_the_finish_time(
        store: Store, harness: Harness) -> None:
    events: list[ViewSchedulingEvent] = []
    view_tracker, seat = tracker(store, events=events)
    track(view_tracker, seat)  # the feeds start here
    jobs = materializer(store).write({STAGE.name: {"version": "v7"}}, transform(STAGE), {})
    harness.claim()
    job = harness.finished(jobs[STAGE])
    track(view_tracker, seat)
    row = store.views.read([STAGE])[STAGE]
    assert row.state is ViewState.MATERIALIZED
    assert row.version_checksum == "v7"
    assert row.transformed_at is not None and job.finished_at is not None
    assert abs((row.transformed_at - job.finished_at).total_seconds()) < 1
    assert [(e.previous, e.new) for e in events] == [
        (ViewState.RECEIVE, ViewState.WAITING), (ViewState.WAITING, ViewState.MATERIALIZED)]


def test_failure_retries_then_fails(store: Store, harness: Harness) -> None:
    view_tracker, seat = tracker(store, ViewsConfig(retries=1))
    track(view_tracker, seat)
    store.views.put(STAGE.name, {"fail": True}, "s1", "v1", "h1")
    jobs = materializer(store).write({STAGE.name: {"fail": True}}, transform(STAGE), {})
    harness.claim()
    harness.finished(jobs[STAGE])
    track(view_tracker, seat)
    row = store.views.read([STAGE])[STAGE]
    assert (row.state, row.retries) == (ViewState.RETRYING, 1)
    assert row.job_id not in (None, jobs[STAGE])
    harness.claim()
    harness.finished(row.job_id)  # type: ignore[arg-type]
    track(view_tracker, seat)
    assert store.views.read([STAGE])[STAGE].state is ViewState.FAILED


def test_invalidate_puts_partitions_back_to_receive(store: Store) -> None:
    stamp = datetime(2015, 5, 4, tzinfo=timezone.utc)
    with store.views.writing() as conn:
        store.views.apply(conn, [_set(STAGE, stamp)])
    assert store.views.invalidate([STAGE, MART]) == 1
    row = store.views.read([STAGE])[STAGE]
    assert (row.state, row.transformed_at) == (ViewState.RECEIVE, stamp)


def test_a_retryable_listener_error_resends_the_last_event_of_each_partition() -> None:
    got: list[ViewSchedulingEvent] = []
    failed = threading.Event()

    class Flaky:
        def on_event(self, event: ViewSchedulingEvent) -> None:
            if event.view == MART and not failed.is_set():
                failed.set()
                raise RetryableListenerError("monitoring store down")
            got.append(event)

    worker = ListenerWorker("view:flaky", Flaky, key=lambda e: e.view,
                            fields=lambda e: {"view": e.view.path})
    worker.start()
    at = datetime.now(timezone.utc)
    worker.offer(ViewSchedulingEvent(ViewState.RECEIVE, ViewState.WAITING, STAGE, at))  # type: ignore[arg-type]
    worker.offer(ViewSchedulingEvent(ViewState.RECEIVE, ViewState.WAITING, MART, at))  # type: ignore[arg-type]
    wait_for(lambda: len(got) >= 3, what="the resent events")
    worker.drain(0)
    assert [e.view for e in got] == [STAGE, STAGE, MART]
    assert worker.restarts == 1
