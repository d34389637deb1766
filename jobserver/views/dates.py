"""Date parameters: a view partitioned by ``year``, ``month`` (and ``day``) addresses
real calendar dates.

Schedoscope's daily and monthly views name their date parameters ``year``, ``month``
and ``day`` and fill them with zero-padded strings (``ymd(20150503)`` gives ``"2015"``,
``"05"``, ``"03"``). A pattern may also spell the values out (``.../2015/05/03``), and
a parameter's declared type (often ``string``) cannot tell ``32`` from a day. So a
view that declares parameters named ``year`` and ``month`` takes, in every addressed
partition, a 4-digit year, a 2-digit month 01–12 and, with ``day``, a 2-digit day that
exists in that month of that year (``29`` in February of a leap year only).

:func:`date_problem` is the rule; :func:`jobserver.views.lattice.check_address` applies
it to every addressed partition before anything is planned, so that materialize, the
``views`` query, invalidate and the dashboard's forms refuse the same values.
A value given as ``null()`` (None) is not a date to check; partitions reached through
dependency mappings are computed from real dates and are not checked again.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence

#: The parameter names that make a view date-partitioned, in calendar order.
YEAR, MONTH, DAY = "year", "month", "day"

_YEAR = re.compile(r"[0-9]{4}")
_TWO_DIGITS = re.compile(r"[0-9]{2}")
#: Days of each month in a common year.
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def date_parameters(names: Sequence[str]) -> tuple[int, int, int | None] | None:
    """The positions of ``year``, ``month`` and ``day`` (None when absent) among a
    view's parameter ``names``, or None when the view is not date-partitioned (it
    lacks ``year`` or ``month``)."""
    if YEAR not in names or MONTH not in names:
        return None
    return names.index(YEAR), names.index(MONTH), (names.index(DAY) if DAY in names
                                                   else None)


def date_problem(year: str | None, month: str | None, day: str | None = None,
                 with_day: bool = False) -> str | None:
    """Why ``year``/``month``/``day`` are not a real calendar date, or None when they
    are (or a value is ``null()``). ``with_day``: the view has a ``day`` parameter.
    The reason starts with the values (``2015/05/32 is not a date``) and names the
    value that is wrong and what it may be."""
    if year is None or month is None or (with_day and day is None):
        return None
    given = "/".join([year, month] + ([day] if with_day and day is not None else []))
    why = _why(year, month, day if with_day else None)
    return None if why is None else f"{given} is not a date: {why}"


def _why(year: str, month: str, day: str | None) -> str | None:
    if not _YEAR.fullmatch(year) or year == "0000":
        return f"{year!r} is not a year (year: 4 digits, 0001 to 9999)"
    if not _TWO_DIGITS.fullmatch(month) or not 1 <= int(month) <= 12:
        return f"{month!r} is not a month (month: 01 to 12)"
    if day is None:
        return None
    days = days_in_month(int(year), int(month))
    if not _TWO_DIGITS.fullmatch(day) or not 1 <= int(day) <= days:
        return f"{day!r} is not a day of {year}-{month} (day: 01 to {days:02d})"
    return None


def days_in_month(year: int, month: int) -> int:
    """How many days ``month`` (1–12) of ``year`` has: February 29 in leap years
    (every 4th, but not a century unless it divides by 400)."""
    return _DAYS[month - 1] + (1 if month == 2 and calendar.isleap(year) else 0)


def address_date_problem(names: Sequence[str], values: Sequence[str | None]) -> str | None:
    """Why the values of one partition of a view with parameter ``names`` do not form a
    real date, or None (also for a view that is not date-partitioned). ``values`` has
    one value per name (the caller checked the count)."""
    positions = date_parameters(names)
    if positions is None:
        return None
    year, month, day = positions
    return date_problem(values[year], values[month],
                        None if day is None else values[day], with_day=day is not None)
