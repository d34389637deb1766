"""Business dates, on SQLite and PostgreSQL, with real stage jobs: a run given a
business date (the API's ``business_date``, ``--business-date``) processes exactly that
date, and a monthly system creates its month ends up to the watermark and runs them
in order, end to end."""

from __future__ import annotations

from typing import Any

import pytest

from jobserver.batches.planner import RunRequest, plan_run
from jobserver.batches.records import RunStatus
from jobserver.exceptions import InvalidRequest
from jobserver.spec import parse_model
from tests.integration.test_batches import (POLICY, RAN, day, harness,  # noqa: F401
                                            put, run, statuses)
from tests.integration.test_runner import Harness


def ran(stage: str, step: str) -> list[str]:
    """The business dates ``step`` of ``stage`` ran for, in the order it ran."""
    return [d for d, s, name in RAN if s == stage and name == step]


def test_a_business_date_run_processes_exactly_that_date(harness: Harness) -> None:
    put(harness.store)
    assert run(harness, "STG", watermark=day(2)).status is RunStatus.SUCCESS
    RAN.clear()
    done = run(harness, "STG", business_date=day(5), watermark=day(6))
    assert done.status is RunStatus.SUCCESS
    assert [item.business_date.isoformat() for item in done.plan] == [day(5)]
    assert ran("STG", "stg1") == [day(5)] and ran("STG", "stg2") == [day(5)]
    assert {d for d, _s, _step in RAN} == {day(5)}
    table = statuses(harness.store)
    assert table[day(5)] == {"STG": "SUCCESS", "FND": "NOT_STARTED", "SNAPSHOT": "NOT_STARTED"}
    assert day(6) not in table  # the watermark's date was not asked for
    # the dates between the newest and the given one are in the table, not run
    assert table[day(3)] == table[day(4)] == {"STG": "NOT_STARTED", "FND": "NOT_STARTED",
                                              "SNAPSHOT": "NOT_STARTED"}

    # a later stage with a business date: that date's FND+SNAPSHOT only, though days
    # 1 and 2 wait for their FND too
    RAN.clear()
    assert run(harness, "FND", business_date=day(5)).status is RunStatus.SUCCESS
    assert [(d, s) for d, s, step in RAN if step in ("fnd1", "snap1")] == [
        (day(5), "FND"), (day(5), "SNAPSHOT")]
    assert {d for d, _s, _step in RAN} == {day(5)}
    assert statuses(harness.store)[day(1)]["FND"] == "NOT_STARTED"

    # a date whose stages are all SUCCESS has nothing to run
    RAN.clear()
    again = run(harness, "FND", business_date=day(5))
    assert again.status is RunStatus.NOTHING and RAN == []


def test_dates_skipped_by_a_business_date_run_are_caught_up_later(harness: Harness) -> None:
    """Days 3 and 4, before the given day 5, are still loaded by the next catch-up."""
    put(harness.store)
    assert run(harness, "STG", watermark=day(2)).status is RunStatus.SUCCESS
    assert run(harness, "STG", business_date=day(5), watermark=day(6)).status is \
        RunStatus.SUCCESS
    RAN.clear()
    assert run(harness, "STG", watermark=day(6)).status is RunStatus.SUCCESS
    assert ran("STG", "stg1") == [day(3), day(4), day(6)]
    assert sorted(statuses(harness.store)) == [day(n) for n in range(1, 7)]
    assert all(row["STG"] == "SUCCESS" for row in statuses(harness.store).values())


MONTHLY: dict[str, Any] = {"system_stage_mapping": [{
    "system": "ORDER", "stages": ["STG", "FND", "SNAPSHOT"], "frequency": "monthly",
    "start_date": "2024-01-31"}]}


def test_a_monthly_system_runs_its_month_ends_in_order(harness: Harness) -> None:
    put(harness.store, **MONTHLY)
    # mid-April: January to March are over, April is not
    done = run(harness, "STG", watermark="2024-04-15")
    assert done.status is RunStatus.SUCCESS
    assert ran("STG", "stg1") == ["2024-01-31", "2024-02-29", "2024-03-31"]
    assert sorted(statuses(harness.store)) == ["2024-01-31", "2024-02-29", "2024-03-31"]

    RAN.clear()
    assert run(harness, "FND").status is RunStatus.SUCCESS
    assert [(d, s) for d, s, step in RAN if step in ("fnd1", "snap1")] == [
        (d, s) for d in ("2024-01-31", "2024-02-29", "2024-03-31") for s in ("FND", "SNAPSHOT")]

    # the last day of April but one: still nothing new
    RAN.clear()
    nothing = run(harness, "STG", watermark="2024-04-29")
    assert nothing.status is RunStatus.NOTHING
    assert "no new business date" in (nothing.message or "")
    assert RAN == []

    # a whole-system run once April is over: its month end, stage by stage
    assert run(harness, watermark="2024-04-30").status is RunStatus.SUCCESS
    assert [(d, s) for d, s, step in RAN if step in ("stg1", "fnd1", "snap1")] == [
        ("2024-04-30", "STG"), ("2024-04-30", "FND"), ("2024-04-30", "SNAPSHOT")]
    table = statuses(harness.store)
    assert sorted(table) == ["2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30"]
    assert all(set(row.values()) == {"SUCCESS"} for row in table.values())


def test_a_monthly_context_of_a_daily_system_has_month_ends_of_its_own(
        harness: Harness) -> None:
    put(harness.store, context_columns=[{"name": "frequency", "values": ["daily", "monthly"]}])
    monthly = {"frequency": "monthly"}
    assert run(harness, "STG", watermark="2024-03-10", context=monthly).status is \
        RunStatus.SUCCESS
    assert ran("STG", "stg1") == ["2024-01-31", "2024-02-29"]
    RAN.clear()
    assert run(harness, "STG", watermark="2024-01-02", context={"frequency": "daily"}).status \
        is RunStatus.SUCCESS
    assert ran("STG", "stg1") == ["2024-01-01", "2024-01-02"]


def test_a_monthly_business_date_must_be_a_month_end(harness: Harness) -> None:
    """A mid-month batch would make the next catch-up skip that month's end."""
    put(harness.store, **MONTHLY)
    assert run(harness, "STG", watermark="2024-01-31").status is RunStatus.SUCCESS
    with pytest.raises(InvalidRequest) as caught:
        plan_run(harness.store, parse_model(RunRequest, {
            "system": "ORDER", "location": "IN", "stage": "STG",
            "business_date": "2024-02-15", "watermark": "2024-03-31"}), POLICY)
    assert caught.value.details[0]["field"] == "business_date"
    assert "2024-02-15" in caught.value.message
    assert sorted(statuses(harness.store)) == ["2024-01-31"]  # nothing stored
    RAN.clear()
    assert run(harness, "STG", watermark="2024-03-31").status is RunStatus.SUCCESS
    assert ran("STG", "stg1") == ["2024-02-29", "2024-03-31"]
