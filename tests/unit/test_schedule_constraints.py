"""Run constraints: CDAP's defaults, wait and abort, and when a waiting one is rechecked."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jobserver.schedules.constraints import (CONCURRENCY_RECHECK, RunFacts, Verdict,
                                             check_all, decide)
from jobserver.schedules.spec import ScheduleSpec

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 5, 4, 12, 3, tzinfo=UTC)  # 14:03 in Berlin


def constraint(**fields: Any) -> Any:
    spec = ScheduleSpec.model_validate_json(json.dumps({
        "name": "s", "template": {"name": "t", "steps": [{"type": "noop", "name": "a"}]},
        "trigger": {"type": "time", "interval": 60}, "constraints": [fields]}))
    return spec.constraints[0]


def facts(now: datetime = NOW, created_ago: float = 0, active: int = 0,
          last_success_ago: float | None = None) -> RunFacts:
    last = None if last_success_ago is None else now - timedelta(seconds=last_success_ago)
    return RunFacts(now=now, created_at=now - timedelta(seconds=created_ago),
                    active_runs=active, last_success_start=last)


def verdict(fields: dict[str, Any], run: RunFacts) -> Verdict:
    [answer] = check_all([constraint(**fields)], run)
    return answer


def test_concurrency_aborts_by_default() -> None:
    answer = verdict({"type": "concurrency", "limit": 1}, facts(active=2))
    assert (answer.met, answer.action) == (False, "abort")
    assert answer.reason == "concurrency: 2 running, limit 1 -> abort"
    assert answer.recheck_at is None


def test_concurrency_met_below_the_limit() -> None:
    answer = verdict({"type": "concurrency", "limit": 3}, facts(active=2))
    assert (answer.met, answer.action, answer.constraint) == (True, "met", "concurrency")


def test_concurrency_waiting_is_rechecked_soon() -> None:
    answer = verdict({"type": "concurrency", "limit": 1, "on_unmet": "wait"}, facts(active=1))
    assert answer.action == "wait"
    assert answer.recheck_at == NOW + CONCURRENCY_RECHECK


def test_delay_waits_by_default_until_created_plus_duration() -> None:
    answer = verdict({"type": "delay", "duration": "5m"}, facts(created_ago=120))
    assert answer.action == "wait"
    assert answer.recheck_at == NOW + timedelta(minutes=3)
    assert answer.reason == "delay 5m: created 2m ago -> wait until 2026-05-04T12:06:00Z"
    assert verdict({"type": "delay", "duration": "5m"}, facts(created_ago=300)).met


def test_since_last_run_aborts_by_default() -> None:
    answer = verdict({"type": "since_last_run", "duration": "1h"}, facts(last_success_ago=600))
    assert answer.action == "abort"
    assert "last successful run started 10m ago" in answer.reason


def test_since_last_run_waits_until_last_plus_duration() -> None:
    answer = verdict({"type": "since_last_run", "duration": "1h", "on_unmet": "wait"},
                     facts(last_success_ago=600))
    assert answer.action == "wait"
    assert answer.recheck_at == NOW + timedelta(minutes=50)


def test_since_last_run_met_without_a_successful_run_or_long_after_one() -> None:
    rule = {"type": "since_last_run", "duration": "1h"}
    assert verdict(rule, facts(last_success_ago=None)).met
    assert verdict(rule, facts(last_success_ago=3600)).met


NIGHT = {"type": "time_window", "start": "22:00", "end": "06:00", "timezone": "Europe/Berlin"}


def berlin(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=BERLIN).astimezone(UTC)  # type: ignore[misc, arg-type]


def test_time_window_waits_by_default_until_it_opens() -> None:
    answer = verdict(NIGHT, facts())
    assert answer.action == "wait"
    assert answer.reason == ("time_window 22:00-06:00 Europe/Berlin: 14:03 is outside "
                             "-> wait until 22:00")
    assert answer.recheck_at == berlin(2026, 5, 4, 22)


@pytest.mark.parametrize("local, inside", [
    ((2026, 5, 4, 22, 0), True), ((2026, 5, 4, 23, 59), True), ((2026, 5, 5, 0, 0), True),
    ((2026, 5, 5, 5, 59, 59), True), ((2026, 5, 5, 6, 0), False), ((2026, 5, 4, 21, 59, 59), False),
    ((2026, 5, 4, 12, 0), False)])
def test_time_window_crossing_midnight(local: tuple[int, ...], inside: bool) -> None:
    answer = verdict(NIGHT, facts(now=berlin(*local)))
    assert answer.met is inside
    if not inside:
        opening = answer.recheck_at
        assert opening is not None and opening > berlin(*local)
        assert opening.astimezone(BERLIN).strftime("%H:%M") == "22:00"
        assert opening - berlin(*local) <= timedelta(hours=24)


def test_time_window_within_a_day_and_abort() -> None:
    day = {"type": "time_window", "start": "09:00", "end": "17:00", "on_unmet": "abort"}
    assert verdict(day, facts(now=datetime(2026, 5, 4, 9, tzinfo=UTC))).met
    answer = verdict(day, facts(now=datetime(2026, 5, 4, 17, tzinfo=UTC)))
    assert (answer.action, answer.recheck_at) == ("abort", None)
    # After the end of today's window, the next opening is tomorrow's.
    waiting = verdict({**day, "on_unmet": "wait"}, facts(now=datetime(2026, 5, 4, 18, tzinfo=UTC)))
    assert waiting.recheck_at == datetime(2026, 5, 5, 9, tzinfo=UTC)


def test_time_window_opening_in_a_skipped_hour() -> None:
    # 02:30 does not exist in Berlin on 2026-03-29: the window opens when the clocks
    # jump from 02:00 CET to 03:00 CEST.
    rule = {**NIGHT, "start": "02:30"}
    answer = verdict(rule, facts(now=berlin(2026, 3, 29, 1, 0)))
    assert answer.recheck_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert verdict(rule, facts(now=datetime(2026, 3, 29, 1, 0, tzinfo=UTC))).met


def test_time_window_opening_in_a_repeated_hour() -> None:
    # 02:30 happens twice on 2026-10-25; the window opens at the first.
    rule = {**NIGHT, "start": "02:30"}
    answer = verdict(rule, facts(now=berlin(2026, 10, 25, 1, 0)))
    assert answer.recheck_at == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


def test_decide() -> None:
    later, sooner = NOW + timedelta(minutes=5), NOW + timedelta(seconds=5)
    met = Verdict("concurrency", True, "met", "ok")
    waits = [Verdict("delay", False, "wait", "w", later),
             Verdict("concurrency", False, "wait", "w", sooner)]
    abort = Verdict("since_last_run", False, "abort", "a")
    assert decide([]) == ("launch", None)
    assert decide([met]) == ("launch", None)
    assert decide([met, *waits]) == ("wait", sooner)
    assert decide([*waits, abort]) == ("abort", None)


def test_check_all_keeps_the_order_and_decides_together() -> None:
    rules = [constraint(type="delay", duration=60), constraint(type="concurrency", limit=1)]
    verdicts = check_all(rules, facts(created_ago=10, active=1))
    assert [v.constraint for v in verdicts] == ["delay", "concurrency"]
    assert decide(verdicts) == ("abort", None)
