"""Shared fixtures: real stores (SQLite file, throw-away PostgreSQL database).

PostgreSQL tests skip with a loud reason when no server answers, except in CI
(``CI=true``), where a missing service fails the run.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
import uuid
from collections.abc import Callable, Iterator

import pytest

from jobserver.store import Store
from jobserver.batches.tables import batch_configs, batch_runs, batch_stages, batches
from jobserver.datasets.tables import datasets, partitions
from jobserver.schedules.tables import evaluations, schedule_jobs, schedules, watches
from jobserver.store.changes import changes
from jobserver.store.tables import (api_tokens, epochs, events, feed_cursors, jobs, servers,
                                   steps, ui_sessions)
from jobserver.views.tables import view_events, view_partitions, views

# A plain postgresql:// URL: the store uses the driver a user's would (psycopg 3).
PG_ADMIN_URL = os.environ.get("JOBSERVER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() == "true"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``long`` tests first. Under ``make test`` two processes share the suite; a
    three-minute test collected late would end the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def missing_service(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: required services must be present)")
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def create_pg_database(prefix: str) -> tuple[str, Callable[[], None]]:
    """A new, empty PostgreSQL database: its URL and how to drop it. Skips loudly, or
    fails in CI, when no server answers."""
    try:
        import psycopg2  # noqa: F401 - the drivers a test may name must be there
    except ImportError:
        missing_service("psycopg2 is not installed")
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable server"
        admin.dispose()
        missing_service(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc.__class__.__name__}")

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}", drop


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped afterwards."""
    url, drop = create_pg_database("jobserver_test")
    try:
        yield url
    finally:
        drop()


@pytest.fixture(scope="session")
def pg_store_session(pg_url: str) -> Iterator[Store]:
    store = Store(pg_url)
    store.upgrade()
    yield store
    store.dispose()


@pytest.fixture(scope="session")
def psycopg2_store_session(pg_store_session: Store, pg_url: str) -> Iterator[Store]:
    """The same database through psycopg2, which an explicit ``postgresql+psycopg2://``
    URL selects: the store must behave the same on both drivers."""
    store = Store("postgresql+psycopg2://" + pg_url.split("://", 1)[1])
    yield store
    store.dispose()


def _empty(store: Store) -> None:
    with store.tx.write() as conn:
        if store.dialect == "postgresql":
            conn.exec_driver_sql("TRUNCATE jobs, steps, job_events, servers, lock_epochs, "
                                 "api_tokens, ui_sessions, feed_cursors, schedules, schedule_jobs, "
                                 "schedule_evaluations, schedule_watches, datasets, partitions, "
                                 "views, view_partitions, view_events, "
                                 "batch_configs, batches, batch_stages, batch_runs, changes "
                                 "RESTART IDENTITY CASCADE")
        else:
            for table in (batch_runs, batch_stages, batches, batch_configs):
                conn.execute(table.delete())
            for table in (changes, events, steps, jobs, servers, epochs, ui_sessions, api_tokens,
                          feed_cursors, watches, evaluations, schedule_jobs, schedules, partitions,
                          datasets, view_events, view_partitions, views):
                conn.execute(table.delete())


def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated, empty store for ``request.param``: ``sqlite``, ``postgres`` (the
    default driver, psycopg 3) or ``postgres-psycopg2``."""
    if request.param.startswith("postgres"):
        pg_store = request.getfixturevalue(
            "psycopg2_store_session" if request.param == "postgres-psycopg2"
            else "pg_store_session")
        _empty(pg_store)
        yield pg_store
        return
    path = tmp_path / "jobserver.db"
    shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
    sqlite_store = Store(f"sqlite:///{path}")
    yield sqlite_store
    sqlite_store.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite store migrated once per test process, which each SQLite test
    gets a copy of: a migration run costs about 0.12 s, a copy about a millisecond.
    (``tests/unit/test_migrations.py`` runs the migrations themselves.) The
    file must be all of it: its engine, disposed, leaves no journal beside it."""
    path = tmp_path_factory.mktemp("sqlite-template") / "jobserver.db"
    store = Store(f"sqlite:///{path}")
    store.upgrade()
    store.dispose()
    beside = [entry.name for entry in path.parent.iterdir() if entry != path]
    assert not beside, f"the template store left {beside} beside its file"
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated, empty store on each dialect (the store's own contract suite,
    ``test_store.py``, adds the psycopg2 driver)."""
    yield from open_store(request, tmp_path)


@pytest.fixture
def store_url(store: Store) -> str:
    return store.url


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory):
    """A ZooKeeper server for this test run (or ``JOBSERVER_TEST_ZK`` if set)."""
    external = os.environ.get("JOBSERVER_TEST_ZK")
    if external:
        yield external
        return
    with started_zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server.hosts


@pytest.fixture
def store_on_postgres(pg_store_session: Store) -> Store:
    _empty(pg_store_session)
    return pg_store_session


@contextmanager
def started_zookeeper(directory: Path):
    """A ZooKeeper server from Debian's package in ``directory``, stopped afterwards;
    a missing package or kazoo skips loudly (fails in CI)."""
    from tests import zkserver

    try:
        import kazoo  # noqa: F401
    except ImportError:
        missing_service("kazoo is not installed")
    reason = zkserver.available()
    if reason:
        missing_service(f"cannot start ZooKeeper: {reason}")
    server = zkserver.ZooKeeperServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
