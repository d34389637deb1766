"""Fixtures of the dashboard's browser tests: a real cluster, a real browser.

* ``cluster``: three ``jobserver serve`` processes on a PostgreSQL database of their
  own (PostgreSQL locks, ``single`` mode), one API address shared by the three
  (``SO_REUSEPORT``, as ``make run`` does). Started on first use and kept while
  browser tests follow one another; stopped before the first test of another
  directory, so that no idle node runs beside the rest of the suite.
* ``browser``: one headless Chromium (Debian's ``/usr/bin/chromium``) driven by
  Playwright, for the whole session; ``page``: a fresh context (no cookies) per test,
  1280 px wide, that fails the test on any console error or 5xx answer unless the
  test allowed it (``page_watch.allow``); ``new_page(**options)`` for more pages or
  other context options (a phone's viewport, a dark colour scheme).
* helpers: :func:`sign_in`, ``make_token(*scopes)`` and :func:`shot` (a screenshot
  under ``tests/browser/output/``, which git ignores; ``JOBSERVER_UI_SHOTS`` elsewhere).

Without Chromium or Playwright the tests skip loudly; with ``CI=true`` they fail.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jobserver.store import Store
from tests.conftest import PG_ADMIN_URL, missing_service
from tests.helpers import free_port
from tests.integration.nodes import TOKEN, Api, Harness, Proc

try:  # the tests take expect from here, so that a missing Playwright skips (fails in CI)
    from playwright.sync_api import expect  # noqa: F401 - re-exported
except ImportError:  # the browser fixture says what is missing
    expect = None

CHROMIUM = "/usr/bin/chromium"
NODES = ("node-1", "node-2", "node-3")
#: What the cluster's nodes run with, on top of the harness's defaults.
NODE_ENV = {"JOBSERVER_SCHEDULER__MODE": "single", "JOBSERVER_LOCK__BACKEND": "postgres",
            "JOBSERVER_API__WORKERS": "1", "JOBSERVER_UI__REFRESH_INTERVAL": "0.5"}
SHOTS = Path(os.environ.get("JOBSERVER_UI_SHOTS") or Path(__file__).parent / "output")
VIEWPORT = {"width": 1280, "height": 900}


# -- the cluster ------------------------------------------------------------------------------
@dataclass
class UiCluster:
    """Three nodes serving one address, and a store on their database for the tests."""

    harness: Harness
    url: str
    database_url: str
    port: int
    nodes: dict[str, Proc] = field(default_factory=dict)
    _store: Store | None = None

    @property
    def api(self) -> Api:
        return Api(self.url, TOKEN, retry_for=20.0)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.database_url, pool_size=2, notify=False)
        return self._store

    def start(self) -> None:
        data_dir = self.harness.tmp_path / "data"
        for node_id in NODES:
            self.nodes[node_id] = self.harness.start_node(
                node_id, self.port, data_dir, database_url=self.database_url, **NODE_ENV)
        self.harness.wait_nodes_ready(self.api, list(self.nodes.values()), self.port, 60.0)

    def stop(self) -> None:
        if self._store is not None:
            self._store.dispose()
            self._store = None
        self.harness.cleanup()


class ClusterHolder:
    """Starts the cluster on first use; :meth:`stop` ends it (the next use starts a new
    one on a new database)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._cluster: UiCluster | None = None
        self._databases: list[str] = []

    def get(self) -> UiCluster:
        if self._cluster is None:
            name = f"jobserver_ui_{uuid.uuid4().hex[:10]}"
            _admin(f'CREATE DATABASE "{name}"')
            self._databases.append(name)
            directory = self._root / name
            directory.mkdir(parents=True)
            port = free_port()
            cluster = UiCluster(Harness(directory), f"http://127.0.0.1:{port}",
                                PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}", port)
            try:
                cluster.start()
            except BaseException:
                cluster.stop()
                raise
            self._cluster = cluster
        return self._cluster

    def stop(self) -> None:
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            cluster.stop()

    def drop_databases(self) -> None:
        for name in self._databases:
            _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin(statement: str) -> None:
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


HOLDER = pytest.StashKey[ClusterHolder]()


@pytest.fixture(scope="session")
def cluster_holder(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHolder]:
    try:
        _admin("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable server"
        missing_service(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: "
                        f"{exc.__class__.__name__}")
    holder = ClusterHolder(tmp_path_factory.mktemp("ui-clusters"))
    request.config.stash[HOLDER] = holder
    yield holder
    holder.stop()
    holder.drop_databases()


@pytest.fixture
def cluster(cluster_holder: ClusterHolder) -> UiCluster:
    return cluster_holder.get()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop the cluster once the next test is not a browser test: after the test's own
    teardown, so that a page still refreshing itself is closed before its server goes
    (a refresh refused meanwhile would read as the page's error)."""
    yield
    holder = item.config.stash.get(HOLDER, None)
    here = Path(__file__).parent
    if holder is not None and (nextitem is None or here not in Path(nextitem.path).parents):
        holder.stop()


# -- the browser ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        missing_service(f"Chromium is not installed ({CHROMIUM}; Debian package 'chromium')")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_service("playwright is not installed (pip install -e '.[dev]')")
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
    except Exception as exc:  # noqa: BLE001 - Playwright's error names what is missing
        playwright.stop()
        missing_service(f"Chromium does not start under Playwright: {exc}")
    yield browser
    browser.close()
    playwright.stop()


@dataclass
class PageWatch:
    """Console errors and 5xx answers seen by one page; none may go unexplained."""

    console_errors: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        """Let console errors matching ``pattern`` pass (a refusal the test provokes)."""
        self.allowed.append(re.compile(pattern))

    def problems(self) -> list[str]:
        unexplained = [text for text in self.console_errors
                       if not any(pattern.search(text) for pattern in self.allowed)]
        return unexplained + self.server_errors


@pytest.fixture
def page_watch() -> PageWatch:
    return PageWatch()


@pytest.fixture
def new_page(browser: Any, cluster: UiCluster,
             page_watch: PageWatch) -> Iterator[Callable[..., Any]]:
    """``new_page(**context_options)``: a page in a fresh browser context (1280 px,
    Europe/Berlin time unless told otherwise) watched for console errors and 5xx
    answers, which fail the test at its end."""
    contexts: list[Any] = []

    def open_page(**options: Any) -> Any:
        context = browser.new_context(**{"viewport": VIEWPORT, "base_url": cluster.url,
                                         "timezone_id": "Europe/Berlin", **options})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("console", lambda message: page_watch.console_errors.append(
            f"{message.text} ({message.location.get('url', '')})")
            if message.type == "error" else None)
        page.on("pageerror", lambda error: page_watch.console_errors.append(
            f"uncaught: {error}"))
        page.on("response", lambda response: page_watch.server_errors.append(
            f"{response.status} {response.request.method} {response.url}")
            if response.status >= 500 else None)
        return page

    yield open_page
    for context in contexts:
        context.close()
    problems = page_watch.problems()
    assert not problems, "the page logged errors or got 5xx answers:\n" + "\n".join(problems)


@pytest.fixture
def page(new_page: Callable[..., Any]) -> Any:
    """A watched page (see ``new_page``)."""
    return new_page()


# -- helpers -----------------------------------------------------------------------------------
def sign_in(page: Any, token: str, next_path: str | None = None) -> None:
    """Sign ``page`` in with ``token`` through the sign-in form; waits for the page the
    sign-in lands on."""
    page.goto("/ui/sign-in" + (f"?next={next_path}" if next_path else ""))
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/(?!sign-in).*"))


def forced_post(page: Any, path: str) -> int:
    """The status of a POST to ``path`` made by the page's own script with the
    session's valid CSRF token (the sign-out form's): what a user forcing an action
    the page did not offer gets."""
    csrf = page.get_attribute("input[name=csrf_token]", "value")
    return page.evaluate("""([url, csrf]) => fetch(url, {
                                method: "POST", credentials: "same-origin",
                                body: new URLSearchParams({csrf_token: csrf})})
                            .then(answer => answer.status)""", [path, csrf])


@pytest.fixture
def make_token(cluster: UiCluster) -> Callable[..., str]:
    """``make_token("read", "operate")``: a new stored token's secret."""
    def make(*scopes: str, name: str | None = None, expires_in: float | None = None) -> str:
        _, secret = cluster.store.tokens.create(name or f"ui-{'-'.join(scopes)}",
                                                list(scopes), expires_in)
        return secret
    return make


def shot(page: Any, name: str) -> Path:
    """Save a full-page screenshot of ``page`` as ``SHOTS/<test>/<name>.png``."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "test").split(" ")[0]
    folder = SHOTS / re.sub(r"[^\w.-]+", "_", test.split("::")[-1])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
