"""Batches through the HTTP API, on SQLite and PostgreSQL: configs put like every
resource (the seed's example; refusals naming the path, nothing stored), runs planned
and refused (422 naming the field, nothing stored), the control table's filters and
the audit's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.batches.tracker import BatchTracker
from jobserver.config import load_config
from jobserver.spec import Policy
from jobserver.store import Store
from tests.integration.test_schedules_api import error_of, fields_of, ok
from tests.unit.test_batch_spec import SEED

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = "/api/v1/batches"


@pytest.fixture
def client(store: Store, tmp_path: Path) -> FlaskClient:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN}
    return create_app(load_config(environ=environ), store=store).test_client()


def seed() -> dict[str, Any]:
    document = yaml.safe_load(SEED.read_text())
    document.pop("kind")
    return document


@pytest.fixture
def seeded(client: FlaskClient) -> FlaskClient:
    reply = ok(client.put(f"{BASE}/configs/seed", json=seed(), headers=AUTH), 201)
    assert reply["change"] == "created" and reply["config"]["systems"] == [
        "ORDER", "HR", "INVENTORY"]
    return client


def run(client: FlaskClient, status: int = 201, **body: Any) -> dict[str, Any]:
    return ok(client.post(f"{BASE}/run", json={"system": "ORDER", "location": "IN", **body},
                          headers=AUTH), status)


def test_putting_a_config_twice_changes_nothing(seeded: FlaskClient) -> None:
    again = ok(seeded.put(f"{BASE}/configs/seed", json=seed(), headers=AUTH))
    assert again["change"] == "unchanged"
    names = [c["name"] for c in ok(seeded.get(f"{BASE}/configs", headers=AUTH))["configs"]]
    assert names == ["seed"]


def test_a_system_belongs_to_one_config(seeded: FlaskClient) -> None:
    document = dict(seed(), name="other")
    error = error_of(seeded.put(f"{BASE}/configs/other", json=document, headers=AUTH), 409)
    assert "seed" in error["message"] and "ORDER" in error["details"]["systems"]


def test_a_job_group_cycle_is_refused_and_nothing_stored(client: FlaskClient) -> None:
    document = seed()
    document["job_groups"][0]["jobs"] = [{"name": "a", "type": "noop", "depends_on": ["b"]},
                                         {"name": "b", "type": "noop", "depends_on": ["a"]}]
    error = error_of(client.put(f"{BASE}/configs/seed", json=document, headers=AUTH), 422)
    assert "job_groups[0].jobs" in fields_of(error) and "cycle" in error["message"]
    error_of(client.get(f"{BASE}/configs/seed", headers=AUTH), 404)


def test_an_unregistered_python_job_is_refused(client: FlaskClient) -> None:
    document = seed()
    document["job_groups"][1]["jobs"] = [{"name": "p", "type": "python", "callable": "nope"}]
    error = error_of(client.put(f"{BASE}/configs/seed", json=document, headers=AUTH), 422)
    assert fields_of(error) == ["job_groups[1].jobs[0].callable"]


@pytest.mark.parametrize("body, field", [
    ({"system": "PAYROLL"}, "system"), ({"stage": "PLP"}, "stage"),
    ({"stage": "NOPE"}, "stage"),
    ({"context": {"business_module": "x"}}, "context.business_module"),
    ({"context": {"frequency": "hourly"}}, "context.frequency"),
    ({"stage": "STG"}, "watermark"),
    ({"stage": "STG", "business_date": "2018-01-05", "watermark": "2018-01-03"}, "business_date"),
    ({"stage": "STG", "surprise": 1}, "surprise")])
def test_bad_runs_are_refused_naming_the_field(seeded: FlaskClient, body: dict[str, Any],
                                               field: str) -> None:
    error = error_of(seeded.post(f"{BASE}/run", json={"system": "ORDER", "location": "IN",
                                                      **body}, headers=AUTH), 422)
    assert fields_of(error)[0] == field
    assert ok(seeded.get(BASE, headers=AUTH))["batches"] == []


def test_a_run_creates_batches_to_the_watermark_and_filters_find_them(
        seeded: FlaskClient, store: Store) -> None:
    reply = run(seeded, stage="STG", watermark="2018-01-03",
                context={"sub_system": "SHIPMENT"})
    assert reply["status"] == "RUNNING" and [i["business_date"] for i in reply["plan"]] == \
        ["2018-01-03"]
    joined = run(seeded, stage="STG", watermark="2018-01-03", context={"sub_system": "SHIPMENT"})
    assert joined["plan"] == reply["plan"]  # follows the stage the first run launched
    page = ok(seeded.get(BASE, query_string={"system": "ORDER", "location": "IN",
                                             "status": "RUNNING"}, headers=AUTH))["batches"]
    assert [(b["business_date"], b["stages"][0]["status"]) for b in page] == [
        ("2018-01-03", "RUNNING")]
    assert ok(seeded.get(BASE, query_string={"from": "2018-01-04"}, headers=AUTH))[
        "batches"] == []
    assert page[0]["stages"][0]["runs"] == 1
    job = store.jobs.get(page[0]["stages"][0]["job_id"])
    assert [s.name for s in job.steps] == ["JOB_Y1"]  # ORDER/SHIPMENT/STG -> JOB_GROUP_Y
    assert job.params["sub_system"] == "SHIPMENT"
    got = ok(seeded.get(f"{BASE}/runs/{reply['id']}", headers=AUTH))
    assert got["id"] == reply["id"]
    audit = ok(seeded.get(f"{BASE}/audit", query_string={"work_unit": "stage", "stage": "STG"},
                          headers=AUTH))["audit"]
    assert [(r["instance_id"], r["status"]) for r in audit] == [
        (f"{page[0]['id']}-STG-1", "RUNNING")]
    error_of(seeded.get(f"{BASE}/audit", query_string={"work_unit": "step"}, headers=AUTH), 422)


def test_the_tracker_settles_a_stage_the_engine_finished(seeded: FlaskClient,
                                                         store: Store) -> None:
    run(seeded, stage="STG", watermark="2018-01-03")
    batch = ok(seeded.get(BASE, headers=AUTH))["batches"][0]
    job_id = batch["stages"][0]["job_id"]
    from jobserver.states import Operation

    store.jobs.apply(job_id, Operation.DISCARD)
    BatchTracker(store, None, Policy(lambda name: False, None)).settle()
    batch = ok(seeded.get(BASE, headers=AUTH))["batches"][0]
    assert batch["stages"][0]["status"] == "FAILED" and batch["status"] == "FAILED"
    assert "DISCARDED" in batch["stages"][0]["message"]
