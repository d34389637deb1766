"""Why is my job not running: ``not_running`` of a READY job through the API, for each
reason a claim has, on SQLite and PostgreSQL; and ``jobserver_jobs_stuck`` counting
jobs READY too long, in the store and on a real node."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.not_running import STUCK_CODES
from tests.helpers import FakeLease, free_port, job_spec, wait_for
from tests.integration.nodes import TOKEN, Api, Harness
from tests.integration.scrape import scrape, value

AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAR = "9999-12-31T00:00:00Z"

Client = Callable[..., FlaskClient]


@pytest.fixture
def make_client(store: Store, tmp_path: Path) -> Client:
    def build(mode: str = "single") -> FlaskClient:
        environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN,
                   "JOBSERVER_SCHEDULER__MODE": mode}
        return create_app(load_config(environ=environ), store=store).test_client()
    return build


def submit(client: FlaskClient, **fields: Any) -> int:
    response = client.post("/api/v1/jobs", data=json.dumps(job_spec(**fields)),
                           content_type="application/json", headers=AUTH)
    assert response.status_code == 201, response.get_data(as_text=True)
    return int(response.get_json()["id"])


def why(client: FlaskClient, job_id: int) -> dict[str, Any]:
    body = client.get(f"/api/v1/jobs/{job_id}", headers=AUTH).get_json()
    assert body["state"] == "READY", body
    return body["not_running"]


def node(store: Store, node_id: str, capacity: int, role: str = "active",
         mode: str = "single") -> None:
    """A live node row, as a node's start-up and heartbeat write it."""
    store.servers.register(node_id, "host", 1, mode, capacity)
    store.servers.set_role(node_id, role)


def start(store: Store, node_id: str, job_id: int, key: str = "scheduler/global") -> None:
    """Claim ``job_id`` on ``node_id`` as its scheduler would: RUNNING there."""
    [claimed] = store.runs.claim(node_id, FakeLease(store, key), 1, job_ids=[job_id])
    assert claimed.state is State.RUNNING


def test_each_reason_of_a_ready_job(make_client: Client, store: Store) -> None:
    client = make_client("single")
    node(store, "node-1", capacity=1)
    node(store, "node-2", capacity=4, role="standby")

    later = submit(client, name="later", not_before=FAR)
    assert why(client, later) == {"code": "not_due", "reason": f"not due until {FAR}",
                                  "details": {"not_before": FAR}}

    nowhere = submit(client, name="nowhere", assigned_servers=["node-99"])
    assert why(client, nowhere) == {
        "code": "no_live_node", "reason": 'no live node among assigned_servers ["node-99"]',
        "details": {"assigned_servers": ["node-99"]}}

    # node-2 is live but a standby: in single mode only the active scheduler claims.
    standby = submit(client, name="standby", assigned_servers=["node-2"])
    found = why(client, standby)
    assert found["code"] == "not_scheduling" and "node-1 does" in found["reason"]

    first = submit(client, name="first")
    found = why(client, first)
    assert found["code"] == "claimable" and "node-1 (1 of 1)" in found["reason"]
    start(store, "node-1", first)
    assert client.get(f"/api/v1/jobs/{first}", headers=AUTH).get_json().get(
        "not_running") is None  # RUNNING: nothing to explain

    queued = submit(client, name="queued")
    found = why(client, queued)
    assert found["code"] == "no_free_slot"
    assert found["reason"] == "no free slot on any node that may run it (node-1 1/1)"
    assert found["details"] == {"nodes": {"node-1": {"free": 0, "capacity": 1}}}

    after = submit(client, name="after", after=[{"job": first, "when": "succeeded"}])
    found = why(client, after)
    assert found["code"] == "waiting_upstream"
    assert found["reason"] == f"waiting for 1 upstream job(s): job {first} (succeeded, RUNNING)"
    assert found["details"] == {"upstreams": [{"job": first, "when": "succeeded",
                                               "state": "RUNNING"}]}


def test_a_lock_key_held_by_a_running_job(make_client: Client, store: Store) -> None:
    client = make_client("distributed")
    node(store, "node-1", capacity=4, mode="distributed")
    node(store, "node-2", capacity=4, mode="distributed")
    holder = submit(client, name="segment", lock_key="sales-2026-11")
    start(store, "node-2", holder, key="segment/sales-2026-11")
    blocked = submit(client, name="segment", lock_key="sales-2026-11")
    assert why(client, blocked) == {
        "code": "lock_held",
        "reason": f"lock_key 'sales-2026-11' is held by job {holder} (RUNNING on node-2)",
        "details": {"lock_key": "sales-2026-11", "job": holder, "node": "node-2"}}
    other = submit(client, name="segment", lock_key="sales-2026-12")
    assert why(client, other)["code"] == "claimable"


def test_no_scheduler_and_dead_nodes(make_client: Client, store: Store) -> None:
    client = make_client("leader")
    job = submit(client)
    assert why(client, job) == {"code": "no_scheduler",
                                "reason": "no leader is elected (leader mode)", "details": {}}
    node(store, "node-1", capacity=2, role="standby", mode="leader")
    assert why(client, job)["code"] == "no_scheduler"  # live, but nobody leads
    node(store, "node-2", capacity=2, mode="leader")  # the leader
    assert why(client, job)["code"] == "claimable"
    store.servers.mark_stopped("node-1")
    store.servers.mark_stopped("node-2")
    assert why(client, job)["code"] == "no_scheduler"  # stopped nodes are not live


def test_stuck_jobs_are_counted_by_reason_past_the_threshold(make_client: Client,
                                                             store: Store) -> None:
    client = make_client("single")
    node(store, "node-1", capacity=1)
    submit(client, name="later", not_before=FAR)
    submit(client, name="nowhere", assigned_servers=["node-99"])
    submit(client, name="nowhere", assigned_servers=["node-98", "node-99"])
    running = submit(client, name="running")
    start(store, "node-1", running)
    submit(client, name="after", after=[{"job": running}])
    submit(client, name="queued")  # no free slot: never counted as stuck

    assert store.jobs.stuck("single", 10.0, older_than=3600) == dict.fromkeys(STUCK_CODES, 0)
    counts = wait_for(lambda: (c := store.jobs.stuck("single", 10.0, older_than=0.2))
                      and sum(c.values()) == 4 and c, 10, 0.1, "four jobs READY for 0.2 s")
    assert counts == {**dict.fromkeys(STUCK_CODES, 0), "not_due": 1, "no_live_node": 2,
                      "waiting_upstream": 1}
    # With no node live, every job left is held by that (no scheduler): still counted.
    store.servers.mark_stopped("node-1")
    counts = store.jobs.stuck("single", 10.0, older_than=0)
    assert counts["no_scheduler"] == 1 and counts["no_live_node"] == 2


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_node_reports_jobs_stuck_past_scheduler_stuck_after(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    try:
        port = free_port()
        proc = harness.start_node("node-1", port, tmp_path / "data",
                                  JOBSERVER_SCHEDULER__STUCK_AFTER="1")
        api = Api(f"http://127.0.0.1:{port}", TOKEN)
        harness.wait_nodes_ready(api, [proc], port)
        base = api.base_url
        assert value(scrape(base, TOKEN), "jobserver_jobs_stuck", reason="no_live_node") == 0
        stuck = api.submit(job_spec(name="nowhere", assigned_servers=["node-99"]))
        runs = api.submit(job_spec(name="runs"))
        api.wait_job(runs)

        def reported() -> dict[str, float] | None:
            samples = scrape(base, TOKEN)
            found = {code: value(samples, "jobserver_jobs_stuck", reason=code)
                     for code in STUCK_CODES}
            return found if found["no_live_node"] else None

        found = wait_for(reported, 20, 0.2, "jobserver_jobs_stuck{reason=no_live_node}")
        assert found == {**dict.fromkeys(STUCK_CODES, 0.0), "no_live_node": 1.0}
        assert api.job(stuck)["not_running"]["code"] == "no_live_node"
        api.call("POST", f"/api/v1/jobs/{stuck}/discard")
        wait_for(lambda: value(scrape(base, TOKEN), "jobserver_jobs_stuck",
                               reason="no_live_node") == 0, 20, 0.2, "the count to drop")
    finally:
        harness.cleanup()
