"""A background loop that dies of an unexpected error takes its node down, visibly.

Each required loop of a node (heartbeat, scheduler, the leader's election, the
runner's watcher, the group commit, the wake-up source, the PostgreSQL lock monitor)
is killed with an injected exception, in-process on a real SQLite store, and the test
checks what a user sees: the node gives up its locks and presence (another node can
take them: for the scheduler, another node takes over), ``/healthz`` answers 503 and
the node's row is no longer alive. ``test_a_serve_process_*`` does it to a real
``jobserver serve`` process, which exits with its documented code, and checks that
the ``jobserver cluster`` launcher reports such an exit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobserver import wakeup
from jobserver.api import create_app
from jobserver.config import Config, load_config
from jobserver.exceptions import LoopDied, StoreUnavailable
from jobserver.node import Node
from jobserver.serve import EXIT_LOOP_DIED
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import State
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from jobserver.store.epochs import EpochRepository
from locks import create_lock_backend
from schedulers.base import presence_key
from schedulers.single import GLOBAL_LOCK
from tests.helpers import free_port, job_spec, wait_for
from tests.integration.nodes import TOKEN, Api, Harness

SLEEP = [{"name": "s", "type": "sleep", "seconds": 60}]


def config_for(data_dir: Path, node_id: str = "n1", **env: str) -> Config:
    return load_config(environ={"JOBSERVER_DATA_DIR": str(data_dir),
                                "JOBSERVER_SERVER__ID": node_id,
                                "JOBSERVER_API__TOKENS": TOKEN,
                                "JOBSERVER_SERVER__HEARTBEAT_INTERVAL": "0.2",
                                "JOBSERVER_SCHEDULER__POLL_INTERVAL": "0.1", **env})


class Nodes:
    """In-process nodes on one data directory, stopped at the end of the test."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.started: list[Node] = []
        self.probe = Store(config_for(data_dir).database_url)

    def start(self, node_id: str = "n1", **env: str) -> Node:
        node = Node(config_for(self.data_dir, node_id, **env), PythonSteps())
        node.start()
        self.started.append(node)
        return node

    def submit(self, steps: list[dict[str, Any]] | None = None) -> int:
        spec = parse_job(json.dumps(job_spec(steps=steps)))
        job, _ = self.probe.jobs.submit(spec, validate_job(spec, Policy(lambda _: False,
                                                                         None)))
        return job.id

    def close(self) -> None:
        for node in self.started:
            node.stop(drain_timeout=0)
        self.probe.dispose()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    nodes = Nodes(tmp_path / "data")
    yield nodes
    nodes.close()


def fail_once(monkeypatch: pytest.MonkeyPatch, target: object, name: str,
              thread: str | None = None) -> None:
    """Make ``target.name`` raise once (in the thread named ``thread``, if given)."""
    original: Callable[..., Any] = getattr(target, name)
    fired = threading.Event()

    def broken(*args: Any, **kwargs: Any) -> Any:
        here = threading.current_thread().name
        if not fired.is_set() and (thread is None or here == thread):
            fired.set()
            raise RuntimeError(f"injected into {name}")
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, broken)


def assert_gave_up(nodes: Nodes, node: Node, loop: str, alone: bool = True) -> None:
    """What a user sees of a node whose ``loop`` died: healthz 503, a row that is no
    longer alive, and its presence lock free for others (and the scheduling lock,
    when no other node has taken it since)."""
    death = wait_for(lambda: node.failure, 15, what=f"the {loop} loop's death")
    assert death.loop == loop, death
    node.stop(drain_timeout=0)  # returns once the supervisor's stop is done
    app = create_app(node.config, store=nodes.probe, python_steps=PythonSteps())
    response = app.test_client().get("/healthz")
    assert response.status_code == 503, response.get_json()
    assert response.get_json()["error"]["code"] == "node_failed"
    row = {server.id: server for server in nodes.probe.servers.list()}[node.id]
    assert row.state != "alive", row
    other = create_lock_backend("file", directory=nodes.data_dir / "locks",
                                next_fence=nodes.probe.epochs.bump, identity="probe")
    try:
        for key in (presence_key(node.id), *([GLOBAL_LOCK] if alone else [])):
            lease = other.acquire(key, blocking=True, timeout=5)
            assert lease is not None, f"{key} is still held"
            lease.release()
    finally:
        other.close()


def test_a_store_outage_while_the_fence_is_drawn_is_ridden_out(
        nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduling lock taken while the store is away (its sessions ended): drawing
    the fence fails. The node lets the lock go and takes it again; it does not give up
    (a CI run's PostgreSQL-sessions chaos test saw a follower die here)."""
    original = EpochRepository.bump
    fired = threading.Event()

    def outage(self: EpochRepository, key: str, holder: str | None = None) -> int:
        if key == GLOBAL_LOCK and not fired.is_set():
            fired.set()
            raise StoreUnavailable("terminating connection due to administrator command")
        return original(self, key, holder)

    monkeypatch.setattr(EpochRepository, "bump", outage)  # before the node binds it
    node = nodes.start()
    wait_for(lambda: node.scheduler.active, 10, what="the node to become active")
    assert fired.is_set() and node.failure is None
    job_id = nodes.submit()
    wait_for(lambda: nodes.probe.jobs.get(job_id).state is State.SUCCEED, 15,
             what="a job to run once the store answered again")


def test_a_heartbeat_that_dies_takes_the_node_down(nodes: Nodes,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    node = nodes.start()
    fail_once(monkeypatch, node.store.servers, "heartbeat")
    assert_gave_up(nodes, node, "heartbeat")


def test_a_dead_scheduler_hands_over_to_another_node(nodes: Nodes,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first = nodes.start("n1")
    wait_for(lambda: first.scheduler.active, 10, what="n1 to be active")
    second = nodes.start("n2")
    fail_once(monkeypatch, first.store.runs, "claim")
    wait_for(lambda: second.scheduler.active, 15, what="n2 to take over")
    assert_gave_up(nodes, first, "scheduler", alone=False)
    job_id = nodes.submit()
    finished = wait_for(lambda: (job := nodes.probe.jobs.get(job_id)).state is State.SUCCEED
                        and job, 15, what="a job to run on the node that took over")
    assert finished.node == "n2"


def test_a_dead_election_ends_the_leaders_work_loop_too(
        nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    node = nodes.start(JOBSERVER_SCHEDULER__MODE="leader")
    wait_for(lambda: node.scheduler.active, 10, what="the node to lead")
    node.scheduler.lease.release()  # so the election loop elects again
    fail_once(monkeypatch, node.locks, "elect")
    assert_gave_up(nodes, node, "scheduler")
    assert isinstance(node.failure.error, LoopDied) and "election" in str(node.failure.error)


def test_a_dead_group_commit_takes_the_node_down(nodes: Nodes,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    node = nodes.start()
    fail_once(monkeypatch, node.store.runs, "complete")
    nodes.submit()
    assert_gave_up(nodes, node, "completer")


def test_a_dead_runner_watcher_takes_the_node_down_and_requeues_its_jobs(
        nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    node = nodes.start()
    fail_once(monkeypatch, node.store.runs, "watch")
    job_id = nodes.submit(SLEEP)
    assert_gave_up(nodes, node, "runner-watch")
    assert nodes.probe.jobs.get(job_id).state is State.READY


def test_a_dead_wake_source_takes_the_node_down(nodes: Nodes,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    original = wakeup._data_version
    node = nodes.start()
    fired = threading.Event()

    def broken(cursor: Any) -> Any:
        if not fired.is_set():
            fired.set()
            raise RuntimeError("injected into the commit watcher")
        return original(cursor)

    monkeypatch.setattr(wakeup, "_data_version", broken)
    nodes.submit()  # a commit the watcher looks for
    assert_gave_up(nodes, node, "sqlite-watch")


def test_a_dead_lock_monitor_takes_the_node_down(nodes: Nodes, pg_url: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    node = nodes.start(JOBSERVER_LOCK__BACKEND="postgres", JOBSERVER_LOCK__URL=pg_url)
    fail_once(monkeypatch, node.locks, "_query", thread="pg-lock-monitor")
    death = wait_for(lambda: node.failure, 15, what="the lock monitor's death")
    assert death.loop == "pg-lock-monitor"
    node.stop(drain_timeout=0)
    assert not node.locks.is_held(presence_key(node.id))
    row = {server.id: server for server in nodes.probe.servers.list()}[node.id]
    assert row.state != "alive"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_serve_process_whose_scheduler_dies_exits_and_another_takes_over(
        tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    try:
        _serve_process_scenario(harness, tmp_path)
    finally:
        harness.cleanup()


def _serve_process_scenario(harness: Harness, tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    trigger = tmp_path / "break-the-scheduler"
    extra = {"JOBSERVER_SCHEDULER__LISTENERS": json.dumps(
        ["tests.loop_breaker:SchedulerBreaker"]), "JSTEST_BREAK_FILE": str(trigger),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = harness.start_node("node-1", port, data_dir, **extra)
    api = Api(f"http://127.0.0.1:{port}", TOKEN, retry_for=20)
    harness.wait_nodes_ready(api, [first], port)
    second = harness.start_node("node-2", port, data_dir, **extra)
    harness.wait_nodes_ready(api, [first, second], port)
    active = api.cluster()["active"]
    dying, surviving = (first, second) if active == "node-1" else (second, first)
    trigger.write_text(dying.name)
    assert dying.wait_exit(30) == EXIT_LOOP_DIED, dying.tail()
    assert "the scheduler loop died" in dying.output()
    cluster = wait_for(lambda: (view := api.cluster())["active"] == surviving.name and view,
                       20, 0.1, "the other node to take over")
    rows = {node["id"]: node for node in cluster["nodes"]}
    assert not rows[dying.name]["alive"], rows
    job_id = api.submit(job_spec())
    assert api.wait_job(job_id)["node"] == surviving.name


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_cluster_launcher_reports_a_node_that_gave_up(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    try:
        port, data_dir = free_port(), tmp_path / "data"
        trigger = tmp_path / "break-the-scheduler"
        env = harness.base_env(
            JOBSERVER_API__BIND=f"127.0.0.1:{port}", JOBSERVER_DATA_DIR=str(data_dir),
            JOBSERVER_SCHEDULER__LISTENERS=json.dumps(["tests.loop_breaker:SchedulerBreaker"]),
            JSTEST_BREAK_FILE=str(trigger), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        launcher = harness.spawn("launcher", harness.cluster_args(1), env)
        harness.wait_banner(launcher)
        trigger.write_text("node-1")
        assert launcher.wait_exit(60) == 0, launcher.tail()
        assert "node-1 exited with 4: a background loop died" in launcher.output()
    finally:
        harness.cleanup()
