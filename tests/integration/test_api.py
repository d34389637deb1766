"""The HTTP API from a client's point of view, on SQLite and PostgreSQL.

Each test drives Flask's test client against a real, migrated store. No scheduler
runs: jobs stay READY unless a test moves them through the store the way a runner
would (``store.runs.claim`` / ``finish_step`` / ``finish_job``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.states import Operation, State
from jobserver.store import Store
from jobserver.store.records import ClaimToken, StepOutcome
from locks import make_lock_backend
from schedulers.base import presence_key
from schedulers.single import GLOBAL_LOCK
from tests.helpers import FakeLease, job_spec, spec_bytes, wait_for

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = "application/json"
JOB_ID = "/api/v1/jobs/{}"
ACTIONS = ("pause", "resume", "rerun", "discard")

Api = tuple[FlaskClient, Store, dict[str, str]]


@pytest.fixture
def make_api(store: Store, tmp_path: Path) -> Callable[..., Api]:
    """Build ``(client, store, auth headers)`` with extra ``JOBSERVER_*`` settings."""
    def build(**env: str) -> Api:
        environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                   "JOBSERVER_API__TOKENS": TOKEN, **env}
        app = create_app(load_config(environ=environ), store=store)
        return app.test_client(), store, dict(AUTH)
    return build


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api()


def submit(client: FlaskClient, spec: dict[str, Any] | None = None,
           **headers: str) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", data=json.dumps(spec or job_spec()),
                           content_type=JSON, headers={**AUTH, **headers})
    assert response.status_code in (200, 201), response.get_data(as_text=True)
    return response.get_json()


def error_of(response: Any, status: int) -> dict[str, Any]:
    """Check the JSON error envelope; return ``error``."""
    assert response.status_code == status and response.is_json, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] and error["message"] and isinstance(error["message"], str)
    assert "Traceback" not in response.get_data(as_text=True)
    return error


def fields_of(error: dict[str, Any]) -> list[str]:
    details = error["details"] if isinstance(error["details"], list) else [error["details"]]
    return [item.get("field") for item in details if item]


# -- 1. auth ---------------------------------------------------------------------------
ROUTES = [("get", "/api/v1/jobs"), ("post", "/api/v1/jobs"), ("post", "/api/v1/jobs/batch"),
          ("get", "/api/v1/jobs/1"),
          ("get", "/api/v1/jobs/1/events"), ("get", "/api/v1/jobs/1/fence/7"),
          ("get", "/api/v1/jobs/1/steps/s1/log"),
          ("get", "/api/v1/cluster"), ("get", "/api/v1/changes"),
          ("get", "/api/v1/openapi.json"), ("get", "/metrics")] + [
    ("post", f"/api/v1/jobs/1/{a}") for a in ACTIONS] + [
    ("get", "/api/v1/schedules"), ("post", "/api/v1/schedules")] + [
    (m, "/api/v1/schedules/default/nightly") for m in ("get", "put", "delete")] + [
    ("post", f"/api/v1/schedules/default/nightly/{a}") for a in ("enable", "disable")] + [
    ("get", f"/api/v1/schedules/default/nightly/{r}") for r in ("jobs", "evaluations")] + [
    ("get", "/api/v1/datasets"), ("post", "/api/v1/datasets")] + [
    (m, "/api/v1/datasets/default/nightly") for m in ("get", "put", "delete")] + [
    (m, "/api/v1/datasets/default/nightly/partitions") for m in ("get", "post", "delete")] + [
    ("get", "/api/v1/datasets/default/nightly/consumers"),
    ("post", "/api/v1/datasets/default/nightly/consumers/c1/reset-failed")] + [
    (m, "/api/v1/datasets/default/nightly/consumers/c1") for m in ("get", "put", "delete")] + [
    ("get", "/api/v1/view-definitions"), ("post", "/api/v1/views/materialize"),
    ("get", "/api/v1/materialize/app.pkg/Sales"), ("post", "/api/v1/views/invalidate"),
    ("get", "/api/v1/views")] + [
    (m, "/api/v1/view-definitions/app.pkg/Sales") for m in ("get", "put", "delete")] + [
    ("get", "/api/v1/batches"), ("get", "/api/v1/batches/audit"),
    ("post", "/api/v1/batches/run"), ("get", "/api/v1/batches/runs/7"),
    ("get", "/api/v1/batches/configs")] + [
    (m, "/api/v1/batches/configs/nightly") for m in ("get", "put", "delete")]
#: A concrete path of ROUTES in OpenAPI's spelling.
TEMPLATES = {"/default/nightly": "/{namespace}/{name}", "/consumers/c1": "/consumers/{consumer}",
             "/view-definitions/app.pkg/Sales": "/view-definitions/{package}/{view}",
             "/materialize/app.pkg/Sales": "/materialize/{pattern}",
             "/configs/nightly": "/configs/{name}", "/runs/7": "/runs/{run_id}",
             "/jobs/1": "/jobs/{job_id}", "/fence/7": "/fence/{fence}",
             "/steps/s1/log": "/steps/{name}/log"}


def templated(path: str) -> str:
    for concrete, template in TEMPLATES.items():
        path = path.replace(concrete, template)
    return path


#: What a request without a valid token may carry: none, a wrong one, another scheme,
#: an empty one.
BAD_AUTHORIZATIONS = [None, "Bearer wrong-token-0123456789abcdef", f"Basic {TOKEN}", "Bearer "]


@pytest.mark.parametrize("method,path", ROUTES)
def test_every_route_needs_a_valid_token(api: Api, method: str, path: str) -> None:
    client, store, _ = api
    assert submit(client)["id"] == 1  # the job routes below name an existing job
    for authorization in BAD_AUTHORIZATIONS:
        headers = {"Authorization": authorization} if authorization else {}
        response = getattr(client, method)(path, headers=headers,
                                           data=spec_bytes(name="intruder"), content_type=JSON)
        error = error_of(response, 401)
        assert error["code"] == "unauthorized", authorization
        assert response.headers["WWW-Authenticate"].startswith("Bearer"), authorization
        assert [(j.name, j.state) for j in store.jobs.list()[0]] == [("job", State.READY)], \
            authorization


def test_healthz_needs_no_token(api: Api) -> None:
    response = api[0].get("/healthz")
    assert (response.status_code, response.get_json()) == (200, {"status": "ok"})


# -- 2. bad requests -------------------------------------------------------------------
def one(**step: Any) -> bytes:
    """A job with the single step ``a``."""
    return spec_bytes(steps=[{"name": "a", **step}])


def case(case_id: str, body: bytes, status: int, field: str, **headers: str) -> Any:
    return pytest.param(body, status, field, {"Content-Type": JSON, **headers}, id=case_id)


A, B = {"name": "a", "type": "noop"}, {"name": "b", "type": "noop"}
BAD_SUBMITS = [
    case("malformed-json", b'{"name": "x", "steps": [', 400, "body"),
    case("json-array", b"[]", 422, "body"),
    case("text-plain", spec_bytes(), 422, "Content-Type", **{"Content-Type": "text/plain"}),
    case("no-content-type", spec_bytes(), 422, "Content-Type", **{"Content-Type": ""}),
    case("unknown-field", spec_bytes(colour="red"), 422, "colour"),
    case("unknown-step-field", one(type="noop", bogus=1), 422, "steps[0].bogus"),
    case("priority-string", spec_bytes(priority="5"), 422, "priority"),
    case("argv-string", one(type="shell", argv="echo hi"), 422, "steps[0].argv"),
    case("seconds-string", one(type="sleep", seconds="1"), 422, "steps[0].seconds"),
    case("steps-not-list", json.dumps({"name": "x", "steps": A}).encode(), 422, "steps"),
    case("missing-name", json.dumps({"steps": [A]}).encode(), 422, "name"),
    case("nul-in-name", spec_bytes(name="a\u0000b"), 422, "name"),
    case("nul-in-argv", one(type="shell", argv=["echo", "a\u0000b"]), 422, "steps[0].argv[1]"),
    case("nul-in-env", one(type="shell", argv=["echo"], env={"X": "\u0000"}), 422,
         "steps[0].env.X"),
    case("nul-in-args", one(type="python", callable="demo.count_words", args={"k": ["\u0000"]}),
         422, "steps[0].args"),
    case("empty-steps", json.dumps({"name": "x", "steps": []}).encode(), 422, "steps"),
    case("unknown-step-type", one(type="teleport"), 422, "steps[0]"),
    case("unregistered-callable", one(type="python", callable="os.system"), 422,
         "steps[0].callable"),
    case("disallowed-executable", one(type="shell", argv=["rm", "-rf", "/tmp/x"]), 422,
         "steps[0].argv[0]"),
    case("duplicate-step", spec_bytes(steps=[A, A]), 422, "steps[1].name"),
    case("missing-dependency", spec_bytes(steps=[A, {**B, "depends_on": ["ghost"]}]), 422,
         "steps[1].depends_on[0]"),
    case("cycle", spec_bytes(steps=[{**A, "depends_on": ["b"]}, {**B, "depends_on": ["a"]}]),
         422, "steps"),
    case("too-large", spec_bytes(params={"blob": "x" * 4096}), 413, "body"),
    case("priority-too-high", spec_bytes(priority=1001), 422, "priority"),
    case("priority-too-low", spec_bytes(priority=-1001), 422, "priority"),
    case("idempotency-key-space", spec_bytes(), 422, "Idempotency-Key",
         **{"Idempotency-Key": "a key"}),
    case("idempotency-key-long", spec_bytes(), 422, "Idempotency-Key",
         **{"Idempotency-Key": "k" * 201}),
    case("naive-not-before", spec_bytes(not_before="2030-01-01T00:00:00"), 422, "not_before"),
    case("not-before-overflows-utc", spec_bytes(not_before="9999-12-31T23:59:59-01:00"), 422,
         "not_before"),
]


@pytest.mark.parametrize("body,status,field,headers", BAD_SUBMITS)
def test_bad_submit_is_refused_and_stores_nothing(make_api: Callable[..., Api], body: bytes,
                                                  status: int, field: str,
                                                  headers: dict[str, str]) -> None:
    client, store, auth = make_api(JOBSERVER_API__MAX_BODY_BYTES="2048",
                                   JOBSERVER_STEPS__SHELL__ALLOWED_EXECUTABLES="echo,true")
    headers = {name: value for name, value in {**auth, **headers}.items() if value}
    error = error_of(client.post("/api/v1/jobs", data=body, headers=headers), status)
    assert field in fields_of(error) or field in error["message"], error
    assert store.jobs.count_by_state() == {}
    assert store.jobs.list() == ([], None)


def test_allowed_executable_is_accepted(make_api: Callable[..., Api]) -> None:
    client, store, _ = make_api(JOBSERVER_STEPS__SHELL__ALLOWED_EXECUTABLES="echo,true")
    job = submit(client, json.loads(one(type="shell", argv=["echo", "hi"])))
    assert job["steps"][0]["spec"]["argv"] == ["echo", "hi"]
    assert store.jobs.count_by_state() == {"READY": 1}


BAD_QUERIES = [("bogus=1", "bogus"), ("limit=0", "limit"), ("limit=abc", "limit"),
               ("limit=501", "limit"), ("state=BOGUS", "state"), ("cursor=xyz", "cursor"),
               ("cursor=0", "cursor"), ("name=a%00b", "name")]


@pytest.mark.parametrize("query,field", BAD_QUERIES)
def test_bad_list_query_names_the_parameter(api: Api, query: str, field: str) -> None:
    client, _, auth = api
    submit(client)
    error = error_of(client.get(f"/api/v1/jobs?{query}", headers=auth), 422)
    assert error["code"] == "invalid_request"
    assert field in fields_of(error)


# -- 3. submit ---------------------------------------------------------------------------
def test_submit_returns_the_ready_job_with_chained_steps(api: Api) -> None:
    client, store, auth = api
    steps = [{"name": "a", "type": "noop"}, {"name": "b", "type": "sleep", "seconds": 0.5},
             {"name": "c", "type": "shell", "argv": ["echo", "hi"], "timeout": 5}]
    response = client.post("/api/v1/jobs", headers=auth, content_type=JSON,
                           data=spec_bytes(name="chain", steps=steps, priority=7,
                                           params={"day": "2024-01-01"},
                                           not_before="2030-01-01T02:00:00+02:00"))
    assert response.status_code == 201, response.get_data(as_text=True)
    job = response.get_json()
    assert response.headers["Location"] == JOB_ID.format(job["id"])
    assert "Idempotent-Replayed" not in response.headers
    assert [job[k] for k in ("state", "name", "priority", "params", "not_before", "progress")] \
        == ["READY", "chain", 7, {"day": "2024-01-01"}, "2030-01-01T00:00:00Z",
            {"done": 0, "total": 3}]
    assert [(s["name"], s["state"], s["depends_on"]) for s in job["steps"]] == [
        ("a", "READY", []), ("b", "READY", ["a"]), ("c", "READY", ["b"])]
    assert job["steps"][2]["spec"] == {"argv": ["echo", "hi"], "timeout": 5, "env": {}}
    shown = client.get(response.headers["Location"], headers=auth).get_json()
    # GET adds why a READY job is not running (the submit's answer does not: no reads).
    assert shown.pop("not_running")["code"] == "not_due"
    assert shown == job
    assert store.jobs.count_by_state() == {"READY": 1}


def test_submit_keeps_explicit_dependencies(api: Api) -> None:
    client, _, _ = api
    job = submit(client, job_spec(steps=[
        {"name": "a", "type": "noop"}, {"name": "b", "type": "noop"},
        {"name": "c", "type": "noop", "depends_on": ["a", "b"]}]))
    assert [s["depends_on"] for s in job["steps"]] == [[], [], ["a", "b"]]


# -- 4. idempotency ------------------------------------------------------------------------
def test_idempotency_key_replays_the_same_job(api: Api) -> None:
    client, store, auth = api
    spec = job_spec(name="once", priority=3)
    headers = {**auth, "Idempotency-Key": "order-42"}

    def post(body: str):
        return client.post("/api/v1/jobs", data=body, content_type=JSON, headers=headers)

    first, again = post(json.dumps(spec)), post(json.dumps(spec))
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Location"] == first.headers["Location"]
    assert again.get_json()["id"] == first.get_json()["id"]
    assert post(json.dumps(dict(reversed(spec.items())), indent=2)).status_code == 200
    assert store.jobs.count_by_state() == {"READY": 1}
    error = error_of(post(json.dumps(job_spec(name="other"))), 409)
    assert error["details"]["field"] == "Idempotency-Key"
    assert store.jobs.count_by_state() == {"READY": 1}
    assert submit(client, spec, **{"Idempotency-Key": "order-43"})["id"] != first.get_json()["id"]
    assert store.jobs.count_by_state() == {"READY": 2}


# -- 5. one job --------------------------------------------------------------------------
def test_get_job_and_events(api: Api) -> None:
    client, _, auth = api
    job = submit(client, job_spec(steps=[{"name": "a", "type": "noop"},
                                         {"name": "b", "type": "noop"}]))
    got = client.get(JOB_ID.format(job["id"]), headers=auth)
    assert got.status_code == 200 and [s["name"] for s in got.get_json()["steps"]] == ["a", "b"]
    events = client.get(JOB_ID.format(job["id"]) + "/events", headers=auth).get_json()["events"]
    assert [(e["from_state"], e["to_state"], e["message"]) for e in events] == [
        (None, "READY", "submitted")]
    assert events[0]["at"].endswith("Z")
    for path in (JOB_ID.format(job["id"] + 1), JOB_ID.format(job["id"] + 1) + "/events",
                 "/api/v1/jobs/abc", JOB_ID.format(10**20)):
        assert error_of(client.get(path, headers=auth), 404)["code"] == "not_found"


# -- 6. listing --------------------------------------------------------------------------
def test_list_newest_first_with_filters_and_pagination(api: Api) -> None:
    client, _, auth = api
    ids = [submit(client, job_spec(name="even" if i % 2 == 0 else "odd"))["id"]
           for i in range(7)]
    assert client.post(JOB_ID.format(ids[3]) + "/pause", headers=auth).status_code == 200

    def page(query: str) -> dict[str, Any]:
        response = client.get(f"/api/v1/jobs?{query}", headers=auth)
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_json()

    everything = page("")
    assert [j["id"] for j in everything["jobs"]] == ids[::-1] and not everything["next_cursor"]
    assert all(j["progress"] == {"done": 0, "total": 1} for j in everything["jobs"])
    assert [j["id"] for j in page("state=STOPPED")["jobs"]] == [ids[3]]
    assert [j["id"] for j in page("state=READY&name=even")["jobs"]] == ids[::2][::-1]
    assert page("name=nobody") == {"jobs": [], "next_cursor": None}
    assert page("cursor=9999999999999999999") == everything  # beyond any BIGINT id

    seen, body, pages = [], {"next_cursor": ""}, 0
    while body["next_cursor"] is not None:
        body = page(f"limit=3&cursor={body['next_cursor']}" if pages else "limit=3")
        seen, pages = seen + [j["id"] for j in body["jobs"]], pages + 1
        assert len(body["jobs"]) <= 3
    assert seen == ids[::-1] and pages == 3


# -- 7. operations ---------------------------------------------------------------------------
def _run(store: Store, job_id: int, steps: State | None, job: State | None) -> None:
    """Claim the job as a runner would; finish every step and the job if asked."""
    lease = FakeLease(store)
    claimed = store.runs.claim("node-test", lease, limit=1)
    assert [j.id for j in claimed] == [job_id]
    token = ClaimToken(job_id, "node-test", lease.fence, claimed[0].attempt)
    for step in claimed[0].steps if steps else []:
        # The claim started the first step already.
        attempt = step.attempt if step.state is State.RUNNING else store.runs.start_step(
            token, step)
        assert store.runs.finish_step(token, step, attempt, StepOutcome(steps))
    if job is not None:
        assert store.runs.finish_job(token, job, error="boom" if job is State.ERROR else None)


SETUPS: dict[str, Callable[[Store, int], Any]] = {
    "READY": lambda store, job_id: None,
    "RUNNING": lambda store, job_id: _run(store, job_id, None, None),
    "SUCCEED": lambda store, job_id: _run(store, job_id, State.SUCCEED, State.SUCCEED),
    "ERROR": lambda store, job_id: _run(store, job_id, State.ERROR, State.ERROR),
    "STOPPED": lambda store, job_id: store.jobs.apply(job_id, Operation.PAUSE),
    "DISCARDED": lambda store, job_id: store.jobs.apply(job_id, Operation.DISCARD),
}
# Kylin's operator rules, written out by hand: (state, action) -> resulting state.
LEGAL = {("READY", "pause"): "STOPPED", ("RUNNING", "pause"): "STOPPED",
         ("STOPPED", "resume"): "READY", ("ERROR", "resume"): "READY",
         ("SUCCEED", "rerun"): "READY", ("ERROR", "rerun"): "READY",
         ("STOPPED", "rerun"): "READY",
         ("READY", "discard"): "DISCARDED", ("RUNNING", "discard"): "DISCARDED",
         ("ERROR", "discard"): "DISCARDED", ("STOPPED", "discard"): "DISCARDED"}


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("state", list(SETUPS))
def test_operations_follow_kylins_rules(api: Api, state: str, action: str) -> None:
    client, store, auth = api
    job_id = submit(client)["id"]
    SETUPS[state](store, job_id)
    before = client.get(JOB_ID.format(job_id), headers=auth).get_json()
    assert before["state"] == state
    events_before = store.jobs.events(job_id)
    response = client.post(JOB_ID.format(job_id) + f"/{action}", headers=auth)
    after = client.get(JOB_ID.format(job_id), headers=auth).get_json()
    if (state, action) not in LEGAL:
        error = error_of(response, 409)
        assert error["code"] == "illegal_transition"
        assert error["details"]["current_state"] == state
        assert after == before and store.jobs.events(job_id) == events_before
        return
    assert response.status_code == 200, response.get_data(as_text=True)
    target = LEGAL[(state, action)]
    assert response.get_json()["state"] == after["state"] == target
    assert store.jobs.events(job_id)[-1].to_state == target
    if target == "READY":  # resume / rerun: ready to be claimed again
        assert after["node"] is None and all(s["state"] == "READY" for s in after["steps"])
        assert after["progress"]["done"] == 0
    if target == "DISCARDED":
        assert after["finished_at"] is not None


def test_operation_with_body_or_unknown_action_changes_nothing(api: Api) -> None:
    client, store, auth = api
    job_id = submit(client)["id"]
    path = JOB_ID.format(job_id)
    bad = client.post(path + "/pause", headers=auth, data='{"force": true}', content_type=JSON)
    assert "body" in fields_of(error_of(bad, 422))
    assert error_of(client.post(path + "/explode", headers=auth), 404)["code"] == "not_found"
    assert error_of(client.post(JOB_ID.format(job_id + 1) + "/pause", headers=auth), 404)
    assert store.jobs.get(job_id).state is State.READY
    assert len(store.jobs.events(job_id)) == 1
    empty = client.post(path + "/pause", headers=auth, data="{}", content_type=JSON)
    assert empty.status_code == 200 and empty.get_json()["state"] == "STOPPED"


# -- 8. cluster ------------------------------------------------------------------------------
def test_cluster_shows_mode_backend_and_live_nodes(api: Api, tmp_path: Path) -> None:
    client, store, auth = api
    # node-a as a running node is: its presence lock and the global lock held (file
    # locks in the data dir the API's config names), registered, its fence recorded.
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                                  "JOBSERVER_SERVER__ID": "node-a"})
    locks = make_lock_backend(config, store)
    presence = locks.acquire(presence_key("node-a"), blocking=False)
    scheduling = locks.acquire(GLOBAL_LOCK, blocking=False)
    assert presence is not None and scheduling is not None
    store.servers.register("node-a", host="host-a", pid=4242, mode="single", capacity=3)
    store.servers.set_role("node-a", "active")
    scheduling.fence  # noqa: B018 - drawing it records node-a as the holder
    submit(client)
    body = client.get("/api/v1/cluster", headers=auth).get_json()
    assert (body["mode"], body["lock_backend"], body["active"]) == ("single", "file", "node-a")
    assert body["jobs"] == {"READY": 1}
    [node] = body["nodes"]
    assert [node[k] for k in ("id", "host", "pid", "capacity")] == ["node-a", "host-a", 4242, 3]
    assert node["alive"] is True and node["role"] == "active"
    assert isinstance(node["heartbeat_age_seconds"], (int, float))
    assert 0 <= node["heartbeat_age_seconds"] < 10  # server.dead_after
    assert node["heartbeat_at"].endswith("Z")

    # The lock backend knows a node is gone before its heartbeat ages out: a node
    # whose presence lock is free is dead at once, and no longer active.
    presence.release()

    def gone() -> dict[str, Any] | None:
        body = client.get("/api/v1/cluster", headers=auth).get_json()
        return body if not body["nodes"][0]["alive"] else None

    body = wait_for(gone, 2, 0.05, "node-a shown dead once its presence lock is free")
    assert body["active"] is None and body["nodes"][0]["role"] == "none", body
    # Dead, though its row still says alive and its heartbeat is fresh.
    assert body["nodes"][0]["state"] == "dead" and \
        body["nodes"][0]["heartbeat_age_seconds"] < 10, body
    scheduling.release()
    locks.close()


def test_cluster_names_one_active_node(api: Api, tmp_path: Path) -> None:
    """A row may still say "active" for a node that lost the lock; the view names the
    holder of the newest fence only, and only while it is alive."""
    client, store, auth = api
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                                  "JOBSERVER_SERVER__ID": "node-b"})
    locks = make_lock_backend(config, store)
    leases = [locks.acquire(presence_key(node), blocking=False)
              for node in ("node-a", "node-b")]
    for node in ("node-a", "node-b"):
        store.servers.register(node, host="h", pid=1, mode="single", capacity=1)
        store.servers.set_role(node, "active")  # node-a's outlived its lease
    scheduling = locks.acquire(GLOBAL_LOCK, blocking=False)
    assert scheduling is not None and scheduling.fence  # node-b's fence: the newest

    def view() -> tuple[Any, dict[str, str], Any]:
        body = client.get("/api/v1/cluster", headers=auth).get_json()
        return (body["active"], {node["id"]: node["role"] for node in body["nodes"]},
                (body["planner"] or {}).get("node"))

    # In single mode the planner is the active node.
    assert view() == ("node-b", {"node-a": "standby", "node-b": "active"}, "node-b")
    scheduling.release()  # released (a drain): nobody is active, whatever the rows say
    assert wait_for(lambda: view() == (None, {"node-a": "standby", "node-b": "standby"}, None),
                    2, 0.05, "no node active or planning once the global lock is free")
    for lease in leases:
        assert lease is not None
        lease.release()
    locks.close()


# -- 9. OpenAPI -----------------------------------------------------------------------------
def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict) and "$ref" in node:
        yield node["$ref"]
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        yield from _refs(child)


def test_openapi_documents_every_route_and_resolves_refs(api: Api) -> None:
    client, _, auth = api
    doc = client.get("/api/v1/openapi.json", headers=auth).get_json()
    assert doc["openapi"] == "3.1.0"
    assert {"JobSpec", "Job", "Error"} <= set(doc["components"]["schemas"])
    expected = {(m, templated(p)) for m, p in ROUTES} | {("get", "/healthz")}
    served = set()  # every API route the app really serves, in OpenAPI's spelling
    for rule in client.application.url_map.iter_rules():
        if rule.rule.startswith("/ui/") or rule.rule == "/":
            continue  # the dashboard's pages (and / that leads to them) are not the API
        path = re.sub(r"<int[^>]*:(job_id|run_id)>", r"{\1}", rule.rule)
        path = re.sub(r"<(?:path:)?(namespace|name|consumer|package|view|pattern|fence)>",
                      r"{\1}", path)
        choices = re.search(r"<any\(([^)]*)\):action>", path)
        for option in choices.group(1).split(", ") if choices else [None]:
            served |= {(m.lower(), path.replace(choices.group(0), option) if option else path)
                       for m in rule.methods - {"HEAD", "OPTIONS"} if rule.endpoint != "static"}
    assert served == expected
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert expected <= documented, expected - documented
    refs = set(_refs(doc))
    assert refs, "the document uses no $ref at all"
    for ref in refs:
        assert ref.startswith("#/"), ref
        target: Any = doc
        for part in ref[2:].split("/"):
            assert isinstance(target, dict) and part in target, f"unresolved $ref {ref}"
            target = target[part]


# -- 10. internal errors ---------------------------------------------------------------------
def test_internal_error_is_json_without_traceback(tmp_path: Path) -> None:
    broken = Store(f"sqlite:///{tmp_path / 'never-migrated.db'}")  # no tables at all
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path),
                                  "JOBSERVER_API__TOKENS": TOKEN})
    try:
        response = create_app(config, store=broken).test_client().get("/api/v1/jobs",
                                                                       headers=AUTH)
        assert error_of(response, 500)["code"] == "internal_error"
        text = response.get_data(as_text=True).lower()
        assert not any(leak in text for leak in ("sqlite", "no such table", "select", ".py"))
    finally:
        broken.dispose()
