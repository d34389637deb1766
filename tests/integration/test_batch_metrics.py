"""The batch lag metrics as a user scraping ``GET /metrics`` sees them, on SQLite and
PostgreSQL: per system and location, ``jobserver_batch_newest_success_date`` (the
newest business date whose batch is SUCCESS, as a Unix time at midnight UTC; absent
before the first) and ``jobserver_batch_lag_periods`` (the batches after it not
SUCCESS yet), as real stage runs succeed, fail and fall behind the watermark."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from jobserver.batches.records import RunStatus, Status
from jobserver.batches.store import BatchFilter
from tests.integration.test_batches import FAIL, day, harness, put, run  # noqa: F401
from tests.integration.test_batches_api import AUTH, client  # noqa: F401
from tests.integration.test_runner import Harness

NEWEST = "jobserver_batch_newest_success_date"
LAG = "jobserver_batch_lag_periods"
# midnight UTC of 2024-01-01 (DAY0 of tests.integration.test_batches), written out
# rather than computed the way the product does
MIDNIGHT_DAY1 = 1704067200.0


def midnight(n: int) -> float:
    """Unix time of day ``n``'s midnight UTC."""
    return MIDNIGHT_DAY1 + (n - 1) * 86400


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """The process's local time zone 14 hours ahead of UTC (a POSIX TZ, no tzdata
    needed): a date turned into a Unix time by local time would be off by a day."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "XXX-14"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def batch_samples(client: FlaskClient) -> dict[tuple[str, str, str], float]:
    """The batch metrics of one scrape: ``{(name, system, location): value}``."""
    response = client.get("/metrics", headers=AUTH)
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            if sample.name in (NEWEST, LAG):
                found[(sample.name, sample.labels["system"], sample.labels["location"])] = \
                    sample.value
    return found


def test_lag_metrics_follow_successes_failures_and_the_watermark(
        harness: Harness, client: FlaskClient, far_from_utc: None) -> None:  # noqa: F811
    put(harness.store)
    assert batch_samples(client) == {}  # no batch yet: no series

    # STG for days 1-3 of 5 (catch_up_limit 3): batches exist, none SUCCESS yet
    assert run(harness, "STG", watermark=day(5)).status is RunStatus.SUCCESS
    assert batch_samples(client) == {(LAG, "ORDER", "IN"): 5}

    # FND+SNAPSHOT for days 1-3: those batches are SUCCESS
    assert run(harness, "FND").status is RunStatus.SUCCESS
    assert batch_samples(client) == {(NEWEST, "ORDER", "IN"): midnight(3),
                                     (LAG, "ORDER", "IN"): 2}

    # another location is a series of its own
    assert run(harness, location="US", watermark=day(2)).status is RunStatus.SUCCESS
    assert batch_samples(client) == {(NEWEST, "ORDER", "IN"): midnight(3),
                                     (LAG, "ORDER", "IN"): 2,
                                     (NEWEST, "ORDER", "US"): midnight(2),
                                     (LAG, "ORDER", "US"): 0}

    # days 4-5 through STG, then FND fails on day 4: nothing newer is SUCCESS
    assert run(harness, "STG", watermark=day(5)).status is RunStatus.SUCCESS
    FAIL.add(("FND", "fnd5"))
    assert run(harness, "FND").status is RunStatus.FAILED
    [failed] = harness.store.batches.list(BatchFilter(system="ORDER", status=Status.FAILED))
    assert failed.business_date.isoformat() == day(4)
    assert batch_samples(client) == {(NEWEST, "ORDER", "IN"): midnight(3),
                                     (LAG, "ORDER", "IN"): 2,
                                     (NEWEST, "ORDER", "US"): midnight(2),
                                     (LAG, "ORDER", "US"): 0}

    # the rerun of day 4's FND succeeds and day 5 follows: IN is up to date
    FAIL.clear()
    assert run(harness, "FND").status is RunStatus.SUCCESS
    samples = batch_samples(client)
    assert (samples[(NEWEST, "ORDER", "IN")], samples[(LAG, "ORDER", "IN")]) == (midnight(5), 0)

    # the source moves on three days: IN falls three periods behind, US is unchanged
    assert run(harness, "STG", watermark=day(8)).status is RunStatus.SUCCESS
    assert batch_samples(client) == {(NEWEST, "ORDER", "IN"): midnight(5),
                                     (LAG, "ORDER", "IN"): 3,
                                     (NEWEST, "ORDER", "US"): midnight(2),
                                     (LAG, "ORDER", "US"): 0}
