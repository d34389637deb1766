"""A noop view whose data is registered in the dataset of the same name, through the
HTTP API as a user drives it, on SQLite and PostgreSQL: ``t.src/Raw`` is dataset
``t.src`` / ``Raw``; a partition registered there materializes the view partition with
the same key (no ``_SUCCESS`` flag needed), one not registered (and without a flag) is
no-data, and so is its dependent; registering it later makes the next materialize see
the data and transform the dependent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.store import Store

TOKEN = "views-datasets-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARAMS = [{"name": "shop", "type": "string"}, {"name": "day", "type": "string"}]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}
RAW = "t.src/Raw/SHOP10"
STAGE = "t.stage/Clean/SHOP10"


@pytest.fixture
def client(store: Store, tmp_path: Path) -> FlaskClient:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN}
    client = create_app(load_config(environ=environ), store=store).test_client()
    views = [
        # Data from outside: a flag under the location, or the dataset t.src/Raw.
        {"name": "t.src/Raw", "parameters": PARAMS, "structure": FIELDS,
         "transformation": "noop", "location": f"{tmp_path}/flags/${{shop}}/${{day}}"},
        {"name": "t.stage/Clean", "parameters": PARAMS, "structure": FIELDS,
         "dependencies": [{"view": "t.src/Raw", "map": {"shop": "$shop", "day": "$day"}}],
         "transformation": {"job": {"steps": [{"name": "clean", "type": "noop"}]}}}]
    for view in views:
        ok(client.put(f"/api/v1/view-definitions/{view['name']}", json=view, headers=AUTH),
           201)
    ok(client.post("/api/v1/datasets", headers=AUTH, json={
        "namespace": "t.src", "name": "Raw",
        "key": [{"name": "shop", "type": "string"}, {"name": "day", "type": "date"}]}), 201)
    return client


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, response.get_data(True))
    return response.get_json()


def register(client: FlaskClient, day: str) -> str:
    """The outside ETL registers a partition; returns its ``created_at``."""
    reply = ok(client.post("/api/v1/datasets/t.src/Raw/partitions", headers=AUTH, json={
        "key": {"shop": "SHOP10", "day": day}, "location": f"s3://raw/SHOP10/{day}"}), 201)
    return reply["partition"]["created_at"]


def materialize(client: FlaskClient, pattern: str) -> dict[str, tuple[str, str, Any]]:
    reply = ok(client.post("/api/v1/views/materialize", headers=AUTH,
                           json={"pattern": pattern}))
    return {d["view"]: (d["action"], d["reason"], d["job_id"]) for d in reply["decisions"]}


def states(client: FlaskClient, pattern: str) -> dict[str, tuple[str, Any]]:
    reply = ok(client.get("/api/v1/views", headers=AUTH,
                          query_string={"pattern": pattern, "dependencies": "true"}))
    return {v["path"]: (v["status"], v["transformed_at"]) for v in reply["views"]}


def test_a_registered_dataset_partition_materializes_the_noop_view_and_a_late_one_counts(
        client: FlaskClient, tmp_path: Path) -> None:
    registered_at = register(client, "2015-05-03")
    register(client, "2015-05-05")  # another key: it says nothing of the 4th

    first = materialize(client, f"{STAGE}/e(2015-05-03,2015-05-04)")
    assert first[f"{RAW}/2015-05-03"][:2] == ("set", f"data at {registered_at}")
    assert first[f"{RAW}/2015-05-04"][:2] == (
        "no-data", f"no _SUCCESS flag at {tmp_path}/flags/SHOP10/2015-05-04/_SUCCESS")
    assert first[f"{STAGE}/2015-05-03"][:2] == ("transform", "never transformed")
    assert first[f"{STAGE}/2015-05-03"][2] is not None  # a job was submitted
    assert first[f"{STAGE}/2015-05-04"] == ("no-data", "all dependencies have no data", None)
    assert states(client, f"{STAGE}/e(2015-05-03,2015-05-04)") == {
        f"{RAW}/2015-05-03": ("materialized", registered_at),
        f"{STAGE}/2015-05-03": ("waiting", None),
        f"{RAW}/2015-05-04": ("no-data", None),
        f"{STAGE}/2015-05-04": ("no-data", None)}

    late_at = register(client, "2015-05-04")  # the late delivery
    second = materialize(client, f"{STAGE}/e(2015-05-03,2015-05-04)")
    assert second[f"{RAW}/2015-05-04"][:2] == ("set", f"data at {late_at}")
    assert second[f"{STAGE}/2015-05-04"][:2] == ("transform", "never transformed")
    assert second[f"{STAGE}/2015-05-04"][2] not in (None, first[f"{STAGE}/2015-05-03"][2])
    # Nothing changed for the 3rd: its data is the same, its job is joined, not redone.
    assert second[f"{RAW}/2015-05-03"][:2] == ("skip", f"data at {registered_at} unchanged")
    assert second[f"{STAGE}/2015-05-03"][0] == "join"
    assert second[f"{STAGE}/2015-05-03"][2] == first[f"{STAGE}/2015-05-03"][2]
    assert states(client, f"{RAW}/2015-05-04") == {f"{RAW}/2015-05-04": ("materialized",
                                                                        late_at)}
