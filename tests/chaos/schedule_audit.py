"""The store's account of time-triggered schedules, judged fire time by fire time.

For every schedule with one ``time`` trigger, the fire times it was due are computed
afresh with :class:`~jobserver.schedules.timing.FireTimes`, from its ``enabled_at`` up
to a cutoff. Each must appear exactly once in the store: as a LAUNCHED schedule-job
whose job exists and carries the schedule-job's launch key as its idempotency key, or
as a ``skipped`` evaluation that its catch-up policy explains. Anything else is a
problem, described with the rows that show it:

- a fire time with no schedule-job and no skip (lost);
- a fire time launched twice, skipped twice, or both launched and skipped;
- a schedule-job or a skip at a time that is not one of the schedule's fire times;
- a schedule-job of a due fire time that ended other than LAUNCHED (no constraint
  or disable should abort one here);
- a LAUNCHED schedule-job without its job, or whose job has another key;
- a job launched under a schedule's key that no LAUNCHED schedule-job owns;
- a skip under ``catchup: all`` (the window covers every outage), or a ``latest``
  skip with no later fire time already due when it was recorded.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select

from jobserver.schedules.firing import schedule_of_key
from jobserver.schedules.spec import TimeTrigger, load_spec
from jobserver.schedules.tables import evaluations, schedule_jobs, schedules
from jobserver.schedules.timing import FireTimes
from jobserver.store import Store
from jobserver.store.models import as_utc
from jobserver.store.tables import jobs

#: More fire times than any run of the chaos test has per schedule.
MAX_FIRES = 100_000


@dataclass
class Rows:
    """What the store holds about the schedules, read once."""

    schedules: list[Any]
    schedule_jobs: dict[int, list[Any]]          # by schedule id
    skips: dict[int, list[Any]]                  # skipped evaluations, by schedule id
    jobs_by_key: dict[str, list[Any]]            # jobs launched under a schedule's key


@dataclass
class Audit:
    """Counts over every schedule, and the problems found (none in a clean run)."""

    fires: int = 0
    #: fire times due while an outage lasted (see :func:`audit`'s ``outages``)
    in_outages: int = 0
    launched: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # by catch-up policy
    #: seconds from each launched fire time to its job's creation
    lags: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lags = sorted(self.lags)
        p99 = lags[int(0.99 * (len(lags) - 1))] if lags else 0.0
        skipped = ", ".join(f"{policy} {count}" for policy, count in sorted(self.skipped.items()))
        return (f"fires={self.fires} in_outages={self.in_outages} launched={self.launched} skipped={sum(self.skipped.values())}"
                f" ({skipped or 'none'}) lag p50={lags[len(lags) // 2] if lags else 0.0:.2f}s"
                f" p99={p99:.2f}s max={lags[-1] if lags else 0.0:.2f}s "
                f"problems={len(self.problems)}")


def read(store: Store) -> Rows:
    """Every schedule, schedule-job, skipped evaluation and schedule-launched job."""
    with store.tx.read() as conn:
        rows = Rows(list(conn.execute(select(schedules).order_by(schedules.c.id))),
                    defaultdict(list), defaultdict(list), defaultdict(list))
        for row in conn.execute(select(schedule_jobs).order_by(schedule_jobs.c.id)):
            rows.schedule_jobs[row.schedule_id].append(row)
        for row in conn.execute(select(evaluations).where(evaluations.c.outcome == "skipped")
                                .order_by(evaluations.c.id)):
            rows.skips[row.schedule_id].append(row)
        for row in conn.execute(select(jobs.c.id, jobs.c.idempotency_key, jobs.c.created_at)
                                .where(jobs.c.idempotency_key.like("schedule/%"))):
            rows.jobs_by_key[row.idempotency_key].append(row)
    return rows


Window = tuple[datetime, datetime]


def audit(rows: Rows, cutoff: datetime, outages: list[Window] | None = None) -> Audit:
    """Judge every schedule's fire times up to ``cutoff`` (aware) by ``rows``; count
    those that fell due within one of the ``outages`` (from, to)."""
    result = Audit()
    owned: set[str] = set()
    for schedule in rows.schedules:
        owned |= _schedule(schedule, rows, cutoff, outages or [], result)
    for key, launched in sorted(rows.jobs_by_key.items()):
        if len(launched) > 1:
            result.problems.append(f"jobs {[job.id for job in launched]} share launch key {key}")
        if key not in owned and _due_key(rows, key, cutoff):
            result.problems.append(f"job {launched[0].id} was launched under {key}, which no "
                                   "LAUNCHED schedule-job of a due fire time owns")
    return result


def _due_key(rows: Rows, key: str, cutoff: datetime) -> bool:
    """Whether ``key`` is a launch key of a fire time up to ``cutoff`` (or of no
    schedule-job at all, which is a problem whenever it was)."""
    schedule_id = schedule_of_key(key)
    for row in rows.schedule_jobs.get(schedule_id or 0, []):
        if row.launch_key == key:
            return row.fire_time is None or _utc(row.fire_time) <= cutoff
    return True


def _schedule(schedule: Any, rows: Rows, cutoff: datetime, outages: list[Window],
              result: Audit) -> set[str]:
    """Check one schedule; returns the launch keys its LAUNCHED schedule-jobs own."""
    spec = load_spec(schedule.spec)
    assert isinstance(spec.trigger, TimeTrigger), f"{schedule.name}: not a lone time trigger"
    name = f"schedule {schedule.id} ({schedule.namespace}/{schedule.name})"
    enabled_at = as_utc(schedule.enabled_at)
    assert enabled_at is not None, f"{name} was never enabled"
    times = FireTimes.of(spec.trigger, enabled_at)
    due = times.between(enabled_at, cutoff, MAX_FIRES)
    result.fires += len(due)
    result.in_outages += sum(1 for t in due if any(start <= t <= end for start, end in outages))
    by_time: dict[datetime, list[Any]] = defaultdict(list)
    for row in rows.schedule_jobs.get(schedule.id, []):
        fire_time = as_utc(row.fire_time)
        if fire_time is None or fire_time <= cutoff:
            by_time[fire_time].append(row)  # type: ignore[index]
    skips: dict[datetime, list[Any]] = defaultdict(list)
    for row in rows.skips.get(schedule.id, []):
        if _utc(row.fire_time) <= cutoff:
            skips[_utc(row.fire_time)].append(row)
    wanted = set(due)
    for fire_time in sorted(set(by_time) - wanted, key=str) + sorted(set(skips) - wanted):
        result.problems.append(f"{name}: {fire_time} is not one of its fire times; rows: "
                               f"{_describe(by_time.get(fire_time, []), skips.get(fire_time, []))}")
    owned = set()
    for fire_time in due:
        launched = _fire_time(name, fire_time, by_time.get(fire_time, []),
                              skips.get(fire_time, []), rows, result)
        owned |= {row.launch_key for row in launched}
    _catch_up(name, spec.catchup, times, wanted, skips, result)
    return owned


def _fire_time(name: str, fire_time: datetime, found: list[Any], skipped: list[Any],
               rows: Rows, result: Audit) -> list[Any]:
    """One due fire time: exactly one launch or one skip. Returns its LAUNCHED rows."""
    launched = [row for row in found if row.state == "LAUNCHED"]
    if len(launched) + len(skipped) != 1 or len(found) != len(launched):
        verdict = ("lost: neither launched nor skipped" if not launched and not skipped
                   else f"{len(launched)} launch(es), {len(skipped)} skip(s), "
                        f"{len(found) - len(launched)} schedule-job(s) not LAUNCHED")
        result.problems.append(f"{name}: fire time {fire_time.isoformat()} {verdict}; rows: "
                               f"{_describe(found, skipped)}")
    for row in launched:
        result.launched += 1
        job = rows.jobs_by_key.get(row.launch_key or "", [])
        if not row.launch_key or [item.id for item in job] != [row.job_id]:
            result.problems.append(
                f"{name}: fire time {fire_time.isoformat()}: schedule-job {row.id} LAUNCHED "
                f"job {row.job_id} under key {row.launch_key!r}, but the jobs with that "
                f"key are {[item.id for item in job]}")
        elif job:
            result.lags.append((_utc(job[0].created_at) - fire_time).total_seconds())
    return launched


def _catch_up(name: str, policy: str, times: FireTimes, wanted: set[datetime],
              skips: dict[datetime, list[Any]], result: Audit) -> None:
    """``all``: nothing skipped. ``latest``: each skip recorded when the next fire
    time was due already (the latest fires in its place)."""
    for fire_time, rows in sorted(skips.items()):
        if fire_time not in wanted:
            continue
        result.skipped[policy] += len(rows)
        following = times.next_after(fire_time)
        for row in rows:
            reason = (row.details or {}).get("reason")
            at = _utc(row.at)
            if policy == "all" or reason != f"catchup_{policy}" or following is None \
                    or following > at:
                result.problems.append(
                    f"{name} (catchup {policy}): fire time {fire_time.isoformat()} skipped "
                    f"at {at.isoformat()} ({reason}: {row.reason}); the next fire time "
                    f"{following} was {'not ' if following is None or following > at else ''}"
                    "due by then")


def _utc(value: datetime | None) -> datetime:
    """A stored time that is never NULL, as an aware UTC datetime."""
    found = as_utc(value)
    assert found is not None
    return found


def _describe(found: list[Any], skipped: list[Any]) -> str:
    parts = [f"schedule-job {row.id} {row.state} fire_time={row.fire_time} key="
             f"{row.launch_key} job={row.job_id} created={row.created_at} reason={row.reason}"
             for row in found]
    parts += [f"evaluation {row.id} skipped at={row.at} ({row.reason})" for row in skipped]
    return "; ".join(parts) or "none"

