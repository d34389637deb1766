"""Who did it: the token (or planner) behind every submit and operator action, through
the API and ``jobserver job ID``, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.cli import main
from jobserver.config import load_config
from jobserver.spec import parse_job, validate_job
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.jobs import KeyedSubmit
from jobserver.store.records import Actor
from tests.helpers import job_spec, live_api
from tests.integration.test_schedule_evaluator import POLICY
from tests.integration.test_schedule_evaluator import Harness as ScheduleHarness

CONFIG_TOKEN = "actor-config-token-0123456789abcdef"
CONFIG_ACTOR = {"name": "config token #1", "token_id": None}
JSON = "application/json"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def client(store: Store, tmp_path: Path) -> FlaskClient:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
               "JOBSERVER_API__TOKENS": CONFIG_TOKEN}
    return create_app(load_config(environ=environ), store=store).test_client()


def submit(client: FlaskClient, secret: str, spec: dict[str, Any] | None = None,
           **headers: str) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", data=json.dumps(spec or job_spec()),
                           content_type=JSON, headers={**bearer(secret), **headers})
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.get_json()


def operate(client: FlaskClient, secret: str, job_id: int, action: str) -> dict[str, Any]:
    response = client.post(f"/api/v1/jobs/{job_id}/{action}", headers=bearer(secret))
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def events(client: FlaskClient, job_id: int) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/jobs/{job_id}/events", headers=bearer(CONFIG_TOKEN))
    assert response.status_code == 200
    return response.get_json()["events"]


@pytest.mark.parametrize("kind", ["stored", "config"])
def test_submit_and_every_operator_action_name_the_token(client: FlaskClient, store: Store,
                                                          kind: str) -> None:
    if kind == "stored":
        token, secret = store.tokens.create("ops-bot", ["read", "submit", "operate"])
        actor = {"name": "ops-bot", "token_id": token.id}
    else:
        secret, actor = CONFIG_TOKEN, CONFIG_ACTOR
    job = submit(client, secret)
    assert job["submitted_by"] == actor
    for action in ("pause", "resume", "pause", "rerun", "discard"):
        operate(client, secret, job["id"], action)

    trail = events(client, job["id"])
    assert [(e["from_state"], e["to_state"], e["message"], e["actor"])
            for e in trail if e["step"] is None] == [
        (None, "READY", "submitted", actor), ("READY", "STOPPED", "pause", actor),
        ("STOPPED", "READY", "resume", actor), ("READY", "STOPPED", "pause", actor),
        ("STOPPED", "READY", "rerun", actor), ("READY", "DISCARDED", "discard", actor)]
    # The steps the discard moved carry the same actor.
    assert [(e["step"], e["to_state"], e["actor"]) for e in trail if e["step"]] == [
        ("s1", "DISCARDED", actor)]
    shown = client.get(f"/api/v1/jobs/{job['id']}", headers=bearer(secret)).get_json()
    assert shown["submitted_by"] == actor and shown["state"] == "DISCARDED"
    listed = client.get("/api/v1/jobs", headers=bearer(secret)).get_json()["jobs"]
    assert listed[0]["submitted_by"] == actor


def test_each_change_names_whoever_asked_for_it(client: FlaskClient, store: Store) -> None:
    ci, ci_secret = store.tokens.create("ci", ["read", "submit"])
    ops, ops_secret = store.tokens.create("ops", ["read", "operate"])
    upstream = submit(client, ci_secret)
    # A job with upstreams is inserted by another path: its actor is recorded too.
    job = submit(client, ci_secret, job_spec(after=[{"job": upstream["id"]}]))
    assert job["submitted_by"] == {"name": "ci", "token_id": ci.id}
    operate(client, CONFIG_TOKEN, job["id"], "pause")
    operate(client, ops_secret, job["id"], "discard")
    trail = [(e["message"], e["actor"]) for e in events(client, job["id"])
             if e["step"] is None]
    assert trail == [("submitted", {"name": "ci", "token_id": ci.id}),
                     ("pause", CONFIG_ACTOR),
                     ("discard", {"name": "ops", "token_id": ops.id})]
    # An idempotent replay is the first submit's job, with its first submitter.
    first = submit(client, ci_secret, job_spec(name="keyed"), **{"Idempotency-Key": "k-1"})
    again = client.post("/api/v1/jobs", data=json.dumps(job_spec(name="keyed")),
                        content_type=JSON, headers={**bearer(CONFIG_TOKEN),
                                                    "Idempotency-Key": "k-1"}).get_json()
    assert again["id"] == first["id"] and again["submitted_by"]["name"] == "ci"


def test_the_engines_own_changes_name_no_actor_but_their_node(client: FlaskClient,
                                                             store: Store) -> None:
    from tests.helpers import FakeLease

    job = submit(client, CONFIG_TOKEN)
    [claimed] = store.runs.claim("node-1", FakeLease(store), 1)
    assert claimed.id == job["id"] and claimed.submitted_by == "config token #1"
    claim = [e for e in events(client, job["id"]) if e["to_state"] == "RUNNING"]
    assert claim and all(e["actor"] is None and e["node"] == "node-1" for e in claim)


def test_planners_submit_under_their_own_names(store: Store) -> None:
    spec = parse_job(json.dumps(job_spec(name="planned")))
    deps = validate_job(spec, POLICY)
    ids = store.jobs.submit_keyed([KeyedSubmit(spec, deps, "plain", None),
                                   KeyedSubmit(spec, deps, "batch", None,
                                               Actor("batch ORDER/IN"))])
    assert store.jobs.get(ids["plain"]).submitted_by == "system"
    batch_job = store.jobs.get(ids["batch"])
    assert (batch_job.submitted_by, batch_job.submitted_by_token_id) == ("batch ORDER/IN", None)
    assert store.jobs.events(ids["batch"])[0].actor == "batch ORDER/IN"

    schedules = ScheduleHarness(store)
    schedules.add("every5", {"type": "time", "cron": "*/5 * * * *"})
    schedules.round(minutes=6)
    [launched] = schedules.jobs()
    assert launched.submitted_by == "schedule default/every5"
    assert store.jobs.events(launched.id)[0].actor == "schedule default/every5"


# -- jobserver job ID -------------------------------------------------------------------
@pytest.fixture
def url(store: Store, tmp_path: Path) -> Iterator[str]:
    with live_api(store, tmp_path / "data", CONFIG_TOKEN) as base:
        yield base


def test_the_job_command_shows_the_trail_with_its_actors(url: str, store: Store,
                                                         tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    token, secret = store.tokens.create("ops-bot", ["read", "submit", "operate"])

    def cli(*args: str, as_token: str = CONFIG_TOKEN) -> str:
        assert main([*args, "--url", url, "--token", as_token]) == 0
        return capsys.readouterr().out

    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(job_spec(name="from-cli")))
    job_id = json.loads(cli("submit", str(spec), "--json", as_token=secret))["id"]
    out = cli("job", str(job_id))
    assert re.search(rf"^submitted: .* by ops-bot \(token {token.id}\)$", out, re.M), out
    # READY, and no node has registered: the reason says so.
    assert ("not running: no node is the active scheduler (single mode) [no_scheduler]"
            in out)
    cli("pause", str(job_id))
    out = cli("job", str(job_id))
    assert "not running" not in out  # STOPPED: the field is for READY jobs
    lines = out.splitlines()
    header, *trail = lines[lines.index("events (2):") + 1:]
    assert header.split() == ["AT", "WHAT", "CHANGE", "BY", "MESSAGE"]
    assert trail[0].split()[1:] == ["job", "READY", "ops-bot", "(token", f"{token.id})",
                                    "submitted"]
    assert trail[1].split()[1:] == ["job", "READY", "->", "STOPPED", "config", "token", "#1",
                                    "pause"]
    assert store.jobs.get(job_id).state is State.STOPPED
