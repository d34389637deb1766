"""Idle schedulers on SQLite wake when another connection commits, not at their poll.

PostgreSQL's LISTEN/NOTIFY path is covered by the cluster and security tests; here the
embedded store's commit watcher, alone and in a real node.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from jobserver.spec import Policy, parse_job, validate_job
from jobserver.store import Store
from jobserver.wakeup import CommitWatcher, Listener, watcher_for
from tests.helpers import free_port, job_spec
from tests.integration.nodes import TOKEN, Api, Harness


@pytest.fixture
def sqlite_store(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.upgrade()
    yield store
    store.dispose()


def _submit(store: Store, name: str) -> int:
    spec = parse_job(json.dumps(job_spec(name=name)))
    job, _ = store.jobs.submit(spec, validate_job(spec, Policy(lambda _name: True, None)))
    return job.id


def test_the_watcher_wakes_on_another_connections_commit_only(sqlite_store: Store,
                                                              tmp_path: Path) -> None:
    wake = threading.Event()
    watcher = CommitWatcher(str(tmp_path / "store.db"), wake)
    watcher.start()
    try:
        time.sleep(0.1)  # a few intervals: it has read the version it starts from
        wake.clear()
        sqlite_store.jobs.list(limit=10)  # reads commit nothing
        time.sleep(0.1)
        assert not wake.is_set()
        other = Store(sqlite_store.url)  # as an API worker: another process's connection
        try:
            _submit(other, "wakes")
        finally:
            other.dispose()
        assert wake.wait(2), "no wake-up after another connection's commit"
    finally:
        watcher.stop()


def test_each_store_gets_its_own_wake_up_source(tmp_path: Path) -> None:
    wake = threading.Event()
    assert isinstance(watcher_for(f"sqlite:///{tmp_path / 'x.db'}", True, wake),
                      CommitWatcher)
    assert isinstance(watcher_for("postgresql://u@127.0.0.1:5432/db", True, wake), Listener)
    assert watcher_for(f"sqlite:///{tmp_path / 'x.db'}", False, wake) is None
    assert watcher_for("sqlite:///:memory:", True, wake) is None


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_idle_sqlite_node_starts_a_submitted_job_long_before_its_poll(
        tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    try:
        port = free_port()
        node = harness.start_node("node-1", port, tmp_path / "data",
                                  JOBSERVER_SCHEDULER__POLL_INTERVAL="60")
        api = Api(f"http://127.0.0.1:{port}", TOKEN)
        harness.wait_nodes_ready(api, [node], port)
        for name in ("first", "second"):  # the second finds the node idle after a job
            job_id = api.submit({"name": name, "steps": [{"name": "s", "type": "noop"}]})
            api.wait_job(job_id, timeout=10)
        assert harness.terminate(node) == 0, node.tail()
    finally:
        harness.cleanup()
