"""A node never schedules without its API: real ``jobserver serve`` processes.

* on an address in use it exits 2 before taking any lock, naming the address, with
  ``api.reuse_port`` on or off (a port held without ``SO_REUSEPORT`` is in use either
  way), and another node takes the active role from it at once;
* an API child that keeps dying (every gunicorn process of the node killed as soon as
  it appears) is restarted a bounded number of times, then the node drains (its
  running job finishes) and exits 5, its presence and row given up.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest

from jobserver.api_process import API_MAX_RESTARTS
from jobserver.serve import EXIT_API_FAILED
from jobserver.store import Store
from locks import create_lock_backend
from schedulers.base import presence_key
from tests.helpers import free_port, wait_for
from tests.integration.nodes import TOKEN, Api, Harness, Proc, descendants


#: CPU seconds of ``jobserver serve`` from its start to its exit on an address in use:
#: the interpreter's start and the command line's imports, nothing of the engine. The
#: product's 5 s is checked as CPU time; wall time on a loaded two-core runner is the
#: machine's (9 s seen with the whole suite running), bounded loosely.
REFUSAL_CPU_BOUND = 5.0
REFUSAL_WALL_BOUND = 20.0


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("reuse_port", ["true", "false"])
def test_serve_on_a_port_in_use_exits_2_holding_nothing(harness: Harness, tmp_path: Path,
                                                        reuse_port: str) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as squatter:  # another program's listener, no SO_REUSEPORT
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        refused = harness.start_node("node-1", port, data_dir,
                                     JOBSERVER_API__REUSE_PORT=reuse_port)
        code = refused.wait_exit(30)
        took = time.monotonic() - refused.started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    output = refused.output()
    assert code == 2, output
    assert cpu <= REFUSAL_CPU_BOUND, f"exited 2 after {cpu:.2f} s of CPU: {output}"
    assert took <= REFUSAL_WALL_BOUND, f"exited 2 only after {took:.2f} s: {output}"
    assert f"127.0.0.1:{port}: address in use" in output, output
    assert "serving the API" not in output and "Traceback" not in output, output
    print(f"\nserve on a used port (reuse_port={reuse_port}) exited 2 after {took:.2f} s "
          f"({cpu:.2f} s of CPU)")
    # It took nothing: no lock file was ever made, no row written, no database made.
    assert not (data_dir / "locks").exists(), list((data_dir / "locks").iterdir())
    assert not (data_dir / "jobserver.db").exists()

    # Another node (the same id even) starts on a free port and becomes active.
    port = free_port()
    node = harness.start_node("node-1", port, data_dir, JOBSERVER_API__REUSE_PORT=reuse_port)
    cluster = harness.wait_nodes_ready(Api(f"http://127.0.0.1:{port}", TOKEN), [node], port)
    assert cluster["active"] == "node-1", cluster
    assert f"serving the API on 127.0.0.1:{port}" in node.output()


def _kill_api(node: Proc) -> set[int]:
    """SIGKILL every gunicorn process of ``node``; the pids of the arbiters killed."""
    arbiters = set()
    for info in descendants(node.pid):
        if "gunicorn" not in info.cmdline:
            continue
        try:
            os.kill(info.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        if info.ppid == node.pid:
            arbiters.add(info.pid)
    return arbiters


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_api_that_keeps_dying_makes_the_node_drain_and_exit(harness: Harness,
                                                               tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    node = harness.start_node("node-1", port, data_dir)
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    harness.wait_nodes_ready(api, [node], port)
    job = api.submit({"name": "finishes-in-the-drain", "steps": [
        {"name": "s", "type": "shell", "argv": ["sleep", "6"]}]})
    wait_for(lambda: api.job(job)["state"] == "RUNNING", 15, 0.05, "the job to start")

    killed: set[int] = set()
    deadline = time.monotonic() + 60
    while node.running() and time.monotonic() < deadline:
        killed |= _kill_api(node)
        time.sleep(0.02)
    code = node.wait_exit(30)
    output = node.output()
    assert code == EXIT_API_FAILED, output
    # Restarted a bounded number of times: the first child and API_MAX_RESTARTS more.
    assert len(killed) == API_MAX_RESTARTS + 1, (killed, output)
    assert output.count("restarting in") == API_MAX_RESTARTS, output
    assert "giving up" in output and "drain" in output, output
    print(f"\nAPI killed {len(killed)} times; node exited {code} "
          f"{time.monotonic() - node.started:.1f} s after its start")

    # It drained: the running job finished here, and the node let go of everything.
    store = Store(f"sqlite:///{data_dir / 'jobserver.db'}")
    try:
        finished = store.jobs.get(job)
        assert (finished.state.value, finished.node, finished.attempt) == \
            ("SUCCEED", "node-1", 1), finished
        [row] = store.servers.list()
        assert row.state == "stopped", row
        locks = create_lock_backend("file", directory=data_dir / "locks",
                                    next_fence=store.epochs.bump, identity="probe")
        assert locks.is_held(presence_key("node-1")) is False
    finally:
        store.dispose()


def _registered_alive(db: Path, server_id: str, pid: int) -> bool:
    """Whether ``server_id``'s row in the SQLite store says alive under ``pid``: what
    other nodes and the cluster view see first of a starting node."""
    if not db.exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)) as conn:
            row = conn.execute("SELECT pid, state FROM servers WHERE id = ?",
                               (server_id,)).fetchone()
    except sqlite3.OperationalError:  # the schema is still being made, or a writer holds it
        return False
    return row is not None and row[0] == pid and row[1] == "alive"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_the_moment_a_node_is_seen_alive_drains_it(harness: Harness,
                                                          tmp_path: Path) -> None:
    """A supervisor (or an operator) may stop a node as soon as the cluster shows it.
    From its registration on, SIGTERM drains it (exit 0, row stopped), however early:
    the node must not die of the signal's default action half started."""
    data_dir = tmp_path / "data"
    node = harness.start_node("node-1", free_port(), data_dir)
    db = data_dir / "jobserver.db"
    wait_for(lambda: not node.running() or _registered_alive(db, "node-1", node.pid),
             60, 0.001, "node-1 to register itself alive")
    os.kill(node.pid, signal.SIGTERM)
    code = node.wait_exit(60)
    assert code == 0, f"exit {code} after a SIGTERM at registration:\n{node.output()}"
    with closing(sqlite3.connect(db)) as conn:
        state = conn.execute("SELECT state FROM servers WHERE id = 'node-1'").fetchone()
    assert state == ("stopped",), state
