"""One schedule's evaluation: fire times due, catch-up, and its schedule-jobs' moves.

Pure but for ``facts`` (:class:`Facts`), which reads what run constraints need from
the store. The lifecycle (CDAP's): a trigger notification goes to the schedule's one
schedule-job in PENDING_TRIGGER or PENDING_CONSTRAINTS, or creates it; once the
trigger is satisfied the constraints are checked: met → PENDING_LAUNCH (its launch
key fixed), unmet in abort mode → ABORTED, unmet in wait mode → checked again at
the earliest time a verdict can change. Notifications that reach a schedule-job
already in PENDING_CONSTRAINTS join it (one job holds every notification) instead of
creating a second one; a fire time that joins one is recorded as skipped (reason
``pending``), since it is never launched on its own. A schedule-job not in PENDING_LAUNCH by its deadline (the
schedule's ``timeout`` after its creation) is ABORTED.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobserver.schedules.constraints import RunFacts, check_all, decide
from jobserver.schedules.spec import OrTrigger, ScheduleSpec, TimeTrigger, leaves
from jobserver.schedules.store import Draft, Due, Evaluation
from jobserver.schedules.timing import FireTimes
from jobserver.schedules.triggers import Notification, deliver, explain, fired_properties, satisfied

#: Fire times enumerated per time trigger and round; more are left for the next round.
MAX_FIRES = 1000
#: Reads ``(active runs, last successful start)`` of a template's job name.
ReadRuns = Callable[[str], tuple[int, datetime | None]]


class Facts:
    """What run constraints read about a template's runs, read once per evaluator
    transaction, with the launches decided in that transaction counted as active
    runs.

    Invariant: the active runs it reports are at least those the store will hold
    when the transaction commits. Launches are submitted at the end of the
    transaction that decides them, so without counting them several fire times due
    in one round (``catchup: all``), or several schedules of one template, would all
    pass a ``concurrency`` limit that only one of them may take."""

    def __init__(self, read: ReadRuns) -> None:
        self._read = read
        self._seen: dict[str, tuple[int, datetime | None]] = {}

    def __call__(self, job_name: str) -> tuple[int, datetime | None]:
        if job_name not in self._seen:
            self._seen[job_name] = self._read(job_name)
        return self._seen[job_name]

    def launching(self, job_name: str) -> None:
        """Count a launch of ``job_name`` decided in this transaction as a run."""
        active, last = self(job_name)
        self._seen[job_name] = (active + 1, last)


@dataclass
class Outcome:
    """What an evaluation of one schedule changes."""

    drafts: list[Draft] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    fired: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    aborted: dict[str, int] = field(default_factory=dict)
    _tracked: set[int] = field(default_factory=set)  # id() of each draft in ``drafts``

    def absorb(self, other: Outcome) -> None:
        """Take ``other``'s changes (one schedule's, evaluated apart) into this one."""
        for draft in other.drafts:
            self.track(draft)
        self.evaluations += other.evaluations
        self.fired += other.fired
        for mine, theirs in ((self.skipped, other.skipped), (self.aborted, other.aborted)):
            for reason, count in theirs.items():
                mine[reason] = mine.get(reason, 0) + count

    def track(self, draft: Draft) -> None:
        """Save ``draft`` with this outcome (once, however often it changes)."""
        if id(draft) not in self._tracked:
            self._tracked.add(id(draft))
            self.drafts.append(draft)

    def skip(self, due: Due, fire_time: datetime, reason: str, why: str,
             draft: Draft | None = None) -> None:
        """Record ``fire_time`` as passed over for ``reason`` (and counted in
        ``fire_times_skipped_total``); ``draft``: the schedule-job it went to."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.evaluations.append(Evaluation(due.id, "skipped", why, draft, fire_time,
                                           details={"reason": reason}))


@dataclass
class TimeCheck:
    """The time triggers of a schedule after a check: what fired, the new cursors,
    and when to look again."""

    notes: list[Notification]
    trigger_state: dict[str, str]
    next_check: datetime | None


def check_time(spec: ScheduleSpec, due: Due, now: datetime, outcome: Outcome,
               fire_times: Callable[[str, TimeTrigger], FireTimes],
               ahead: timedelta = timedelta(0)) -> TimeCheck:
    """Every time trigger's fire times after its cursor up to ``now`` (``now + ahead``
    for a schedule that launches ahead, see :func:`launches_ahead`), thinned by the
    schedule's catch-up policy; each one skipped is recorded in ``outcome``. The
    next check is ``ahead`` before the next fire time."""
    notes: list[Notification] = []
    state = dict(due.trigger_state)
    upcoming: list[datetime] = []
    for path, leaf in leaves(spec.trigger):
        if not isinstance(leaf, TimeTrigger):
            continue
        times = fire_times(path, leaf)
        cursor = _parse(state.get(path)) or due.enabled_at
        found = times.between(cursor, now + ahead, MAX_FIRES)
        more = len(found) == MAX_FIRES  # a backlog: this round only skips
        missed = [fire_time for fire_time in found if fire_time <= now]
        early = [] if more else found[len(missed):]
        for fire_time in _catch_up(spec, due, missed, now, more, outcome) + early:
            notes.append(Notification(part=path, kind="time", at=now, fire_time=fire_time))
        if found:
            state[path] = found[-1].isoformat()
            cursor = found[-1]
        following = now if more else times.next_after(cursor)
        if following is not None:
            upcoming.append(following if more else following - ahead)
    notes.sort(key=lambda note: note.fire_time or now)
    return TimeCheck(notes, state, min(upcoming) if upcoming else None)


def launches_ahead(spec: ScheduleSpec) -> bool:
    """Whether the schedule's firings depend on nothing but the clock: every trigger
    leaf a time trigger, joined by ``or`` only, and no run constraints. Such a
    firing's outcome is known before its fire time, so its job can be launched ahead
    to start at that time (``not_before``); any other firing is decided when it is
    due."""
    def clock_only(trigger: Any) -> bool:
        if isinstance(trigger, OrTrigger):
            return all(clock_only(part) for part in trigger.parts)
        return isinstance(trigger, TimeTrigger)
    return not spec.constraints and clock_only(spec.trigger)


def _catch_up(spec: ScheduleSpec, due: Due, found: list[datetime], now: datetime,
              more: bool, outcome: Outcome) -> list[datetime]:
    """The due fire times that fire; the others are recorded as skipped."""
    if spec.catchup == "latest":
        keep = [] if more or not found else [found[-1]]
        reason, why = "catchup_latest", "missed; catchup latest fires only the latest"
    elif spec.catchup == "all":
        window = timedelta(seconds=spec.catchup_window)
        keep = [t for t in found if now - t <= window]
        reason, why = "catchup_window", "missed by more than catchup_window"
    else:
        grace = timedelta(seconds=spec.misfire_grace)
        keep = [t for t in found if now - t <= grace][-1:]
        reason, why = "catchup_none", "missed by more than misfire_grace; catchup none"
    for fire_time in found:
        if fire_time not in keep:
            outcome.skip(due, fire_time, reason, why)
    return keep


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def notify(spec: ScheduleSpec, due: Due, pending: Draft | None, notes: list[Notification],
           now: datetime, facts: Facts, outcome: Outcome) -> Draft | None:
    """Deliver ``notes`` in order; returns the schedule-job left pending, if any."""
    for note in notes:
        if pending is None:
            pending = Draft(schedule_id=due.id, generation=due.generation,
                            state="PENDING_TRIGGER", created_at=now,
                            deadline_at=now + timedelta(seconds=spec.timeout),
                            fire_time=note.fire_time)
            pending.next_check_at = pending.deadline_at
        outcome.track(pending)
        pending.notifications.append(note.to_json())
        if pending.state != "PENDING_TRIGGER":
            _joined(due, pending, note, outcome)  # it does not start a second job
            continue
        pending.trigger_state = deliver(spec.trigger, pending.trigger_state, note)
        if not satisfied(spec.trigger, pending.trigger_state):
            outcome.evaluations.append(Evaluation(
                due.id, "pending_trigger", f"{_part(note)}; waiting for "
                f"{explain(spec.trigger, pending.trigger_state)}", pending, note.fire_time))
            continue
        pending.state = "PENDING_CONSTRAINTS"
        pending.properties = fired_properties(spec.trigger, pending.trigger_state)
        outcome.fired += 1
        fired = f"{_part(note)}: {explain(spec.trigger, pending.trigger_state)}"
        if constrain(spec, due, pending, now, facts, outcome, fired):
            pending = None
    return pending


def _joined(due: Due, pending: Draft, note: Notification, outcome: Outcome) -> None:
    """A fire time that reached a schedule-job waiting for its constraints is held by
    it (CDAP: one pending schedule-job per schedule) and never launched on its own:
    recorded as skipped, linked to that schedule-job. Job events and partitions it
    holds are in its notifications, and have no fire time to miss."""
    if note.fire_time is None:
        return
    held = (f" of fire time {pending.fire_time:%Y-%m-%d %H:%M:%S}Z"
            if pending.fire_time is not None else "")
    outcome.skip(due, note.fire_time, "pending",
                 f"joined the pending schedule-job{held}, which waits for its "
                 "constraints: one pending schedule-job per schedule, this fire time is "
                 "not launched on its own", pending)


def _part(note: Notification) -> str:
    if note.kind == "time":
        return f"time trigger {note.part or 'root'} fire time {note.fire_time:%Y-%m-%d %H:%M:%S}Z"
    if note.kind == "job_status":
        return f"job {note.job_id} ended {note.state}"
    return f"{note.count} new partition(s)"


def constrain(spec: ScheduleSpec, due: Due, draft: Draft, now: datetime, facts: Facts,
              outcome: Outcome, fired: str | None = None) -> bool:
    """Check a PENDING_CONSTRAINTS schedule-job's constraints and deadline; True once
    it left the pending states (to PENDING_LAUNCH or ABORTED). ``fired``: why its
    trigger fired, in this evaluation (recorded with the verdict when that is a
    launch: one record per firing on the common path, not two)."""
    outcome.track(draft)
    if now >= draft.deadline_at:
        return _abort(due, draft, "timeout", f"timeout: not launched within "
                      f"{spec.timeout:g} s of its creation", outcome)
    if draft.state == "PENDING_TRIGGER":
        draft.next_check_at = draft.deadline_at
        return False
    active, last = facts(spec.template.name) if spec.constraints else (0, None)
    verdicts = check_all(spec.constraints, RunFacts(now, draft.created_at, active, last))
    decision, recheck = decide(verdicts)
    reasons = "; ".join(v.reason for v in verdicts) or "no run constraints"
    details = {"constraints": [{"constraint": v.constraint, "met": v.met,
                                "action": v.action, "reason": v.reason} for v in verdicts]}
    if fired is not None and decision != "launch":
        outcome.evaluations.append(Evaluation(due.id, "fired", fired, draft, draft.fire_time))
    if decision == "abort":
        kind = next(v.constraint for v in verdicts if v.action == "abort")
        return _abort(due, draft, kind, reasons, outcome, details)
    if decision == "wait":
        draft.next_check_at = min(recheck or draft.deadline_at, draft.deadline_at)
        if draft.reason != reasons:  # recorded when the verdict changes, not every poll
            draft.reason = reasons
            outcome.evaluations.append(Evaluation(due.id, "waiting", reasons, draft,
                                                  draft.fire_time, details,
                                                  draft.next_check_at))
        return False
    draft.state, draft.next_check_at, draft.reason = "PENDING_LAUNCH", None, None
    draft.launch_key = launch_key(due, draft)
    if spec.constraints:
        facts.launching(spec.template.name)
    outcome.evaluations.append(Evaluation(
        due.id, "pending_launch" if fired is None else "fired",
        reasons if fired is None else f"{fired}; {reasons}", draft, draft.fire_time, details))
    return True


def _abort(due: Due, draft: Draft, kind: str, reason: str, outcome: Outcome,
           details: dict | None = None) -> bool:
    draft.state, draft.reason, draft.next_check_at = "ABORTED", reason, None
    outcome.aborted[kind] = outcome.aborted.get(kind, 0) + 1
    outcome.evaluations.append(Evaluation(due.id, "aborted", reason, draft, draft.fire_time,
                                          details or {"reason": kind}))
    return True


def launch_key(due: Due, draft: Draft) -> str:
    """The launch's Idempotency-Key: schedule, generation and fire time (a random
    part for event-fired schedule-jobs, fixed here before the launch is tried)."""
    when = (f"{draft.fire_time:%Y%m%dT%H%M%S.%fZ}" if draft.fire_time is not None
            else f"event-{uuid.uuid4().hex}")
    return f"schedule/{due.id}/{due.generation}/{when}"


def schedule_of_key(key: str | None) -> int | None:
    """The schedule id in a launch key (``schedule/<id>/…``), else None."""
    if not key or not key.startswith("schedule/"):
        return None
    part = key.split("/", 2)[1]
    return int(part) if part.isdigit() else None
