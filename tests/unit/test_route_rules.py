"""Every route declares what it needs: walked from the application's URL map, so that a
route added later (a planner's, a page's form) cannot forget its scope or its cost."""

from __future__ import annotations

from pathlib import Path

import re

import pytest
from flask import Flask

from jobserver.api import PUBLIC_ENDPOINTS, create_app
from jobserver.api.auth import Cost, endpoint_costs, endpoint_scopes, required_scope
from jobserver.config import load_config
from jobserver.store import Store
from jobserver.store.tokens import READ, SUBMIT, grants

CHANGES = {"POST", "PUT", "PATCH", "DELETE"}
#: The one form that is posted before there is a token to check.
SIGN_IN = "ui.sign_in_post"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    directory: Path = tmp_path_factory.mktemp("routes")
    store = Store(f"sqlite:///{directory / 'jobserver.db'}")
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(directory),
                                  "JOBSERVER_API__TOKENS": "route-rules-token-0123456789"})
    return create_app(config, store=store)


def routes(app: Flask) -> list[tuple[str, set[str]]]:
    return [(rule.endpoint, set(rule.methods or ()) - {"HEAD", "OPTIONS"})
            for rule in app.url_map.iter_rules() if rule.endpoint != "static"]


def test_every_api_route_declares_its_scope(app: Flask) -> None:
    undeclared = sorted(endpoint for endpoint, _ in routes(app)
                        if not endpoint.startswith("ui.") and endpoint not in PUBLIC_ENDPOINTS
                        and endpoint not in endpoint_scopes())
    assert undeclared == [], "routes needing admin only by default: declare their scope"


def test_every_dashboard_form_declares_its_scope(app: Flask) -> None:
    undeclared = sorted(endpoint for endpoint, methods in routes(app)
                        if endpoint.startswith("ui.") and methods & CHANGES
                        and endpoint != SIGN_IN
                        and not hasattr(app.view_functions[endpoint], "ui_scope"))
    assert undeclared == [], "dashboard forms without ui_action(scope)"


def test_every_route_that_changes_something_declares_its_cost(app: Flask) -> None:
    undeclared = sorted(endpoint for endpoint, methods in routes(app)
                        if methods & CHANGES and endpoint not in endpoint_costs())
    assert undeclared == [], "declare each route's cost in jobserver.api.auth.ENDPOINT_COSTS or its planner's routes()"
    stale = sorted(set(endpoint_costs()) - {endpoint for endpoint, _ in routes(app)})
    assert stale == [], "costs declared for routes that do not exist"


def test_what_creates_jobs_or_definitions_needs_submit_and_costs(app: Flask) -> None:
    for endpoint, cost in endpoint_costs().items():
        if cost is Cost.FREE:
            continue
        view = app.view_functions[endpoint]
        scope = getattr(view, "ui_scope", None) or endpoint_scopes().get(endpoint)
        assert scope is not None and grants(frozenset({scope}), SUBMIT) \
            and scope != READ, (endpoint, scope)


SECURITY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
TABLE = re.compile(r"<!-- routes -->\n(.*?)<!-- /routes -->", re.S)


def spelled(rule: str) -> str:
    """A route as the security page writes it: ``{name}`` for a parameter, ``a|b`` for a
    choice."""
    rule = re.sub(r"<any\(([^)]*)\):[a-z_]+>", lambda m: m.group(1).replace(", ", "|"), rule)
    return re.sub(r"<(?:[a-z]+(?:\([^)]*\))?:)?([a-z_]+)>", r"{\1}", rule)


def route_rows(app: Flask) -> set[tuple[str, str, str, str]]:
    """(method, path, scope, cost) of every API route and every dashboard form."""
    found = set()
    for rule in app.url_map.iter_rules():
        for method in sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"}):
            if rule.endpoint == "static" or (rule.endpoint.startswith("ui.")
                                             and method not in CHANGES):
                continue
            view = app.view_functions[rule.endpoint]
            scope = ("none" if rule.endpoint in PUBLIC_ENDPOINTS or rule.endpoint == SIGN_IN
                     else getattr(view, "ui_scope", None) or required_scope(rule.endpoint))
            cost = endpoint_costs()[rule.endpoint].value if rule.endpoint in endpoint_costs() \
                else "-"
            found.add((method, spelled(rule.rule), str(scope), cost))
    return found


def test_the_security_page_states_every_routes_scope_and_cost(app: Flask) -> None:
    """The table of docs/security.md ("Who may do what") is the code's: a route added,
    or a scope or cost changed, without the page is caught here. (Print the rows with ``-s`` to update it.)"""
    match = TABLE.search(SECURITY_PAGE.read_text())
    assert match, "docs/security.md lost its <!-- routes --> table"
    written = set()
    for line in match.group(1).splitlines()[2:]:
        cells = [cell.strip().strip("`")
                 for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        method, _, path = cells[0].partition(" ")
        written.add((method, path.replace("\\|", "|"), cells[1], cells[2]))
    expected = route_rows(app)
    for row in sorted(expected - written, key=lambda r: (r[1], r[0])):
        print(f"| `{row[0]} {row[1].replace('|', chr(92) + '|')}` | {row[2]} | {row[3]} |")
    assert written == expected, (sorted(expected - written), sorted(written - expected))
