"""The consumer routes: declared idempotently, viewed, retried; bad input is a 422
naming the field and stores nothing; a job's inputs are checked at submit."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from tests.integration.test_datasets_api import AUTH, PARTS, RAW, client, part, raw  # noqa: F401
from tests.integration.test_schedules_api import error_of, fields_of, ok

CLEANSE = f"{RAW}/consumers/cleanse"
JOB = {"name": "clean", "steps": [{"name": "a", "type": "noop"}]}


def test_a_consumer_is_put_idempotently_and_shows_its_state(raw: FlaskClient) -> None:
    ok(raw.post(PARTS, json={"partitions": [part(hour=h) for h in range(3)]}, headers=AUTH),
       201)
    body = {"processing_limit": 2, "filter": ["hour >= 1"], "max_retries": 2}
    created = ok(raw.put(CLEANSE, json=body, headers=AUTH), 201)
    assert created["change"] == "created"
    assert ok(raw.put(CLEANSE, json=body, headers=AUTH))["change"] == "unchanged"
    view = ok(raw.get(CLEANSE, headers=AUTH))
    assert view["working_set"] == {"NEW": 0, "IN_PROGRESS": 0, "FAILED": 0}
    assert view["lag"] == 2 and view["failed"] == [] and view["spec"]["max_retries"] == 2
    assert [c["name"] for c in ok(raw.get(f"{RAW}/consumers", headers=AUTH))["consumers"]] \
        == ["cleanse"]
    assert ok(raw.post(f"{CLEANSE}/reset-failed", headers=AUTH)) == {"reset": 0}
    assert raw.delete(CLEANSE, headers=AUTH).status_code == 204
    error_of(raw.get(CLEANSE, headers=AUTH), 404)


@pytest.mark.parametrize("body,field", [
    ({"filter": ["colour = red"]}, "filter[0]"),
    ({"processing_limit": 0}, "processing_limit"),
    ({"processing_limit": 20, "max_working_set_size": 10}, "processing_limit"),
    ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, "end"),
    ({"max_retries": -1}, "max_retries"),
    ({"dataset": "other"}, "dataset"),
])
def test_bad_consumer_settings_are_422_naming_the_field(raw: FlaskClient, body: dict,
                                                       field: str) -> None:
    assert field in fields_of(error_of(raw.put(CLEANSE, json=body, headers=AUTH), 422))
    error_of(raw.get(CLEANSE, headers=AUTH), 404)  # nothing stored


@pytest.mark.parametrize("inputs,field", [
    ([{"dataset": "raw", "consumer": "nope"}], "inputs[0].consumer"),
    ([{"dataset": "missing", "consumer": "cleanse"}], "inputs[0].dataset"),
    ([{"dataset": "raw", "consumer": "cleanse", "limit": 500}], "inputs[0].limit"),
    ([{"dataset": "raw", "consumer": "cleanse"}, {"dataset": "raw", "consumer": "cleanse"}],
     "inputs[1].dataset"),
    ([{"dataset": "raw", "consumer": "cleanse", "on_empty": "wait"}], "inputs[0].on_empty"),
])
def test_a_job_input_is_checked_at_submit(raw: FlaskClient, inputs: list, field: str) -> None:
    ok(raw.put(CLEANSE, json={"processing_limit": 100}, headers=AUTH), 201)
    error = error_of(raw.post("/api/v1/jobs", json={**JOB, "inputs": inputs}, headers=AUTH),
                     422)
    assert field in fields_of(error)
    job = ok(raw.post("/api/v1/jobs", json={**JOB, "inputs": [
        {"dataset": "raw", "consumer": "cleanse", "limit": 100}]}, headers=AUTH), 201)
    shown = ok(raw.get(f"/api/v1/jobs/{job['id']}", headers=AUTH), 200)
    assert [(i["dataset"], i["consumer"], i["limit"]) for i in shown["inputs"]] == [
        ("raw", "cleanse", 100)]


def test_metrics_show_each_consumer_lag_and_totals(raw: FlaskClient) -> None:
    ok(raw.post(PARTS, json={"partitions": [part(hour=h) for h in range(3)]}, headers=AUTH),
       201)
    ok(raw.put(CLEANSE, json={}, headers=AUTH), 201)
    text = raw.get("/metrics", headers=AUTH).get_data(as_text=True)
    series = '{consumer="cleanse",dataset="default/raw"}'
    assert f"jobserver_consumer_lag{series} 3.0" in text
    assert f"jobserver_consumer_partitions_processed_total{series} 0.0" in text
    assert f"jobserver_consumer_partitions_failed_total{series} 0.0" in text
