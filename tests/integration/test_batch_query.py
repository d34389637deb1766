"""The control table's ``to`` filter, on SQLite and PostgreSQL: ``GET
/api/v1/batches?...&to=`` returns the batches up to that business date (inclusive),
newest first, alone or with the other filters; a bad date is a 422 naming ``to``; and
``jobserver batch status --to`` shows the same rows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.cli import main
from jobserver.store import Store
from tests.helpers import live_api
from tests.integration.test_batches_api import AUTH, BASE, TOKEN, client  # noqa: F401
from tests.integration.test_schedules_api import error_of, fields_of, ok

CONFIG = {
    "valid_systems": ["ORDER"], "valid_stages": ["STG", "FND"], "valid_locations": ["IN", "US"],
    "system_stage_mapping": [{"system": "ORDER", "stages": ["STG", "FND"],
                              "start_date": "2024-01-01"}],
    "job_group_mapping": [{"system": "ORDER", "stage": "STG", "job_group": ["LOAD"]},
                          {"system": "ORDER", "stage": "FND", "job_group": ["BUILD"]}],
    "job_groups": [{"name": "LOAD", "jobs": [{"name": "extract", "type": "noop"}]},
                   {"name": "BUILD", "jobs": [{"name": "build", "type": "noop"}]}]}


@pytest.fixture
def table(client: FlaskClient) -> FlaskClient:  # noqa: F811
    """ORDER/IN with batches 2024-01-01..06 (the 1st's STG launched, so RUNNING; the
    others NOT_STARTED) and ORDER/US with 2024-01-01..03."""
    ok(client.put(f"{BASE}/configs/orders", json=CONFIG, headers=AUTH), 201)
    for location, watermark in (("IN", "2024-01-06"), ("US", "2024-01-03")):
        ok(client.post(f"{BASE}/run", json={"system": "ORDER", "location": location,
                                           "stage": "STG", "watermark": watermark},
                       headers=AUTH), 201)
    return client


def listed(client: FlaskClient, **query: Any) -> list[tuple[str, str]]:
    """(location, business_date) of each batch the control table lists, in its order."""
    page = ok(client.get(BASE, query_string=query, headers=AUTH))["batches"]
    return [(batch["location"], batch["business_date"]) for batch in page]


def test_to_keeps_the_batches_up_to_that_date_newest_first(table: FlaskClient) -> None:
    assert len(listed(table)) == 9
    assert listed(table, location="IN", to="2024-01-03") == [
        ("IN", "2024-01-03"), ("IN", "2024-01-02"), ("IN", "2024-01-01")]
    both = listed(table, system="ORDER", to="2024-01-02")
    assert sorted(both) == [("IN", "2024-01-01"), ("IN", "2024-01-02"),
                            ("US", "2024-01-01"), ("US", "2024-01-02")]
    assert [day for _loc, day in both] == ["2024-01-02"] * 2 + ["2024-01-01"] * 2
    assert listed(table, to="2023-12-31") == []
    assert listed(table, location="IN", to="2024-12-31") == [
        ("IN", f"2024-01-0{n}") for n in range(6, 0, -1)]


def test_to_with_from_status_and_limit(table: FlaskClient) -> None:
    assert listed(table, location="IN", **{"from": "2024-01-02", "to": "2024-01-04"}) == [
        ("IN", "2024-01-04"), ("IN", "2024-01-03"), ("IN", "2024-01-02")]
    assert listed(table, location="IN", **{"from": "2024-01-05", "to": "2024-01-05"}) == [
        ("IN", "2024-01-05")]
    # the 1st's STG runs: it is RUNNING, the 2nd and 3rd NOT_STARTED
    assert listed(table, location="IN", to="2024-01-03", status="NOT_STARTED") == [
        ("IN", "2024-01-03"), ("IN", "2024-01-02")]
    assert listed(table, location="IN", to="2024-01-03", status="RUNNING") == [
        ("IN", "2024-01-01")]
    # the limit takes the newest of the dates up to `to`, not the newest of all
    assert listed(table, location="IN", to="2024-01-04", limit=2) == [
        ("IN", "2024-01-04"), ("IN", "2024-01-03")]


@pytest.mark.parametrize("bad", ["2024-02-30", "yesterday"])
def test_a_to_that_is_not_a_date_is_refused_naming_it(table: FlaskClient, bad: str) -> None:
    error = error_of(table.get(BASE, query_string={"to": bad}, headers=AUTH), 422)
    assert fields_of(error) == ["to"]


@pytest.fixture
def cli(store: Store, tmp_path: Path, table: FlaskClient,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    with live_api(store, tmp_path / "live", TOKEN) as url:
        def call(*args: str) -> tuple[int, str, str]:
            code = main([*args, "--url", url, "--token", TOKEN])
            captured = capsys.readouterr()
            return code, captured.out, captured.err
        yield call


def test_batch_status_to_shows_the_same_rows(cli: Any) -> None:
    code, out, err = cli("batch", "status", "--system", "ORDER", "--location", "IN",
                         "--to", "2024-01-02")
    assert (code, err) == (0, "")
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.strip().splitlines()]
    assert rows[0][:4] == ["ID", "SYSTEM", "LOCATION", "BUSINESS DATE"]
    assert [(row[2], row[3], row[5]) for row in rows[1:]] == [
        ("IN", "2024-01-02", "NOT_STARTED"), ("IN", "2024-01-01", "RUNNING")]
    code, out, _ = cli("batch", "status", "--to", "2023-12-31")
    assert (code, out.strip()) == (0, "(no batches)")
    code, _, err = cli("batch", "status", "--to", "2024-13-01")
    assert code == 2 and "'2024-13-01' is not a date" in err
