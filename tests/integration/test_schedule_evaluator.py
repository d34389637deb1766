"""The schedule evaluator on a real store (SQLite and PostgreSQL), round by round on a
controlled clock: CDAP's documented behaviours, catch-up, fencing and launches."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import func, insert, select

from jobserver.config import SchedulesConfig
from jobserver.exceptions import FencedOff, StoreUnavailable
from jobserver.schedules.evaluator import ScheduleEvaluator
from jobserver.schedules.metrics import ScheduleMetrics
from jobserver.schedules.spec import parse_schedule, spec_hash, watch_targets
from jobserver.schedules.store import EvaluatorStore
from jobserver.schedules.tables import evaluations, schedule_jobs, schedules, watches
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.jobs import KeyedSubmit
from jobserver.store.tables import AuditEvent, jobs, record_events
from tests.helpers import FakeLease, job_spec

POLICY = Policy(lambda name: False, None)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
TEMPLATE = {"name": "nightly", "steps": [{"name": "s1", "type": "noop"}],
            "params": {"region": "eu"}}


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.start = self.now = start

    def __call__(self) -> datetime:
        return self.now

    def at(self, **delta: float) -> Clock:
        self.now = self.start + timedelta(**delta)
        return self


class Harness:
    """An evaluator on a controlled clock. Launching ahead is off unless ``lead_time``
    is given: most tests here are about what happens when a fire time is due."""

    def __init__(self, store: Store, lead_time: float = 0.0, start: datetime = T0) -> None:
        self.store = store
        self.clock = Clock(start)
        self.metrics = ScheduleMetrics(CollectorRegistry())
        self.released: list[datetime] = []
        self.evaluator = ScheduleEvaluator(
            store, None, SchedulesConfig(lead_time=lead_time),  # type: ignore[arg-type]
            POLICY, self.metrics, clock=self.clock,
            release=lambda: self.released.append(self.clock.now))
        self.lease = FakeLease(store)

    def add(self, name: str, trigger: dict[str, Any], **fields: Any) -> int:
        """An enabled schedule, enabled at the clock's start."""
        start = self.clock.start
        spec = parse_schedule({"name": name, "template": TEMPLATE, "trigger": trigger,
                               **fields}, POLICY)
        with self.store.tx.write() as conn:
            schedule_id = conn.execute(insert(schedules).values(
                namespace=spec.namespace, name=spec.name, generation=1,
                spec=spec.model_dump(mode="json"), spec_hash=spec_hash(spec), enabled=True,
                trigger_state={}, next_check_at=start, created_at=start, updated_at=start,
                enabled_at=start).returning(schedules.c.id)).scalar_one()
            for kind, target in watch_targets(spec):
                conn.execute(insert(watches).values(schedule_id=schedule_id, kind=kind,
                                                    target=target))
        return schedule_id

    def round(self, **delta: float) -> None:
        self.clock.at(**delta)
        self.evaluator.evaluate(self.lease)  # type: ignore[arg-type]

    def schedule_jobs(self, schedule_id: int) -> list[Any]:
        with self.store.tx.read() as conn:
            return conn.execute(select(schedule_jobs).where(
                schedule_jobs.c.schedule_id == schedule_id).order_by(schedule_jobs.c.id)).all()

    def evaluations(self, schedule_id: int, outcome: str | None = None) -> list[Any]:
        query = select(evaluations).where(evaluations.c.schedule_id == schedule_id)
        if outcome:
            query = query.where(evaluations.c.outcome == outcome)
        with self.store.tx.read() as conn:
            return conn.execute(query.order_by(evaluations.c.id)).all()

    def jobs(self, name: str = "nightly") -> list[Any]:
        with self.store.tx.read() as conn:
            return conn.execute(select(jobs).where(jobs.c.name == name)
                                .order_by(jobs.c.id)).all()

    def submit(self, name: str) -> int:
        spec = parse_job(json.dumps(job_spec(name=name)))
        return self.store.jobs.submit(spec, validate_job(spec, POLICY))[0].id

    def finish(self, job_id: int, state: State = State.SUCCEED) -> None:
        with self.store.tx.write() as conn:
            record_events(conn, [AuditEvent(job_id, State.READY, State.RUNNING),
                                 AuditEvent(job_id, State.RUNNING, state)])

    def metric(self, name: str, **labels: str) -> float:
        registry = self.metrics.fired._registry if hasattr(self.metrics.fired, "_registry") \
            else None
        del registry
        for family in (self.metrics.skipped, self.metrics.aborted):
            for metric in family.collect():
                for sample in metric.samples:
                    if sample.name == name and sample.labels == labels:
                        return sample.value
        return 0.0


@pytest.fixture
def h(store: Store) -> Harness:
    return Harness(store)


def test_cron_fires_the_latest_missed_time_and_records_the_skipped_one(h: Harness) -> None:
    sid = h.add("every5", {"type": "time", "cron": "*/5 * * * *"},
                properties={"mode": "full"})
    h.round(minutes=11)  # 12:05 and 12:10 are due; catchup latest fires 12:10
    launched = h.jobs()
    assert len(launched) == 1
    assert launched[0].params == {"region": "eu", "mode": "full"}
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "LAUNCHED" and sj.job_id == launched[0].id
    assert sj.fire_time == T0 + timedelta(minutes=10)
    (skipped,) = h.evaluations(sid, "skipped")
    assert skipped.fire_time == T0 + timedelta(minutes=5)
    assert h.metric("jobserver_schedule_fire_times_skipped_total",
                    reason="catchup_latest") == 1
    h.round(minutes=11)  # the same instant again: nothing new
    assert len(h.jobs()) == 1
    h.round(minutes=15, seconds=0.5)
    assert [sj.fire_time for sj in h.schedule_jobs(sid)][-1] == T0 + timedelta(minutes=15)
    assert len(h.jobs()) == 2
    with h.store.tx.read() as conn:
        assert conn.execute(select(schedules.c.next_check_at).where(
            schedules.c.id == sid)).scalar() == T0 + timedelta(minutes=20)


def test_catchup_all_fires_every_missed_time_within_the_window(h: Harness) -> None:
    sid = h.add("all", {"type": "time", "cron": "*/5 * * * *"}, catchup="all",
                catchup_window="7m")
    h.round(minutes=16)  # 12:05 (11 min late) is outside the window; 12:10, 12:15 fire
    fired = [sj.fire_time for sj in h.schedule_jobs(sid)]
    assert fired == [T0 + timedelta(minutes=10), T0 + timedelta(minutes=15)]
    assert len({job.idempotency_key for job in h.jobs()}) == 2
    assert [e.fire_time for e in h.evaluations(sid, "skipped")] == [T0 + timedelta(minutes=5)]


def test_catchup_none_fires_only_what_is_on_time(h: Harness) -> None:
    sid = h.add("none", {"type": "time", "cron": "*/5 * * * *"}, catchup="none",
                misfire_grace="60s")
    h.round(minutes=10, seconds=30)
    assert [sj.fire_time for sj in h.schedule_jobs(sid)] == [T0 + timedelta(minutes=10)]
    h.round(minutes=17)  # 12:15 is two minutes late: skipped
    assert len(h.schedule_jobs(sid)) == 1
    assert [e.fire_time for e in h.evaluations(sid, "skipped")] == [
        T0 + timedelta(minutes=5), T0 + timedelta(minutes=15)]


def test_and_of_two_job_statuses_fires_once_both_completed(h: Harness) -> None:
    """The seed's example: and(onProgramStatus(W1, COMPLETED), onProgramStatus(W2, ...))."""
    sid = h.add("both", {"type": "and", "parts": [
        {"type": "job_status", "job": "W1", "states": ["SUCCEED"]},
        {"type": "job_status", "job": "W2", "states": ["SUCCEED"]}]})
    h.round(seconds=1)  # the feed starts here
    w1, w2 = h.submit("W1"), h.submit("W2")
    h.finish(w1)
    h.round(seconds=2)
    (pending,) = h.schedule_jobs(sid)
    assert pending.state == "PENDING_TRIGGER" and h.jobs() == []
    h.finish(w2, State.ERROR)  # not a listed state: does not count
    h.round(seconds=3)
    assert h.jobs() == []
    w2 = h.submit("W2")
    h.finish(w2)
    h.round(seconds=4)
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "LAUNCHED" and len(h.jobs()) == 1
    assert [n["job_id"] for n in sj.notifications] == [w1, w2]
    first, launched = h.evaluations(sid)
    assert first.outcome == "pending_trigger" and launched.outcome == "launched"
    assert "job" in launched.reason and "fired" not in launched.reason.split(";")[-1]
    assert launched.details["job_id"] == sj.job_id


def test_one_pending_schedule_job_holds_every_concurrent_notification(h: Harness) -> None:
    """CDAP: five notifiers at once make one job, which holds all five."""
    sid = h.add("gathered", {"type": "job_status", "job": "feed"},
                constraints=[{"type": "delay", "duration": "1h"}])
    h.round(seconds=1)
    ids = [h.submit("feed") for _ in range(5)]
    threads = [threading.Thread(target=h.finish, args=(job_id,)) for job_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    h.round(seconds=2)
    h.round(seconds=3)
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "PENDING_CONSTRAINTS"
    assert sorted(n["job_id"] for n in sj.notifications) == ids
    h.round(hours=1, seconds=2)
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "LAUNCHED" and len(h.jobs()) == 1


def test_concurrency_aborts_by_default_and_waits_when_asked(h: Harness) -> None:
    running = h.submit("nightly")  # a READY run of the template, from anywhere
    aborting = h.add("abort", {"type": "time", "interval": "1m"},
                     constraints=[{"type": "concurrency", "limit": 1}])
    waiting = h.add("wait", {"type": "time", "interval": "1m"},
                    constraints=[{"type": "concurrency", "limit": 1, "on_unmet": "wait"}])
    h.round(minutes=1)
    (aborted,) = h.schedule_jobs(aborting)
    assert aborted.state == "ABORTED" and "concurrency" in aborted.reason
    assert h.metric("jobserver_schedule_jobs_aborted_total", reason="concurrency") == 1
    (waits,) = h.schedule_jobs(waiting)
    assert waits.state == "PENDING_CONSTRAINTS"
    assert "limit 1" in h.evaluations(waiting, "waiting")[0].reason
    h.finish(running)
    with h.store.tx.write() as conn:  # the run ends (the evaluator reads jobs' state)
        conn.execute(jobs.update().where(jobs.c.id == running).values(state="SUCCEED"))
    h.round(minutes=1, seconds=6)
    assert h.schedule_jobs(waiting)[0].state == "LAUNCHED"


def test_since_last_run_counts_successful_runs_only(h: Harness) -> None:
    sid = h.add("spaced", {"type": "time", "interval": "1m"},
                constraints=[{"type": "since_last_run", "duration": "1h"}])
    job_id = h.submit("nightly")
    with h.store.tx.write() as conn:
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(
            state="ERROR", started_at=T0))
    h.round(minutes=1)  # a failed run does not count: launched
    assert h.schedule_jobs(sid)[0].state == "LAUNCHED"
    with h.store.tx.write() as conn:
        conn.execute(jobs.update().where(jobs.c.name == "nightly").values(
            state="SUCCEED", started_at=T0 + timedelta(minutes=1)))
    h.round(minutes=2)
    assert h.schedule_jobs(sid)[1].state == "ABORTED"  # default: abort
    assert "since_last_run" in h.schedule_jobs(sid)[1].reason


def test_time_window_across_midnight_waits_for_the_window(h: Harness) -> None:
    sid = h.add("night", {"type": "time", "cron": "0 14 * * *"},
                constraints=[{"type": "time_window", "start": "22:00", "end": "06:00"}])
    h.round(hours=2, minutes=1)  # 14:01: outside 22:00-06:00, wait (the default)
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "PENDING_CONSTRAINTS"
    assert sj.next_check_at == T0.replace(hour=22)
    h.round(hours=10)  # 22:00: start inclusive
    assert h.schedule_jobs(sid)[0].state == "LAUNCHED"


def test_timeout_aborts_a_schedule_job_still_waiting(h: Harness) -> None:
    sid = h.add("late", {"type": "time", "interval": "1m"}, timeout="30m",
                constraints=[{"type": "delay", "duration": "2h"}])
    h.round(minutes=1)
    h.round(minutes=31)
    first = h.schedule_jobs(sid)[0]
    assert first.state == "ABORTED" and first.reason.startswith("timeout")
    assert h.metric("jobserver_schedule_jobs_aborted_total", reason="timeout") == 1


def test_a_stale_evaluator_writes_nothing(h: Harness) -> None:
    sid = h.add("fenced", {"type": "time", "interval": "1m"})
    stale = h.lease
    FakeLease(h.store)  # another node took the lock since
    h.clock.at(minutes=5)
    with pytest.raises(FencedOff):
        h.evaluator.evaluate(stale)  # type: ignore[arg-type]
    assert h.schedule_jobs(sid) == [] and h.jobs() == []
    with h.store.tx.read() as conn:
        assert conn.execute(select(schedules.c.trigger_state).where(
            schedules.c.id == sid)).scalar() == {}


def test_a_launch_retried_after_a_crash_makes_one_job(h: Harness, monkeypatch) -> None:
    sid = h.add("retried", {"type": "time", "interval": "1m"})

    def crash(*_args: Any) -> None:
        raise StoreUnavailable("the store went away")

    with monkeypatch.context() as patch:  # the jobs are submitted, then the store fails
        patch.setattr(EvaluatorStore, "save_drafts", staticmethod(crash))
        with pytest.raises(StoreUnavailable):
            h.round(minutes=1)
    # The job was submitted in the firing's transaction, so it went with it.
    assert h.jobs() == [] and h.schedule_jobs(sid) == []
    h.round(minutes=1, seconds=1)
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "LAUNCHED" and sj.job_id == h.jobs()[0].id and len(h.jobs()) == 1


def test_a_pending_launch_left_in_the_store_finds_the_job_its_key_made(h: Harness) -> None:
    """A schedule-job an older node left in PENDING_LAUNCH after submitting its job:
    the launch is retried under the same key, which finds that job."""
    sid = h.add("left", {"type": "time", "interval": "1h"})
    key = f"schedule/{sid}/1/left-behind"
    spec = parse_job(json.dumps(TEMPLATE))
    made = h.store.jobs.submit_keyed([KeyedSubmit(spec, validate_job(spec, POLICY), key,
                                                  None)])[key]
    with h.store.tx.write() as conn:
        conn.execute(insert(schedule_jobs).values(
            schedule_id=sid, generation=1, state="PENDING_LAUNCH", notifications=[],
            trigger_state={}, properties={}, created_at=T0, updated_at=T0,
            deadline_at=T0 + timedelta(days=1), launch_key=key))
    h.round(seconds=1)
    (sj,) = h.schedule_jobs(sid)
    assert sj.state == "LAUNCHED" and sj.job_id == made and len(h.jobs()) == 1


def test_job_status_of_another_schedules_runs(h: Harness) -> None:
    upstream = h.add("upstream", {"type": "time", "interval": "1m"})
    downstream = h.add("downstream", {"type": "job_status", "schedule": "upstream",
                                      "states": ["SUCCEED", "ERROR"]})
    h.round(seconds=1)
    h.finish(h.submit("nightly"))  # the same job name, not upstream's run: no trigger
    h.round(minutes=1)
    assert h.schedule_jobs(downstream) == []
    (launched,) = h.schedule_jobs(upstream)
    h.finish(launched.job_id, State.ERROR)
    h.round(minutes=1, seconds=1)
    (fired,) = h.schedule_jobs(downstream)
    assert fired.state == "LAUNCHED"
    assert fired.notifications[0]["job_id"] == launched.job_id
    assert fired.notifications[0]["state"] == "ERROR"


def test_a_schedule_that_cannot_be_evaluated_does_not_stop_the_others(h: Harness) -> None:
    broken = h.add("broken", {"type": "time", "interval": "1m"})
    healthy = h.add("healthy", {"type": "time", "interval": "1m"})
    with h.store.tx.write() as conn:  # a spec this version cannot read
        conn.execute(schedules.update().where(schedules.c.id == broken).values(
            spec={"name": "broken", "trigger": {"type": "sundial"}}))
    h.round(minutes=1)
    assert h.schedule_jobs(healthy)[0].state == "LAUNCHED"
    (error,) = h.evaluations(broken, "error")
    assert "cannot be evaluated" in error.reason
    with h.store.tx.read() as conn:
        assert conn.execute(select(schedules.c.next_check_at).where(
            schedules.c.id == broken)).scalar() == T0 + timedelta(minutes=2)


def test_evaluation_records_are_kept_for_the_retention_only(h: Harness) -> None:
    sid = h.add("kept", {"type": "time", "interval": "1m"})
    h.round(minutes=1)
    with h.store.tx.write() as conn:
        conn.execute(evaluations.update().values(at=T0 - timedelta(days=8)))
    h.evaluator._pruned_at = None
    h.round(minutes=2)  # the retention is 7 days by default
    assert {e.at for e in h.evaluations(sid)} == {T0 + timedelta(minutes=2)}
