"""Datasets and partitions through the HTTP API, on SQLite and PostgreSQL: declare,
change and delete datasets; add partitions one at a time and in batches, all or
nothing; the 409s and 422s that name the key or field and store nothing; queries by
key ranges, sets and metadata, page by page; removal by key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.store import Store
from tests.integration.test_schedules_api import error_of, fields_of, ok

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = "/api/v1/datasets"
RAW = f"{BASE}/default/raw"
PARTS = f"{RAW}/partitions"
KEY = [{"name": "date", "type": "date"}, {"name": "hour", "type": "int"},
       {"name": "shop", "type": "string"}]


@pytest.fixture
def client(store: Store, tmp_path: Path) -> FlaskClient:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN}
    return create_app(load_config(environ=environ), store=store).test_client()


def part(date: str = "2026-11-01", hour: int = 0, shop: str = "berlin",
         **fields: Any) -> dict[str, Any]:
    return {"key": {"date": date, "hour": hour, "shop": shop},
            "location": f"s3://raw/{date}/{hour}/{shop}", **fields}


@pytest.fixture
def raw(client: FlaskClient) -> FlaskClient:
    ok(client.post(BASE, json={"name": "raw", "key": KEY}, headers=AUTH), 201)
    return client


def keys(client: FlaskClient, *where: str, **query: Any) -> list[tuple[str, int, str]]:
    page = ok(client.get(PARTS, query_string={"where": list(where), **query}, headers=AUTH))
    return [(p["key"]["date"], p["key"]["hour"], p["key"]["shop"]) for p in page["partitions"]]


def count(client: FlaskClient) -> int:
    return ok(client.get(RAW, headers=AUTH))["partition_count"]


# -- datasets -----------------------------------------------------------------------------
def test_datasets_are_created_read_listed_and_deleted(client: FlaskClient) -> None:
    created = client.post(BASE, json={"name": "raw", "key": KEY, "description": "orders"},
                          headers=AUTH)
    body = ok(created, 201)
    assert created.headers["Location"] == RAW
    assert (body["namespace"], body["key"], body["partition_count"]) == ("default", KEY, 0)
    assert error_of(client.post(BASE, json={"name": "raw", "key": KEY}, headers=AUTH),
                    409)["details"]["field"] == "name"
    ok(client.post(BASE, json={"namespace": "b", "name": "x", "key": KEY[:1]}, headers=AUTH),
       201)
    page = ok(client.get(BASE, query_string={"limit": 1}, headers=AUTH))
    assert [d["name"] for d in page["datasets"]] == ["x"] and page["next_cursor"] == "b/x"
    page = ok(client.get(BASE, query_string={"cursor": "b/x"}, headers=AUTH))
    assert [d["name"] for d in page["datasets"]] == ["raw"] and page["next_cursor"] is None
    assert client.delete(RAW, headers=AUTH).status_code == 204
    assert error_of(client.get(RAW, headers=AUTH), 404)["message"] == \
        "dataset default/raw does not exist"


def test_put_creates_updates_and_refuses_a_key_change_once_partitions_exist(
        raw: FlaskClient) -> None:
    described = {"key": KEY, "description": "raw orders"}
    dry = ok(raw.put(RAW, json=described, query_string={"dry_run": "true"}, headers=AUTH))
    assert (dry["change"], dry["changed"]) == ("updated", ["description"])
    assert ok(raw.get(RAW, headers=AUTH))["description"] is None  # the dry run changed nothing
    assert ok(raw.put(RAW, json=described, headers=AUTH))["change"] == "updated"
    assert ok(raw.put(RAW, json=described, headers=AUTH))["change"] == "unchanged"
    narrower = {"key": KEY[:2]}
    assert sorted(ok(raw.put(RAW, json=narrower, headers=AUTH))["changed"]) == \
        ["description", "key"]
    ok(raw.put(RAW, json=described, headers=AUTH))
    ok(raw.post(PARTS, json=part(), headers=AUTH), 201)
    error = error_of(raw.put(RAW, json=narrower, headers=AUTH), 409)
    assert fields_of(error) == ["key"] and "1 partition(s)" in error["message"]
    assert ok(raw.get(RAW, headers=AUTH))["key"] == KEY
    assert error_of(raw.put(RAW, json={"name": "other", "key": KEY}, headers=AUTH),
                    422)["details"][0]["field"] == "name"


# -- adding -------------------------------------------------------------------------------
def test_one_partition_and_a_batch_are_added(raw: FlaskClient) -> None:
    one = ok(raw.post(PARTS, json=part(metadata={"rows": 10}), headers=AUTH), 201)
    assert one["added"] == 1 and one["skipped"] == []
    assert one["partition"]["key"] == {"date": "2026-11-01", "hour": 0, "shop": "berlin"}
    assert one["partition"]["metadata"] == {"rows": 10} and one["partition"]["job_id"] is None
    batch = ok(raw.post(PARTS, json={"partitions": [part(hour=h) for h in range(1, 24)]},
                        headers=AUTH), 201)
    assert (batch["added"], batch["partition"]) == (23, None)
    assert count(raw) == 24


def test_an_existing_key_is_a_409_naming_it_unless_if_absent(raw: FlaskClient) -> None:
    ok(raw.post(PARTS, json=part(hour=5), headers=AUTH), 201)
    error = error_of(raw.post(PARTS, json={"partitions": [part(hour=4), part(hour=5)]},
                              headers=AUTH), 409)
    assert fields_of(error) == ["partitions[1].key"]
    assert error["details"][0]["key"] == {"date": "2026-11-01", "hour": 5, "shop": "berlin"}
    assert "hour=5" in error["message"] and count(raw) == 1  # hour 4 was not added either
    reply = ok(raw.post(PARTS, json={"partitions": [part(hour=4), part(hour=5)],
                                     "if_absent": True}, headers=AUTH), 201)
    assert reply["added"] == 1
    assert reply["skipped"] == [{"date": "2026-11-01", "hour": 5, "shop": "berlin"}]
    again = ok(raw.post(PARTS, json={**part(hour=5), "if_absent": True}, headers=AUTH), 200)
    assert (again["added"], again["partition"]) == (0, None) and count(raw) == 2


@pytest.mark.parametrize("body,field", [
    (part(hour=None), "key.hour"),
    ({"key": {"date": "2026-11-01", "shop": "b"}, "location": "x"}, "key.hour"),
    (part(hour="7"), "key.hour"),
    ({**part(), "key": {**part()["key"], "colour": "red"}}, "key.colour"),
    (part(location="x" * 4097), "location"),
    (part(metadata={"big": "x" * 5000}), "metadata"),
    (part(date="2026-02-30"), "key.date"),
    ({**part(), "if_absent": "yes"}, "if_absent"),
    ({"partitions": [part(hour=1), part(hour=1)]}, "partitions[1].key"),
    ({"partitions": [part(), part(hour="x")]}, "partitions[1].key.hour"),
    ({"partitions": [part(hour=h) for h in range(10_001)]}, "partitions"),
    ({"partitions": []}, "partitions"),
])
def test_bad_partitions_are_422s_naming_the_field_and_store_nothing(
        raw: FlaskClient, body: dict[str, Any], field: str) -> None:
    if body.get("key", {}).get("hour", 0) is None:
        del body["key"]["hour"]
    error = error_of(raw.post(PARTS, json=body, headers=AUTH), 422)
    assert field in fields_of(error), error
    assert count(raw) == 0


def test_a_batch_of_ten_thousand_is_accepted(raw: FlaskClient) -> None:
    batch = [part(date=f"2026-11-{1 + i // 1000:02d}", hour=i % 1000, shop="s")
             for i in range(10_000)]
    assert ok(raw.post(PARTS, json={"partitions": batch}, headers=AUTH), 201)["added"] == 10_000
    assert count(raw) == 10_000


def test_partitions_of_a_missing_dataset_are_404(client: FlaskClient) -> None:
    assert error_of(client.post(PARTS, json=part(), headers=AUTH), 404)["details"] == \
        {"namespace": "default", "name": "raw"}


# -- queries ------------------------------------------------------------------------------
def test_queries_filter_by_ranges_sets_and_metadata(raw: FlaskClient) -> None:
    batch = [part(date=f"2026-10-{day}", hour=hour, shop=shop,
                  metadata={"source": "crawler" if hour % 2 else "upload"})
             for day in (30, 31) for hour in (-1, 2, 10) for shop in ("a", "b")]
    batch += [part(date="2026-11-01", hour=9, shop="a"), part(date="2026-11-02", hour=9,
                                                              shop="c")]
    ok(raw.post(PARTS, json={"partitions": batch}, headers=AUTH), 201)
    assert keys(raw, "date >= 2026-11-01", order="oldest") == [
        ("2026-11-01", 9, "a"), ("2026-11-02", 9, "c")]
    # ints compare as numbers: -1 < 2 < 10 (as text "10" < "2")
    assert sorted(keys(raw, "date = 2026-10-30", "hour > 1", "shop = a")) == [
        ("2026-10-30", 2, "a"), ("2026-10-30", 10, "a")]
    assert keys(raw, "hour < 0", "shop in (b, c)", "date <= 2026-10-30") == [
        ("2026-10-30", -1, "b")]
    assert sorted(keys(raw, "meta.source = crawler", "date = 2026-10-31")) == [
        ("2026-10-31", -1, "a"), ("2026-10-31", -1, "b")]
    error = error_of(raw.get(PARTS, query_string={"where": ["hour > 1", "colour = red"]},
                             headers=AUTH), 422)
    assert fields_of(error) == ["where[1]"] and "not a key field" in error["message"]
    error = error_of(raw.get(PARTS, query_string={"where": "hour > noon"}, headers=AUTH), 422)
    assert fields_of(error) == ["where[0]"]


def test_pages_follow_the_cursor_newest_or_oldest_first(raw: FlaskClient) -> None:
    ok(raw.post(PARTS, json={"partitions": [part(hour=h) for h in range(7)]}, headers=AUTH),
       201)
    for order, expected in (("newest", list(range(6, -1, -1))), ("oldest", list(range(7)))):
        seen, cursor = [], None
        while True:
            query = {"order": order, "limit": 3, "where": "hour >= 0",
                     **({"cursor": cursor} if cursor else {})}
            page = ok(raw.get(PARTS, query_string=query, headers=AUTH))
            seen += [p["key"]["hour"] for p in page["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == expected


# -- removing -----------------------------------------------------------------------------
def test_partitions_are_removed_by_key_all_or_nothing(raw: FlaskClient) -> None:
    ok(raw.post(PARTS, json={"partitions": [part(hour=h) for h in range(3)]}, headers=AUTH),
       201)
    key = part(hour=1)["key"]
    gone = part(hour=9)["key"]
    error = error_of(raw.delete(PARTS, json={"keys": [key, gone]}, headers=AUTH), 404)
    assert error["details"][0]["key"] == gone and count(raw) == 3
    error = error_of(raw.delete(PARTS, json={"keys": [{**key, "hour": "1"}]}, headers=AUTH),
                     422)
    assert fields_of(error) == ["keys[0].hour"]
    reply = ok(raw.delete(PARTS, json={"keys": [key, gone], "missing_ok": True}, headers=AUTH))
    assert reply == {"deleted": 1, "missing": [gone]}
    assert keys(raw, order="oldest") == [("2026-11-01", 0, "berlin"), ("2026-11-01", 2, "berlin")]
