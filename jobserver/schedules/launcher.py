"""Launches: schedule-jobs in PENDING_LAUNCH made into engine jobs.

A launch runs in the evaluator's fenced transaction, the one that decided it: the jobs
(one bulk idempotent submit under each schedule-job's launch key), the schedule-jobs
saved LAUNCHED with their job ids and one evaluation record per launch (why it fired,
and the job) commit together, and only while the evaluator's lease holds. Schedule-jobs
found in PENDING_LAUNCH in the store (an older node's) are launched the same way, then
moved to LAUNCHED. A firing decided ahead of its fire time (``schedules.lead_time``)
makes a job with ``not_before`` at that time: it is in the store, READY, when its time
comes, and no scheduler claims it before.

A job is built from its schedule's template once per schedule generation (validated as
the API validates a submit); a firing that adds trigger properties is validated again
with them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from jobserver.api.limits import SubmitLimiter
from jobserver.exceptions import InvalidRequest
from jobserver.schedules.firing import Outcome
from jobserver.schedules.records import ABORTED, LAUNCHED, PENDING_LAUNCH
from jobserver.schedules.store import Draft, Due, EvaluatorStore, Evaluation, Launch
from jobserver.spec import JobSpec, Policy, validate_job
from jobserver.store.jobs import JobRepository, KeyedSubmit, discard_waiting
from jobserver.store.records import Actor

#: A schedule generation's job: the spec, its steps' dependencies and its digest, or
#: why the node refuses the template.
Built = tuple[JobSpec, list[list[str]], str] | str
#: The outcomes of the evaluation records that decide a launch; the launch record
#: takes the place of the schedule-job's last one.
DECIDING = ("fired", "pending_launch")
#: How many schedule generations' jobs are kept built.
BUILT_CACHE = 50_000


#: Whether the budget named by a schedule's owner key (jobserver.schedules.store.owner_key)
#: has one more launch in it now; it takes the launch when it has.
Budget = Callable[[str], bool]
#: Why a launch waits for its owner's budget.
OVER_BUDGET = ("its owner submits faster than api.submit_rate: launched once the "
               "owner's budget allows")


class Launcher:
    def __init__(self, store: EvaluatorStore, jobs: JobRepository, policy: Policy,
                 metrics: Any, clock: Callable[[], datetime],
                 budget: Budget | None = None) -> None:
        self._store = store
        self._budget = budget
        #: How many launches the last call left in PENDING_LAUNCH for their owner's
        #: budget: the evaluator comes back for them soon, not at the next due time.
        self.deferred = 0
        self._jobs = jobs
        self._policy = policy
        self._metrics = metrics
        self._clock = clock
        self._built: dict[tuple[int, int], Built] = {}

    def launch_decided(self, conn: Connection, outcome: Outcome,
                       dues: dict[int, Due]) -> set[datetime]:
        """Launch the schedule-jobs that ``outcome`` moved to PENDING_LAUNCH, before
        it is saved: each is then saved LAUNCHED with its job (ABORTED if the node
        refuses its template), and the evaluation that decided it becomes its launch
        record. Returns the fire times the jobs launched ahead wait for."""
        drafts = self._not_launched_before(conn, outcome, [
            draft for draft in outcome.drafts
            if draft.state == PENDING_LAUNCH and draft.launch_key is not None])
        drafts = self._affordable(drafts, dues, outcome)
        if not drafts:
            return set()
        now = self._clock()
        prepared = [self._prepare(_launch_of(draft, dues[draft.schedule_id]), now)
                    for draft in drafts]
        job_ids = self._jobs.submit_keyed(
            [item for item in prepared if isinstance(item, KeyedSubmit)], conn)
        done = self._clock()
        deciding = {id(row.draft): index for index, row in enumerate(outcome.evaluations)
                    if row.draft is not None and row.outcome in DECIDING}
        for draft, item in zip(drafts, prepared):
            if isinstance(item, str):
                draft.state, draft.reason, draft.next_check_at = ABORTED, item, None
                outcome.aborted["template"] = outcome.aborted.get("template", 0) + 1
                outcome.evaluations.append(Evaluation(draft.schedule_id, "aborted", item,
                                                      draft, draft.fire_time))
            else:
                draft.state, draft.job_id = LAUNCHED, job_ids[item.key]
                self._record_launch(draft, done, outcome, deciding.get(id(draft)))
        return {draft.fire_time for draft in drafts
                if draft.fire_time is not None and draft.fire_time > now}

    def _affordable(self, drafts: list[Draft], dues: dict[int, Due],
                    outcome: Outcome) -> list[Draft]:
        """``drafts`` whose owner's budget has a launch for each (taken now); the
        others stay in PENDING_LAUNCH, saved as such, and are launched by a later
        round (:meth:`launch`), each fire time once, as a launch left by a node that
        died after deciding is."""
        self.deferred = 0
        if self._budget is None:
            return drafts
        kept = []
        for draft in drafts:
            if self._budget(dues[draft.schedule_id].owner_key):
                kept.append(draft)
                continue
            self.deferred += 1
            draft.reason = OVER_BUDGET
            outcome.evaluations.append(Evaluation(draft.schedule_id, "pending_launch",
                                                  OVER_BUDGET, draft, draft.fire_time))
        return kept

    def _not_launched_before(self, conn: Connection, outcome: Outcome,
                             drafts: list[Draft]) -> list[Draft]:
        """``drafts`` but those whose launch key a schedule-job holds already, each
        dropped from ``outcome`` and recorded as a skipped fire time: a fire time
        launched ahead, its schedule disabled and enabled again before that time, and
        the job not discarded because the store's clock had passed the fire time
        while the API's had not."""
        taken = self._store.launch_keys_taken(conn, [draft.launch_key or "" for draft in drafts])
        if not taken:
            return drafts
        for draft in [draft for draft in drafts if draft.launch_key in taken]:
            outcome.drafts.remove(draft)
            outcome.evaluations = [row for row in outcome.evaluations if row.draft is not draft]
            outcome.skipped["launched_before"] = outcome.skipped.get("launched_before", 0) + 1
            outcome.evaluations.append(Evaluation(
                draft.schedule_id, "skipped", f"already launched by schedule-job "
                f"{taken[draft.launch_key or '']}", fire_time=draft.fire_time,
                details={"reason": "launched_before"}))
        return [draft for draft in drafts if draft.launch_key not in taken]

    def _record_launch(self, draft: Draft, done: datetime, outcome: Outcome,
                       index: int | None) -> None:
        """The launch record of ``draft``: the evaluation at ``index`` (the one that
        decided the launch) with the job added, or a new one."""
        assert draft.job_id is not None
        lag = (done - (draft.fire_time or draft.created_at)).total_seconds()
        self._observe(lag)
        record = (Evaluation(draft.schedule_id, "launched", "", draft, draft.fire_time)
                  if index is None else outcome.evaluations[index])
        text = _launched(draft.job_id, lag, draft.fire_time is not None)
        record = replace(record, outcome="launched",
                         reason=f"{record.reason}; {text}" if record.reason else text,
                         details={**record.details, "job_id": draft.job_id,
                                  "lag_seconds": lag})
        if index is None:
            outcome.evaluations.append(record)
        else:
            outcome.evaluations[index] = record

    def launch(self, conn: Connection, launches: list[Launch]) -> set[datetime]:
        """Submit the jobs of ``launches`` (schedule-jobs in PENDING_LAUNCH in the
        store) and record the outcome in ``conn`` (the caller's fenced
        transaction); returns the fire times the jobs launched ahead wait for. Launches
        whose owner's budget is spent stay in PENDING_LAUNCH (:attr:`deferred`)."""
        self.deferred = 0
        if self._budget is not None:
            affordable = [launch for launch in launches if self._budget(launch.owner_key)]
            self.deferred = len(launches) - len(affordable)
            launches = affordable
        if not launches:
            return set()
        now = self._clock()
        prepared = {launch.id: self._prepare(launch, now) for launch in launches}
        keyed = [item for item in prepared.values() if isinstance(item, KeyedSubmit)]
        job_ids = self._jobs.submit_keyed(keyed, conn)
        self._settle(conn, launches, prepared, job_ids, self._clock())
        return {launch.fire_time for launch in launches
                if launch.fire_time is not None and launch.fire_time > now}

    def _prepare(self, launch: Launch, now: datetime) -> KeyedSubmit | str:
        """The job ``launch`` submits, or why the node refuses its template. A launch
        ahead of its fire time makes a job that may not start before it."""
        built = self._generation(launch)
        if isinstance(built, str):
            return built
        job, dependencies, digest = built
        if launch.properties:
            template = job.model_dump(mode="json")
            template["params"] = {**template["params"], **launch.properties}
            built = self._validated(template)
            if isinstance(built, str):
                return built
            job, dependencies, digest = built
        if launch.fire_time is not None and launch.fire_time > now:
            start = max(launch.fire_time, job.not_before or launch.fire_time)
            job = job.model_copy(update={"not_before": start})
            digest = hashlib.sha256(f"{digest}/{start.isoformat()}".encode()).hexdigest()
        return KeyedSubmit(job, dependencies, launch.launch_key, digest,
                           Actor(f"schedule {launch.qualified}"))

    def _generation(self, launch: Launch) -> Built:
        """The job of the launch's schedule generation: its template with the
        schedule's properties as params."""
        key = (launch.schedule_id, launch.generation)
        found = self._built.get(key)
        if found is None:
            if len(self._built) >= BUILT_CACHE:
                self._built.clear()
            template = dict(launch.spec["template"])
            template["params"] = {**template.get("params", {}),
                                  **launch.spec.get("properties", {})}
            found = self._built[key] = self._validated(template)
        return found

    def _validated(self, template: dict[str, Any]) -> Built:
        try:
            job = JobSpec.model_validate_json(json.dumps(template))
            dependencies = validate_job(job, self._policy)
        except (InvalidRequest, ValueError) as exc:
            return f"template refused: {getattr(exc, 'message', exc)}"
        digest = hashlib.sha256(json.dumps(job.model_dump(mode="json"),
                                           sort_keys=True).encode()).hexdigest()
        return job, dependencies, digest

    def _settle(self, conn: Connection, launches: list[Launch],
                prepared: dict[int, KeyedSubmit | str], job_ids: dict[str, int],
                now: datetime) -> None:
        rows = self._refused(conn, launches, prepared, now)
        pairs = [(launch, job_ids[launch.launch_key]) for launch in launches
                 if launch.launch_key in job_ids]
        moved = self._store.mark_launched(conn, pairs, now)
        # One aborted meanwhile keeps the job its launch made (it runs, as launched
        # jobs do), unless that job was launched ahead and may not start yet: then
        # the job is discarded and the launch key freed (see discard_waiting).
        discarded = set(discard_waiting(
            conn, [job_id for launch, job_id in pairs if launch.id not in moved],
            "its schedule-job was aborted before its fire time"))
        self._store.free_launch_keys(conn, [launch.id for launch, job_id in pairs
                                            if job_id in discarded])
        for launch, job_id in pairs:
            if launch.id in moved:
                lag = (now - (launch.fire_time or launch.created_at)).total_seconds()
                self._observe(lag)
                rows.append(Evaluation(launch.schedule_id, "launched",
                                       _launched(job_id, lag, launch.fire_time is not None),
                                       fire_time=launch.fire_time,
                                       details={"job_id": job_id, "lag_seconds": lag}))
        self._store.record(conn, rows, now)

    def _observe(self, lag: float) -> None:
        if self._metrics is not None:
            self._metrics.launched.inc()
            self._metrics.lag.observe(max(0.0, lag))

    def _refused(self, conn: Connection, launches: list[Launch],
                 prepared: dict[int, KeyedSubmit | str], now: datetime) -> list[Evaluation]:
        """Abort the launches whose template the node refuses; their records."""
        rows = []
        for launch in launches:
            item = prepared[launch.id]
            if isinstance(item, str) and self._store.abort_launch(conn, launch, item, now):
                rows.append(Evaluation(launch.schedule_id, "aborted", item,
                                       fire_time=launch.fire_time))
        if rows and self._metrics is not None:
            self._metrics.aborted.labels("template").inc(len(rows))
        return rows


def owner_budget(rate: float, burst: int) -> Budget:
    """Each owner's launches limited as its submits are (``api.submit_rate`` and
    ``api.submit_burst``), in a bucket of the evaluating node: one node evaluates at a
    time, so a token's schedules together launch no faster than the token submits."""
    limiter = SubmitLimiter(rate, burst)
    return lambda key: limiter.wait_time(key) <= 0


def _launch_of(draft: Draft, due: Due) -> Launch:
    return Launch(draft.id or 0, draft.schedule_id, draft.generation,
                  draft.launch_key or "", draft.fire_time, draft.created_at,
                  draft.properties, due.spec, due.qualified, due.owner_key)


def _launched(job_id: int, lag: float, timed: bool) -> str:
    if lag < 0:
        return (f"job {job_id} launched {-lag:.3f} s ahead of its fire time; it starts "
                "at its fire time")
    return f"job {job_id} launched {lag:.3f} s after {'its fire time' if timed else 'its trigger'}"
