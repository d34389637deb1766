"""Fire times of ``time`` triggers, computed with APScheduler 3's trigger classes.

Only the classes are used (``CronTrigger``, ``IntervalTrigger``,
``CalendarIntervalTrigger``, ``OrTrigger`` and their ``get_next_fire_time``), never
APScheduler's schedulers or job stores. Every time handed out is aware and in UTC.

Where crontab and APScheduler disagree, crontab wins:

- Day of week: cron's 0 and 7 are Sunday; APScheduler 3 reads 0 as Monday. The field
  is parsed here (numbers, names, ranges, lists, steps) and given to APScheduler as
  day names.
- Day of month and day of week both restricted (neither starts with ``*``): a day
  matching either fires, as in Vixie cron. APScheduler requires both, so the two are
  computed as two triggers and the earlier time wins.

Daylight saving time, for a cron expression in a zone that has it:

- Skipped hour (clocks go forward): a time of day that does not exist that day fires
  once, at the instant the wall clock would have shown it under the old offset: "30 2
  * * *" in Europe/Berlin fires on 2026-03-29 at 03:30 CEST (01:30 UTC). An hourly
  expression has one fire time fewer that night, because the hour has gone.
- Repeated hour (clocks go back): if the hour field is ``*`` (every hour), both
  passes of the repeated hour fire, as each is an hour of real time. Otherwise a wall
  time that occurs twice fires only in its first pass: "30 2 * * *" fires once on
  2026-10-25, at 02:30 CEST (00:30 UTC).

A calendar interval (every n days/weeks/months/years at a time of day) keeps
APScheduler's rule: a day on which the time of day does not exist is skipped, and a
time of day that occurs twice fires in its first pass. Intervals are spans of real
time and ignore the wall clock.

Every time computed must be strictly later than the one before. APScheduler can
return an earlier one near a repeated hour; the computation then moves on (past the
repeated hour, or by growing steps) a bounded number of times and raises
:class:`TriggerError` if it still does not advance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

from apscheduler.triggers.calendarinterval import CalendarIntervalTrigger
from apscheduler.triggers.combining import OrTrigger as AnyOf
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from jobserver.exceptions import TriggerError

if TYPE_CHECKING:
    from jobserver.schedules.spec import TimeTrigger

UTC = timezone.utc
_TICK = timedelta(microseconds=1)
#: How many times a computation that does not advance is pushed forward.
MAX_RETRIES = 32
#: How many fire times in the second pass of a repeated hour may be passed over.
MAX_SKIPS = 1000
#: How many calendar periods may lie between the anchor and a queried time.
MAX_PERIODS = 200_000

_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


class _Next(Protocol):
    def get_next_fire_time(self, previous_fire_time: Any, now: datetime) -> Any: ...


@dataclass(frozen=True)
class Cron:
    """A parsed crontab line: the APScheduler trigger that computes it and whether
    its hour field is ``*`` (which decides the repeated-hour rule)."""

    trigger: _Next
    every_hour: bool
    days_of_week: frozenset[int]


def _weekday(token: str) -> int:
    if token.isdigit() and 0 <= int(token) <= 7:
        return int(token)
    if token.lower() in _DAYS:
        return _DAYS.index(token.lower())
    raise ValueError(f"{token!r} is not a day of the week (0-7 or sun-sat)")


def parse_days_of_week(field: str) -> frozenset[int]:
    """Crontab's day-of-week field as a set of days, 0 = Sunday … 6 = Saturday; 7 is
    Sunday too. Accepts ``*``, numbers, names, ranges, lists and steps (``*/2``,
    ``1-5/2``, ``1/2`` = from 1 to 7 by 2)."""
    days: set[int] = set()
    for token in field.split(","):
        body, slash, step_text = token.partition("/")
        if slash and not (step_text.isdigit() and int(step_text) > 0):
            raise ValueError(f"{token!r}: the step must be a positive number")
        step = int(step_text) if slash else 1
        if body == "*":
            low, high = 0, 7
        elif "-" in body:
            first, _, last = body.partition("-")
            low, high = _weekday(first), _weekday(last)
            high = 7 if high == 0 and low > 0 else high  # "fri-sun"
            if low > high:
                raise ValueError(f"{token!r}: the range runs backwards")
        else:
            low = _weekday(body)
            high = 7 if slash else low
        days.update(day % 7 for day in range(low, high + 1, step))
    return frozenset(days)


def parse_cron(expression: str, zone: str) -> Cron:
    """A 5-field crontab line (or a macro such as ``@daily``) in an IANA zone; raises
    ValueError naming the field that is wrong."""
    fields = MACROS.get(expression.strip().lower(), expression).split()
    if len(fields) != 5:
        raise ValueError(f"{len(fields)} fields; a cron expression has 5: "
                         + " ".join(_FIELDS))
    minute, hour, dom, month, dow = fields
    try:
        days = parse_days_of_week(dow)
    except ValueError as exc:
        raise ValueError(f"day-of-week: {exc}") from None
    names = "*" if len(days) == 7 else ",".join(_DAYS[day] for day in sorted(days))
    tz = ZoneInfo(zone)
    try:
        if dom.startswith("*") or dow.startswith("*"):
            trigger: _Next = CronTrigger(minute=minute, hour=hour, day=dom, month=month,
                                         day_of_week=names, timezone=tz)
        else:
            trigger = AnyOf([CronTrigger(minute=minute, hour=hour, day=dom, month=month,
                                         timezone=tz),
                             CronTrigger(minute=minute, hour=hour, month=month,
                                         day_of_week=names, timezone=tz)])
    except ValueError as exc:
        raise ValueError(f"{exc}") from None
    return Cron(trigger, hour in ("*", "*/1"), days)


def _second_pass(instant: datetime, zone: ZoneInfo) -> bool:
    """Whether the wall time at this instant is the second pass of a repeated hour."""
    local = instant.astimezone(zone)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _end_of_second_pass(instant: datetime, zone: ZoneInfo) -> datetime:
    """The first instant after ``instant`` that is not in a repeated hour's second pass."""
    low, high = instant, instant + timedelta(hours=1)
    while _second_pass(high, zone):
        high += timedelta(hours=1)
    while high - low > _TICK:  # low is in the second pass, high is not
        middle = low + (high - low) / 2
        low, high = (middle, high) if _second_pass(middle, zone) else (low, middle)
    return high


#: How many answers of ``next_after`` a :class:`FireTimes` remembers.
KNOWN_ANSWERS = 8


class FireTimes:
    """The fire times of one ``time`` trigger. Build with :meth:`of`."""

    def __init__(self, trigger: _Next, zone: ZoneInfo, kind: str, skip_repeats: bool) -> None:
        self._trigger = trigger
        self._zone = zone
        self._kind = kind
        self._skip_repeats = skip_repeats
        self._cursor: datetime | None = None  # a calendar fire time already reached
        # next_after's last answers: a firing asks for the same few (the fire time
        # after the cursor, then the one after that, once to fire and once to know
        # when to look again), and each asks APScheduler's field-by-field search.
        self._known: dict[datetime, datetime | None] = {}

    @classmethod
    def of(cls, trigger: TimeTrigger, anchor: datetime) -> FireTimes:
        """Fire times of ``trigger``; ``anchor`` is where an interval or calendar
        interval counts from when the trigger has no ``start`` of its own."""
        zone = ZoneInfo(trigger.timezone)
        start = (trigger.start or anchor).astimezone(UTC)
        if trigger.cron is not None:
            cron = parse_cron(trigger.cron, trigger.timezone)
            if trigger.start is not None:
                cron = Cron(_NotBefore(cron.trigger, start), cron.every_hour,
                            cron.days_of_week)
            return cls(cron.trigger, zone, "cron",
                       skip_repeats=not cron.every_hour)
        if trigger.interval is not None:
            return cls(IntervalTrigger(seconds=trigger.interval, start_date=start,
                                       timezone=UTC), zone, "interval", False)
        assert trigger.calendar is not None  # the spec requires exactly one
        calendar = CalendarIntervalTrigger(**trigger.calendar.model_dump(),
                                           start_date=start.astimezone(zone).date(),
                                           timezone=zone)
        return cls(calendar, zone, "calendar", False)

    def next_after(self, previous: datetime) -> datetime | None:
        """The first fire time strictly later than ``previous`` (aware, UTC), or None
        if there is none."""
        floor = previous.astimezone(UTC)
        if floor in self._known:
            return self._known[floor]
        found = self._search(floor)
        if len(self._known) >= KNOWN_ANSWERS:
            self._known.clear()
        self._known[floor] = found
        return found

    def _search(self, floor: datetime) -> datetime | None:
        probe, retries, skips = floor, 0, 0
        while True:
            found = self._candidate(probe)
            if found is None:
                return None
            if found <= probe:
                retries += 1
                if retries > MAX_RETRIES:
                    raise TriggerError(f"fire times do not advance past {probe.isoformat()}",
                                       {"previous": floor.isoformat()})
                probe = self._unstick(probe, retries)
            elif self._skip_repeats and _second_pass(found, self._zone):
                skips += 1
                if skips > MAX_SKIPS:
                    raise TriggerError("too many fire times in a repeated hour")
                probe = found
            else:
                return found

    def between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Fire times t with ``after < t <= until``, oldest first, at most ``limit``."""
        times: list[datetime] = []
        current: datetime | None = after
        while len(times) < limit and current is not None:
            current = self.next_after(current)
            if current is None or current > until:
                break
            times.append(current)
        return times

    def _unstick(self, probe: datetime, retries: int) -> datetime:
        if _second_pass(probe, self._zone):
            return max(_end_of_second_pass(probe, self._zone) - _TICK, probe + _TICK)
        return probe + timedelta(milliseconds=2 ** (retries - 1))

    def _candidate(self, probe: datetime) -> datetime | None:
        """APScheduler's next fire time at or after ``probe`` + 1 µs, in UTC."""
        if self._kind == "calendar":
            return self._calendar_candidate(probe)
        found = self._trigger.get_next_fire_time(None, probe + _TICK)
        return None if found is None else found.astimezone(UTC)

    def _calendar_candidate(self, probe: datetime) -> datetime | None:
        # CalendarIntervalTrigger only steps from a previous fire time, so walk from
        # the anchor, remembering how far the walk got.
        current = self._cursor
        if current is None or current > probe:
            current = self._trigger.get_next_fire_time(None, probe)
        for _ in range(MAX_PERIODS):
            if current is None or current > probe:
                return None if current is None else current.astimezone(UTC)
            self._cursor = current
            current = self._trigger.get_next_fire_time(current, probe)
        raise TriggerError(f"more than {MAX_PERIODS} calendar periods before "
                           f"{probe.isoformat()}")


@dataclass(frozen=True)
class _NotBefore:
    """A cron trigger that does not fire before ``start``."""

    inner: _Next
    start: datetime

    def get_next_fire_time(self, previous_fire_time: Any, now: datetime) -> Any:
        return self.inner.get_next_fire_time(previous_fire_time, max(now, self.start))


def format_duration(seconds: float) -> str:
    """90 -> "1m30s", 86400 -> "1d"; fractions of a second are kept on the seconds."""
    parts, rest = [], seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(f"{int(amount)}{unit}")
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return "".join(parts)
