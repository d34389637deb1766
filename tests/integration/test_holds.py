"""Claim-ahead in the store (``scheduler.prefetch``): what a held job is, on SQLite and
PostgreSQL. A held job is READY with its node set; it must never read as started, every
operation on READY jobs must act on it, and only its holder, under the lease it was
held with, may start it."""

from __future__ import annotations

import pytest

from jobserver.states import Operation, State
from jobserver.store import Store
from tests.helpers import FakeLease
from tests.integration.test_store import submit


def transitions(store: Store, job_id: int) -> list[tuple[str | None, str | None, str]]:
    return [(event.step, event.from_state, event.to_state)
            for event in store.jobs.events(job_id)]


def test_a_held_job_reads_as_waiting_for_a_slot_and_no_other_claim_takes_it(
        store: Store) -> None:
    high, low = submit(store, priority=5), submit(store)
    lease = FakeLease(store)
    store.servers.register("n1", "host", 1, "single", 10)
    assert store.holds.hold("n1", lease, 1) == [high]
    job = store.jobs.get(high)
    assert (job.state, job.node, job.fence, job.attempt) == (State.READY, "n1", lease.fence, 0)
    assert job.started_at is None
    assert [step.state for step in job.steps] == [State.READY]
    assert [to for _, _, to in transitions(store, high)] == ["READY"]  # submitted only
    reason = store.jobs.not_running(job, "single", 30)
    assert reason.code == "claimed_ahead"
    assert "claimed by node n1, waiting for a slot" in reason.reason
    assert [claimed.id for claimed in store.runs.claim("n2", lease, 10)] == [low]


def test_the_holder_starts_it_as_a_claim_would(store: Store) -> None:
    job_id = submit(store)
    lease = FakeLease(store)
    assert store.holds.hold("n1", lease, 5) == [job_id]
    started = store.holds.start_held("n1", lease, [job_id])
    assert [job.id for job in started] == [job_id]
    job = started[0]
    assert (job.state, job.node, job.fence, job.attempt) == (State.RUNNING, "n1", lease.fence, 1)
    assert job.started_at is not None and job.steps[0].state is State.RUNNING
    assert transitions(store, job_id)[1:] == [(None, "READY", "RUNNING"),
                                              ("s1", "READY", "RUNNING")]
    assert store.holds.start_held("n1", lease, [job_id]) == []  # once


def test_only_its_holder_starts_it(store: Store) -> None:
    job_id = submit(store)
    lease = FakeLease(store)
    store.holds.hold("n1", lease, 1)
    assert store.holds.start_held("n2", lease, [job_id]) == []
    assert store.jobs.get(job_id).state is State.READY


@pytest.mark.parametrize("operation, final", [(Operation.PAUSE, State.STOPPED),
                                              (Operation.DISCARD, State.DISCARDED)])
def test_pause_and_discard_act_on_a_held_job_and_it_never_starts(
        store: Store, operation: Operation, final: State) -> None:
    job_id = submit(store)
    lease = FakeLease(store)
    store.holds.hold("n1", lease, 1)
    assert store.jobs.apply(job_id, operation).state is final
    assert store.holds.start_held("n1", lease, [job_id]) == []
    job = store.jobs.get(job_id)
    assert job.state is final and job.attempt == 0 and job.started_at is None
    assert "RUNNING" not in [to for _, _, to in transitions(store, job_id)]
    if operation is Operation.PAUSE:  # resumed, it is any node's to claim again
        store.jobs.apply(job_id, Operation.RESUME)
        assert [job.id for job in store.runs.claim("n2", lease, 1)] == [job_id]


def test_a_job_held_under_a_superseded_lease_does_not_start_and_goes_back(
        store: Store) -> None:
    job_id = submit(store)
    old = FakeLease(store)
    store.holds.hold("n1", old, 1)
    new = FakeLease(store)  # another node became the active scheduler
    assert store.holds.start_held("n1", old, [job_id]) == []
    assert store.holds.release_holds(None) == 1  # what the new active scheduler does
    job = store.jobs.get(job_id)
    assert (job.state, job.node, job.attempt) == (State.READY, None, 0)
    assert [claimed.id for claimed in store.runs.claim("n2", new, 1)] == [job_id]


def test_holds_go_back_by_id_and_fence_or_all_but_those_kept(store: Store) -> None:
    first, second, third = submit(store), submit(store), submit(store)
    lease = FakeLease(store)
    assert store.holds.hold("n1", lease, 3) == [first, second, third]
    assert store.holds.release_holds("n1", [first], fence=lease.fence + 1) == 0
    assert store.holds.release_holds("n1", [first], fence=lease.fence) == 1
    assert store.holds.release_holds("n1", keep=[second]) == 1
    assert [store.jobs.get(job_id).node for job_id in (first, second, third)] == [
        None, "n1", None]


def test_a_dead_holders_jobs_go_back_with_no_attempt_consumed(store: Store) -> None:
    job_id = submit(store)
    store.holds.hold("n1", FakeLease(store), 1)
    assert "n1" in store.servers.owned_jobs()  # a rescue looks at n1
    assert store.servers.requeue_orphans("n1", "n2") == []  # nothing was RUNNING
    job = store.jobs.get(job_id)
    assert (job.state, job.node, job.attempt) == (State.READY, None, 0)


def test_a_hold_takes_nothing_under_a_superseded_lease(store: Store) -> None:
    submit(store)
    old = FakeLease(store)
    FakeLease(store)
    assert store.holds.hold("n1", old, 1) == []
