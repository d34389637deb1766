"""What the schedules pages show, read through the schedule catalog.

A row is a schedule with its trigger in words (:mod:`jobserver.schedules.words`),
its next fire time (as the API computes it) and its pending schedule-job. The detail
adds the run constraints in words, the newest schedule-jobs with the state of the
engine jobs they launched, and the newest evaluations with their reasons.

Every read is bounded: a page of schedules by their (namespace, name) index, the
pending schedule-jobs of that page, and per schedule the newest ``RECENT``
schedule-jobs and evaluations by their (schedule_id, id) indexes; job states by
primary key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobserver.schedules.records import EvaluationRecord, ScheduleJobRecord, ScheduleRecord
from jobserver.schedules.serialize import next_fire_time, stored_spec
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
    records, following = store.schedules.list(namespace, None, limit, after)
    return [_row(record) for record in records], following


def schedule_detail(store: Store, namespace: str, name: str) -> ScheduleDetail:
    """The schedule's page; :class:`NotFound` if there is no such schedule."""
    record = store.schedules.get(namespace, name)
    jobs, _ = store.schedules.schedule_jobs(namespace, name, limit=RECENT)
    evaluations, _ = store.schedules.evaluations(namespace, name, limit=RECENT)
    launched = [job.job_id for job in jobs if job.job_id is not None]
    states = {job_id: state.value for job_id, state in store.jobs.states(launched).items()}
    spec = stored_spec(record)
    return ScheduleDetail(
        _row(record), [] if spec is None else [constraint_words(c) for c in spec.constraints],
        "" if spec is None else duration_words(spec.timeout),
        "" if spec is None else spec.catchup, jobs, evaluations, states)

