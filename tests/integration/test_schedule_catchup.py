"""Catch-up with run constraints on a real store (SQLite and PostgreSQL), on a
controlled clock: CDAP keeps one pending schedule-job per schedule, so missed fire
times that come while it waits join it; each one that joins is recorded as skipped,
and a launch decided in a round counts against the concurrency of the next."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from jobserver.store import Store
from jobserver.store.tables import jobs
from tests.integration.test_schedule_evaluator import T0, Harness

EVERY_5 = {"type": "time", "cron": "*/5 * * * *"}
WAIT_FOR_ONE = [{"type": "concurrency", "limit": 1, "on_unmet": "wait"}]


@pytest.fixture
def h(store: Store) -> Harness:
    return Harness(store)


def end_runs(h: Harness) -> None:
    with h.store.tx.write() as conn:
        conn.execute(update(jobs).where(jobs.c.name == "nightly").values(state="SUCCEED"))


def test_missed_fire_times_held_back_by_a_constraint_are_each_recorded(h: Harness) -> None:
    running = h.submit("nightly")  # a run of the template holds the constraint
    sid = h.add("held", EVERY_5, catchup="all", constraints=WAIT_FOR_ONE)
    h.round(minutes=16)  # 12:05, 12:10 and 12:15 are due
    (pending,) = h.schedule_jobs(sid)
    assert pending.state == "PENDING_CONSTRAINTS"
    assert pending.fire_time == T0 + timedelta(minutes=5)
    skipped = h.evaluations(sid, "skipped")
    assert [e.fire_time for e in skipped] == [T0 + timedelta(minutes=10),
                                              T0 + timedelta(minutes=15)]
    for record in skipped:
        assert record.details == {"reason": "pending"}
        assert record.schedule_job_id == pending.id
        assert "pending schedule-job of fire time 2026-12-01 12:05:00Z" in record.reason
    assert h.metric("jobserver_schedule_fire_times_skipped_total", reason="pending") == 2
    assert len(h.jobs()) == 1 and h.jobs()[0].id == running
    end_runs(h)
    h.round(minutes=16, seconds=6)
    (launched,) = h.schedule_jobs(sid)
    assert launched.state == "LAUNCHED" and len(h.jobs()) == 2  # the run and one launch


def test_a_launch_decided_in_a_round_counts_against_concurrency(h: Harness) -> None:
    sid = h.add("free", EVERY_5, catchup="all", constraints=WAIT_FOR_ONE)
    h.round(minutes=16)
    first, second = h.schedule_jobs(sid)
    assert (first.state, first.fire_time) == ("LAUNCHED", T0 + timedelta(minutes=5))
    assert (second.state, second.fire_time) == ("PENDING_CONSTRAINTS",
                                                T0 + timedelta(minutes=10))
    assert len(h.jobs()) == 1
    (skipped,) = h.evaluations(sid, "skipped")
    assert skipped.fire_time == T0 + timedelta(minutes=15)
    assert skipped.schedule_job_id == second.id
    end_runs(h)
    h.round(minutes=16, seconds=6)
    assert [sj.state for sj in h.schedule_jobs(sid)] == ["LAUNCHED", "LAUNCHED"]
    assert len(h.jobs()) == 2


def test_in_abort_mode_each_missed_fire_time_is_aborted_in_turn(h: Harness) -> None:
    sid = h.add("strict", EVERY_5, catchup="all",
                constraints=[{"type": "concurrency", "limit": 1}])
    h.round(minutes=16)
    assert [(sj.state, sj.fire_time) for sj in h.schedule_jobs(sid)] == [
        ("LAUNCHED", T0 + timedelta(minutes=5)), ("ABORTED", T0 + timedelta(minutes=10)),
        ("ABORTED", T0 + timedelta(minutes=15))]
    assert len(h.jobs()) == 1 and h.evaluations(sid, "skipped") == []
