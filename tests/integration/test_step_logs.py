"""Full step logs, on SQLite and PostgreSQL: written by a real runner while its steps
run, served by a second API application on its own connection to the same store (as
another node would serve them), through the HTTP API and ``jobserver logs``.

The runner claims jobs by hand (no scheduler), as in ``test_runner.py``; the CLI runs
as a real process against the second application served over HTTP.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import delete
from werkzeug.serving import make_server

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.connections import Connections
from jobserver.runner import Runner
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.steps import step_types
from jobserver.steps.log import cut_marker
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from jobserver.store.logs import LogKey
from jobserver.store.tables import jobs
from tests.helpers import FakeLease, job_spec, wait_for

TOKEN = "step-logs-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONFIG = load_config(environ={"JOBSERVER_API__TOKENS": TOKEN})
#: The runner's connection for sql steps: a database of its own, empty.
WAREHOUSE = load_config(environ={"JOBSERVER_CONNECTIONS__WAREHOUSE__URL": "sqlite://"})
CLI = [sys.executable, "-m", "jobserver.cli"]
#: Prints ``sys.argv[1]`` numbered lines, each with every byte value now and then:
#: the log must come back byte for byte, not as text.
GENERATOR = """import sys
out = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    out.write(b"line %07d " % i + (bytes(range(1, 256)) if i % 97 == 0 else b"x" * (i % 61)) + b"\\n")
"""


def generated(lines: int) -> bytes:
    out = bytearray()
    for i in range(lines):
        out += b"line %07d " % i + (bytes(range(1, 256)) if i % 97 == 0 else b"x" * (i % 61))
        out += b"\n"
    return bytes(out)


class Node:
    """A runner on ``store`` (the node that runs the steps) and an API application on
    a store of its own on the same database (the node that serves the logs)."""

    def __init__(self, store: Store, log_limit: int) -> None:
        python = PythonSteps()
        python.register("test.boom", lambda ctx: 1 / 0)
        self.policy = Policy(python.is_registered, None)
        self.store = store
        self.connections = Connections(WAREHOUSE.connections)
        self.runner = Runner(store, step_types(python, self.connections), CONFIG.steps.shell,
                             4, log_limit=log_limit)
        self.runner.start()
        self.other = Store(store.url)
        self.api: FlaskClient = create_app(CONFIG, store=self.other).test_client()

    def run(self, steps: list[dict[str, Any]], wait: bool = True) -> int:
        spec = parse_job(json.dumps(job_spec(steps=steps)))
        job, _ = self.store.jobs.submit(spec, validate_job(spec, self.policy))
        for claimed in self.store.runs.claim("n1", FakeLease(self.store), 10):
            self.runner.submit(claimed)
        if wait:
            self.finished(job.id)
        return job.id

    def finished(self, job_id: int) -> Any:
        return wait_for(lambda: (job := self.store.jobs.get(job_id)).state
                        not in (State.READY, State.RUNNING) and job, 30,
                        what=f"job {job_id} to finish")

    def log(self, job_id: int, step: str, **query: Any) -> Any:
        return self.api.get(f"/api/v1/jobs/{job_id}/steps/{step}/log", query_string=query,
                            headers=AUTH)

    def close(self) -> None:
        self.runner.cancel_all("test over")
        self.runner.wait_idle(10)
        self.runner.shutdown()
        self.other.dispose()
        self.connections.dispose()


@pytest.fixture
def make_node(store: Store) -> Iterator[Callable[..., Node]]:
    nodes: list[Node] = []

    def make(log_limit: int = CONFIG.steps.log_limit_bytes) -> Node:
        nodes.append(Node(store, log_limit))
        return nodes[-1]
    yield make
    for node in nodes:
        node.close()


@pytest.fixture
def node(make_node: Callable[..., Node]) -> Node:
    return make_node()


@pytest.fixture
def served(node: Node) -> Iterator[str]:
    """The serving node's application over real HTTP: its URL."""
    server = make_server("127.0.0.1", 0, node.api.application, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(5)


def cli(url: str, *args: str, token: str = TOKEN) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, "logs", *args, "--url", url, "--token", token],
                          capture_output=True, timeout=30)


def test_a_log_of_megabytes_comes_back_whole_through_the_api_and_the_cli(
        node: Node, served: str, tmp_path: Path) -> None:
    script = tmp_path / "gen.py"
    script.write_text(GENERATOR)
    expected = generated(60_000)
    assert len(expected) > 2_000_000
    job_id = node.run([{"name": "big", "type": "shell",
                        "argv": [sys.executable, str(script), "60000"]}])
    step = node.store.jobs.get(job_id).steps[0]
    assert step.state is State.SUCCEED and "bytes cut" in step.output  # head and tail stay
    assert node.store.step_logs.chunk_count(LogKey(job_id, "big", 1)) > 1  # written as it came
    response = node.log(job_id, "big")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["X-Log-Attempt"] == "1"
    assert response.headers["X-Log-Complete"] == "true"
    assert response.get_data() == expected
    assert node.log(job_id, "big", offset=1_234_567).get_data() == expected[1_234_567:]
    printed = cli(served, str(job_id), "big")
    assert printed.returncode == 0 and printed.stderr == b""
    assert printed.stdout == expected


def test_a_log_is_cut_at_the_limit_with_a_line_saying_how_much_was_dropped(
        make_node: Callable[..., Node]) -> None:
    node = make_node(log_limit=4096)
    job_id = node.run([{"name": "s", "type": "shell",
                        "argv": ["sh", "-c", "head -c 10000 /dev/zero | tr '\\0' y"]}])
    body = node.log(job_id, "s").get_data()
    assert body == b"y" * 4096 + cut_marker(10000 - 4096, 4096)
    assert b"5904 more bytes dropped" in body


def test_each_attempt_of_a_retried_step_has_its_own_log(node: Node) -> None:
    job_id = node.run([{"name": "flaky", "type": "shell", "retries": 1, "retry_backoff": 0.1,
                        "argv": ["sh", "-c", 'echo "attempt $JOBSERVER_ATTEMPT"; exit 1']}])
    assert node.store.jobs.get(job_id).state is State.ERROR
    for attempt in (1, 2):
        response = node.log(job_id, "flaky", attempt=attempt)
        assert response.get_data() == f"attempt {attempt}\n".encode()
    newest = node.log(job_id, "flaky")
    assert newest.headers["X-Log-Attempt"] == "2" and newest.get_data() == b"attempt 2\n"


@pytest.mark.parametrize("path,query,status,field", [
    ("/api/v1/jobs/999/steps/flaky/log", {}, 404, "job_id"),
    ("/api/v1/jobs/{job}/steps/ghost/log", {}, 404, "step"),
    ("/api/v1/jobs/{job}/steps/flaky/log", {"attempt": 2}, 404, "attempt"),
    ("/api/v1/jobs/{job}/steps/later/log", {}, 404, "attempt"),
    ("/api/v1/jobs/{job}/steps/flaky/log", {"attempt": "x"}, 422, "attempt"),
    ("/api/v1/jobs/{job}/steps/flaky/log", {"attempt": 0}, 422, "attempt"),
    ("/api/v1/jobs/{job}/steps/flaky/log", {"offset": -1}, 422, "offset"),
    ("/api/v1/jobs/{job}/steps/flaky/log", {"tail": 5}, 422, "tail"),
])
def test_unknown_logs_and_bad_queries_are_json_errors(node: Node, path: str, query: dict,
                                                      status: int, field: str) -> None:
    job_id = node.run([{"name": "flaky", "type": "shell", "argv": ["sh", "-c", "exit 3"]},
                       {"name": "later", "type": "noop"}])
    response = node.api.get(path.format(job=job_id), query_string=query, headers=AUTH)
    assert response.status_code == status and response.is_json, response.get_data()
    error = response.get_json()["error"]
    details = error["details"] if isinstance(error["details"], list) else [error["details"]]
    assert any(field in item for item in details) or any(
        item.get("field") == field for item in details), error


def test_steps_without_output_write_nothing_and_python_output_is_kept(node: Node) -> None:
    job_id = node.run([{"name": "quiet", "type": "noop"},
                       {"name": "silent", "type": "shell", "argv": ["true"]},
                       {"name": "boom", "type": "python", "callable": "test.boom"}])
    assert node.store.jobs.get(job_id).state is State.ERROR
    for name in ("quiet", "silent"):
        assert node.store.step_logs.chunk_count(LogKey(job_id, name, 1)) == 0
        response = node.log(job_id, name)
        assert (response.status_code, response.get_data()) == (200, b"")
    traceback = node.log(job_id, "boom").get_data().decode()
    assert "ZeroDivisionError" in traceback
    assert traceback == node.store.jobs.get(job_id).steps[2].output


def test_a_rerun_drops_the_old_logs_and_deleting_the_job_drops_them_all(node: Node) -> None:
    job_id = node.run([{"name": "s", "type": "shell", "argv": ["echo", "first run"]}])
    assert node.log(job_id, "s").get_data() == b"first run\n"
    node.store.jobs.apply(job_id, Operation.RERUN)
    assert node.log(job_id, "s").status_code == 404  # not run since: nothing to serve
    assert node.store.step_logs.chunk_count(LogKey(job_id, "s", 1)) == 0
    for claimed in node.store.runs.claim("n1", FakeLease(node.store), 10):
        node.runner.submit(claimed)
    node.finished(job_id)
    assert node.log(job_id, "s").get_data() == b"first run\n"
    with node.store.tx.write() as conn:
        conn.execute(delete(jobs).where(jobs.c.id == job_id))
    assert node.store.step_logs.chunk_count(LogKey(job_id, "s", 1)) == 0


def test_logs_follow_a_running_step_and_end_with_it(node: Node, served: str,
                                                    tmp_path: Path) -> None:
    go = tmp_path / "go"
    job_id = node.run([{"name": "slow", "type": "shell", "argv": [
        "sh", "-c", f'echo one; while [ ! -e "{go}" ]; do sleep 0.05; done; echo two']}],
        wait=False)
    follower = subprocess.Popen([*CLI, "logs", str(job_id), "slow", "-f", "--url", served,
                                 "--token", TOKEN], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"one\n"  # while the step still runs
        assert follower.poll() is None
        assert node.store.jobs.get(job_id).state is State.RUNNING
        go.touch()
        assert follower.stdout.readline() == b"two\n"
        assert follower.wait(timeout=15) == 0
        assert follower.stdout.read() == b""
    finally:
        follower.kill()
        follower.wait()
    assert node.store.jobs.get(job_id).state is State.SUCCEED


def test_logs_of_every_step_in_order_with_headers(node: Node, served: str) -> None:
    job_id = node.run([{"name": "a", "type": "shell", "argv": ["printf", "no newline"]},
                       {"name": "b", "type": "shell", "argv": ["sh", "-c", "exit 1"]},
                       {"name": "c", "type": "noop"}])
    printed = cli(served, str(job_id))
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.decode() == ("==> step a (attempt 1, SUCCEED) <==\nno newline\n"
                                       "\n==> step b (attempt 1, ERROR) <==\n"
                                       "\n==> step c (not run, READY) <==\n")
    followed = cli(served, str(job_id), "-f")
    assert followed.returncode == 0 and followed.stdout == printed.stdout


def test_a_failed_sql_steps_error_is_in_its_log(node: Node, served: str) -> None:
    """What ended a sql step is the last line of its log, as ``jobserver logs`` prints
    it: a statement the database refused, or a refusal before any statement ran."""
    job_id = node.run([{"name": "load", "type": "sql", "connection": "warehouse",
                        "statements": ["CREATE TABLE t (x INTEGER)",
                                       "INSERT INTO missing_table VALUES (1)"]}])
    [step] = node.store.jobs.get(job_id).steps or []
    error = step.error or ""
    assert step.state is State.ERROR and "missing_table" in error, step
    printed = cli(served, str(job_id))
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.decode().splitlines()
    assert lines[0] == "==> step load (attempt 1, ERROR) <==", lines
    assert lines[1].startswith("[1] CREATE TABLE t (x INTEGER): done"), lines
    assert lines[2:] == ["rolled back at statements[1]", f"error: {error}"], lines
    assert error.startswith("statements[1]: OperationalError: no such table")
    refused = node.run([{"name": "load", "type": "sql", "connection": "elsewhere",
                         "statements": ["SELECT 1"]}])
    [step] = node.store.jobs.get(refused).steps or []
    error = step.error or ""
    assert "no connection named 'elsewhere'" in error
    alone = cli(served, str(refused), "load")
    assert (alone.returncode, alone.stdout.decode()) == (0, f"error: {error}"), alone


def on_a_terminal(url: str, *args: str) -> tuple[int, bytes]:
    """``jobserver logs ARGS`` with its standard output on a pseudo-terminal (whose
    line discipline writes each newline as CR LF): the exit code and what it showed."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*CLI, "logs", *args, "--url", url, "--token", TOKEN],
                                stdout=slave, stderr=subprocess.DEVNULL)
    finally:
        os.close(slave)
    shown = bytearray()
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except OSError:  # EIO: the terminal's other end is closed, all was read
        pass
    finally:
        os.close(master)
    return proc.wait(timeout=30), bytes(shown)


def test_escape_sequences_are_shown_escaped_on_a_terminal_and_kept_with_raw(
        node: Node, served: str) -> None:
    """A step's output retitles the window and colours the text: on a terminal the
    sequences are shown, not acted on; ``--raw`` and a pipe get the bytes."""
    output = b"\x1b]0;pwned\x07\x1b[31mred\x1b[0m\ttab\n"
    job_id = node.run([{"name": "s", "type": "shell",
                        "argv": ["printf", "\\033]0;pwned\\007\\033[31mred\\033[0m\\ttab\\n"]}])
    assert node.log(job_id, "s").get_data() == output
    assert on_a_terminal(served, str(job_id), "s") == (
        0, b"\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m\ttab\r\n")
    assert on_a_terminal(served, str(job_id), "s", "--raw") == (0, output[:-1] + b"\r\n")
    assert cli(served, str(job_id), "s").stdout == output


@pytest.mark.parametrize("args,message", [
    (["x"], "ID must be a positive whole number"),
    (["0"], "ID must be a positive whole number"),
    (["1", "--attempt", "2"], "--attempt needs a STEP"),
    (["1", "s", "--attempt", "-3"], "--attempt must be a positive whole number"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    printed = cli("http://127.0.0.1:9", *args)
    assert printed.returncode == 2
    assert printed.stderr.decode().count("\n") == 1 and message in printed.stderr.decode()


def test_an_unknown_step_is_the_apis_404(node: Node, served: str) -> None:
    job_id = node.run([{"name": "a", "type": "noop"}])
    printed = cli(served, str(job_id), "ghost")
    assert printed.returncode == 1 and b"has no step 'ghost'" in printed.stderr


def test_a_nul_byte_in_the_output_reaches_the_log_and_the_step_ends(node: Node) -> None:
    job_id = node.run([{"name": "s", "type": "shell", "argv": ["printf", "a\\000b\\n"]}])
    job = node.store.jobs.get(job_id)
    assert job.state is State.SUCCEED, job.error
    assert node.log(job_id, "s").get_data() == b"a\x00b\n"
    assert job.steps[0].output == "a\ufffdb\n"  # text columns take no NUL


# -- real nodes ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_node_serves_and_follows_the_log_of_a_step_another_node_runs(tmp_path: Path) -> None:
    """Two ``jobserver serve`` processes on one store: node-2's API (gunicorn) streams
    and follows the log of a step node-1 runs, under node-1's ``steps.log_limit_bytes``."""
    from tests.helpers import free_port
    from tests.integration.nodes import TOKEN as NODE_TOKEN
    from tests.integration.nodes import Api, Harness

    harness = Harness(tmp_path)
    try:
        data_dir, database = tmp_path / "data", f"sqlite:///{tmp_path / 'shared.db'}"
        ports = {name: free_port() for name in ("node-1", "node-2")}
        for name, port in ports.items():
            # Distributed: each node claims what it may run; node-1 runs the job.
            harness.start_node(name, port, data_dir, database_url=database,
                               JOBSERVER_SCHEDULER__MODE="distributed",
                               JOBSERVER_STEPS__LOG_LIMIT_BYTES="4096")
        runner, server = (Api(f"http://127.0.0.1:{ports[n]}", NODE_TOKEN) for n in ports)
        wait_for(lambda: _serving(server, set(ports)), 60, what="both nodes alive")
        go = tmp_path / "go"
        job_id = runner.submit(job_spec(assigned_servers=["node-1"], steps=[
            {"name": "slow", "type": "shell", "argv": [
                "sh", "-c", f'echo one; while [ ! -e "{go}" ]; do sleep 0.05; done; echo two']},
            {"name": "big", "type": "shell",
             "argv": ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' z"]}]))
        url = f"http://127.0.0.1:{ports['node-2']}"
        follower = subprocess.Popen([*CLI, "logs", str(job_id), "slow", "-f", "--url", url,
                                     "--token", NODE_TOKEN], stdout=subprocess.PIPE)
        try:
            assert follower.stdout is not None
            assert follower.stdout.readline() == b"one\n"  # served by node-2 as it runs
            assert server.job(job_id)["node"] == "node-1" and follower.poll() is None
            go.touch()
            assert follower.stdout.readline() == b"two\n"
            assert follower.wait(timeout=20) == 0
        finally:
            follower.kill()
            follower.wait()
        server.wait_job(job_id)
        printed = cli(url, str(job_id), "big", token=NODE_TOKEN)
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == b"z" * 4096 + cut_marker(5000 - 4096, 4096)
    finally:
        harness.cleanup()


def _serving(api: Any, names: set[str]) -> bool:
    try:
        return names <= {node["id"] for node in api.cluster()["nodes"] if node["alive"]}
    except Exception:  # noqa: BLE001 - not up yet
        return False
