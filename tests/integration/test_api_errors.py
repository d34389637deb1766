"""Every error of every route is the API's JSON error body, on SQLite and PostgreSQL.

The routes are read from the application's own URL map, so a route added later is
swept too: unknown paths and methods, path parameters that are not what the route
takes, bodies over the size limit and JSON nested too deep. Each answer must be
``{"error": {"code", "message", "details"}}`` with a 4xx status, never Werkzeug's
HTML or text page and never a 500.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.routing import Rule

from jobserver.api import PUBLIC_ENDPOINTS, create_app
from jobserver.api.requests import MAX_JSON_DEPTH
from jobserver.config import load_config
from jobserver.store import Store
from jobserver.ui.pages import PUBLIC as UI_PUBLIC
from tests.helpers import job_spec

TOKEN = "errors-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = "application/json"
LIMIT = 64 * 1024  # api.max_body_bytes here: small, so that the sweep stays fast
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: ``<converter(arguments):name>`` or ``<name>`` in a rule.
PARAMETER = re.compile(r"<(?:(\w+)(?:\(([^)]*)\))?:)?(\w+)>")
#: Path parameters a route does not take: ``int`` ones never match these.
BAD_IDS = ("abc", "-1", "1.5", "1" + "0" * 30)
#: Names that are not names: each must be a 4xx, never an error of the store.
BAD_NAMES = ("%00", "x" * 3000, "%E2%98%83", "a%0Ab", "%FF")


@pytest.fixture
def app(store: Store, tmp_path: Path) -> Flask:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN,
               "JOBSERVER_API__MAX_BODY_BYTES": str(LIMIT)}
    return create_app(load_config(environ=environ), store=store)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def rules(app: Flask) -> Iterator[Rule]:
    return (rule for rule in app.url_map.iter_rules() if rule.endpoint != "static")


def path_of(rule: Rule, **values: str) -> str:
    """A concrete path of ``rule``: ``values`` by parameter name, else one it takes."""
    def fill(match: re.Match[str]) -> str:
        converter, arguments, name = match.groups()
        if name in values:
            return values[name]
        if converter == "int":
            return "1"
        if converter == "any":
            return arguments.split(",")[0].strip().strip("'\"")
        return "a/b" if converter == "path" else "x"
    return PARAMETER.sub(fill, rule.rule)


def parameters(rule: Rule) -> list[tuple[str, str]]:
    """``(converter, name)`` of each path parameter."""
    return [(converter or "default", name)
            for converter, _, name in PARAMETER.findall(rule.rule)]


def methods_of(rule: Rule) -> list[str]:
    return sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"})


def error_of(response: Any, status: int | None = None) -> dict[str, Any]:
    """The error body, checked: JSON, the API's shape, a 4xx (or ``status``)."""
    text = response.get_data(as_text=True)
    where = f"{response.status_code} {response.content_type}: {text[:300]}"
    assert response.content_type == JSON, where
    assert (response.status_code == status if status
            else 400 <= response.status_code < 500), where
    body = json.loads(text)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, where
    assert isinstance(body["error"]["code"], str) and body["error"]["code"], where
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], where
    assert "<" not in body["error"]["message"] and "Traceback" not in text, where
    return body["error"]


def test_the_sweep_sees_every_blueprint(app: Flask) -> None:
    """The URL map is what the sweeps walk: it must hold the routes of every part."""
    paths = {rule.rule for rule in rules(app)}
    for prefix in ("/api/v1/jobs", "/api/v1/schedules", "/api/v1/datasets", "/api/v1/views",
                   "/api/v1/batches", "/api/v1/cluster", "/metrics", "/healthz", "/ui/"):
        assert any(path.startswith(prefix) for path in paths), prefix


UNKNOWN = ["/api", "/api/v1", "/api/v1/nope", "/favicon.ico", "/api/v1/jobs/1/explode",
           "/api/v1/jobs/", "/api/v2/jobs", "/api/v1/jobs/1/events/2", "/%00", "/" + "x" * 5000]


def test_unknown_routes_are_json_404s(client: FlaskClient) -> None:
    for path in UNKNOWN:
        for method in [*METHODS, "PROPFIND"]:
            response = client.open(path, method=method, headers=AUTH)
            error = error_of(response, 404)
            assert error["code"] == "not_found" and "no route matches" in error["message"]


def test_every_route_refuses_other_methods_with_a_json_405(app: Flask,
                                                           client: FlaskClient) -> None:
    adapter = app.url_map.bind("localhost")
    swept = 0
    for rule in rules(app):
        path = path_of(rule)
        allowed = sorted(set(adapter.allowed_methods(path)) - {"HEAD", "OPTIONS"})
        for method in [*METHODS, "PROPFIND", "TRACE"]:
            if method in allowed:
                continue
            response = client.open(path, method=method, headers=AUTH)
            error = error_of(response, 405)
            assert error["details"] == {"allowed": allowed}, (method, path)
            assert set(response.headers["Allow"].replace(" ", "").split(",")) >= set(allowed)
            swept += 1
    assert swept > 50


def test_every_route_answers_bad_path_parameters_with_a_json_4xx(app: Flask,
                                                                 client: FlaskClient) -> None:
    swept = 0
    for rule in rules(app):
        for converter, name in parameters(rule):
            bad = BAD_IDS if converter == "int" else BAD_NAMES if converter in (
                "default", "string", "path") else ("not-an-option",)
            for value in bad:
                path = path_of(rule, **{name: value})
                for method in methods_of(rule):
                    response = client.open(path, method=method, headers=AUTH, data=b"{}",
                                           content_type=JSON)
                    error = error_of(response)
                    if converter in ("int", "any"):
                        assert response.status_code == 404, (method, path)
                        assert "no route matches" in error["message"], (method, path)
                    swept += 1
    assert swept > 100


def test_every_route_refuses_a_body_over_the_limit_with_a_json_413(
        app: Flask, client: FlaskClient) -> None:
    for rule in rules(app):
        view = app.view_functions[rule.endpoint]
        limit = max(LIMIT, getattr(view, "max_body_bytes", 0))
        for method in methods_of(rule):
            response = client.open(path_of(rule), method=method, headers=AUTH,
                                   data=b" " * (limit + 1), content_type=JSON)
            error = error_of(response, 413)
            assert f"larger than {limit} bytes" in error["message"], (method, rule.rule)
            assert error["details"] == {"field": "body"}
            if limit == LIMIT:
                assert "api.max_body_bytes" in error["message"]


def test_a_chunked_body_over_the_limit_is_a_json_413(client: FlaskClient) -> None:
    """No Content-Length to check up front: the limit holds as the body is read."""
    body = json.dumps(job_spec(params={"blob": "x" * LIMIT})).encode()
    response = client.post("/api/v1/jobs", headers=AUTH, content_type=JSON,
                           input_stream=io.BytesIO(body),
                           environ_overrides={"wsgi.input_terminated": True})
    assert f"larger than {LIMIT} bytes" in error_of(response, 413)["message"]


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_every_route_refuses_json_nested_too_deep_by_name(app: Flask,
                                                          client: FlaskClient) -> None:
    for rule in rules(app):
        for method in methods_of(rule):
            for body in (deep(10_000), '{"a": ' * 500 + "1" + "}" * 500):
                response = client.open(path_of(rule), method=method, headers=AUTH,
                                       data=body, content_type=JSON)
                error = error_of(response, 400)
                assert error["message"] == ("request body is nested deeper than "
                                            f"{MAX_JSON_DEPTH} levels"), (method, rule.rule)
                assert error["details"][0]["field"] == "body"


def test_nesting_up_to_the_limit_is_accepted_and_strings_do_not_count(
        client: FlaskClient) -> None:
    # The job object, "params" and "a" take three levels.
    spec = job_spec(params={"a": json.loads(deep(MAX_JSON_DEPTH - 2)),
                            "text": "[" * 5000 + '\\"{' * 100})
    response = client.post("/api/v1/jobs", headers=AUTH, data=json.dumps(spec),
                           content_type=JSON)
    assert response.status_code == 201, response.get_data(as_text=True)
    spec = job_spec(params={"a": json.loads(deep(MAX_JSON_DEPTH - 1))})
    response = client.post("/api/v1/jobs", headers=AUTH, data=json.dumps(spec),
                           content_type=JSON)
    assert "nested deeper than" in error_of(response, 400)["message"]


def test_malformed_json_is_still_called_malformed(client: FlaskClient) -> None:
    for body in ('{"name": ', '"\\"\\"' * 1000, "[" * 50, "{]"):
        response = client.post("/api/v1/jobs", headers=AUTH, data=body, content_type=JSON)
        assert error_of(response, 400)["message"] == "request body is not valid JSON", body


def test_every_route_but_the_health_check_answers_401_in_json(app: Flask,
                                                              client: FlaskClient) -> None:
    """The dashboard's pages too: without a session, a client that does not ask for
    HTML gets the API's 401 (its sign-in page and static files are public)."""
    for rule in rules(app):
        if rule.endpoint in PUBLIC_ENDPOINTS or rule.endpoint in UI_PUBLIC:
            continue
        for method in methods_of(rule):
            response = client.open(path_of(rule), method=method, data=b"{}",
                                   content_type=JSON)
            assert error_of(response, 401)["code"] == "unauthorized", (method, rule.rule)
