"""Fire times: crontab's reading of cron fields, DST rules, the runaway guard."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger

from jobserver.exceptions import TriggerError
from jobserver.schedules.spec import TimeTrigger
from jobserver.schedules.timing import FireTimes, parse_days_of_week

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def at(*fields: int, tz: Any = UTC) -> datetime:
    return datetime(*fields, tzinfo=tz).astimezone(UTC)  # type: ignore[misc, arg-type]


def time_trigger(**fields: Any) -> TimeTrigger:
    return TimeTrigger.model_validate_json(json.dumps({"type": "time", **fields}))


def fires(trigger: TimeTrigger, after: datetime, until: datetime,
          limit: int = 500) -> list[datetime]:
    return FireTimes.of(trigger, ANCHOR).between(after, until, limit)


def weekdays(cron: str) -> set[str]:
    """The days of the week a daily-time cron fires on over two weeks of March 2026."""
    times = fires(time_trigger(cron=cron), at(2026, 3, 1), at(2026, 3, 15))
    return {t.strftime("%a") for t in times}


@pytest.mark.parametrize("dow, days", [
    ("0", {"Sun"}), ("7", {"Sun"}), ("sun", {"Sun"}), ("1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
    ("*/2", {"Sun", "Tue", "Thu", "Sat"}), ("1-5/2", {"Mon", "Wed", "Fri"}),
    ("5-7", {"Fri", "Sat", "Sun"}), ("fri-sun", {"Fri", "Sat", "Sun"}), ("MON,wed", {"Mon", "Wed"}),
    ("6,0", {"Sat", "Sun"}), ("1/3", {"Mon", "Thu", "Sun"})])
def test_day_of_week_as_crontab_reads_it(dow: str, days: set[str]) -> None:
    assert weekdays(f"0 12 * * {dow}") == days


@pytest.mark.parametrize("dow", ["8", "fri-mon", "*/0", "x", "1-"])
def test_bad_day_of_week(dow: str) -> None:
    with pytest.raises(ValueError):
        parse_days_of_week(dow)


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # The 13th of each month and every Friday, not only Fridays the 13th.
    times = fires(time_trigger(cron="0 0 13 * 5"), at(2026, 2, 1), at(2026, 3, 31))
    assert {(t.month, t.day) for t in times} == {
        (2, 6), (2, 13), (2, 20), (2, 27), (3, 6), (3, 13), (3, 20), (3, 27)}
    # 2026-02-13 is a Friday: it fires once that day.
    assert len(times) == 8


def test_a_star_field_keeps_the_and_of_both() -> None:
    # The day-of-month field starts with "*": Mondays that are odd days.
    times = fires(time_trigger(cron="0 0 */2 * 1"), at(2026, 3, 1), at(2026, 3, 31))
    assert [t.day for t in times] == [9, 23]


def test_cron_in_its_time_zone() -> None:
    times = fires(time_trigger(cron="0 4 * * *", timezone="Europe/Berlin"),
                  at(2026, 1, 10), at(2026, 1, 12))
    assert times == [at(2026, 1, 10, 3), at(2026, 1, 11, 3)]
    assert all(t.tzinfo is UTC for t in times)


def test_skipped_hour_fires_once_that_day_an_hour_later() -> None:
    daily = time_trigger(cron="30 2 * * *", timezone="Europe/Berlin")
    times = fires(daily, at(2026, 3, 28), at(2026, 3, 31))
    # 02:30 does not exist on 2026-03-29; it fires at 03:30 CEST, once.
    assert times == [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1, 30), at(2026, 3, 30, 0, 30)]
    assert times[1].astimezone(BERLIN).hour == 3


def test_skipped_hour_hourly_cron_has_one_fire_time_fewer() -> None:
    hourly = time_trigger(cron="30 * * * *", timezone="Europe/Berlin")
    day = fires(hourly, at(2026, 3, 29, tz=BERLIN), at(2026, 3, 30, tz=BERLIN))
    assert len(day) == 23
    assert [t.astimezone(BERLIN).hour for t in day[:4]] == [0, 1, 3, 4]


def test_repeated_hour_fires_a_daily_time_once() -> None:
    daily = time_trigger(cron="30 2 * * *", timezone="Europe/Berlin")
    times = fires(daily, at(2026, 10, 24), at(2026, 10, 27))
    assert times == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]


def test_repeated_hour_from_inside_its_second_pass() -> None:
    # APScheduler answers with the first pass (earlier than asked) here.
    daily = FireTimes.of(time_trigger(cron="30 2 * * *", timezone="Europe/Berlin"), ANCHOR)
    assert daily.next_after(at(2026, 10, 25, 1, 35)) == at(2026, 10, 26, 1, 30)
    assert daily.next_after(at(2026, 10, 25, 0, 30)) == at(2026, 10, 26, 1, 30)


def test_repeated_hour_hourly_cron_fires_in_both_passes() -> None:
    hourly = time_trigger(cron="0 * * * *", timezone="Europe/Berlin")
    day = fires(hourly, at(2026, 10, 25, tz=BERLIN) - timedelta(seconds=1),
                at(2026, 10, 25, 23, tz=BERLIN))
    assert len(day) == 25  # 00:00 … 23:00 local, 02:00 twice
    assert day == sorted(set(day))
    assert all(b - a == timedelta(hours=1) for a, b in zip(day, day[1:]))
    assert [t.astimezone(BERLIN).strftime("%H%z") for t in day[2:4]] == ["02+0200", "02+0100"]


def test_fixed_hours_fire_once_in_a_repeated_hour() -> None:
    every_minute_at_two = time_trigger(cron="*/20 2 * * *", timezone="Europe/Berlin")
    times = fires(every_minute_at_two, at(2026, 10, 24, 12), at(2026, 10, 25, 12))
    assert [t.astimezone(BERLIN).strftime("%H:%M%z") for t in times] == [
        "02:00+0200", "02:20+0200", "02:40+0200"]


def test_next_after_is_strictly_later() -> None:
    times = FireTimes.of(time_trigger(cron="*/5 * * * *"), ANCHOR)
    assert times.next_after(at(2026, 1, 1, 0, 5)) == at(2026, 1, 1, 0, 10)
    assert times.next_after(at(2026, 1, 1, 0, 4, 59)) == at(2026, 1, 1, 0, 5)


def test_between_bounds_and_limit() -> None:
    times = FireTimes.of(time_trigger(cron="0 * * * *"), ANCHOR)
    assert times.between(at(2026, 1, 1, 1), at(2026, 1, 1, 3), 10) == [
        at(2026, 1, 1, 2), at(2026, 1, 1, 3)]
    assert times.between(at(2026, 1, 1), at(2026, 1, 2), 3) == [
        at(2026, 1, 1, 1), at(2026, 1, 1, 2), at(2026, 1, 1, 3)]


def test_cron_start_is_a_not_before() -> None:
    later = time_trigger(cron="0 * * * *", start="2026-02-01T00:30:00Z")
    assert FireTimes.of(later, ANCHOR).next_after(ANCHOR) == at(2026, 2, 1, 1)


def test_interval_counts_from_its_anchor() -> None:
    times = FireTimes.of(time_trigger(interval="15m"), at(2026, 1, 1, 0, 0, 10))
    assert times.next_after(at(2026, 1, 1, 0, 5)) == at(2026, 1, 1, 0, 15, 10)
    assert times.next_after(at(2026, 1, 1, 0, 15, 10)) == at(2026, 1, 1, 0, 30, 10)
    assert times.next_after(at(2025, 1, 1)) == at(2026, 1, 1, 0, 0, 10)
    own_start = time_trigger(interval=60, start="2026-01-01T00:00:30Z")
    assert FireTimes.of(own_start, ANCHOR).next_after(at(2026, 1, 1, 1)) == at(2026, 1, 1, 1, 0, 30)


def test_interval_ignores_the_wall_clock() -> None:
    times = fires(time_trigger(interval="1h", timezone="Europe/Berlin"),
                  at(2026, 10, 24, 23, 59), at(2026, 10, 25, 4))
    assert times == [at(2026, 10, 25, hour) for hour in range(0, 5)]


def test_calendar_interval() -> None:
    monthly = FireTimes.of(time_trigger(calendar={"months": 1, "hour": 4},
                                        timezone="Europe/Berlin"), at(2026, 1, 15, 12))
    assert monthly.next_after(at(2026, 1, 15, 12)) == at(2026, 2, 15, 4, tz=BERLIN)
    assert monthly.next_after(at(2026, 6, 20)) == at(2026, 7, 15, 4, tz=BERLIN)
    # Asked again for an earlier time: the walk restarts from the anchor.
    assert monthly.next_after(at(2026, 1, 1)) == at(2026, 1, 15, 4, tz=BERLIN)


def test_calendar_interval_skips_a_day_whose_time_does_not_exist() -> None:
    daily = time_trigger(calendar={"days": 1, "hour": 2, "minute": 30}, timezone="Europe/Berlin")
    times = fires(daily, at(2026, 3, 27), at(2026, 3, 31))
    assert [t.astimezone(BERLIN).day for t in times] == [27, 28, 30]


def test_runaway_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    stuck = at(2026, 1, 1)
    monkeypatch.setattr(CronTrigger, "get_next_fire_time", lambda self, prev, now: stuck)
    times = FireTimes.of(time_trigger(cron="0 * * * *"), ANCHOR)
    with pytest.raises(TriggerError) as caught:
        times.next_after(stuck)
    assert caught.value.code == "trigger_error"


def test_a_time_that_does_not_advance_is_stepped_past(monkeypatch: pytest.MonkeyPatch) -> None:
    real = CronTrigger.get_next_fire_time
    answers = [at(2026, 1, 1)]

    def once_stale(self: CronTrigger, prev: Any, now: datetime) -> Any:
        return answers.pop() if answers else real(self, prev, now)

    monkeypatch.setattr(CronTrigger, "get_next_fire_time", once_stale)
    times = FireTimes.of(time_trigger(cron="0 * * * *"), ANCHOR)
    assert times.next_after(at(2026, 1, 1)) == at(2026, 1, 1, 1)
