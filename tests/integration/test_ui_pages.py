"""The dashboard's pages through Flask's test client, on SQLite and PostgreSQL: what
each shows, what it offers for a token's scopes, and how it refuses (the browser
tests drive the same through a real cluster)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.logs import LogKey
from tests.helpers import job_spec
from tests.integration.test_ui_sessions import HTML, form_value, sign_in

CONFIG_TOKEN = "ui-pages-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {CONFIG_TOKEN}"}


@pytest.fixture
def signed_in(store: Store, tmp_path: Path) -> Callable[..., FlaskClient]:
    """``signed_in(*scopes)``: a client signed in with a stored token of those scopes
    (none: the config token, every scope)."""
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
               "JOBSERVER_API__TOKENS": CONFIG_TOKEN}
    app = create_app(load_config(environ=environ), store=store)

    def make(*scopes: str) -> FlaskClient:
        client = app.test_client()
        secret = store.tokens.create("ui-" + "-".join(scopes), list(scopes))[1] \
            if scopes else CONFIG_TOKEN
        assert sign_in(client, secret).status_code == 303
        return client
    return make


def submit(client: FlaskClient, spec: dict[str, Any]) -> int:
    response = client.post("/api/v1/jobs", data=json.dumps(spec),
                           content_type="application/json", headers=BEARER)
    assert response.status_code == 201, response.get_json()
    return int(response.get_json()["id"])


def text_of(response: Any, status: int = 200) -> str:
    assert response.status_code == status, response.get_data(True)[:500]
    return response.get_data(True)


def action_buttons(html: str) -> list[str]:
    return re.findall(r'<form method="post" action="/ui/jobs/\d+/(\w+)"', html)


def test_the_job_page_shows_what_it_waits_for_and_offers_the_scopes_actions(
        signed_in: Callable[..., FlaskClient], store: Store) -> None:
    operator = signed_in()
    upstream = submit(operator, job_spec("extract", not_before="2999-01-01T00:00:00Z"))
    job_id = submit(operator, job_spec("report", after=[{"job": upstream,
                                                         "when": "succeeded"}]))
    page = text_of(operator.get(f"/ui/jobs/{job_id}", headers=HTML))
    assert f'data-upstream="{upstream}"' in page and "succeeded" in page
    assert 'data-not-running="waiting_upstream"' in page
    assert action_buttons(page) == ["pause", "discard"]
    assert 'data-confirm="Discard job #' in page

    reader = signed_in("read")
    page = text_of(reader.get(f"/ui/jobs/{job_id}", headers=HTML))
    assert action_buttons(page) == [] and 'data-upstream' in page
    forced = reader.post(f"/ui/jobs/{job_id}/pause",
                         data={"csrf_token": form_value(page, "csrf_token")}, headers=HTML)
    assert "lacks the &#39;operate&#39; scope" in text_of(forced, 403)
    assert store.jobs.get(job_id).state is State.READY


def test_actions_go_through_the_store_and_name_the_token(
        signed_in: Callable[..., FlaskClient], store: Store) -> None:
    client = signed_in("read", "operate")
    job_id = submit(client, job_spec("held", not_before="2999-01-01T00:00:00Z"))
    csrf = form_value(text_of(client.get(f"/ui/jobs/{job_id}", headers=HTML)), "csrf_token")
    done = client.post(f"/ui/jobs/{job_id}/pause", data={"csrf_token": csrf}, headers=HTML)
    assert (done.status_code, done.headers["Location"]) == (
        303, f"/ui/jobs/{job_id}?done=pause")
    assert "Paused." in text_of(client.get(done.headers["Location"], headers=HTML))
    [event] = [e for e in store.jobs.events(job_id) if e.message == "pause"]
    assert (event.to_state, event.actor) == ("STOPPED", "ui-read-operate")
    refused = client.post(f"/ui/jobs/{job_id}/pause", data={"csrf_token": csrf}, headers=HTML)
    assert "Refused:" in text_of(refused, 409)
    assert store.jobs.get(job_id).state is State.STOPPED


def test_a_step_log_is_served_by_session(signed_in: Callable[..., FlaskClient],
                                         store: Store) -> None:
    client = signed_in("read")
    job_id = submit(client, job_spec("logged"))
    assert client.get(f"/ui/jobs/{job_id}/steps/s1/log").status_code == 404
    store.step_logs.append(LogKey(job_id, "s1", 1), 0, 0, b"line one\nline two\n")
    with store.tx.write() as conn:
        conn.exec_driver_sql(f"UPDATE steps SET attempt = 1 WHERE job_id = {job_id}")
    log = client.get(f"/ui/jobs/{job_id}/steps/s1/log?attempt=1")
    assert (log.status_code, log.get_data()) == (200, b"line one\nline two\n")
    assert log.content_type.startswith("text/plain")
    assert client.application.test_client().get(
        f"/ui/jobs/{job_id}/steps/s1/log", headers=BEARER).status_code == 401


def test_the_jobs_page_filters_and_names_a_bad_filter(signed_in: Callable[..., FlaskClient],
                                                      store: Store) -> None:
    client = signed_in()
    ids = [submit(client, job_spec(name)) for name in ("a", "b", "a")]
    page = text_of(client.get("/ui/jobs?name=a&state=&node=", headers=HTML))
    assert re.findall(r'data-job="(\d+)"', page) == [str(ids[2]), str(ids[0])]
    first = text_of(client.get("/ui/jobs?limit=2", headers=HTML))
    assert re.findall(r'data-job="(\d+)"', first) == [str(ids[2]), str(ids[1])]
    older = re.search(r'href="([^"]+)" rel="next"', first)
    assert older and "before=" in older.group(1)
    rest = text_of(client.get(older.group(1).replace("&amp;", "&"), headers=HTML))
    assert re.findall(r'data-job="(\d+)"', rest) == [str(ids[0])]
    live = text_of(client.get("/ui/jobs/live?state=READY"))
    assert "<html" not in live and f'data-job="{ids[0]}"' in live
    bad = client.get("/ui/jobs?state=SOON", headers=HTML)
    assert "state" in text_of(bad, 422)
    assert client.get("/ui/jobs?colour=red").get_json()["error"]["details"][0]["field"] == \
        "colour"


def test_the_navigation_lists_the_pages_that_exist(signed_in: Callable[..., FlaskClient]) -> None:
    page = text_of(signed_in().get("/ui/cluster", headers=HTML))
    nav = re.search(r'<nav class="nav".*?</nav>', page, re.S)
    assert nav
    links = re.findall(r'href="(/ui/[^"]*)"[^>]*>(\w+)</a>', nav.group(0))
    assert [label for _, label in links][:2] == ["Cluster", "Jobs"]
    assert 'aria-current="page">Cluster' in nav.group(0)
