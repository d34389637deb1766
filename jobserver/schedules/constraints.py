"""Run constraints checked against the facts of one moment: met, wait or abort.

Each check gives a :class:`Verdict` with a reason a user can read and, when it
waits, the instant at which the answer can change; :func:`decide` folds the verdicts
into what the evaluator does with the schedule-job. The facts (:class:`RunFacts`) are
read from the store by the caller; nothing here reads a clock or the store.

Defaults follow CDAP: ``concurrency`` and ``since_last_run`` abort, ``delay`` and
``time_window`` wait (``delay`` can only wait).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo

from jobserver.schedules.spec import (ConcurrencyConstraint, DelayConstraint,
                                      SinceLastRunConstraint, TimeWindowConstraint)
from jobserver.schedules.timing import format_duration

UTC = timezone.utc
#: How soon a concurrency constraint that waits is checked again: runs end without
#: telling the schedule, so the count is read again after this long.
CONCURRENCY_RECHECK = timedelta(seconds=5)

Action = Literal["met", "wait", "abort"]


@dataclass(frozen=True)
class RunFacts:
    """What the constraints are checked against.

    ``active_runs`` counts READY and RUNNING jobs with the template's name, whoever
    launched them; ``last_success_start`` is the start of the newest SUCCEED run of
    the template (failed, stopped and discarded runs do not count).
    """

    now: datetime
    created_at: datetime
    active_runs: int
    last_success_start: datetime | None


@dataclass(frozen=True)
class Verdict:
    """One constraint's answer. ``recheck_at`` is set when it waits: the earliest
    instant at which the answer can change."""

    constraint: str
    met: bool
    action: Action
    reason: str
    recheck_at: datetime | None = None


def _stamp(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _verdict(constraint: Any, met: bool, reason: str, recheck_at: datetime | None,
             until: str | None = None) -> Verdict:
    """The verdict for the constraint's ``on_unmet``; ``until`` says ``recheck_at`` in
    words (an instant in UTC by default)."""
    if met:
        return Verdict(constraint.type, True, "met", f"{reason} -> met")
    if constraint.on_unmet == "abort":
        return Verdict(constraint.type, False, "abort", f"{reason} -> abort")
    if until is None and recheck_at is not None:
        until = _stamp(recheck_at)
    words = f" until {until}" if until else ""
    return Verdict(constraint.type, False, "wait", f"{reason} -> wait{words}", recheck_at)


def check_concurrency(constraint: ConcurrencyConstraint, facts: RunFacts) -> Verdict:
    """Met while fewer than ``limit`` runs of the template are READY or RUNNING."""
    met = facts.active_runs < constraint.limit
    reason = f"concurrency: {facts.active_runs} running, limit {constraint.limit}"
    return _verdict(constraint, met, reason, facts.now + CONCURRENCY_RECHECK)


def check_delay(constraint: DelayConstraint, facts: RunFacts) -> Verdict:
    """Met once ``duration`` has passed since the schedule-job was created."""
    ready = facts.created_at + timedelta(seconds=constraint.duration)
    waited = format_duration(max(0.0, (facts.now - facts.created_at).total_seconds()))
    reason = f"delay {format_duration(constraint.duration)}: created {waited} ago"
    return _verdict(constraint, facts.now >= ready, reason, ready)


def check_since_last_run(constraint: SinceLastRunConstraint, facts: RunFacts) -> Verdict:
    """Met once ``duration`` has passed since the last successful run started."""
    wanted = format_duration(constraint.duration)
    last = facts.last_success_start
    if last is None:
        return _verdict(constraint, True, f"since_last_run {wanted}: no successful run",
                        None)
    ready = last + timedelta(seconds=constraint.duration)
    ago = format_duration(max(0.0, (facts.now - last).total_seconds()))
    reason = f"since_last_run {wanted}: last successful run started {ago} ago"
    return _verdict(constraint, facts.now >= ready, reason, ready)


def _hhmm(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def in_window(local: time, start: time, end: time) -> bool:
    """Start inclusive, end exclusive; a window with end < start crosses midnight."""
    if start < end:
        return start <= local < end
    return local >= start or local < end


def _opening(day: date, start: time, zone: ZoneInfo) -> datetime:
    """The instant the wall clock of ``zone`` first reaches ``start`` on ``day``.

    A wall time that occurs twice opens at its first pass; one skipped by a DST
    change opens when the clocks jump past it.
    """
    wall = datetime.combine(day, start)
    passes = sorted(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    low, high = passes
    if low == high or low.astimezone(zone).replace(tzinfo=None) == wall:
        return low  # an ordinary or a repeated wall time
    # A skipped wall time: low shows a time before it, high one after it.
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0)


def next_opening(now: datetime, start: time, zone: ZoneInfo) -> datetime:
    """The first instant after ``now`` at which a window starting at ``start`` opens."""
    today = now.astimezone(zone).date()
    for offset in range(3):
        opening = _opening(today + timedelta(days=offset), start, zone)
        if opening > now:
            return opening
    raise AssertionError("a window opens at least once in three days")


def check_time_window(constraint: TimeWindowConstraint, facts: RunFacts) -> Verdict:
    """Met from ``start`` (inclusive) to ``end`` (exclusive) in the window's zone."""
    zone = ZoneInfo(constraint.timezone)
    local = facts.now.astimezone(zone)
    start, end = _hhmm(constraint.start), _hhmm(constraint.end)
    met = in_window(local.time().replace(tzinfo=None), start, end)
    where = "inside" if met else "outside"
    reason = (f"time_window {constraint.start}-{constraint.end} {constraint.timezone}: "
              f"{local:%H:%M} is {where}")
    opening = None if met else next_opening(facts.now, start, zone)
    return _verdict(constraint, met, reason, opening, until=constraint.start)


_CHECKS: dict[type, Any] = {
    ConcurrencyConstraint: check_concurrency, DelayConstraint: check_delay,
    TimeWindowConstraint: check_time_window, SinceLastRunConstraint: check_since_last_run}


def check(constraint: Any, facts: RunFacts) -> Verdict:
    """One constraint's verdict."""
    verdict: Verdict = _CHECKS[type(constraint)](constraint, facts)
    return verdict


def check_all(constraints: list[Any], facts: RunFacts) -> list[Verdict]:
    """Every constraint's verdict, in the spec's order."""
    return [check(constraint, facts) for constraint in constraints]


def decide(verdicts: list[Verdict]) -> tuple[Literal["launch", "wait", "abort"],
                                             datetime | None]:
    """Abort if any verdict aborts; else wait until the earliest recheck if any
    waits; else launch."""
    if any(verdict.action == "abort" for verdict in verdicts):
        return "abort", None
    waits = [verdict.recheck_at for verdict in verdicts if verdict.action == "wait"]
    if waits:
        known = [at for at in waits if at is not None]
        return "wait", min(known) if known else None
    return "launch", None
