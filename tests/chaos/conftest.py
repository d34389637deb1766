"""Fixtures of the chaos tests: the harness, a lock backend with its database, and a
ZooKeeper server owned by one test (to stop and restart it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.cluster import Backend
from tests.conftest import _empty, started_zookeeper
from tests.integration.nodes import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.cleanup()


def make_backend(request: pytest.FixtureRequest, lock: str,
                 zk_hosts: str | None = None) -> Backend:
    """``file``: SQLite in the cluster's data dir. ``postgres``/``zookeeper``: the
    session's PostgreSQL database, emptied; ZooKeeper under a root of this test's own."""
    if lock == "file":
        return Backend("file", None)
    store = request.getfixturevalue("pg_store_session")
    _empty(store)
    if lock == "postgres":
        return Backend("postgres", store.url)
    hosts = zk_hosts or request.getfixturevalue("zookeeper")
    return Backend("zookeeper", store.url, hosts, f"/chaos-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def own_zookeeper(tmp_path: Path):
    """A ZooKeeper server for this test alone: it may be stopped and restarted."""
    with started_zookeeper(tmp_path / "zookeeper") as server:
        yield server
