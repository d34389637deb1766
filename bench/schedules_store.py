"""The store side of the schedules scenario: bulk creation, and reading what fired.

Schedules go in as a user's would come out of the catalog: the first one through
``store.schedules.create`` (parsed and validated as the API does), the others as copies
of its row that differ only in name, spec and spec digest, in one transaction. Outcomes
are read back from ``schedule_jobs`` joined to the jobs they launched.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.common import epoch_seconds
from bench.stores import poll_engine

#: Every minute, on the minute: the issue's scenario.
CRON = "* * * * *"
CRON_TRIGGER: dict[str, Any] = {"type": "time", "cron": CRON}
TEMPLATE = {"name": "tick", "steps": [{"name": "s", "type": "noop"}]}


def schedule_body(name: str, trigger: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schedule of one no-op step (the cron trigger unless told), as a user would
    POST it."""
    return {"name": name, "template": TEMPLATE, "trigger": trigger or CRON_TRIGGER}


def interval_trigger(seconds: float, first: float) -> dict[str, Any]:
    """Every ``seconds``, first at ``first`` (epoch seconds)."""
    return {"type": "time", "interval": seconds, "start": _utc(first).isoformat()}


def schedule_name(index: int) -> str:
    return f"tick-{index:05d}"


def create_schedules(url: str, count: int, trigger: dict[str, Any] | None = None) -> float:
    """Create ``count`` enabled schedules (cron unless ``trigger`` says otherwise);
    returns the seconds it took."""
    from sqlalchemy import insert, select

    from jobserver.schedules.spec import parse_schedule, spec_hash
    from jobserver.schedules.tables import schedules
    from jobserver.spec import Policy
    from jobserver.store import Store

    started = time.monotonic()
    store = Store(url, notify=False)
    try:
        spec = parse_schedule(schedule_body(schedule_name(0), trigger), Policy(lambda _name: False, None))
        first = store.schedules.create(spec, enabled=True)
        with store.engine.begin() as conn:
            row = conn.execute(select(schedules).where(schedules.c.id == first.id)
                               ).mappings().one()
            template = {key: value for key, value in row.items() if key != "id"}
            copies = []
            for index in range(1, count):
                copy = spec.model_copy(update={"name": schedule_name(index)})
                copies.append({**template, "name": copy.name,
                               "spec": copy.model_dump(mode="json"),
                               "spec_hash": spec_hash(copy)})
            for at in range(0, len(copies), 2000):
                conn.execute(insert(schedules), copies[at:at + 2000])
    finally:
        store.dispose()
    return time.monotonic() - started


def create_after_boundary(url: str, count: int, gap: float) -> tuple[float, float]:
    """Create the schedules early in a minute, so that a running node's first look at
    them (each one's next fire time) is done before their first fire time: when the
    next minute boundary is less than ``gap`` seconds away, wait until it has passed.
    Returns the seconds the creation took and that first fire time."""
    boundary = next_minute(time.time())
    if boundary - time.time() < gap:
        while time.time() < boundary + 1.0:
            time.sleep(0.2)
    create_s = create_schedules(url, count)
    return create_s, next_minute(time.time())


def create_on_interval(url: str, count: int, gap: float, seconds: float) -> tuple[float, float]:
    """Create the schedules on an interval trigger whose first fire time is the first
    whole second ``gap`` seconds from now: the same room for the node's first look as
    :func:`create_after_boundary` gives, without waiting for a minute boundary.
    Returns the seconds the creation took and that first fire time."""
    first = float(math.ceil(time.time() + gap))
    return create_schedules(url, count, interval_trigger(seconds, first)), first


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


def unsettled(url: str) -> int:
    """Enabled schedules due now, schedule-jobs not yet launched, and jobs not yet
    finished: zero once the node has looked at every schedule and is idle."""
    from sqlalchemy import func, select

    from jobserver.schedules.tables import schedule_jobs, schedules
    from jobserver.store.tables import jobs

    now = datetime.now(timezone.utc)
    with poll_engine(url).connect() as conn:
        due = conn.execute(select(func.count()).select_from(schedules).where(
            schedules.c.enabled, schedules.c.next_check_at <= now)).scalar()
        pending = conn.execute(select(func.count()).select_from(schedule_jobs).where(
            schedule_jobs.c.state.in_(("PENDING_TRIGGER", "PENDING_CONSTRAINTS",
                                       "PENDING_LAUNCH")))).scalar()
        active = conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.state.in_(("READY", "RUNNING")))).scalar()
    return int(due or 0) + int(pending or 0) + int(active or 0)


def launched_count(url: str, fire_time: float) -> int:
    """Schedule-jobs of ``fire_time`` (epoch seconds) that launched their job."""
    from sqlalchemy import func, select

    from jobserver.schedules.tables import schedule_jobs

    with poll_engine(url).connect() as conn:
        return int(conn.execute(select(func.count()).select_from(schedule_jobs).where(
            schedule_jobs.c.fire_time >= _utc(fire_time - 0.5),
            schedule_jobs.c.fire_time < _utc(fire_time + 0.5),
            schedule_jobs.c.state == "LAUNCHED")).scalar() or 0)


def wait_launched(url: str, fire_time: float, count: int, deadline: float,
                  poll: float = 1.0) -> tuple[int, float]:
    """Poll until ``count`` schedule-jobs of ``fire_time`` launched or the wall clock
    passes ``deadline``; returns (launched, wall time of the last poll)."""
    while True:
        done = launched_count(url, fire_time)
        if done >= count or time.time() >= deadline:
            return done, time.time()
        time.sleep(poll)


def outcomes(url: str, fire_times: list[float]) -> list[dict[str, Any]]:
    """One dict per schedule-job of the measured fire times: schedule, fire time,
    state, when it was marked LAUNCHED, and its job's insert time, start time
    (``not_before``: a job launched ahead) and claim time (epoch seconds, the store's
    clock)."""
    from sqlalchemy import select

    from jobserver.schedules.tables import schedule_jobs
    from jobserver.store.tables import jobs

    wanted = {round(t) for t in fire_times}
    query = (select(schedule_jobs.c.schedule_id, schedule_jobs.c.fire_time,
                    schedule_jobs.c.state, schedule_jobs.c.updated_at, jobs.c.created_at,
                    jobs.c.not_before, jobs.c.started_at)
             .outerjoin(jobs, jobs.c.id == schedule_jobs.c.job_id)
             .where(schedule_jobs.c.fire_time >= _utc(min(fire_times) - 0.5),
                    schedule_jobs.c.fire_time < _utc(max(fire_times) + 0.5)))
    found = []
    with poll_engine(url).connect() as conn:
        for row in conn.execute(query):
            fire = epoch_seconds(row.fire_time)
            if round(fire) not in wanted:
                continue
            found.append({"schedule_id": row.schedule_id, "fire_time": fire,
                          "state": row.state, "marked": epoch_seconds(row.updated_at),
                          "created": _epoch(row.created_at), "started": _epoch(row.started_at),
                          "not_before": _epoch(row.not_before)})
    return found


def _epoch(value: Any) -> float | None:
    return None if value is None else epoch_seconds(value)


def evaluation_counts(url: str, fire_times: list[float]) -> dict[str, int]:
    """Evaluation records of the measured fire times by outcome (fired, skipped,
    aborted, launched, ...)."""
    from sqlalchemy import func, select

    from jobserver.schedules.tables import evaluations

    with poll_engine(url).connect() as conn:
        rows = conn.execute(select(evaluations.c.outcome, func.count()).where(
            evaluations.c.fire_time >= _utc(min(fire_times) - 0.5),
            evaluations.c.fire_time < _utc(max(fire_times) + 0.5))
            .group_by(evaluations.c.outcome)).all()
    return {outcome: int(count) for outcome, count in rows}


def database_counters(url: str) -> dict[str, int]:
    """PostgreSQL's commit and row counters of this database (empty on SQLite)."""
    from sqlalchemy import text

    if not url.startswith("postgresql"):
        return {}
    with poll_engine(url).connect() as conn:
        row = conn.execute(text(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted "
            "FROM pg_stat_database WHERE datname = current_database()")).mappings().one()
    return {key: int(value) for key, value in row.items()}


def next_fire(after: float, first: float, period: float) -> float:
    """The first of ``first``, ``first + period``, ... at or after ``after``."""
    return first + max(0, math.ceil((after - first) / period)) * period


def next_minute(after: float) -> float:
    """The first whole minute (epoch seconds) at or after ``after``."""
    minute = datetime.fromtimestamp(after, timezone.utc).replace(second=0, microsecond=0)
    if minute.timestamp() < after:
        minute += timedelta(minutes=1)
    return minute.timestamp()
