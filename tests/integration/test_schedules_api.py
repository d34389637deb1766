"""Schedules through the HTTP API, on SQLite and PostgreSQL: CDAP's life cycle
(created disabled; enable; disable, update and delete abort what is pending and leave
launched jobs alone), the 422s that name the field and store nothing, and the scopes.

No evaluator runs: a pending schedule-job is inserted straight into the store, as
the evaluator would have left it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, insert, select, update

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.datasets.consumer_spec import parse_consumer
from jobserver.datasets.spec import parse_dataset
from jobserver.schedules.tables import evaluations, schedule_jobs, schedules, watches
from jobserver.states import State
from jobserver.store import Store
from tests.helpers import wait_for

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = "/api/v1/schedules"
NIGHTLY = f"{BASE}/default/nightly"

Api = tuple[FlaskClient, Store]


@pytest.fixture
def make_api(store: Store, tmp_path: Path) -> Callable[..., Api]:
    def build(**env: str) -> Api:
        environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                   "JOBSERVER_API__TOKENS": TOKEN,
                   "JOBSERVER_STEPS__SHELL__ALLOWED_EXECUTABLES": "echo,true", **env}
        return create_app(load_config(environ=environ), store=store).test_client(), store
    return build


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api()


def body(name: str = "nightly", **fields: Any) -> dict[str, Any]:
    """A valid schedule: a noop template fired by a cron line in Berlin."""
    return {"name": name, "template": {"name": "etl", "steps": [{"name": "a", "type": "noop"}]},
            "trigger": {"type": "time", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
            **fields}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status and response.is_json, response.get_data(as_text=True)
    return response.get_json()["error"]


def fields_of(error: dict[str, Any]) -> list[str]:
    details = error["details"] if isinstance(error["details"], list) else [error["details"]]
    return [item.get("field") for item in details if item]


def create(client: FlaskClient, **fields: Any) -> dict[str, Any]:
    return ok(client.post(BASE, json=body(**fields), headers=AUTH), 201)


def add_schedule_job(store: Store, schedule_id: int, state: str, job_id: int | None = None,
                     generation: int = 1) -> int:
    """A schedule-job as the evaluator would have left it."""
    now = datetime.now(timezone.utc)
    with store.tx.write() as conn:
        return int(conn.execute(insert(schedule_jobs).values(
            schedule_id=schedule_id, generation=generation, state=state, fire_time=now,
            notifications=[], trigger_state={}, properties={}, created_at=now,
            updated_at=now, deadline_at=now + timedelta(days=1), next_check_at=now,
            job_id=job_id, reason=None).returning(schedule_jobs.c.id)).scalar_one())


def rows(store: Store, table: Any, **where: Any) -> list[Any]:
    query = select(table).where(*(table.c[name] == value for name, value in where.items()))
    with store.tx.read() as conn:
        return list(conn.execute(query).mappings())


def count(store: Store, table: Any) -> int:
    with store.tx.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def engine_job(client: FlaskClient) -> int:
    response = client.post("/api/v1/jobs", headers=AUTH,
                           json={"name": "etl", "steps": [{"name": "a", "type": "noop"}]})
    return int(ok(response, 201)["id"])


# -- life cycle ------------------------------------------------------------------------
def test_a_schedule_is_created_disabled(api: Api) -> None:
    client, store = api
    response = client.post(BASE, json=body(), headers=AUTH)
    schedule = ok(response, 201)
    assert response.headers["Location"] == NIGHTLY
    assert (schedule["namespace"], schedule["name"], schedule["enabled"],
            schedule["generation"]) == ("default", "nightly", False, 1)
    assert schedule["next_fire_time"] is None and schedule["next_check_at"] is None
    assert "02:30" in schedule["trigger_text"] and "Europe/Berlin" in schedule["trigger_text"]
    assert schedule["spec"]["trigger"]["cron"] == "30 2 * * *"
    assert ok(client.get(NIGHTLY, headers=AUTH)) == schedule
    assert ok(client.get(BASE, headers=AUTH))["schedules"] == [schedule]
    error = error_of(client.post(BASE, json=body(), headers=AUTH), 409)
    assert "already exists" in error["message"]


def test_enable_then_disable(api: Api) -> None:
    client, _ = api
    create(client)
    enabled = ok(client.post(f"{NIGHTLY}/enable", headers=AUTH))
    assert enabled["enabled"] and enabled["enabled_at"] and enabled["next_check_at"]
    fire = datetime.fromisoformat(enabled["next_fire_time"])
    assert fire > datetime.now(timezone.utc)
    assert fire.astimezone(timezone(timedelta(hours=1))).hour in (2, 3)  # 02:30 Berlin
    assert ok(client.post(f"{NIGHTLY}/enable", headers=AUTH))["enabled_at"] == \
        enabled["enabled_at"]  # enabling again changes nothing
    disabled = ok(client.post(f"{NIGHTLY}/disable", headers=AUTH))
    assert not disabled["enabled"]
    assert disabled["next_fire_time"] is None and disabled["next_check_at"] is None
    listed = ok(client.get(f"{BASE}?enabled=false", headers=AUTH))["schedules"]
    assert [s["name"] for s in listed] == ["nightly"]
    assert ok(client.get(f"{BASE}?enabled=true", headers=AUTH))["schedules"] == []


def test_disable_aborts_pending_schedule_jobs_and_leaves_launched_ones(api: Api) -> None:
    client, store = api
    schedule = create(client, enabled=True)
    job_id = engine_job(client)
    launched = add_schedule_job(store, schedule["id"], "LAUNCHED", job_id)
    pending_launch = add_schedule_job(store, schedule["id"], "PENDING_LAUNCH")
    pending = add_schedule_job(store, schedule["id"], "PENDING_CONSTRAINTS")
    shown = ok(client.get(NIGHTLY, headers=AUTH))["pending"]
    assert (shown["id"], shown["state"]) == (pending, "PENDING_CONSTRAINTS")

    assert ok(client.post(f"{NIGHTLY}/disable", headers=AUTH))["pending"] is None
    jobs = ok(client.get(f"{NIGHTLY}/jobs", headers=AUTH))["schedule_jobs"]
    assert [(j["id"], j["state"], j["reason"], j["job_id"]) for j in jobs] == [
        (pending, "ABORTED", "schedule disabled", None),
        (pending_launch, "ABORTED", "schedule disabled", None),
        (launched, "LAUNCHED", None, job_id)]
    assert store.jobs.get(job_id).state is State.READY  # the engine's job runs on
    found = ok(client.get(f"{NIGHTLY}/evaluations", headers=AUTH))["evaluations"]
    assert sorted((e["schedule_job_id"], e["outcome"], e["reason"]) for e in found) == [
        (pending_launch, "aborted", "schedule disabled"),
        (pending, "aborted", "schedule disabled")]
    aborted = ok(client.get(f"{NIGHTLY}/jobs?state=ABORTED&limit=1", headers=AUTH))
    assert [j["id"] for j in aborted["schedule_jobs"]] == [pending]
    following = ok(client.get(f"{NIGHTLY}/jobs?state=ABORTED&cursor={aborted['next_cursor']}",
                              headers=AUTH))
    assert [j["id"] for j in following["schedule_jobs"]] == [pending_launch]
    assert following["next_cursor"] is None


def test_update_is_delete_and_create_but_keeps_the_flag(api: Api) -> None:
    client, store = api
    schedule = create(client, enabled=True)
    with store.tx.write() as conn:  # what the evaluator remembered of the old trigger
        conn.execute(update(schedules).values(trigger_state={"": "2026-01-01T00:00:00Z"}))
    pending = add_schedule_job(store, schedule["id"], "PENDING_TRIGGER")
    changed = body(trigger={"type": "time", "interval": "15m"},
                   constraints=[{"type": "concurrency", "limit": 1}])
    reply = ok(client.put(NIGHTLY, json=changed, headers=AUTH))
    assert (reply["change"], reply["changed"], reply["dry_run"]) == (
        "updated", ["trigger", "constraints"], False)
    updated = reply["schedule"]
    assert (updated["generation"], updated["enabled"], updated["pending"]) == (2, True, None)
    # Its time triggers count from the update, as for a new schedule.
    assert datetime.fromisoformat(updated["enabled_at"]) > \
        datetime.fromisoformat(schedule["enabled_at"])
    assert rows(store, schedules)[0]["trigger_state"] == {}
    assert [(j["state"], j["reason"]) for j in rows(store, schedule_jobs, id=pending)] == [
        ("ABORTED", "schedule updated")]
    again = ok(client.put(NIGHTLY, json=changed, headers=AUTH))
    assert (again["change"], again["changed"], again["schedule"]["generation"]) == (
        "unchanged", [], 2)
    flag_only = ok(client.put(NIGHTLY, json={**changed, "enabled": False}, headers=AUTH))
    assert (flag_only["change"], flag_only["changed"]) == ("updated", ["enabled"])
    assert (flag_only["schedule"]["enabled"], flag_only["schedule"]["generation"]) == (False, 2)


def test_put_creates_and_a_dry_run_changes_nothing(api: Api) -> None:
    client, store = api
    dry = ok(client.put(f"{NIGHTLY}?dry_run=true", json=body(), headers=AUTH))
    assert dry == {"schedule": None, "change": "created", "changed": [], "dry_run": True}
    assert count(store, schedules) == 0
    created = ok(client.put(NIGHTLY, json=body(enabled=True), headers=AUTH), 201)
    assert created["change"] == "created" and created["schedule"]["enabled"]
    before = rows(store, schedules)
    dry = ok(client.put(f"{NIGHTLY}?dry_run=true", json=body(description="x", enabled=False),
                        headers=AUTH))
    assert (dry["change"], dry["changed"]) == ("updated", ["description", "enabled"])
    assert rows(store, schedules) == before
    error = error_of(client.put(f"{BASE}/default/other", json=body(), headers=AUTH), 422)
    assert fields_of(error) == ["name"]


def test_delete_disables_then_removes_everything_but_launched_jobs(api: Api) -> None:
    client, store = api
    create(client, name="other")
    schedule = create(client, enabled=True, trigger={
        "type": "and", "parts": [{"type": "job_status", "job": "extract"},
                                 {"type": "job_status", "schedule": "other"}]})
    assert {(w["kind"], w["target"]) for w in rows(store, watches)} == {
        ("job", "extract"), ("schedule", "default/other")}
    job_id = engine_job(client)
    add_schedule_job(store, schedule["id"], "LAUNCHED", job_id)
    add_schedule_job(store, schedule["id"], "PENDING_TRIGGER")
    response = client.delete(NIGHTLY, headers=AUTH)
    assert response.status_code == 204, response.get_data(as_text=True)
    assert error_of(client.get(NIGHTLY, headers=AUTH), 404)["code"] == "not_found"
    assert [count(store, table) for table in (schedules, schedule_jobs, evaluations,
                                              watches)] == [1, 0, 0, 0]  # other's
    assert store.jobs.get(job_id).state is State.READY
    for method, path in (("delete", NIGHTLY), ("post", f"{NIGHTLY}/enable"),
                         ("post", f"{NIGHTLY}/disable"), ("get", f"{NIGHTLY}/jobs"),
                         ("get", f"{NIGHTLY}/evaluations")):
        error_of(getattr(client, method)(path, headers=AUTH), 404)


def test_watches_follow_updates(api: Api) -> None:
    client, store = api
    declare(store, "logs", "raw")
    create(client, trigger={"type": "job_status", "job": "extract"})
    ok(client.put(NIGHTLY, json=body(trigger={"type": "partition", "dataset": "logs/raw"}),
                  headers=AUTH))
    assert [(w["kind"], w["target"]) for w in rows(store, watches)] == [("dataset", "logs/raw")]


def test_list_pages_by_namespace_and_name(api: Api) -> None:
    client, _ = api
    for namespace, name in (("b", "x"), ("a", "y"), ("a", "x"), ("default", "z")):
        create(client, namespace=namespace, name=name)
    seen, cursor = [], None
    while True:
        query = f"?limit=3&cursor={cursor}" if cursor else "?limit=3"
        page = ok(client.get(BASE + query, headers=AUTH))
        seen += [f"{s['namespace']}/{s['name']}" for s in page["schedules"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["a/x", "a/y", "b/x", "default/z"]
    only_a = ok(client.get(f"{BASE}?namespace=a", headers=AUTH))["schedules"]
    assert [s["name"] for s in only_a] == ["x", "y"]
    for query, field in (("limit=0", "limit"), ("enabled=maybe", "enabled"),
                         ("cursor=a", "cursor"), ("bogus=1", "bogus")):
        assert field in fields_of(error_of(client.get(f"{BASE}?{query}", headers=AUTH), 422))


# -- bad input ---------------------------------------------------------------------------
SHELL_RM = {"name": "etl", "steps": [{"name": "a", "type": "shell", "argv": ["rm", "x"]}]}
BAD = [
    ("cron-with-6-fields", {"trigger": {"type": "time", "cron": "0 0 * * * *"}},
     "trigger.cron"),
    ("unknown-time-zone", {"trigger": {"type": "time", "cron": "0 * * * *",
                                       "timezone": "Mars/Olympus"}}, "trigger.timezone"),
    ("window-start-equals-end", {"constraints": [
        {"type": "time_window", "start": "10:00", "end": "10:00"}]}, "constraints[0].end"),
    ("window-25-00", {"constraints": [
        {"type": "time_window", "start": "25:00", "end": "10:00"}]}, "constraints[0].start"),
    ("concurrency-0", {"constraints": [{"type": "concurrency", "limit": 0}]},
     "constraints[0].limit"),
    ("delay-abort", {"constraints": [{"type": "delay", "duration": "5m", "on_unmet": "abort"}]},
     "constraints[0].on_unmet"),
    ("and-without-parts", {"trigger": {"type": "and", "parts": []}}, "trigger.parts"),
    ("template-refused", {"template": SHELL_RM}, "template.steps[0].argv[0]"),
    ("template-unknown-field", {"template": {"name": "etl", "steps": [
        {"name": "a", "type": "noop", "bogus": 1}]}}, "template.steps[0].bogus"),
    ("namespace-with-slash", {"namespace": "a/b"}, "namespace"),
    ("name-with-slash", {"name": "a/b"}, "name"),
    ("enabled-not-bool", {"enabled": "yes"}, "enabled"),
    ("partition-on-a-missing-dataset", {"trigger": {"type": "partition", "dataset": "raw"}},
     "trigger.dataset"),
    ("job-status-on-a-missing-schedule", {"trigger": {"type": "job_status",
                                                      "schedule": "extract"}},
     "trigger.schedule"),
    ("a-missing-dataset-in-an-or", {"trigger": {"type": "or", "parts": [
        {"type": "time", "interval": "1h"},
        {"type": "partition", "dataset": "logs/raw"}]}}, "trigger.parts[1].dataset"),
]


@pytest.mark.parametrize("fields,field", [pytest.param(f, p, id=i) for i, f, p in BAD])
def test_bad_schedule_is_refused_naming_the_field_and_stores_nothing(
        api: Api, fields: dict[str, Any], field: str) -> None:
    client, store = api
    error = error_of(client.post(BASE, json=body(**fields), headers=AUTH), 422)
    assert field in fields_of(error), error
    if "/" not in fields.get("name", "") + fields.get("namespace", ""):
        error = error_of(client.put(NIGHTLY, json=body(**fields), headers=AUTH), 422)
        assert field in fields_of(error), error
    assert [count(store, table) for table in (schedules, watches)] == [0, 0]


def declare(store: Store, namespace: str, name: str) -> None:
    store.datasets.create(parse_dataset({"namespace": namespace, "name": name,
                                         "key": [{"name": "day", "type": "date"}]}))


def test_a_trigger_on_a_missing_consumer_or_key_field_is_refused_until_it_exists(
        api: Api) -> None:
    client, store = api
    declare(store, "default", "raw")
    on_consumer = body(trigger={"type": "partition", "dataset": "raw", "consumer": "load"})
    error = error_of(client.post(BASE, json=on_consumer, headers=AUTH), 422)
    assert fields_of(error) == ["trigger.consumer"]
    assert "dataset default/raw has no consumer load" in error["message"]
    on_field = body(trigger={"type": "and", "parts": [
        {"type": "partition", "dataset": "raw", "filter": ["day >= 2026-11-01", "shop = a"]},
        {"type": "job_status", "schedule": "nightly"}]})  # its own runs: allowed
    error = error_of(client.put(NIGHTLY, json=on_field, headers=AUTH), 422)
    assert fields_of(error) == ["trigger.parts[0].filter[1]"] and "shop" in error["message"]
    assert count(store, schedules) == 0
    dry = ok(client.put(f"{NIGHTLY}?dry_run=true", json=on_consumer, headers=AUTH))
    assert dry["change"] == "created"  # apply --dry-run of a file that declares it too
    store.consumers.put(parse_consumer({"dataset": "raw", "name": "load"}))
    ok(client.put(NIGHTLY, json=on_consumer, headers=AUTH), 201)
    on_field["trigger"]["parts"][0]["filter"] = ["day >= 2026-11-01"]
    assert ok(client.put(NIGHTLY, json=on_field, headers=AUTH))["change"] == "updated"


def test_malformed_bodies(api: Api) -> None:
    client, store = api
    assert error_of(client.post(BASE, data=b"{", content_type="application/json",
                                headers=AUTH), 400)["code"] == "malformed_request"
    assert fields_of(error_of(client.post(BASE, data=b"[]", content_type="application/json",
                                          headers=AUTH), 422)) == ["body"]
    assert fields_of(error_of(client.post(BASE, data=b"{}", content_type="text/plain",
                                          headers=AUTH), 422)) == ["Content-Type"]
    assert count(store, schedules) == 0


# -- scopes ------------------------------------------------------------------------------
def test_scopes(api: Api) -> None:
    client, store = api
    create(client)
    tokens = {scopes: store.tokens.create(scopes.replace(",", "-"), scopes.split(","))[1]
              for scopes in ("read", "read,submit", "read,submit,shell", "read,operate")}

    def call(scopes: str, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {tokens[scopes]}"}
        return getattr(client, method)(path, headers=headers, **kwargs)

    for path in (BASE, NIGHTLY, f"{NIGHTLY}/jobs", f"{NIGHTLY}/evaluations"):
        ok(call("read", "get", path))
    for method, path in (("post", BASE), ("put", f"{BASE}/default/other")):
        error = error_of(call("read", method, path, json=body(name="other")), 403)
        assert error["details"]["required_scope"] == "submit"
    shell = body(name="other", template={"name": "etl", "steps": [
        {"name": "a", "type": "shell", "argv": ["echo", "hi"]}]})
    error = error_of(call("read,submit", "post", BASE, json=shell), 403)
    assert fields_of(error) == ["template.steps[0].type"]
    assert count(store, schedules) == 1
    ok(call("read,submit,shell", "post", BASE, json=shell), 201)
    for method, path in (("post", f"{NIGHTLY}/enable"), ("post", f"{NIGHTLY}/disable"),
                         ("delete", NIGHTLY)):
        error = error_of(call("read,submit", method, path), 403)
        assert error["details"]["required_scope"] == "operate"
    ok(call("read,operate", "post", f"{NIGHTLY}/enable"))
    assert call("read,operate", "delete", NIGHTLY).status_code == 204


# -- the evaluator and the API serialise on the schedule's row (PostgreSQL) --------------
def test_disable_waits_for_the_evaluators_lock_and_aborts_what_it_wrote(
        store_on_postgres: Store, tmp_path: Path) -> None:
    """PostgreSQL only: SQLite's write transactions are serial by themselves."""
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN}
    store = store_on_postgres
    client = create_app(load_config(environ=environ), store=store).test_client()
    schedule = create(client, enabled=True)
    disabled: list[Any] = []
    with store.engine.begin() as evaluator:  # an evaluator's round, holding the row
        evaluator.execute(select(schedules.c.id).where(schedules.c.id == schedule["id"])
                          .with_for_update())
        worker = threading.Thread(target=lambda: disabled.append(
            store.schedules.disable("default", "nightly")))
        worker.start()
        wait_for(lambda: _waiting_on_a_lock(store), what="disable waiting for the row lock")
        now = datetime.now(timezone.utc)
        evaluator.execute(insert(schedule_jobs).values(
            schedule_id=schedule["id"], generation=1, state="PENDING_TRIGGER",
            notifications=[], trigger_state={}, properties={}, created_at=now,
            updated_at=now, deadline_at=now + timedelta(days=1)))
    worker.join(10)
    assert disabled and not disabled[0].enabled
    assert [(j["state"], j["reason"]) for j in rows(store, schedule_jobs)] == [
        ("ABORTED", "schedule disabled")]


def _waiting_on_a_lock(store: Store) -> bool:
    with store.engine.connect() as conn:
        return bool(conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()").scalar())
