"""``POST /api/v1/jobs/batch`` from a client's point of view, on SQLite and PostgreSQL:
jobs created in order, idempotent replays, all-or-nothing refusals naming
``jobs[i].<field>``, the rate limit counted per job and one wake-up per batch.

Flask's test client against a real, migrated store; no scheduler runs, so the jobs
stay READY as submitted.
"""

from __future__ import annotations

import json
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.store import WAKE_CHANNEL, Store
from jobserver.store.tables import jobs as jobs_table
from tests.helpers import job_spec, wait_for

TOKEN = "bulk-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BATCH = "/api/v1/jobs/batch"

Api = tuple[FlaskClient, Store]


def client_for(store: Store, data_dir: Path, **env: str) -> FlaskClient:
    environ = {"JOBSERVER_DATA_DIR": str(data_dir), "JOBSERVER_API__TOKENS": TOKEN,
               "JOBSERVER_API__SUBMIT_BURST": "5000", **env}
    return create_app(load_config(environ=environ), store=store).test_client()


@pytest.fixture
def make_api(store: Store, tmp_path: Path) -> Callable[..., Api]:
    """``(client, store)`` with extra ``JOBSERVER_*`` settings."""
    def build(**env: str) -> Api:
        return client_for(store, tmp_path / "data", **env), store
    return build


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api()


def post(client: FlaskClient, jobs: Any, headers: dict[str, str] | None = None) -> Any:
    body = jobs if isinstance(jobs, (bytes, str)) else json.dumps({"jobs": jobs})
    return client.post(BATCH, data=body, content_type="application/json",
                       headers=headers or AUTH)


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert set(error) == {"code", "message", "details"}
    return error


def fields(error: dict[str, Any]) -> list[str]:
    return [item["field"] for item in error["details"]]


def job_count(store: Store) -> int:
    with store.tx.read() as conn:
        return len(conn.execute(jobs_table.select()).all())


def keyed(name: str, key: str | None = None, **fields: Any) -> dict[str, Any]:
    body = job_spec(name=name, **fields)
    if key is not None:
        body["idempotency_key"] = key
    return body


def test_a_batch_creates_its_jobs_in_request_order(api: Api) -> None:
    client, store = api
    names = [f"job-{index}" for index in range(25)]
    response = post(client, [job_spec(name=name, priority=index)
                             for index, name in enumerate(names)])
    assert response.status_code == 201, response.get_data(as_text=True)
    answer = response.get_json()["jobs"]
    assert [item["created"] for item in answer] == [True] * 25
    ids = [item["id"] for item in answer]
    assert ids == sorted(ids) and len(set(ids)) == 25  # ascending as the items
    for index, job_id in enumerate(ids):
        job = store.jobs.get(job_id)
        assert (job.name, job.priority, job.state.value) == (names[index], index, "READY")
        assert [step.name for step in job.steps or []] == ["s1"]
        assert [event.message for event in store.jobs.events(job_id)] == ["submitted"]
    metrics = client.get("/metrics", headers=AUTH).get_data(as_text=True)
    assert "jobserver_jobs_submitted_total 25.0" in metrics


#: A job using every field, to compare a batch's job with the single submit's.
FULL = {
    "name": "nightly-etl", "priority": 5, "params": {"date": "2026-11-28", "ünï": [1, 2.5]},
    "parallelism": 2, "not_before": "2031-11-29T02:00:00+01:00", "lock_key": "sales-11",
    "assigned_servers": ["node-1", "node-2"],
    "inputs": [{"dataset": "raw", "consumer": "cleanse", "limit": 10}],
    "steps": [
        {"name": "extract", "type": "shell", "argv": ["/bin/echo", "x"], "timeout": 60,
         "env": {"A": "b"}, "retries": 3, "retry_backoff": 5},
        {"name": "count", "type": "python", "callable": "demo.count_words",
         "args": {"n": 1}, "depends_on": ["extract"]},
        {"name": "pause", "type": "sleep", "seconds": 2, "depends_on": ["extract"]},
        {"name": "load", "type": "noop", "depends_on": ["count", "pause"],
         "retryable": False}]}


def test_a_batch_job_is_stored_as_the_single_submit_stores_it(api: Api) -> None:
    client, _ = api
    dataset = {"name": "raw", "key": [{"name": "hour", "type": "int"}]}
    assert client.post("/api/v1/datasets", json=dataset, headers=AUTH).status_code == 201
    assert client.put("/api/v1/datasets/default/raw/consumers/cleanse",
                      json={"processing_limit": 100}, headers=AUTH).status_code == 201
    submitted = client.post("/api/v1/jobs", json=FULL, headers=AUTH).get_json()
    single = client.get(f"/api/v1/jobs/{submitted['id']}", headers=AUTH).get_json()
    [batched] = post(client, [FULL]).get_json()["jobs"]
    shown = client.get(f"/api/v1/jobs/{batched['id']}", headers=AUTH).get_json()
    for job in (single, shown):
        for volatile in ("id", "created_at", "updated_at"):
            job.pop(volatile)
    assert shown == single
    assert shown["not_before"].startswith("2031-11-29T01:00:00")


def test_a_replayed_batch_returns_the_same_jobs_not_created(api: Api) -> None:
    client, store = api
    first = post(client, [keyed("a", "key-a"), keyed("b", "key-b")])
    assert first.status_code == 201
    ids = [item["id"] for item in first.get_json()["jobs"]]
    again = post(client, [keyed("a", "key-a"), keyed("b", "key-b")])
    assert again.status_code == 200  # nothing new
    assert again.get_json() == {"jobs": [{"id": ids[0], "created": False},
                                         {"id": ids[1], "created": False}]}
    # Replays and new jobs mix; an item without a key is always a new job.
    mixed = post(client, [keyed("b", "key-b"), keyed("c"), keyed("c"), keyed("d", "key-d")])
    assert mixed.status_code == 201
    answer = mixed.get_json()["jobs"]
    assert answer[0] == {"id": ids[1], "created": False}
    assert [item["created"] for item in answer[1:]] == [True, True, True]
    assert len({item["id"] for item in answer}) == 4
    assert job_count(store) == 5


def test_a_key_of_the_single_submit_replays_in_a_batch(api: Api) -> None:
    client, _ = api
    single = client.post("/api/v1/jobs", data=json.dumps(job_spec(name="once")),
                         content_type="application/json",
                         headers={**AUTH, "Idempotency-Key": "shared-key"})
    assert single.status_code == 201
    answer = post(client, [keyed("once", "shared-key")])
    assert answer.status_code == 200
    assert answer.get_json()["jobs"] == [{"id": single.get_json()["id"], "created": False}]


def test_a_key_used_for_another_job_is_a_409_and_nothing_is_written(api: Api) -> None:
    client, store = api
    first = post(client, [keyed("a", "key-a")]).get_json()["jobs"][0]["id"]
    before = job_count(store)
    response = post(client, [keyed("new"), keyed("changed", "key-a"), keyed("x", "key-x")])
    error = error_of(response, 409)
    assert error["code"] == "conflict"
    assert error["details"] == [{"field": "jobs[1].idempotency_key", "job_id": first,
                                 "message": "already used with a different request"}]
    assert error["message"].startswith("jobs[1].idempotency_key: ")
    assert job_count(store) == before
    # key-x was not taken: the same batch without the conflict goes in whole.
    assert post(client, [keyed("new"), keyed("x", "key-x")]).status_code == 201


@pytest.mark.parametrize("items,field", [
    ([keyed("ok"), {"name": "bad", "steps": []}], "jobs[1].steps"),
    ([keyed("ok"), keyed("ok"), keyed("bad", unknown=1)], "jobs[2].unknown"),
    ([keyed("bad", steps=[{"name": "s", "type": "shell", "argv": []}])], "jobs[0].steps[0].argv"),
    ([keyed("ok"), keyed("bad", steps=[{"name": "s", "type": "noop"},
                                      {"name": "s", "type": "noop"}])], "jobs[1].steps[1].name"),
    ([keyed("ok"), keyed("bad", steps=[{"name": "s", "type": "python",
                                        "callable": "not.registered"}])],
     "jobs[1].steps[0].callable"),
    ([keyed("ok"), keyed("bad", inputs=[{"dataset": "default/missing", "consumer": "c"}])],
     "jobs[1].inputs[0].dataset"),
    ([keyed("ok"), keyed("bad", after=[{"job": 999999}])], "jobs[1].after[0].job"),
    ([keyed("bad", "has space")], "jobs[0].idempotency_key"),
    ([keyed("a", "same"), keyed("b"), keyed("a", "same")], "jobs[2].idempotency_key"),
])
def test_one_invalid_item_is_a_422_naming_it_and_nothing_is_written(
        api: Api, items: list[dict[str, Any]], field: str) -> None:
    client, store = api
    error = error_of(post(client, items), 422)
    assert error["code"] == "invalid_request"
    assert fields(error)[0] == field and error["message"].startswith(field)
    assert job_count(store) == 0


def test_every_bad_item_is_named(api: Api) -> None:
    client, _ = api
    twice = [{"name": "s", "type": "noop"}, {"name": "s", "type": "noop"}]
    unregistered = [{"name": "s", "type": "python", "callable": "not.registered"}]
    # Parsed first (types, fields), then checked as whole jobs: each stage names all.
    parsed = error_of(post(client, [{"name": "a", "steps": []}, keyed("ok"),
                                    keyed("b", unknown=1)]), 422)
    assert fields(parsed) == ["jobs[0].steps", "jobs[2].unknown"]
    checked = error_of(post(client, [keyed("a", steps=twice), keyed("ok"),
                                     keyed("b", steps=unregistered)]), 422)
    assert fields(checked) == ["jobs[0].steps[1].name", "jobs[2].steps[0].callable"]


@pytest.mark.parametrize("body,status,field", [
    ({"jobs": []}, 422, "jobs"),
    ({"jobs": [job_spec()] * 1001}, 422, "jobs"),
    ({}, 422, "jobs"),
    ({"jobs": [job_spec()], "extra": True}, 422, "extra"),
    ([job_spec()], 422, "body"),
    ("{not json", 400, "body"),
])
def test_the_batch_itself_is_checked(api: Api, body: Any, status: int, field: str) -> None:
    client, store = api
    data = body if isinstance(body, str) else json.dumps(body)
    error = error_of(client.post(BATCH, data=data, content_type="application/json",
                                 headers=AUTH), status)
    assert field in fields(error)
    assert job_count(store) == 0


def test_a_batch_with_shell_steps_needs_the_shell_scope(api: Api) -> None:
    client, store = api
    _, secret = store.tokens.create("submitter", ["submit"])
    shell = {"name": "s", "type": "shell", "argv": ["/bin/true"]}
    error = error_of(post(client, [keyed("ok"), keyed("sh", steps=[shell])],
                          {"Authorization": f"Bearer {secret}"}), 403)
    assert fields(error) == ["jobs[1].steps[0].type"]
    assert error["message"].startswith("jobs[1].steps[0].type: shell steps need")
    assert job_count(store) == 0


def test_the_rate_limit_counts_each_job_of_a_batch(make_api: Callable[..., Api]) -> None:
    client, store = make_api(JOBSERVER_API__SUBMIT_RATE="0.001",
                             JOBSERVER_API__SUBMIT_BURST="10")
    assert post(client, [keyed(f"a{i}") for i in range(6)]).status_code == 201
    refused = post(client, [keyed(f"b{i}") for i in range(5)])  # 4 left in the bucket
    error = error_of(refused, 429)
    assert error["code"] == "rate_limited" and int(refused.headers["Retry-After"]) >= 1
    assert job_count(store) == 6  # the whole batch was refused
    assert post(client, [keyed(f"c{i}") for i in range(4)]).status_code == 201
    too_big = error_of(post(client, [keyed(f"d{i}") for i in range(11)]), 429)
    assert "exceeds api.submit_burst (10)" in too_big["message"]
    assert too_big["details"]["burst"] == 10 and too_big["details"]["requested"] == 11
    assert job_count(store) == 10


def test_after_names_existing_jobs_and_ids_still_ascend(api: Api) -> None:
    client, store = api
    [upstream] = [item["id"] for item in post(client, [keyed("up")]).get_json()["jobs"]]
    response = post(client, [keyed("plain"), keyed("down", after=[{"job": upstream}]),
                             keyed("again", "k-again")])
    assert response.status_code == 201
    ids = [item["id"] for item in response.get_json()["jobs"]]
    assert ids == sorted(ids)
    down = store.jobs.get(ids[1])
    assert down.waiting_on == 1 and [up.job for up in down.after] == [upstream]
    assert store.jobs.get(ids[0]).waiting_on == 0
    replay = post(client, [keyed("again", "k-again"), keyed("down2", after=[{"job": upstream}])])
    assert replay.get_json()["jobs"][0] == {"id": ids[2], "created": False}


def test_one_wake_up_per_batch(store_on_postgres: Store, tmp_path: Path) -> None:
    """PostgreSQL's NOTIFY (SQLite nodes watch the database file's commits)."""
    import psycopg2

    store = store_on_postgres
    client = client_for(store, tmp_path / "data")
    listener = psycopg2.connect(store.url.replace("postgresql+psycopg2", "postgresql"))
    listener.autocommit = True
    try:
        listener.cursor().execute(f"LISTEN {WAKE_CHANNEL}")
        upstream = 0
        for batch in (lambda: [keyed(f"n{i}") for i in range(50)], lambda: [keyed("up")],
                      lambda: [keyed(f"w{i}", after=[{"job": upstream}]) for i in range(3)]):
            answer = post(client, batch())
            assert answer.status_code == 201
            upstream = answer.get_json()["jobs"][0]["id"]
            # A transaction's notifications arrive together at its commit, which
            # came before the answer.
            wait_for(lambda: select.select([listener], [], [], 0.1)[0], 5,
                     what="a notification")
            listener.poll()
            assert [n.channel for n in listener.notifies] == [WAKE_CHANNEL]
            listener.notifies.clear()
    finally:
        listener.close()


def test_batches_racing_for_a_new_key_make_one_job(store: Store) -> None:
    """The loser of the key's unique index runs its batch again and replays the
    winner's job; its other items are created once, not twice."""
    from jobserver.spec import Policy, parse_job, validate_job
    from jobserver.store.intake import BatchItem

    def item(name: str, key: str | None) -> BatchItem:
        spec = parse_job(json.dumps(job_spec(name=name)))
        return BatchItem(spec, validate_job(spec, Policy(lambda _name: True, None)), key,
                         None if key is None else "digest-of-raced")

    start = threading.Barrier(6)
    answers: list[Any] = []

    def submit(index: int) -> None:
        start.wait()
        answers.append(store.jobs.submit_batch([item(f"own-{index}", None),
                                                item("raced", "raced-key")]))

    threads = [threading.Thread(target=submit, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 6
    raced = [answer[1] for answer in answers]
    assert len({job.id for job in raced}) == 1
    assert sorted(job.created for job in raced) == [False] * 5 + [True]
    assert all(answer[0].created for answer in answers)
    assert job_count(store) == 7
