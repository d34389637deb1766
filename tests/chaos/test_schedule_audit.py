"""The chaos test's judge of schedules (:mod:`tests.chaos.schedule_audit`) passes what
the evaluator really writes and finds each kind of wrong history: a history made by
the evaluator on a controlled clock, then altered in one way per case."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import delete, insert, select, update

from jobserver.config import SchedulesConfig
from jobserver.schedules.catalog import ScheduleCatalog
from jobserver.schedules.evaluator import ScheduleEvaluator
from jobserver.schedules.spec import parse_schedule
from jobserver.schedules.tables import evaluations, schedule_jobs
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.store import Store
from jobserver.store.tables import jobs
from tests.chaos import schedule_audit
from tests.helpers import FakeLease, job_spec

POLICY = Policy(lambda name: False, None)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CUTOFF = T0 + timedelta(seconds=51)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def history(store: Store) -> dict[str, int]:
    """Two schedules every 10 s from T0, ``latest`` and ``all``; evaluated at 10.5 s,
    20.5 s, then not until 51 s (30 s and 40 s missed: launching ahead is off, or 30 s
    would have been launched at 20.5 s). Returns their ids."""
    clock = Clock()
    catalog = ScheduleCatalog(store.tx, clock)
    ids = {}
    for policy in ("latest", "all"):
        spec = parse_schedule({"name": policy, "catchup": policy, "template": job_spec(policy),
                               "trigger": {"type": "time", "interval": 10}}, POLICY)
        ids[policy] = catalog.create(spec, enabled=True).id
    evaluator = ScheduleEvaluator(store, None, SchedulesConfig(lead_time=0),  # type: ignore
                                  POLICY, clock=clock)
    lease = FakeLease(store)
    for seconds in (10.5, 20.5, 51):
        clock.now = T0 + timedelta(seconds=seconds)
        evaluator.evaluate(lease)  # type: ignore[arg-type]
    return ids


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _schedule_job(store: Store, schedule_id: int, seconds: float) -> object:
    with store.tx.read() as conn:
        return conn.execute(select(schedule_jobs).where(
            schedule_jobs.c.schedule_id == schedule_id,
            schedule_jobs.c.fire_time == _at(seconds))).one()


def lose(store: Store, ids: dict[str, int]) -> None:
    with store.tx.write() as conn:
        conn.execute(delete(schedule_jobs).where(schedule_jobs.c.schedule_id == ids["latest"],
                                                 schedule_jobs.c.fire_time == _at(20)))


def launch_twice(store: Store, ids: dict[str, int]) -> None:
    spec = parse_job(json.dumps(job_spec("all")))
    key = f"schedule/{ids['all']}/1/again"
    job = store.jobs.submit(spec, validate_job(spec, POLICY), key)[0]
    row = _schedule_job(store, ids["all"], 30)
    columns = {name: value for name, value in row._mapping.items() if name != "id"}  # type: ignore
    with store.tx.write() as conn:
        conn.execute(insert(schedule_jobs).values(**{**columns, "launch_key": key,
                                                      "job_id": job.id}))


def launch_and_skip(store: Store, ids: dict[str, int]) -> None:
    with store.tx.write() as conn:
        conn.execute(insert(evaluations).values(
            schedule_id=ids["all"], at=_at(51), outcome="skipped", fire_time=_at(40),
            reason="missed", details={"reason": "catchup_all"}))


def drop_job(store: Store, ids: dict[str, int]) -> None:
    key = _schedule_job(store, ids["latest"], 10).launch_key  # type: ignore[attr-defined]
    with store.tx.write() as conn:
        conn.execute(delete(jobs).where(jobs.c.idempotency_key == key))


def stray_job(store: Store, ids: dict[str, int]) -> None:
    spec = parse_job(json.dumps(job_spec("stray")))
    store.jobs.submit(spec, validate_job(spec, POLICY), f"schedule/{ids['latest']}/1/stray")


def skip_early(store: Store, ids: dict[str, int]) -> None:
    with store.tx.write() as conn:
        conn.execute(update(evaluations).where(
            evaluations.c.schedule_id == ids["latest"], evaluations.c.outcome == "skipped",
            evaluations.c.fire_time == _at(30)).values(at=_at(35)))


def move(store: Store, ids: dict[str, int]) -> None:
    with store.tx.write() as conn:
        conn.execute(update(schedule_jobs).where(
            schedule_jobs.c.schedule_id == ids["all"], schedule_jobs.c.fire_time == _at(20))
            .values(fire_time=_at(15)))


def test_the_evaluators_history_is_clean(store: Store) -> None:
    history(store)
    result = schedule_audit.audit(schedule_audit.read(store), CUTOFF,
                                  [(_at(21), _at(51))])
    assert result.problems == []
    assert (result.fires, result.launched, dict(result.skipped)) == (10, 8, {"latest": 2})
    assert result.in_outages == 6  # 30, 40 and 50 s of each


@pytest.mark.parametrize(("alter", "finding"), [
    (lose, "fire time 2026-12-01T12:00:20+00:00 lost"),
    (launch_twice, "2 launch(es), 0 skip(s)"),
    (launch_and_skip, "1 launch(es), 1 skip(s)"),
    (drop_job, "but the jobs with that key are []"),
    (stray_job, "which no LAUNCHED schedule-job of a due fire time owns"),
    (skip_early, "the next fire time 2026-12-01 12:00:40+00:00 was not due by then"),
    (move, "12:00:15+00:00 is not one of its fire times"),
], ids=lambda value: getattr(value, "__name__", "finding"))
def test_each_wrong_history_is_found(store: Store, alter: Callable[[Store, dict[str, int]],
                                                                   None],
                                     finding: str) -> None:
    alter(store, history(store))
    problems = schedule_audit.audit(schedule_audit.read(store), CUTOFF).problems
    assert any(finding in problem for problem in problems), problems
