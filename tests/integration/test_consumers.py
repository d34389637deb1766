"""Consumers (CDAP's PartitionConsumer) with real job runs, on SQLite and PostgreSQL:
one test per requirement of the seed, named after it, and the ends of a run (success,
failure, operator stop, node death) as the working set shows them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from jobserver.datasets.consumer_spec import parse_consumer
from jobserver.datasets.spec import parse_dataset
from jobserver.exceptions import InvalidRequest
from jobserver.states import Operation, State
from jobserver.store import Store
from tests.helpers import FakeLease, wait_for
from tests.integration.test_runner import PYTHON_STEPS, Harness, submit

SEEN: dict[int, list[int]] = {}
GATE = threading.Event()


def _record(ctx: Any, fail: bool = False, hold: bool = False) -> dict[str, Any]:
    """Records the partition ids its job got; ``hold`` waits for GATE; ``fail`` raises."""
    SEEN[ctx.job_id] = [p["id"] for p in ctx.inputs["raw"]["partitions"]]
    if hold:
        GATE.wait(20)
    if fail:
        raise RuntimeError("cannot read the partition")
    return {"consumed": len(SEEN[ctx.job_id])}


PYTHON_STEPS.register("test.consume", _record)


@pytest.fixture
def harness(store: Store) -> Iterator[Harness]:
    store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "date", "type": "date"}, {"name": "hour", "type": "int"}]}))
    SEEN.clear()
    GATE.clear()
    h = Harness(store)
    yield h
    GATE.set()
    h.close()


def consumer(store: Store, **settings: Any) -> None:
    store.consumers.put(parse_consumer({"dataset": "raw", "name": "cleanse", **settings}))


def add(store: Store, hours: range, meta: dict[str, Any] | None = None,
        day: str = "2026-11-01") -> None:
    store.partitions.add("default", "raw", [
        {"key": {"date": day, "hour": hour}, "location": f"/raw/{day}/{hour}",
         "metadata": meta or {}} for hour in hours])


def consume(harness: Harness, fail: bool = False, hold: bool = False, limit: int | None = None,
            on_empty: str = "succeed", wait: bool = True) -> int:
    """Submit a job consuming raw through cleanse and run it; its id."""
    job_id = submit(harness.store, inputs=[
        {"dataset": "raw", "consumer": "cleanse", "limit": limit, "on_empty": on_empty}],
        steps=[{"name": "read", "type": "python", "callable": "test.consume",
                "args": {"fail": fail, "hold": hold}}])
    harness.claim()
    if wait:
        harness.finished(job_id)
    return job_id


def hours_of(store: Store, ids: list[int]) -> list[int]:
    _, page, _ = store.partitions.list("default", "raw", [], newest_first=False, limit=500)
    return [p.key["hour"] for p in page if p.id in ids]


def view(store: Store) -> Any:
    return store.consumers.get("default", "raw", "cleanse")


def test_consume_only_new_partitions_in_a_workflow_run(harness: Harness, tmp_path) -> None:
    """Requirement 1: a job run processes the partitions that are new to its
    consumer; a shell step reads them from JOBSERVER_INPUT_RAW, a python step from its
    context; success removes them from the working set, the next run gets only the
    partitions added since."""
    store = harness.store
    consumer(store)
    add(store, range(3))
    out = tmp_path / "seen.json"
    job_id = submit(store, inputs=[{"dataset": "raw", "consumer": "cleanse"}], steps=[
        {"name": "shell", "type": "shell", "argv": ["sh", "-c", f'cp "$JOBSERVER_INPUT_RAW" {out}']},
        {"name": "py", "type": "python", "callable": "test.consume"}])
    harness.claim()
    assert harness.finished(job_id).state is State.SUCCEED
    handed = json.loads(out.read_text())
    assert handed["dataset"] == "default/raw" and handed["consumer"] == "cleanse"
    assert [p["key"]["hour"] for p in handed["partitions"]] == [0, 1, 2]
    assert [p["id"] for p in handed["partitions"]] == SEEN[job_id]
    state = view(store)
    assert state.counts == {"NEW": 0, "IN_PROGRESS": 0, "FAILED": 0}
    assert state.processed_total == 3 and state.lag == 0
    add(store, range(3, 5))
    assert view(store).lag == 2
    second = consume(harness)
    assert hours_of(store, SEEN[second]) == [3, 4]


def test_processing_limit_bounds_the_partitions_of_each_run(harness: Harness) -> None:
    """Requirement 2: a run takes at most processing_limit partitions (and at most
    its input's limit); the rest wait NEW for the next run."""
    store = harness.store
    consumer(store, processing_limit=4, max_working_set_size=10)
    add(store, range(7))
    first = consume(harness, limit=10)
    assert hours_of(store, SEEN[first]) == [0, 1, 2, 3]
    second = consume(harness, limit=2)
    assert hours_of(store, SEEN[second]) == [4, 5]
    assert view(store).counts["NEW"] == 1 and view(store).lag == 1


def test_filter_skips_partitions_that_do_not_match_for_good(harness: Harness) -> None:
    """Requirement 3: key ranges and metadata equality; what does not match is never
    added to the working set, even after the filter changes."""
    store = harness.store
    consumer(store, filter=["hour >= 2", "meta.source = crawler"])
    add(store, range(4), {"source": "crawler"}, day="2026-11-01")
    add(store, range(4), {"source": "manual"}, day="2026-11-02")
    assert view(store).lag == 2
    job = consume(harness)
    assert hours_of(store, SEEN[job]) == [2, 3]
    consumer(store)  # no filter from now on: the skipped partitions stay skipped
    assert consume(harness) and view(store).lag == 0
    assert harness.store.jobs.get(max(SEEN) + 1).state is State.SUCCEED  # nothing to do


def test_concurrent_consumers_get_disjoint_sets(harness: Harness) -> None:
    """Requirement 4 (CDAP-3944): several jobs of one consumer run at once, each with
    its own partitions."""
    store = harness.store
    consumer(store, processing_limit=3)
    add(store, range(9))
    jobs = [consume(harness, hold=True, wait=False) for _ in range(3)]
    wait_for(lambda: len(SEEN) == 3, 15, what="three jobs to start")
    assert view(store).counts["IN_PROGRESS"] == 9
    GATE.set()
    assert all(harness.finished(job).state is State.SUCCEED for job in jobs)
    taken = [hour for job in jobs for hour in hours_of(store, SEEN[job])]
    assert sorted(taken) == list(range(9))
    assert view(store).processed_total == 9


def test_partitions_failed_are_retried_then_failed_after_max_retries(harness: Harness) -> None:
    """Requirement 5: a failed run gives its partitions back NEW with one more
    attempt; after max_retries + 1 failed attempts they are FAILED with the last
    error, and an operator can put them back."""
    store = harness.store
    consumer(store, max_retries=1)
    add(store, range(2))
    first = consume(harness, fail=True)
    assert store.jobs.get(first).state is State.ERROR
    assert view(store).counts == {"NEW": 2, "IN_PROGRESS": 0, "FAILED": 0}
    second = consume(harness, fail=True)
    assert SEEN[second] == SEEN[first]
    state = view(store)
    assert state.counts == {"NEW": 0, "IN_PROGRESS": 0, "FAILED": 2}
    assert [item["attempts"] for item in state.failed] == [2, 2]
    assert "cannot read the partition" in state.failed[0]["last_error"]
    assert state.failed_total == 2
    assert store.jobs.get(consume(harness)).state is State.SUCCEED  # nothing NEW
    assert store.consumers.reset_failed("default", "raw", "cleanse") == 2
    third = consume(harness)
    assert SEEN[third] == SEEN[first] and view(store).processed_total == 2


def test_start_end_window_limits_what_is_consumed(harness: Harness) -> None:
    """Requirement 6: only partitions created in [start, end) are consumed."""
    store = harness.store
    stamps = []
    for hours in (range(2), range(2, 4), range(4, 6)):  # one creation time per batch
        add(store, hours)
        _, page, _ = store.partitions.list("default", "raw", [], newest_first=True, limit=1)
        stamps.append(page[0].created_at)
    assert stamps[0] < stamps[1] < stamps[2]
    consumer(store, start=stamps[1].isoformat(), end=stamps[2].isoformat())
    job = consume(harness)
    assert hours_of(store, SEEN[job]) == [2, 3]
    assert view(store).lag == 0


def test_query_partitions_and_consumer_state_outside_a_job(harness: Harness) -> None:
    """Requirement 7: partitions and a consumer's state are read outside any job."""
    store = harness.store
    consumer(store, filter=["hour < 3"])
    add(store, range(5))
    _, page, _ = store.partitions.list("default", "raw", ["hour >= 3"])
    assert sorted(p.key["hour"] for p in page) == [3, 4]
    state = view(store)
    assert state.lag == 3 and state.pointer == (0, 0)
    assert state.spec.filter == ["hour < 3"]


def test_working_set_bound(harness: Harness) -> None:
    """The working set never holds more than max_working_set_size partitions NEW
    or IN_PROGRESS; the pointer moves only past what was read."""
    store = harness.store
    consumer(store, max_working_set_size=3, processing_limit=1)
    add(store, range(10))
    consume(harness)
    state = view(store)
    assert state.counts["NEW"] == 2 and state.processed_total == 1 and state.lag == 9


def test_on_empty_succeed_runs_no_step_and_skip_waits(harness: Harness) -> None:
    store = harness.store
    consumer(store)
    done = consume(harness)
    assert store.jobs.get(done).state is State.SUCCEED and done not in SEEN
    waiting = consume(harness, on_empty="skip", wait=False)
    job = wait_for(lambda: (j := store.jobs.get(waiting)).state is State.READY
                   and j.not_before is not None and j, 10, what="the job to wait")
    assert job.node is None and waiting not in SEEN


def test_a_rescued_job_gives_its_partitions_back(harness: Harness) -> None:
    """A node that dies: its job is re-queued, its partitions are NEW with one more
    attempt, and its next run takes a fresh set."""
    store = harness.store
    consumer(store)
    add(store, range(2))
    job_id = submit(store, inputs=[{"dataset": "raw", "consumer": "cleanse"}],
                    steps=[{"name": "py", "type": "python", "callable": "test.consume"}])
    [job] = store.runs.claim("dead", FakeLease(store), 1)
    assert store.consumers.take(job.token(), job.inputs).count == 2
    assert view(store).counts["IN_PROGRESS"] == 2
    assert store.servers.requeue_orphans("dead", "n2") == [(job_id, State.READY)]
    state = view(store)
    assert state.counts == {"NEW": 2, "IN_PROGRESS": 0, "FAILED": 0}
    harness.claim()
    assert harness.finished(job_id).state is State.SUCCEED
    assert len(SEEN[job_id]) == 2 and view(store).processed_total == 2


def test_a_stale_run_takes_nothing(harness: Harness) -> None:
    """The fill is fenced by the claim: a run whose token is no longer the job's
    takes no partition."""
    store = harness.store
    consumer(store)
    add(store, range(2))
    submit(store, inputs=[{"dataset": "raw", "consumer": "cleanse"}],
           steps=[{"name": "py", "type": "python", "callable": "test.consume"}])
    [job] = store.runs.claim("n9", FakeLease(store), 1)
    store.servers.requeue_orphans("n9", "n2")
    from jobserver.exceptions import FencedOff
    with pytest.raises(FencedOff):
        store.consumers.take(job.token(), job.inputs)
    assert view(store).counts["IN_PROGRESS"] == 0


def test_a_paused_job_gives_its_partitions_back(harness: Harness) -> None:
    store = harness.store
    consumer(store)
    add(store, range(2))
    job = consume(harness, hold=True, wait=False)
    wait_for(lambda: job in SEEN, 10, what="the job to start")
    store.jobs.apply(job, Operation.PAUSE)
    state = view(store)
    assert state.counts == {"NEW": 2, "IN_PROGRESS": 0, "FAILED": 0}
    GATE.set()


def test_bad_consumer_settings_name_the_field(harness: Harness) -> None:
    store = harness.store
    with pytest.raises(InvalidRequest) as caught:
        consumer(store, filter=["shop = berlin"])
    assert caught.value.details[0]["field"] == "filter[0]"
    with pytest.raises(InvalidRequest) as caught:
        consumer(store, processing_limit=0)
    assert caught.value.details[0]["field"] == "processing_limit"
    assert store.consumers.list("default", "raw") == []
