"""Date parameters: a view with ``year``/``month``/``day`` addresses real dates only,
leap years included."""

from __future__ import annotations

import pytest

from jobserver.exceptions import InvalidRequest
from jobserver.views.dates import address_date_problem, date_problem, days_in_month
from jobserver.views.lattice import instantiate
from jobserver.views.model import ViewAddress
from jobserver.views.spec import parse_view

DAILY = ["shop", "year", "month", "day"]


@pytest.mark.parametrize("year, days", [
    ("2016", 29), ("2015", 28), ("2000", 29), ("1900", 28), ("2100", 28), ("2400", 29),
    ("0004", 29), ("0001", 28)])
def test_february_has_29_days_in_leap_years_only(year: str, days: int) -> None:
    assert days_in_month(int(year), 2) == days
    assert date_problem(year, "02", f"{days:02d}", with_day=True) is None
    assert date_problem(year, "02", f"{days + 1:02d}", with_day=True) == (
        f"{year}/02/{days + 1} is not a date: '{days + 1}' is not a day of {year}-02 "
        f"(day: 01 to {days})")


@pytest.mark.parametrize("values, reason", [
    (("2015", "05", "32"), "'32' is not a day of 2015-05 (day: 01 to 31)"),
    (("2015", "04", "31"), "'31' is not a day of 2015-04 (day: 01 to 30)"),
    (("2015", "05", "00"), "'00' is not a day of 2015-05 (day: 01 to 31)"),
    (("2015", "05", "3"), "'3' is not a day of 2015-05 (day: 01 to 31)"),
    (("2015", "13", "01"), "'13' is not a month (month: 01 to 12)"),
    (("2015", "00", "01"), "'00' is not a month (month: 01 to 12)"),
    (("2015", "5", "01"), "'5' is not a month (month: 01 to 12)"),
    (("15", "05", "01"), "'15' is not a year (year: 4 digits, 0001 to 9999)"),
    (("0000", "05", "01"), "'0000' is not a year (year: 4 digits, 0001 to 9999)"),
    (("x2015", "05", "01"), "'x2015' is not a year (year: 4 digits, 0001 to 9999)"),
])
def test_a_value_that_is_not_part_of_a_date_is_named(values: tuple[str, str, str],
                                                      reason: str) -> None:
    assert date_problem(*values, with_day=True) == f"{'/'.join(values)} is not a date: {reason}"


def test_only_views_naming_year_and_month_are_date_partitioned() -> None:
    assert address_date_problem(DAILY, ("S", "2015", "05", "31")) is None
    assert address_date_problem(["shop", "year", "month"], ("S", "2015", "12")) is None
    assert address_date_problem(["shop", "year", "month"], ("S", "2015", "13")) is not None
    # Order does not matter; a view without both names is not checked.
    assert address_date_problem(["day", "month", "year"], ("30", "02", "2016")) is not None
    assert address_date_problem(["shop", "day"], ("S", "99")) is None
    assert address_date_problem(["year", "n"], ("nope", "1")) is None
    # null() is no date to check.
    assert address_date_problem(DAILY, ("S", None, None, None)) is None


def test_an_addressed_partition_is_refused_before_its_lattice_is_built() -> None:
    spec = parse_view({"name": "a.b/Daily", "transformation": "noop",
                       "parameters": [{"name": n, "type": "string"} for n in DAILY],
                       "structure": {"fields": [{"name": "id", "type": "bigint"}]}})
    views = {spec.name: spec}
    good = ViewAddress("a.b", "Daily", ("S", "2016", "02", "29"))
    assert instantiate(views, [good]).order == [good]
    with pytest.raises(InvalidRequest) as exc:
        instantiate(views, [ViewAddress("a.b", "Daily", ("S", "2015", "02", "29"))])
    assert exc.value.details == [{"field": "pattern", "message": (
        "a.b/Daily/S/2015/02/29: 2015/02/29 is not a date: '29' is not a day of 2015-02 "
        "(day: 01 to 28)")}]
