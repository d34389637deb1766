"""The dashboard's sign-in, sessions and CSRF checks, through Flask's test client on
SQLite and PostgreSQL (the browser tests in ``tests/browser`` drive the same through
a real cluster)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.store import Store
from jobserver.store.engine import store_now
from jobserver.store.tables import api_tokens, ui_sessions
from jobserver.ui.pages import PUBLIC

CONFIG_TOKEN = "ui-config-token-0123456789abcdef"
HTML = {"Accept": "text/html"}
COOKIE = "jobserver_session"


@pytest.fixture
def make_app(store: Store, tmp_path: Path) -> Callable[..., Flask]:
    def build(tokens: str = CONFIG_TOKEN, **env: str) -> Flask:
        environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                   "JOBSERVER_API__TOKENS": tokens, **env}
        return create_app(load_config(environ=environ), store=store)
    return build


@pytest.fixture
def client(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app().test_client()


def form_value(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match, f"no {name} field in the page"
    return match.group(1)


def sign_in(client: FlaskClient, token: str, next_path: str | None = None) -> Any:
    page = client.get("/ui/sign-in", headers=HTML)
    data = {"csrf_token": form_value(page.get_data(True), "csrf_token"), "token": token}
    if next_path is not None:
        data["next"] = next_path
    return client.post("/ui/sign-in", data=data, headers=HTML)


def csrf_of(client: FlaskClient) -> str:
    return form_value(client.get("/ui/cluster", headers=HTML).get_data(True), "csrf_token")


def set_cookie_header(response: Any, name: str) -> SimpleCookie:
    for header in response.headers.getlist("Set-Cookie"):
        if header.startswith(name + "="):
            cookie: SimpleCookie = SimpleCookie()
            cookie.load(header)
            return cookie
    raise AssertionError(f"no {name} cookie set: {response.headers.getlist('Set-Cookie')}")


def session_rows(store: Store) -> list[dict[str, Any]]:
    with store.tx.read() as conn:
        return [dict(row) for row in conn.execute(select(ui_sessions)).mappings()]


def test_sign_in_keeps_a_reference_never_the_token(client: FlaskClient, store: Store) -> None:
    assert client.get("/ui/cluster", headers=HTML).headers["Location"] == \
        "/ui/sign-in?next=/ui/cluster"
    response = sign_in(client, CONFIG_TOKEN, "/ui/cluster")
    assert (response.status_code, response.headers["Location"]) == (303, "/ui/cluster")
    morsel = set_cookie_header(response, COOKIE)[COOKIE]
    assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/ui"
    session_id = morsel.value
    assert CONFIG_TOKEN not in session_id and len(session_id) >= 40
    [row] = session_rows(store)
    assert row["id_hash"] == hashlib.sha256(session_id.encode()).hexdigest()
    assert not any(value and (CONFIG_TOKEN in str(value) or session_id in str(value))
                   for value in row.values())
    page = client.get("/ui/cluster", headers=HTML)
    assert page.status_code == 200 and "config token #1" in page.get_data(True)


@pytest.mark.parametrize("setting,scheme,secure", [
    ("auto", "http", False), ("auto", "https", True), ("always", "http", True),
    ("never", "https", False)])
def test_secure_cookies_follow_the_setting(make_app: Callable[..., Flask], setting: str,
                                           scheme: str, secure: bool) -> None:
    """``ui.secure_cookies``: ``auto`` follows the request's scheme (gunicorn's, which
    a trusted proxy's X-Forwarded-Proto sets); ``always`` for a TLS proxy gunicorn does
    not trust; ``never`` for plain http everywhere."""
    client = make_app(JOBSERVER_UI__SECURE_COOKIES=setting).test_client()
    base = f"{scheme}://localhost/ui"
    page = client.get(f"{base}/sign-in", headers=HTML)
    assert bool(set_cookie_header(page, "jobserver_sign_in")["jobserver_sign_in"]["secure"]) \
        is secure
    response = client.post(f"{base}/sign-in", headers=HTML, data={
        "csrf_token": form_value(page.get_data(True), "csrf_token"), "token": CONFIG_TOKEN})
    assert bool(set_cookie_header(response, COOKIE)[COOKIE]["secure"]) is secure
    csrf = form_value(client.get(f"{base}/cluster", headers=HTML).get_data(True), "csrf_token")
    out = client.post(f"{base}/sign-out", data={"csrf_token": csrf}, headers=HTML)
    assert bool(set_cookie_header(out, COOKIE)[COOKIE]["secure"]) is secure


def test_bad_tokens_and_forged_sign_ins_open_nothing(client: FlaskClient, store: Store) -> None:
    response = sign_in(client, "jst_" + "A" * 43)
    assert response.status_code == 401 and "invalid token" in response.get_data(True)
    _, submit_only = store.tokens.create("submitter", ["submit"])
    response = sign_in(client, submit_only)
    assert response.status_code == 403
    assert "lacks the &#39;read&#39; scope" in response.get_data(True)
    # A form posted from elsewhere has no sign-in cookie to match its value.
    other = client.application.test_client()
    forged = other.post("/ui/sign-in", data={"csrf_token": "x" * 32, "token": CONFIG_TOKEN},
                        headers=HTML)
    assert forged.status_code == 403 and COOKIE not in str(forged.headers)
    assert session_rows(store) == []


def test_next_never_leaves_the_dashboard(client: FlaskClient) -> None:
    for target in ("https://evil.example/ui/", "//evil.example/ui/x", "/api/v1/jobs",
                   "/ui\\@evil.example", "/ui/../api/v1/jobs"):
        client.delete_cookie(COOKIE, path="/ui")
        assert sign_in(client, CONFIG_TOKEN, target).headers["Location"] == "/ui/cluster"


def test_posts_need_the_csrf_token(client: FlaskClient, store: Store) -> None:
    sign_in(client, CONFIG_TOKEN)
    for data in ({}, {"csrf_token": ""}, {"csrf_token": "0" * 64}):
        response = client.post("/ui/sign-out", data=data, headers=HTML)
        assert response.status_code == 403 and "CSRF" in response.get_data(True)
    assert len(session_rows(store)) == 1
    assert client.get("/ui/cluster", headers=HTML).status_code == 200  # still signed in
    response = client.post("/ui/sign-out", data={"csrf_token": csrf_of(client)}, headers=HTML)
    assert response.status_code == 303 and response.headers["Location"].startswith(
        "/ui/sign-in")
    assert session_rows(store) == []
    assert client.get("/ui/cluster", headers=HTML).status_code == 303


def test_a_csrf_token_belongs_to_its_session(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    first, second = app.test_client(), app.test_client()
    sign_in(first, CONFIG_TOKEN)
    sign_in(second, CONFIG_TOKEN)
    response = first.post("/ui/sign-out", data={"csrf_token": csrf_of(second)}, headers=HTML)
    assert response.status_code == 403


def test_revoked_or_expired_tokens_end_their_sessions(client: FlaskClient,
                                                      store: Store) -> None:
    token, secret = store.tokens.create("ops", ["read"])
    sign_in(client, secret)
    assert client.get("/ui/cluster/live").status_code == 200
    store.tokens.revoke(token.id)
    response = client.get("/ui/cluster/live")
    assert response.status_code == 401 and response.get_json()["error"]["code"] == \
        "unauthorized"
    assert session_rows(store) == []  # ended, not merely refused
    page = client.get("/ui/sign-in", headers=HTML)
    assert "session has ended" in page.get_data(True)

    expiring, expiring_secret = store.tokens.create("soon", ["read"], expires_in=3600)
    sign_in(client, expiring_secret)
    assert client.get("/ui/cluster", headers=HTML).status_code == 200
    with store.tx.write() as conn:
        conn.execute(update(api_tokens).where(api_tokens.c.id == expiring.id)
                     .values(expires_at=store_now(-1)))
    assert client.get("/ui/cluster", headers=HTML).headers["Location"].startswith(
        "/ui/sign-in")


def test_a_config_token_taken_out_ends_its_sessions(make_app: Callable[..., Flask]) -> None:
    client = make_app().test_client()
    sign_in(client, CONFIG_TOKEN)
    cookie = client.get_cookie(COOKIE, path="/ui")
    assert cookie is not None
    rotated = make_app(tokens="another-config-token-0123456789").test_client()
    rotated.set_cookie(COOKIE, cookie.value, path="/ui")
    assert rotated.get("/ui/cluster/live").status_code == 401
    kept = make_app(tokens=f"another-config-token-0123456789,{CONFIG_TOKEN}").test_client()
    kept.set_cookie(COOKIE, cookie.value, path="/ui")
    page = kept.get("/ui/cluster", headers=HTML)
    assert page.status_code == 200 and "config token #2" in page.get_data(True)


def test_sessions_expire_by_themselves(make_app: Callable[..., Flask], store: Store) -> None:
    client = make_app(JOBSERVER_UI__SESSION_LIFETIME="60").test_client()
    sign_in(client, CONFIG_TOKEN)
    assert client.get("/ui/cluster/live").status_code == 200
    with store.tx.write() as conn:
        conn.execute(update(ui_sessions).values(expires_at=store_now(-1)))
    assert client.get("/ui/cluster/live").status_code == 401
    sign_in(make_app().test_client(), CONFIG_TOKEN)  # signing in clears expired rows
    assert len(session_rows(store)) == 1


def test_a_session_is_not_a_bearer_token_nor_the_reverse(client: FlaskClient) -> None:
    sign_in(client, CONFIG_TOKEN)
    assert client.get("/api/v1/jobs").status_code == 401
    assert client.post("/api/v1/jobs/1/pause").status_code == 401
    bearer = client.application.test_client()
    response = bearer.get("/ui/cluster/live",
                          headers={"Authorization": f"Bearer {CONFIG_TOKEN}"})
    assert response.status_code == 401


def test_every_dashboard_route_declares_its_scope(client: FlaskClient) -> None:
    app = client.application
    endpoints = {rule.endpoint for rule in app.url_map.iter_rules()
                 if rule.rule.startswith("/ui/")}
    assert {"ui.cluster", "ui.sign_in", "ui.sign_out"} <= endpoints
    undeclared = [endpoint for endpoint in endpoints - PUBLIC
                  if not hasattr(app.view_functions[endpoint], "ui_scope")]
    assert undeclared == []


def test_pages_are_not_cached_framed_or_scripted_inline(client: FlaskClient) -> None:
    sign_in(client, CONFIG_TOKEN)
    page = client.get("/ui/cluster", headers=HTML)
    assert page.headers["Cache-Control"] == "no-store"
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "<script>" not in page.get_data(True)
    assert page.headers["X-Jobserver-Node"]
