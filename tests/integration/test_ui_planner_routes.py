"""The planners' pages through Flask's test client on SQLite and PostgreSQL: who may
see and do what (scopes, CSRF), refusals as pages that name the problem, and the
actions' effects in the store. The browser tests (``tests/browser``) drive the same
pages in Chromium against a real cluster."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from jobserver.apply import apply_documents, load
from jobserver.client import Client
from jobserver.store import Store
from tests.helpers import live_api
from tests.integration.test_ui_sessions import (CONFIG_TOKEN, HTML, form_value,  # noqa: F401
                                                make_app, sign_in)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NIGHTLY = "/ui/schedules/default/nightly-extract"
HOURLY = "/ui/schedules/default/hourly-compaction"
SETUP_TIMEOUT = 60.0


@pytest.fixture
def applied(store: Store, tmp_path: Path) -> Store:
    """The example schedules, datasets and views, applied as ``jobserver apply`` does."""
    with live_api(store, tmp_path / "api", CONFIG_TOKEN) as url:
        for name in ("schedules.yaml", "datasets.yaml", "views.yaml"):
            text = (EXAMPLES / name).read_text()
            # The CLI's 10 s timeout is for one request to a server; here a loaded CI
            # machine once took 10 s over a SQLite write of the setup, not the test.
            client = Client(url, CONFIG_TOKEN, timeout=SETUP_TIMEOUT)
            assert apply_documents(client, load(text), out=io.StringIO()) == 0
    return store


@pytest.fixture
def browse(applied: Store, make_app: Callable[..., Flask]) -> Callable[..., FlaskClient]:
    """A test client signed in with a stored token of ``scopes``."""
    app = make_app()

    def signed_in(*scopes: str) -> FlaskClient:
        client = app.test_client()
        _, secret = applied.tokens.create(f"t-{'-'.join(scopes)}", list(scopes))
        assert sign_in(client, secret).status_code == 303
        return client
    return signed_in


def page(client: FlaskClient, path: str, status: int = 200) -> str:
    response = client.get(path, headers=HTML)
    assert response.status_code == status, (path, response.get_data(True)[:500])
    return response.get_data(True)


def test_every_planner_page_answers_a_read_token(browse: Callable[..., FlaskClient]) -> None:
    client = browse("read")
    for path in ("/ui/schedules", NIGHTLY, "/ui/datasets", "/ui/datasets/default/raw",
                 "/ui/views", "/ui/views?pattern=app.eci.source/Shops/e(prod,staging)",
                 "/ui/batches"):
        html = page(client, path)
        assert 'href="/ui/static/planners.css"' in html and "Traceback" not in html


def test_the_switch_is_offered_to_operate_only(browse: Callable[..., FlaskClient],
                                               applied: Store) -> None:
    reader = page(browse("read"), NIGHTLY)
    assert "every day at 02:30 Europe/Berlin" in reader
    assert "/disable" not in reader and 'data-enabled="true"' in reader
    operator = page(browse("read", "operate"), NIGHTLY)
    assert f'action="{NIGHTLY}/disable"' in operator


def test_the_switch_disables_and_enables_through_the_catalog(
        browse: Callable[..., FlaskClient], applied: Store) -> None:
    client = browse("read", "operate")
    csrf = form_value(page(client, HOURLY), "csrf_token")
    response = client.post(f"{HOURLY}/enable", data={"csrf_token": csrf, "back": HOURLY},
                           headers=HTML)
    assert response.status_code == 303 and response.headers["Location"] == HOURLY
    assert applied.schedules.get("default", "hourly-compaction").enabled
    assert 'aria-checked="true"' in page(client, HOURLY)
    client.post(f"{HOURLY}/disable", data={"csrf_token": csrf}, headers=HTML)
    assert not applied.schedules.get("default", "hourly-compaction").enabled


def test_the_switch_refuses_without_csrf_or_scope(browse: Callable[..., FlaskClient],
                                                  applied: Store) -> None:
    operator = browse("read", "operate")
    assert operator.post(f"{NIGHTLY}/disable", data={}, headers=HTML).status_code == 403
    reader = browse("read")
    csrf = form_value(page(reader, NIGHTLY), "csrf_token")
    refused = reader.post(f"{NIGHTLY}/disable", data={"csrf_token": csrf}, headers=HTML)
    assert refused.status_code == 403 and "operate" in refused.get_data(True)
    assert applied.schedules.get("default", "nightly-extract").enabled


def test_refused_filters_and_patterns_are_pages_naming_the_problem(
        browse: Callable[..., FlaskClient]) -> None:
    client = browse("read", "submit")
    html = page(client, "/ui/datasets/default/raw?where=shop+%3D+x", 422)
    assert "where[0]" in html and "&#39;shop&#39; is not a key field" in html
    html = page(client, "/ui/views?pattern=app.eci.stage/Search/SHOP10/rymd(2015", 422)
    assert "unbalanced parenthesis" in html
    html = page(client, "/ui/views/materialize?pattern=app.eci.stage/Nope/x", 422)
    assert "app.eci.stage/Nope" in html
    page(client, "/ui/schedules/default/nope", 404)
    page(client, "/ui/batches/123456", 404)


def test_materialize_needs_submit_and_runs_only_the_plan_shown(
        browse: Callable[..., FlaskClient], applied: Store) -> None:
    pattern = "app.eci.source/Shops/e(prod,staging)"
    page(browse("read"), f"/ui/views/materialize?pattern={pattern}", 403)
    client = browse("read", "submit")
    html = page(client, f"/ui/views/materialize?pattern={pattern}")
    assert 'data-action="no-data"' in html  # no _SUCCESS flags: nothing to set
    form = {"csrf_token": form_value(html, "csrf_token"), "pattern": pattern,
            "mode": "DEFAULT", "digest": "not the plan shown"}
    changed = client.post("/ui/views/materialize", data=form, headers=HTML)
    assert changed.status_code == 409 and "The plan changed" in changed.get_data(True)
    assert applied.views.listing() == []  # nothing ran
    form["digest"] = form_value(html, "digest")
    done = client.post("/ui/views/materialize", data=form, headers=HTML)
    assert done.status_code == 200 and "Done:" in done.get_data(True)
    assert {row.stored.state.value for row in applied.views.listing()} == {"no-data"}


def test_invalidate_needs_operate(browse: Callable[..., FlaskClient]) -> None:
    pattern = "app.eci.source/Shops/prod"
    page(browse("read", "submit"), f"/ui/views/invalidate?pattern={pattern}", 403)
    client = browse("read", "operate")
    html = page(client, f"/ui/views/invalidate?pattern={pattern}")
    assert "It addresses 1 partition" in html
    answer = client.post("/ui/views/invalidate", data={
        "csrf_token": form_value(html, "csrf_token"), "pattern": pattern}, headers=HTML)
    assert answer.status_code == 303 and "invalidated=0" in answer.headers["Location"]


def test_the_live_parts_answer_fragments(browse: Callable[..., FlaskClient]) -> None:
    """What ui.js asks for every few seconds: the part alone, not a whole page."""
    client = browse("read")
    fragment = {"Accept": "text/html-fragment"}
    for path, inside in ((f"{NIGHTLY}/live", "every day at 02:30 Europe/Berlin"),
                         ("/ui/views/grid?pattern=app.eci.source/Shops/prod", "data-path"),
                         ("/ui/batches/grid", "No batches yet")):
        response = client.get(path, headers=fragment)
        text = response.get_data(True)
        assert response.status_code == 200 and inside in text and "<html" not in text, path
    refused = client.get("/ui/views/grid?pattern=x(", headers=fragment)
    assert refused.status_code == 422 and "pattern:" in refused.get_data(True)
