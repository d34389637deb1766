"""A stage run as one engine job, and the business dates of a system's periods.

The steps of a stage's job are the jobs of the job groups resolved for it, in group
order. Inside a group, a job runs after the jobs its ``depends_on`` names, or after
every job of the next lower ``sequence`` number; a group that uses neither is a chain
in list order (Guzzle's "loop through the jobs"). A group starts once the group before
it has finished (its first jobs depend on the previous group's last ones). The job's
``parallelism`` is the stage's: independent steps run side by side up to it.
"""

from __future__ import annotations

import calendar
import hashlib
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from jobserver.batches.spec import BatchConfig, GroupJob, Period
from jobserver.exceptions import InvalidRequest
from jobserver.spec import JobSpec, parse_model

#: An idempotency key is at most this long (``jobs.idempotency_key``).
MAX_KEY = 200


def group_dependencies(jobs: list[GroupJob]) -> list[list[str]]:
    """Each job's dependencies inside its group (see the module's docstring)."""
    names = [job.step.name for job in jobs]
    if all(job.step.depends_on is None and job.sequence is None for job in jobs):
        return [[]] + [[names[i - 1]] for i in range(1, len(names))]
    levels = sorted({job.sequence for job in jobs if job.sequence is not None})
    found = []
    for job in jobs:
        deps = list(job.step.depends_on or [])
        if job.sequence is not None:
            lower = [s for s in levels if s < job.sequence]
            if lower:
                deps += [other.step.name for other in jobs if other.sequence == lower[-1]]
        found.append(list(dict.fromkeys(deps)))
    return found


def stage_steps(config: BatchConfig, groups: list[str]) -> list[dict[str, Any]]:
    """The stage job's steps (JSON) for the resolved ``groups``, in order."""
    steps: list[dict[str, Any]] = []
    previous: list[str] = []
    for group in groups:
        jobs = config.groups[group]
        deps = group_dependencies(jobs)
        names = {job.step.name for job in jobs}
        depended = {dep for item in deps for dep in item}
        for job, job_deps in zip(jobs, deps):
            step = job.step.model_dump(mode="json")
            step["depends_on"] = job_deps if job_deps else list(previous)
            steps.append(step)
        previous = [name for name in names if name not in depended]
        previous.sort(key=[job.step.name for job in jobs].index)
    return steps


def stage_job(config: BatchConfig, system: str, location: str, context: Mapping[str, str],
              business_date: date, stage: str, batch_id: int) -> JobSpec:
    """The engine job of one stage run; :class:`InvalidRequest` when no job group is
    mapped to the stage or the groups' jobs clash (a job name in two groups)."""
    groups = config.groups_for(system, location, stage, context)
    if not groups:
        raise InvalidRequest(f"stage: no job group is mapped to {system}/{stage} for "
                             f"location {location}",
                             [{"field": "stage", "message": "no job group mapped"}])
    params = {"system": system, "location": location, "business_date":
              business_date.isoformat(), "stage": stage, "batch_id": batch_id, **context}
    name = f"batch {system}/{location} {business_date.isoformat()} {stage}"
    body = {"name": name[:200],
            "steps": stage_steps(config, groups), "params": params,
            "parallelism": config.parallelism(stage)}
    return parse_model(JobSpec, body)


def context_key(context: Mapping[str, str]) -> str:
    """The context as one comparable text: ``k=v,k=v`` sorted by key; '' when empty."""
    return ",".join(f"{key}={context[key]}" for key in sorted(context))


def launch_key(system: str, location: str, context: Mapping[str, str], business_date: date,
               stage: str, run: int) -> str:
    """``batch/<system>/<location>/<context>/<business_date>/<stage>/<run#>``: a retried
    launch of the same run submits one job. A context too long for the key is hashed."""
    ctx = context_key(context) or "-"
    key = f"batch/{system}/{location}/{ctx}/{business_date.isoformat()}/{stage}/{run}"
    if len(key) > MAX_KEY:
        ctx = "sha256:" + hashlib.sha256(ctx.encode()).hexdigest()[:32]
        key = f"batch/{system}/{location}/{ctx}/{business_date.isoformat()}/{stage}/{run}"
    if len(key) > MAX_KEY:  # long names too: the whole key hashed, still one per run
        key = "batch/sha256:" + hashlib.sha256(key.encode()).hexdigest()
    return key


def period_end(day: date, period: Period) -> date:
    """The business date of the period holding ``day`` (monthly: the month's end)."""
    if period is Period.DAILY:
        return day
    return day.replace(day=calendar.monthrange(day.year, day.month)[1])


def next_period(day: date, period: Period) -> date:
    if period is Period.DAILY:
        return day + timedelta(days=1)
    return period_end(period_end(day, period) + timedelta(days=1), period)


def periods(after: date | None, first: date | None, until: date, period: Period,
            limit: int = 1000) -> list[date]:
    """The business dates after ``after`` (or from ``first``, else ``until`` alone when
    nothing was loaded yet) up to ``until``, earliest first; at most ``limit``."""
    try:
        last = period_end(until, period)
        if last > until:  # a month not over yet: its business date is still to come
            last = until.replace(day=1) - timedelta(days=1)
        if after is not None:
            day = next_period(after, period)
        else:
            day = period_end(first, period) if first is not None else last
    except OverflowError:  # the ends of the calendar
        return []
    found: list[date] = []
    while day <= last and len(found) < limit:
        found.append(day)
        try:
            day = next_period(day, period)
        except OverflowError:  # the end of the calendar
            break
    return found
