"""Launching ahead (``schedules.lead_time``): a firing that depends on the clock alone
is launched before its fire time as a job that may not start before it; disabling or
deleting the schedule before that time discards the job.

The controlled clock starts in the real future here: whether a job may start is the
store's clock's decision (``not_before``), as it is for the schedulers' claims."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select, update

from jobserver.schedules.tables import schedules
from jobserver.store import Store
from jobserver.store.runs import claimable
from jobserver.store.tables import jobs
from tests.integration.test_schedule_evaluator import Harness

EVERY_MINUTE = {"type": "time", "cron": "* * * * *"}


@pytest.fixture
def h(store: Store) -> Harness:
    """Lead time 10 s; the clock starts on a minute boundary at least a minute from now."""
    now = datetime.now(timezone.utc)
    start = now.replace(second=0, microsecond=0) + timedelta(minutes=2)
    return Harness(store, lead_time=10.0, start=start)


def _claimable(h: Harness) -> int:
    with h.store.tx.read() as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)
                                .where(claimable("n1"))).scalar() or 0)


def _next_check(h: Harness, schedule_id: int) -> Any:
    with h.store.tx.read() as conn:
        return conn.execute(select(schedules.c.next_check_at)
                            .where(schedules.c.id == schedule_id)).scalar()


def test_a_clock_only_schedule_is_launched_ahead_to_start_at_its_fire_time(
        h: Harness) -> None:
    sid = h.add("ahead", EVERY_MINUTE)
    fire = h.clock.start + timedelta(minutes=1)
    h.round(seconds=45)  # 15 s before the fire time: not yet within the lead time
    assert h.jobs() == [] and _next_check(h, sid) == fire - timedelta(seconds=10)
    h.clock.at(seconds=52)
    assert h.evaluator.evaluate(h.lease) == fire  # type: ignore[arg-type]
    (job,) = h.jobs()
    assert job.state == "READY" and job.not_before == fire
    assert _claimable(h) == 0  # the store's clock has not reached the fire time
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "LAUNCHED" and sj.job_id == job.id and sj.fire_time == fire
    (launched,) = h.evaluations(sid, "launched")
    assert "8.000 s ahead of its fire time" in launched.reason
    assert h.released == []
    h.round(seconds=60)  # the fire time: the schedulers are woken, nothing fires twice
    assert h.released == [fire] and len(h.jobs()) == 1
    assert _next_check(h, sid) == fire + timedelta(seconds=50)


def test_a_firing_with_run_constraints_is_decided_when_due(h: Harness) -> None:
    sid = h.add("constrained", EVERY_MINUTE,
                constraints=[{"type": "concurrency", "limit": 1}])
    h.round(seconds=52)
    assert h.jobs() == [] and _next_check(h, sid) == h.clock.start + timedelta(minutes=1)
    h.round(seconds=60.5)
    (job,) = h.jobs()
    assert job.not_before is None and h.schedule_jobs(sid)[0].state == "LAUNCHED"


@pytest.mark.parametrize("action", ["disable", "delete"])
def test_stopping_a_schedule_discards_its_job_launched_ahead_only(h: Harness,
                                                                  action: str) -> None:
    sid = h.add("stopped", EVERY_MINUTE)
    h.round(seconds=60.5)  # the first fire time is due when first seen: launched now
    h.round(seconds=115)  # the second is launched ahead
    due_job, early_job = h.jobs()
    assert due_job.not_before is None and early_job.not_before is not None
    getattr(h.store.schedules, action)("default", "stopped")
    kept, discarded = h.jobs()
    assert kept.state == "READY" and discarded.state == "DISCARDED"
    events = h.store.jobs.events(discarded.id)
    assert events[-1].message == f"schedule {action}d before its fire time"
    if action == "disable":
        first, second = h.schedule_jobs(sid)
        assert (first.state, second.state) == ("LAUNCHED", "ABORTED")
        (aborted,) = h.evaluations(sid, "aborted")
        assert f"job {discarded.id} discarded before its fire time" in aborted.reason


def test_enabled_again_before_its_fire_time_it_launches_that_fire_time_anew(
        h: Harness) -> None:
    sid = h.add("again", EVERY_MINUTE)
    h.round(seconds=52)
    (first,) = h.jobs()
    h.store.schedules.disable("default", "again")
    h.store.schedules.enable("default", "again")  # its clock starts now, before 12:01
    h.clock.at(seconds=53)
    with h.store.tx.write() as conn:  # as enabling at the evaluator's clock would
        conn.execute(update(schedules).where(schedules.c.id == sid).values(
            enabled_at=h.clock.start + timedelta(seconds=52.5), next_check_at=h.clock.now))
    h.round(seconds=53)
    discarded, relaunched = h.jobs()
    assert discarded.id == first.id and discarded.state == "DISCARDED"
    assert relaunched.state == "READY" and relaunched.not_before == first.not_before
    assert [sj.state for sj in h.schedule_jobs(sid)] == ["ABORTED", "LAUNCHED"]


def test_a_fire_time_already_launched_is_not_launched_twice(h: Harness) -> None:
    """The schedule enabled again before a fire time launched ahead, its job not
    discarded (the store's clock had passed the fire time, the API's had not): the
    evaluator meets that fire time again and records it as skipped."""
    sid = h.add("twice", EVERY_MINUTE)
    h.round(seconds=52)
    with h.store.tx.write() as conn:  # what enabling again leaves, bar the discard
        conn.execute(update(schedules).where(schedules.c.id == sid).values(
            trigger_state={}, enabled_at=h.clock.start + timedelta(seconds=52.5),
            next_check_at=h.clock.start + timedelta(seconds=52.5)))
    h.round(seconds=53)
    assert len(h.jobs()) == 1 and len(h.schedule_jobs(sid)) == 1
    (skipped,) = h.evaluations(sid, "skipped")
    assert skipped.details == {"reason": "launched_before"}
    assert skipped.fire_time == h.clock.start + timedelta(minutes=1)


def test_the_lead_grows_to_twice_the_longest_recent_firing(h: Harness) -> None:
    evaluator = h.evaluator
    evaluator._adapt_lead(12.0)  # firing what was due took 12 s: start 24 s ahead
    assert evaluator.ahead == timedelta(seconds=24)
    evaluator._adapt_lead(0.1)  # a quick firing since does not shrink it
    assert evaluator.ahead == timedelta(seconds=24)
    evaluator._adapt_lead(45.0)
    assert evaluator.ahead == timedelta(seconds=60)  # at most MAX_LEAD
    off = Harness(h.store, lead_time=0.0).evaluator
    off._adapt_lead(12.0)
    assert off.ahead == timedelta(0)
