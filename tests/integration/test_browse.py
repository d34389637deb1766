"""The dashboard's bounded reads of jobs (``jobserver.store.browse``) on SQLite and
PostgreSQL: filters, cursors, scan windows, time ranges, capped counts, throughput."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import update

from jobserver.spec import parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.store import Store
from jobserver.store import browse as browse_module
from jobserver.store.browse import JobFilter, Throughput
from jobserver.ui.cluster import SETTLE, ThroughputCache
from jobserver.store.engine import store_now
from jobserver.store.tables import jobs
from tests.helpers import spec_bytes

T0 = datetime(2027, 1, 10, 12, 0, tzinfo=timezone.utc)


def submit(store: Store, name: str) -> int:
    spec = parse_job(spec_bytes(name=name))
    job, _ = store.jobs.submit(spec, validate_job(spec, None))
    return job.id


def place(store: Store, job_id: int, **values: object) -> None:
    with store.tx.write() as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))


@pytest.fixture
def twenty(store: Store) -> list[int]:
    """Twenty jobs a minute apart from T0: even ones "even" on node-1, odd "odd"."""
    ids = []
    for index in range(20):
        job_id = submit(store, "even" if index % 2 == 0 else "odd")
        place(store, job_id, created_at=T0 + timedelta(minutes=index),
              node="node-1" if index % 2 == 0 else "node-2")
        ids.append(job_id)
    return ids


def ids_of(page: browse_module.JobPage) -> list[int]:
    return [job.id for job in page.jobs]


def test_pages_go_newest_first_by_cursor(store: Store, twenty: list[int]) -> None:
    first = store.browse.page(JobFilter(), 8)
    assert ids_of(first) == twenty[::-1][:8] and first.next_before == twenty[12]
    second = store.browse.page(JobFilter(), 8, first.next_before)
    assert ids_of(second) == twenty[::-1][8:16]
    last = store.browse.page(JobFilter(), 8, second.next_before)
    assert ids_of(last) == twenty[::-1][16:] and last.next_before is None
    assert last.jobs[0].steps_total == 1


def test_filters_combine(store: Store, twenty: list[int]) -> None:
    store.jobs.apply(twenty[2], Operation.DISCARD)
    page = store.browse.page(JobFilter(state=State.READY, name="even", node="node-1"), 50)
    assert ids_of(page) == [i for i in twenty[::-1] if twenty.index(i) % 2 == 0
                            and i != twenty[2]]
    assert ids_of(store.browse.page(JobFilter(name="odd", node="node-1"), 50)) == []
    assert ids_of(store.browse.page(JobFilter(state=State.DISCARDED), 50)) == [twenty[2]]


def test_a_time_range_is_an_id_range(store: Store, twenty: list[int]) -> None:
    wanted = JobFilter(since=T0 + timedelta(minutes=5), until=T0 + timedelta(minutes=9))
    assert ids_of(store.browse.page(wanted, 50)) == twenty[5:9][::-1]
    between = JobFilter(since=T0 + timedelta(minutes=4, seconds=30))
    assert ids_of(store.browse.page(between, 50)) == twenty[5:][::-1]
    assert ids_of(store.browse.page(JobFilter(until=T0), 50)) == []
    assert ids_of(store.browse.page(JobFilter(since=T0 + timedelta(days=1)), 50)) == []
    page = store.browse.page(JobFilter(since=T0, name="odd"), 3)
    assert ids_of(page) == [twenty[19], twenty[17], twenty[15]]


def test_filters_no_index_serves_stop_at_the_window(store: Store, twenty: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browse_module, "SCAN_WINDOW", 6)
    page = store.browse.page(JobFilter(node="node-1"), 50)
    assert ids_of(page) == [twenty[18], twenty[16], twenty[14]]
    assert page.window_ended and page.next_before == twenty[14]
    rest = []
    while page.next_before is not None:
        page = store.browse.page(JobFilter(node="node-1"), 50, page.next_before)
        rest += ids_of(page)
    assert rest == [twenty[i] for i in (12, 10, 8, 6, 4, 2, 0)]
    nobody = store.browse.page(JobFilter(node="node-9"), 50)
    assert nobody.jobs == [] and nobody.window_ended


def test_counts_stop_at_their_cap(store: Store, twenty: list[int]) -> None:
    store.jobs.apply(twenty[0], Operation.PAUSE)
    counts = store.browse.counts(cap=5)
    assert counts.counts == {"READY": 5, "STOPPED": 1} and counts.capped == {"READY"}
    assert store.browse.counts().counts == {"READY": 19, "STOPPED": 1}


def test_throughput_counts_the_last_hour_per_minute(store: Store, twenty: list[int]) -> None:
    now = store.browse.finished_per_minute().now
    for index, job_id in enumerate(twenty[:6]):
        state = State.ERROR if index == 0 else State.SUCCEED
        minute = [0, 1, 1, 10, 59, 70][index]
        place(store, job_id, state=state.value,
              finished_at=datetime.fromtimestamp((now - minute) * 60 + 20, timezone.utc))
    finished = store.browse.finished_per_minute()
    if finished.now != now:  # the minute turned between the two reads
        pytest.skip("the store's clock crossed a minute; the figures moved")
    throughput = Throughput.of(finished.now, finished.counts)
    assert throughput.total == 5  # 70 minutes ago is outside the hour
    assert throughput.per_minute["ERROR"][59] == 1
    assert throughput.per_minute["SUCCEED"][58] == 2
    assert throughput.per_minute["SUCCEED"][49] == 1
    assert throughput.per_minute["SUCCEED"][0] == 1
    later = store.browse.finished_per_minute(first=now - 1)
    assert later.first == now - 1 and set(later.counts) == {now - 1, now}


def test_the_cluster_page_keeps_the_minutes_that_are_over(store: Store,
                                                          twenty: list[int]) -> None:
    cache = ThroughputCache()
    place(store, twenty[0], state=State.SUCCEED.value, finished_at=store_now(-600))
    first = cache.read(store.browse)
    asked: list[int | None] = []
    reader = store.browse.finished_per_minute

    def spy(minutes: int = 60, first: int | None = None) -> Any:
        asked.append(first)
        return reader(minutes, first)

    store.browse.finished_per_minute = spy  # type: ignore[method-assign]
    try:
        again = cache.read(store.browse)
    finally:
        del store.browse.finished_per_minute
    assert again.total == first.total == 1
    now = reader().now
    assert asked and asked[0] is not None and asked[0] >= now - SETTLE


def test_recent_events_are_the_newest(store: Store) -> None:
    job_id = submit(store, "busy")
    for operation in (Operation.PAUSE, Operation.RESUME, Operation.PAUSE):
        store.jobs.apply(job_id, operation)
    newest = store.browse.recent_events(job_id, 2)
    assert [(e.from_state, e.to_state) for e in newest] == [("STOPPED", "READY"),
                                                            ("READY", "STOPPED")]
