"""A real ``jobserver serve`` to attack: one node per store, tokens of each scope.

The planners' security tests act as an attacker would: over HTTP, against a node started
as an operator starts one, holding a stored token with only the scopes under test. A
node costs a few seconds to start, so a test module shares one per store
(:func:`attack_node`, module-scoped and parametrized over SQLite and PostgreSQL); each
test names what it makes with :func:`unique` so that tests sharing a node do not meet.

A module sets the node's extra configuration by defining its own ``attack_env`` fixture
(module-scoped, returning ``{"JOBSERVER_...": value}``); ``{data_dir}`` in a value is
replaced by the node's data directory.
"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jobserver.store import Store
from tests.conftest import create_pg_database
from tests.helpers import free_port
from tests.integration.nodes import TOKEN, Api, Harness, Proc, http_call

#: The scope sets an attacker may hold, by the name tests use.
SCOPE_SETS = {
    "read": ["read"],
    "submit": ["read", "submit"],
    "shell": ["read", "submit", "shell"],
    "sql": ["read", "submit", "sql"],
    "operate": ["read", "submit", "operate"],
}


def unique(prefix: str) -> str:
    """A name no other test on the shared node uses."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@dataclass
class AttackNode:
    """A running node, its store (for what an HTTP reply cannot show) and its tokens:
    ``tokens[name]`` for each of :data:`SCOPE_SETS`, ``admin`` for the config token."""

    url: str
    store: Store
    data_dir: Path
    proc: Proc
    kind: str
    tokens: dict[str, str] = field(default_factory=dict)

    def call(self, method: str, path: str, body: Any = None, token: str = "admin",
             headers: dict[str, str] | None = None, timeout: float = 30.0) -> tuple[int, Any]:
        """One request as the holder of ``tokens[token]``: ``(status, JSON body)``."""
        return http_call(self.url + path, method, body, self.tokens[token], headers, timeout)

    def api(self, token: str = "admin") -> Api:
        return Api(self.url, self.tokens[token])

    def browser(self, token: str) -> Browser:
        """A dashboard session signed in with ``tokens[token]``."""
        browser = Browser(self.url)
        status, _ = browser.form("/ui/sign-in", {"token": self.tokens[token]},
                                 csrf_from="/ui/sign-in")
        assert status in (200, 303), status
        return browser


class Browser:
    """The dashboard as a browser uses it: a cookie jar, HTML pages, forms with the
    page's CSRF token."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def open(self, path: str, data: dict[str, str] | None = None) -> tuple[int, str]:
        body = None if data is None else urllib.parse.urlencode(data).encode()
        request = urllib.request.Request(self.url + path, data=body,
                                         headers={"Accept": "text/html"})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def form(self, path: str, data: dict[str, str], csrf_from: str = "/ui/cluster"
             ) -> tuple[int, str]:
        """POST ``data`` to ``path`` with the CSRF token of the page ``csrf_from``."""
        _, page = self.open(csrf_from)
        match = re.search(r'name="csrf_token" value="([^"]*)"', page)
        assert match, f"no csrf_token field on {csrf_from}"
        return self.open(path, {**data, "csrf_token": match.group(1)})


def _fresh_database(kind: str, directory: Path) -> tuple[str, Any]:
    """A new, empty database for one node: its URL and how to drop it afterwards."""
    if kind == "sqlite":
        return f"sqlite:///{directory / 'jobserver.db'}", lambda: None
    return create_pg_database("jobserver_attack")


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    """Extra node settings; a module overrides this fixture to set its own."""
    return {}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def attack_node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                attack_env: dict[str, str]) -> Iterator[AttackNode]:
    directory = tmp_path_factory.mktemp(f"attack-{request.param}")
    data_dir = directory / "data"
    data_dir.mkdir()
    url, drop = _fresh_database(request.param, directory)
    store = Store(url)
    store.upgrade()
    tokens = {"admin": TOKEN}
    for name, scopes in SCOPE_SETS.items():
        tokens[name] = store.tokens.create(f"attacker-{name}", scopes)[1]
    harness = Harness(directory)
    port = free_port()
    # One API worker unless the module asks for more: a node starts faster, and what
    # these tests attack does not depend on how many workers share the port.
    extra = {"JOBSERVER_API__WORKERS": "1",
             **{key: value.replace("{data_dir}", str(data_dir))
                for key, value in attack_env.items()}}
    proc = harness.start_node("attack-1", port, data_dir, database_url=url, **extra)
    node = AttackNode(f"http://127.0.0.1:{port}", store, data_dir, proc, request.param, tokens)
    try:
        harness.wait_nodes_ready(node.api(), [proc], port)
        yield node
    finally:
        harness.cleanup()
        store.dispose()
        drop()


#: The shipped view lattice, which the planner attacks run against.
EXAMPLE_VIEWS = Path(__file__).resolve().parents[2] / "examples" / "views.yaml"


def apply_example_views(node: AttackNode) -> None:
    """PUT every view definition of :data:`EXAMPLE_VIEWS` on ``node``, as an admin."""
    import yaml

    for document in yaml.safe_load_all(EXAMPLE_VIEWS.read_text()):
        status, reply = node.call("PUT", f"/api/v1/view-definitions/{document['name']}",
                                  document)
        assert status in (200, 201), reply
