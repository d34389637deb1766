"""What the schedules pages show, read through the schedule catalog.

A row is a schedule with its trigger in words (:mod:`jobserver.schedules.words`),
its next fire time (as the API computes it), its pending schedule-job and the engine
job it launched last with that job's state. The detail
adds the run constraints in words, the newest schedule-jobs with the state of the
engine jobs they launched, and the newest evaluations with their reasons.

Every read is bounded: a page of schedules by their (namespace, name) index, the
pending schedule-jobs of that page, per schedule of the page its newest ``RECENT``
schedule-jobs for the last launched job (their states by primary key), and per
schedule the newest ``RECENT``
schedule-jobs and evaluations by their (schedule_id, id) indexes; job states by
primary key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import select

from jobserver.schedules.records import EvaluationRecord, ScheduleJobRecord, ScheduleRecord
from jobserver.schedules.repos import schedule_catalog
from jobserver.schedules.serialize import next_fire_time, stored_spec
from jobserver.schedules.tables import schedule_jobs
from jobserver.schedules.words import constraint_words, duration_words, trigger_words
from jobserver.store import Store

#: Schedules on one page of the list.
PAGE = 50
#: Schedule-jobs and evaluations a schedule's page shows.
RECENT = 20


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule as the list shows it; ``trigger`` is None when the stored spec no
    longer validates (e.g. its time zone left the system's database)."""

    record: ScheduleRecord
    trigger: str | None
    next_fire: datetime | None
    last_job: int | None = None
    last_state: str | None = None

    @property
    def description(self) -> str | None:
        return self.record.spec.get("description")


@dataclass(frozen=True)
class ScheduleDetail:
    """One schedule's page."""

    row: ScheduleRow
    constraints: list[str]
    timeout: str
    catchup: str
    jobs: list[ScheduleJobRecord]
    evaluations: list[EvaluationRecord]
    job_states: dict[int, str]


def _row(record: ScheduleRecord, now: datetime | None = None) -> ScheduleRow:
    spec = stored_spec(record)
    return ScheduleRow(record, None if spec is None else trigger_words(spec.trigger),
                       next_fire_time(record, spec, now))


def schedule_rows(store: Store, namespace: str | None = None,
                  after: tuple[str, str] | None = None, limit: int = PAGE,
                  ) -> tuple[list[ScheduleRow], tuple[str, str] | None]:
    """A page of schedules by (namespace, name) and the ``after`` of the next page."""
    records, following = schedule_catalog(store).list(namespace, None, limit, after)
    last = last_launched(store, [record.id for record in records])
    states = {job_id: state.value for job_id, state in store.jobs.states(
        list(last.values())).items()}
    return [replace(_row(record), last_job=last.get(record.id),
                    last_state=states.get(last.get(record.id, 0)))
            for record in records], following


def last_launched(store: Store, schedule_ids: list[int]) -> dict[int, int]:
    """The engine job each schedule launched last, by schedule id: per schedule one
    read of its newest ``RECENT`` schedule-jobs by the (schedule_id, id) index (a
    schedule whose newest ones launched nothing, skipped or pending, shows none)."""
    found: dict[int, int] = {}
    with store.tx.read() as conn:
        for schedule_id in schedule_ids:
            newest = (select(schedule_jobs.c.job_id)
                      .where(schedule_jobs.c.schedule_id == schedule_id)
                      .order_by(schedule_jobs.c.id.desc()).limit(RECENT).subquery())
            job_id = conn.execute(select(newest.c.job_id).where(newest.c.job_id.is_not(None))
                                  .limit(1)).scalar()
            if job_id is not None:
                found[schedule_id] = int(job_id)
    return found


def schedule_detail(store: Store, namespace: str, name: str) -> ScheduleDetail:
    """The schedule's page; :class:`NotFound` if there is no such schedule."""
    record = schedule_catalog(store).get(namespace, name)
    jobs, _ = schedule_catalog(store).schedule_jobs(namespace, name, limit=RECENT)
    evaluations, _ = schedule_catalog(store).evaluations(namespace, name, limit=RECENT)
    launched = [job.job_id for job in jobs if job.job_id is not None]
    states = {job_id: state.value for job_id, state in store.jobs.states(launched).items()}
    spec = stored_spec(record)
    return ScheduleDetail(
        _row(record), [] if spec is None else [constraint_words(c) for c in spec.constraints],
        "" if spec is None else duration_words(spec.timeout),
        "" if spec is None else spec.catchup, jobs, evaluations, states)

