"""Triggers and run constraints in words, for people: the dashboard, the API's
``trigger_text`` and the evaluator's reasons.

    time, cron "30 2 * * *" in Europe/Berlin   every day at 02:30 Europe/Berlin
    time, cron "*/15 8-18 * * 1-5"              every 15 minutes during hours 08 to 18
                                                on Monday to Friday UTC
    time, interval 5400                         every 90 minutes
    time, calendar {months: 1, hour: 4}         every month at 04:00 UTC
    job_status, job etl, [ERROR, STOPPED]       when job etl fails or is stopped
    partition, dataset raw, count 10            when 10 new partitions of dataset raw
                                                have arrived
    and(A, or(B, C))                            A and (B or C)

A cron line is read field by field into the set of values it allows, so that
"1-5", "mon-fri" and "1,2,3,4,5" read alike; a field this module cannot read (an
extension of APScheduler's such as ``last``) makes the sentence "cron EXPR ZONE",
which is never wrong. A cron sentence always names its zone, since the wall clock
it follows is the zone's; days of the week and day of month both restricted read
"or", as crontab fires on either (:mod:`jobserver.schedules.timing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobserver.schedules.timing import MACROS, parse_days_of_week

_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_MONTH_NAMES = {name[:3].lower(): index + 1 for index, name in enumerate(_MONTHS)}
#: Each numeric field's bounds, as crontab gives them.
_BOUNDS = {"minute": (0, 59), "hour": (0, 23), "day": (1, 31), "month": (1, 12)}
#: Times of day listed one by one at most; more read as minutes past hours.
MAX_LISTED_TIMES = 6
_ENDED = {"SUCCEED": "succeeds", "ERROR": "fails", "DISCARDED": "is discarded",
          "STOPPED": "is stopped"}
_UNITS = (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


class _Unreadable(ValueError):
    """A cron field this module does not put into words."""


# -- small word helpers --------------------------------------------------------------
def join(items: Sequence[str], conjunction: str = "and") -> str:
    """"a", "a and b", "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


def _count(amount: float, unit: str) -> str:
    number = f"{amount:g}"
    return f"{number} {unit}" + ("" if amount == 1 else "s")


def duration_words(seconds: float) -> str:
    """90 → "90 seconds", 5400 → "90 minutes", 7200 → "2 hours", 86400 → "1 day";
    a span no unit divides into at most 120 reads "1 day 2 hours 3 minutes"."""
    for unit, size in _UNITS:
        if seconds % size == 0 and seconds // size <= 120:
            return _count(seconds // size, unit)
    parts, rest = [], seconds
    for unit, size in _UNITS[1:-1]:
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(_count(amount, unit))
    if rest or not parts:
        parts.append(_count(round(rest, 3), "second"))
    return " ".join(parts)


def _every(seconds: float) -> str:
    words = duration_words(seconds)
    single = words.startswith("1 ") and " " not in words[2:]
    return "every " + (words[2:] if single else words)  # "every hour", "every 1 hour 30…"


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive values as (first, last) runs, in the given order."""
    found: list[tuple[int, int]] = []
    for value in values:
        if found and value == found[-1][1] + 1:
            found[-1] = (found[-1][0], value)
        else:
            found.append((value, value))
    return found


def _spans(values: Sequence[int], name: Any = str) -> str:
    """"1 to 5", "1, 3 and 5", "1 to 3 and 7": runs of three or more read as ranges."""
    parts: list[str] = []
    for first, last in _runs(values):
        if last - first >= 2:
            parts.append(f"{name(first)} to {name(last)}")
        else:
            parts += [name(value) for value in range(first, last + 1)]
    return join(parts)


# -- cron fields ---------------------------------------------------------------------
def _number(token: str, field: str) -> int:
    low, high = _BOUNDS[field]
    value = _MONTH_NAMES.get(token.lower()) if field == "month" else None
    if value is None:
        if not token.isdigit():
            raise _Unreadable(token)
        value = int(token)
    if not low <= value <= high:
        raise _Unreadable(token)
    return value


def field_values(text: str, field: str) -> list[int]:
    """The sorted values a numeric cron field allows: ``*``, numbers (month names),
    ranges, lists and steps; :class:`ValueError` for anything else."""
    low, high = _BOUNDS[field]
    found: set[int] = set()
    for token in text.split(","):
        body, slash, step_text = token.partition("/")
        if slash and not (step_text.isdigit() and int(step_text) > 0):
            raise _Unreadable(token)
        step = int(step_text) if slash else 1
        if body == "*":
            first, last = low, high
        elif "-" in body:
            start, _, end = body.partition("-")
            first, last = _number(start, field), _number(end, field)
        else:
            first = _number(body, field)
            last = high if slash else first
        if first > last:
            raise _Unreadable(token)
        found.update(range(first, last + 1, step))
    return sorted(found)


def _step(values: list[int], field: str) -> int | None:
    """n when ``values`` are every n-th value of the field from its lowest (``*/n``);
    1 for all of them; None otherwise."""
    low, high = _BOUNDS[field]
    if len(values) < 2 or values[0] != low:
        return 1 if values == [low] and low == high else None
    step = values[1] - values[0]
    return step if values == list(range(low, high + 1, step)) else None


def _hours_phrase(hours: list[int]) -> str:
    """"every 2nd hour", "hour 08", "hours 08 to 18"."""
    step = _step(hours, "hour")
    if step is not None and step > 1:
        return f"every {_ordinal(step)} hour"
    label = "hour" if len(hours) == 1 else "hours"
    return f"{label} {_spans(hours, lambda hour: f'{hour:02d}')}"


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(
        number % 10, "th")
    return f"{number}{suffix}"


def _times_of_day(minutes: list[int], hours: list[int]) -> str | None:
    """"at 02:30", "at 08:00 and 20:00", when the line fires a few times a day."""
    if len(minutes) * len(hours) > MAX_LISTED_TIMES:
        return None
    return "at " + join([f"{hour:02d}:{minute:02d}" for hour in hours for minute in minutes])


def _clock_phrase(minutes: list[int], hours: list[int]) -> tuple[str, bool]:
    """What the minute and hour fields say, and whether that is a time of day (a
    sentence that needs "every day" when no day field restricts it)."""
    listed = _times_of_day(minutes, hours)
    if listed is not None:
        return listed, True
    minute_step, hour_step = _step(minutes, "minute"), _step(hours, "hour")
    if minute_step is not None:
        said = "every minute" if minute_step == 1 else f"every {minute_step} minutes"
    elif len(minutes) == 1 and hour_step is not None and hour_step > 1:
        return f"every {hour_step} hours at minute {minutes[0]}", False
    elif len(minutes) == 1 and hour_step is None and _is_one_run(hours):
        return (f"every hour from {hours[0]:02d}:{minutes[0]:02d} to "
                f"{hours[-1]:02d}:{minutes[0]:02d}"), False
    else:
        label = "minute" if len(minutes) == 1 else "minutes"
        said = f"at {label} {_spans(minutes)}"
        if hour_step == 1:
            return f"every hour {said}", False
        return f"{said} past {_hours_phrase(hours)}", False
    if hour_step == 1:
        return said, False
    return f"{said} during {_hours_phrase(hours)}", False


def _is_one_run(values: list[int]) -> bool:
    return len(values) > 1 and values == list(range(values[0], values[-1] + 1))


def _weekdays(days: frozenset[int]) -> str:
    """Days of the week from Monday: "Monday to Friday", "Saturday and Sunday"."""
    monday_first = sorted((day + 6) % 7 for day in days)
    return _spans(monday_first, lambda day: _WEEKDAYS[(day + 1) % 7])


def _day_phrase(dom: str, dow: str, months: str | None) -> tuple[str | None, bool]:
    """"on Monday to Friday", "on day 1 of the month" (of ``months``, the month
    field's words, when given: then True for "said"); None for any day. Both
    restricted read "or" (crontab fires on either), unless one is written with a
    leading ``*`` (``*/2``): then a day must match both."""
    days = field_values(dom, "day")
    weekdays = parse_days_of_week(dow)
    on_weekdays = _weekdays(weekdays) if len(weekdays) < 7 else None
    if len(days) == 31:
        return (None if on_weekdays is None else f"on {on_weekdays}"), False
    step = _step(days, "day")
    of = months or "the month"
    if step is not None:
        on_days = f"on every {_ordinal(step)} day of {of}"
    else:
        on_days = f"on {'day' if len(days) == 1 else 'days'} {_spans(days)} of {of}"
    if on_weekdays is None:
        return on_days, months is not None
    if dom.startswith("*") or dow.startswith("*"):
        return f"{on_days} that falls on {on_weekdays}", months is not None
    return f"{on_days} or on {on_weekdays}", months is not None


def _months(month: str) -> str | None:
    """"January and July", "March to June"; None for every month."""
    months = field_values(month, "month")
    if len(months) == 12:
        return None
    return _spans(months, lambda number: _MONTHS[number - 1])


def cron_words(expression: str, zone: str) -> str:
    """A crontab line (or macro) in a zone as a sentence; "cron EXPR ZONE" for a
    line whose fields are not all readable here."""
    fields = MACROS.get(expression.strip().lower(), expression).split()
    try:
        if len(fields) != 5:
            raise _Unreadable(expression)
        minute, hour, dom, month, dow = fields
        clock, time_of_day = _clock_phrase(field_values(minute, "minute"),
                                           field_values(hour, "hour"))
        months = _months(month)
        days, said = _day_phrase(dom, dow, months)
    except ValueError:
        return f"cron {expression.strip()} {zone}"
    in_months = None if said or months is None else f"in {months}"
    if not time_of_day:
        words = [clock, days, in_months]
    elif days is None:
        words = ["every day", in_months, clock]
    else:  # "every Monday to Friday at 06:30", "on day 1 of January at 00:00"
        weekly = len(field_values(dom, "day")) == 31  # the days are days of the week
        words = ["every" + days[2:] if weekly else days, in_months, clock]
    return " ".join(word for word in words if word) + f" {zone}"


# -- triggers ------------------------------------------------------------------------
def _instant(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def _calendar_words(trigger: Any) -> str:
    calendar = trigger.calendar
    periods = [(getattr(calendar, unit), unit[:-1]) for unit in ("years", "months", "weeks",
                                                                  "days")]
    counted = [_count(amount, unit) for amount, unit in periods if amount]
    if len(counted) == 1 and counted[0].startswith("1 "):
        counted = [counted[0][2:]]  # "every month", but "every 1 year and 2 months"
    at = f"{calendar.hour:02d}:{calendar.minute:02d}"
    if calendar.second:
        at += f":{calendar.second:02d}"
    return f"every {join(counted)} at {at} {trigger.timezone}"


def time_words(trigger: Any) -> str:
    """A ``time`` trigger: its cron line, interval or calendar interval in words,
    with its ``start`` when it has one."""
    if trigger.cron is not None:
        words = cron_words(trigger.cron, trigger.timezone)
    elif trigger.interval is not None:
        words = _every(trigger.interval)
    else:
        words = _calendar_words(trigger)
    return words if trigger.start is None else f"{words} from {_instant(trigger.start)}"


def _job_status_words(trigger: Any) -> str:
    what = f"job {trigger.job}" if trigger.job is not None else \
        f"a run of schedule {trigger.schedule}"
    if set(trigger.states) == set(_ENDED):
        return f"when {what} ends"
    return f"when {what} {join([_ENDED[state] for state in trigger.states], 'or')}"


def _partition_words(trigger: Any) -> str:
    if trigger.count == 1:
        head, verb = "a new partition", "arrives"
    else:
        head, verb = f"{trigger.count} new partitions", "have arrived"
    words = [f"when {head} of dataset {trigger.dataset}"]
    if trigger.filter:
        words.append("matching " + join(list(trigger.filter)))
    if trigger.consumer is not None:
        words.append(f"for consumer {trigger.consumer}")
    return " ".join([*words, verb])


def trigger_words(trigger: Any) -> str:
    """A trigger tree as a sentence: leaves in words, the parts of an ``and``/``or``
    joined by the word, nested ones in parentheses."""
    if trigger.type in ("and", "or"):
        parts = [f"({trigger_words(part)})" if part.type in ("and", "or")
                 else trigger_words(part) for part in trigger.parts]
        return f" {trigger.type} ".join(parts)  # between every two: no comma to misread
    if trigger.type == "time":
        return time_words(trigger)
    if trigger.type == "job_status":
        return _job_status_words(trigger)
    return _partition_words(trigger)


# -- run constraints -----------------------------------------------------------------
def constraint_words(constraint: Any) -> str:
    """A run constraint and what happens while it is not met: "at most 1 run at a
    time, else abort"."""
    kind = constraint.type
    if kind == "concurrency":
        runs = "1 run" if constraint.limit == 1 else f"{constraint.limit} runs"
        said = f"at most {runs} of the job at a time"
    elif kind == "delay":
        said = f"{duration_words(constraint.duration)} after it fires"
    elif kind == "time_window":
        said = f"between {constraint.start} and {constraint.end} {constraint.timezone}"
    else:
        said = (f"{duration_words(constraint.duration)} after the last successful run "
                "started")
    return f"{said}, else {constraint.on_unmet}"
