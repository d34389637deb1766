"""Triggers and constraints in words: what the dashboard and ``trigger_text`` say."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jobserver.schedules.spec import parse_schedule
from jobserver.schedules.timing import FireTimes
from jobserver.schedules.words import (constraint_words, cron_words, duration_words,
                                       field_values, trigger_words)
from jobserver.spec import Policy

UTC = timezone.utc


def spec_of(trigger: dict[str, Any], constraints: list[Any] | None = None) -> Any:
    return parse_schedule({"name": "s", "trigger": trigger, "constraints": constraints or [],
                           "template": {"name": "j", "steps": [{"type": "noop", "name": "a"}]}},
                          Policy(lambda name: False, None))


def words(trigger: dict[str, Any]) -> str:
    return trigger_words(spec_of(trigger).trigger)


@pytest.mark.parametrize("cron, said", [
    ("0 4 * * *", "every day at 04:00"),
    ("30 6 * * 1-5", "every Monday to Friday at 06:30"),
    ("30 6 * * mon-fri", "every Monday to Friday at 06:30"),
    ("0 6 * * 0,6", "every Saturday and Sunday at 06:00"),
    ("0 6 * * 6,7", "every Saturday and Sunday at 06:00"),
    ("0 6 * * 1,3,5", "every Monday, Wednesday and Friday at 06:00"),
    ("0 0,12 * * *", "every day at 00:00 and 12:00"),
    ("0,30 9 * * *", "every day at 09:00 and 09:30"),
    ("*/5 * * * *", "every 5 minutes"),
    ("0,15,30,45 * * * *", "every 15 minutes"),
    ("* * * * *", "every minute"),
    ("15 * * * *", "every hour at minute 15"),
    ("0 */2 * * *", "every 2 hours at minute 0"),
    ("0 8-18 * * 1-5", "every hour from 08:00 to 18:00 on Monday to Friday"),
    ("*/15 8-18 * * 1-5", "every 15 minutes during hours 08 to 18 on Monday to Friday"),
    ("* 9 * * *", "every minute during hour 09"),
    ("0-10 * * * *", "every hour at minutes 0 to 10"),
    ("0 1,5,9,13,17,21,23 * * *", "at minute 0 past hours 01, 05, 09, 13, 17, 21 and 23"),
    ("0 0 1 * *", "on day 1 of the month at 00:00"),
    ("0 0 1-7 * *", "on days 1 to 7 of the month at 00:00"),
    ("0 9 1 1,7 *", "on day 1 of January and July at 09:00"),
    ("0 0 1 */3 *", "on day 1 of January, April, July and October at 00:00"),
    ("0 0 * jan-mar *", "every day in January to March at 00:00"),
    ("*/10 * * 6 *", "every 10 minutes in June"),
    # crontab: both day fields restricted fire on either; a leading * makes it "and"
    ("0 0 13 * 5", "on day 13 of the month or on Friday at 00:00"),
    ("0 0 */2 * 1", "on every 2nd day of the month that falls on Monday at 00:00"),
    ("@daily", "every day at 00:00"), ("@weekly", "every Sunday at 00:00"),
    ("@monthly", "on day 1 of the month at 00:00"), ("@yearly", "on day 1 of January at 00:00"),
    ("@hourly", "every hour at minute 0"),
])
def test_cron_lines_read_as_sentences_naming_their_zone(cron: str, said: str) -> None:
    assert cron_words(cron, "Europe/Berlin") == f"{said} Europe/Berlin"


@pytest.mark.parametrize("cron", ["0 0 L * *", "0 0 * * 5L", "0 0 last * *", "1 2 3"])
def test_a_line_not_read_here_is_shown_as_it_is(cron: str) -> None:
    assert cron_words(cron, "UTC") == f"cron {cron} UTC"


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 6 * * 1,3,5", "0,30 9 * * 6",
                                  "0 0,12 * * 0"])
def test_the_times_a_sentence_lists_are_the_times_that_fire(cron: str) -> None:
    """Over two weeks, every fire time is at one of the listed times of day, on one
    of the named days, and every named day fires."""
    zone = "America/New_York"
    said = words({"type": "time", "cron": cron, "timezone": zone})
    times = set(re.findall(r"\d\d:\d\d", said))
    named = set(re.findall(r"Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday",
                           said)) or {"every day"}
    start = datetime(2026, 6, 1, tzinfo=UTC)
    fired = FireTimes.of(spec_of({"type": "time", "cron": cron, "timezone": zone}).trigger,
                         start).between(start, start + timedelta(days=14), 200)
    local = [moment.astimezone(ZoneInfo(zone)) for moment in fired]
    assert {moment.strftime("%H:%M") for moment in local} == times
    days = {moment.strftime("%A") for moment in local}
    assert days == named or named == {"every day"} and len(days) == 7


@pytest.mark.parametrize("field, text, values", [
    ("minute", "*/20", [0, 20, 40]), ("hour", "1-5/2", [1, 3, 5]), ("hour", "22/1", [22, 23]),
    ("month", "jan,mar-apr", [1, 3, 4]), ("day", "1,15,31", [1, 15, 31]),
])
def test_field_values(field: str, text: str, values: list[int]) -> None:
    assert field_values(text, field) == values


@pytest.mark.parametrize("trigger, said", [
    ({"interval": "15m"}, "every 15 minutes"), ({"interval": 5400}, "every 90 minutes"),
    ({"interval": 60}, "every minute"), ({"interval": "1d"}, "every day"),
    ({"interval": "2h"}, "every 2 hours"), ({"interval": 90}, "every 90 seconds"),
    ({"interval": 604800 * 2}, "every 2 weeks"),
    ({"interval": 86400 + 3600 + 1}, "every 1 day 1 hour 1 second"),
    ({"interval": "1h", "start": "2026-01-01T00:30:00Z"},
     "every hour from 2026-01-01 00:30 UTC"),
    ({"calendar": {"months": 1, "hour": 4}}, "every month at 04:00 UTC"),
    ({"calendar": {"weeks": 2, "hour": 6, "minute": 30, "second": 5}, "timezone": "Asia/Tokyo"},
     "every 2 weeks at 06:30:05 Asia/Tokyo"),
    ({"calendar": {"years": 1, "months": 2}}, "every 1 year and 2 months at 00:00 UTC"),
])
def test_intervals_and_calendar_intervals(trigger: dict[str, Any], said: str) -> None:
    assert words({"type": "time", **trigger}) == said


@pytest.mark.parametrize("trigger, said", [
    ({"type": "job_status", "job": "load-customers"}, "when job load-customers succeeds"),
    ({"type": "job_status", "schedule": "nightly-extract", "states": ["ERROR", "STOPPED"]},
     "when a run of schedule nightly-extract fails or is stopped"),
    ({"type": "job_status", "job": "etl",
      "states": ["SUCCEED", "ERROR", "DISCARDED", "STOPPED"]}, "when job etl ends"),
    ({"type": "partition", "dataset": "raw"}, "when a new partition of dataset raw arrives"),
    ({"type": "partition", "dataset": "raw", "consumer": "cleanse", "count": 10},
     "when 10 new partitions of dataset raw for consumer cleanse have arrived"),
    ({"type": "partition", "dataset": "ns/logs", "count": 3,
      "filter": ["shop = a", "day >= 2026-11-01"]},
     "when 3 new partitions of dataset ns/logs matching shop = a and day >= 2026-11-01 "
     "have arrived"),
])
def test_event_triggers(trigger: dict[str, Any], said: str) -> None:
    assert words(trigger) == said


def test_compositions_nest_in_parentheses() -> None:
    said = words({"type": "and", "parts": [
        {"type": "time", "cron": "0 4 * * *", "timezone": "Europe/Berlin"},
        {"type": "or", "parts": [
            {"type": "job_status", "job": "etl"},
            {"type": "partition", "dataset": "logs", "count": 3},
            {"type": "job_status", "schedule": "ns/w2", "states": ["ERROR"]}]}]})
    assert said == ("every day at 04:00 Europe/Berlin and (when job etl succeeds or when "
                    "3 new partitions of dataset logs have arrived or when a run of "
                    "schedule ns/w2 fails)")


def test_the_readme_example_of_and() -> None:
    assert words({"type": "and", "parts": [
        {"type": "job_status", "schedule": "nightly-extract"},
        {"type": "job_status", "job": "load-customers"}]}) == (
        "when a run of schedule nightly-extract succeeds and when job load-customers succeeds")


def test_constraints_in_words() -> None:
    spec = spec_of({"type": "time", "interval": 60}, [
        {"type": "concurrency", "limit": 1}, {"type": "delay", "duration": "5m"},
        {"type": "time_window", "start": "01:00", "end": "06:00", "timezone": "Europe/Berlin"},
        {"type": "since_last_run", "duration": "45m", "on_unmet": "wait"}])
    assert [constraint_words(item) for item in spec.constraints] == [
        "at most 1 run of the job at a time, else abort",
        "5 minutes after it fires, else wait",
        "between 01:00 and 06:00 Europe/Berlin, else wait",
        "45 minutes after the last successful run started, else wait"]


@pytest.mark.parametrize("seconds, said", [(1, "1 second"), (1.5, "1.5 seconds"),
                                           (120, "2 minutes"), (7260, "2 hours 1 minute"),
                                           (3600 * 130, "5 days 10 hours")])
def test_durations(seconds: float, said: str) -> None:
    assert duration_words(seconds) == said
