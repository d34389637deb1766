"""The ``jobserver cluster`` launcher as ``make run`` starts it: how it stops, and the
address each of its nodes has of its own.

* Stopping drains: a signal to the launcher's process group (Ctrl-C; SIGINT even when
  the launcher inherited it ignored, as a script's background command does) drains
  every node; the launcher waits longer than the drain and says how it goes; a job
  still running when the drain ends is re-queued with a ``node N drained`` event and
  runs once more after a restart, with no rescue of a "died" node. A second signal
  stops at once.
* Each node answers on a port of its own as well as on the shared one, and every
  answer names its node (``X-Jobserver-Node``), so ``/metrics`` can be scraped per node.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jobserver.cluster_stop import HALT_GRACE
from jobserver.store import Store
from tests.helpers import free_port, wait_for
from tests.integration.nodes import JOBSERVER, Api, Harness, Proc, descendants, listeners
from tests.integration.scrape import scrape, value

pytestmark = pytest.mark.slow

DRAIN_TIMEOUT = 3.0
#: How long the re-queued job's step runs: longer than the drain, short enough to wait for.
STEP_SECONDS = 8
#: jobserver.cluster_stop.HALT_GRACE, and a margin for a loaded machine
SECOND_SIGNAL_EXIT_BOUND = HALT_GRACE + 3.0
PROGRESS = re.compile(r"^(node-\d): draining, 1 job running, (\d+) s left$", re.M)


def _env(harness: Harness, port: int, data_dir: Path) -> dict[str, str]:
    return harness.base_env(JOBSERVER_API__BIND=f"127.0.0.1:{port}",
                            JOBSERVER_DATA_DIR=str(data_dir),
                            JOBSERVER_SCHEDULER__POLL_INTERVAL="0.2",
                            JOBSERVER_SERVER__DRAIN_TIMEOUT=str(DRAIN_TIMEOUT))


def _spawn_from_script(harness: Harness, name: str, args: list[str],
                       env: dict[str, str]) -> Proc:
    """The launcher as a script's background command gets it: SIGINT ignored (what
    ``trap '' INT`` does, and a non-interactive shell does for ``cmd &``) and kept
    so through ``exec``. It leads a process group of its own, as in a terminal."""
    log = harness.log_dir / f"{name}.log"
    script = 'trap "" INT; exec "$@"'
    with open(log, "wb") as handle:
        popen = subprocess.Popen(["sh", "-c", script, "sh", *JOBSERVER, *args], env=env,
                                 cwd=harness.tmp_path, stdin=subprocess.DEVNULL,
                                 stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    proc = Proc(name, popen, log, time.monotonic())
    harness.procs.append(proc)
    return proc


def _wait_banner(launcher: Proc) -> str:
    """The launcher's token, once its banner is out."""
    text = Harness.wait_banner(launcher)
    match = re.search(r"token:\s+(\S+)", text)
    assert match, text
    return match.group(1)


def _events(data_dir: Path, job_id: int) -> list[Any]:
    store = Store(f"sqlite:///{data_dir / 'jobserver.db'}")
    try:
        return list(store.jobs.events(job_id))
    finally:
        store.dispose()


def _job_row(data_dir: Path, job_id: int) -> Any:
    store = Store(f"sqlite:///{data_dir / 'jobserver.db'}")
    try:
        return store.jobs.get(job_id)
    finally:
        store.dispose()


def _stop_group(launcher: Proc, signum: signal.Signals, timeout: float) -> tuple[int, float]:
    """``signum`` to the launcher's process group (Ctrl-C in its terminal); its exit
    code and how long it took."""
    tree = descendants(launcher.pid)
    sent = time.monotonic()
    os.killpg(launcher.pid, signum)
    code = launcher.wait_exit(timeout)
    took = time.monotonic() - sent
    wait_for(lambda: not [info for info in tree if info.running()], 15, 0.1,
             "every node and gunicorn process of the cluster to exit")
    return code, took


# -- stopping -------------------------------------------------------------------------------
@pytest.mark.timeout(240)
def test_stopping_the_launcher_drains_and_requeues_as_drained(harness: Harness,
                                                             tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    ledger = tmp_path / "ledger"
    env = _env(harness, port, data_dir)

    # 1. Ctrl-C to a launcher started from a script (SIGINT inherited ignored).
    launcher = _spawn_from_script(harness, "launcher", harness.cluster_args(3), env)
    api = Api(f"http://127.0.0.1:{port}", _wait_banner(launcher))
    job_id = api.submit({"name": "long", "steps": [{"name": "s", "type": "shell", "argv": [
        "sh", "-c", f"echo run >> {ledger}; sleep {STEP_SECONDS}"]}]})
    running = wait_for(lambda: (job := api.job(job_id))["state"] == "RUNNING" and job,
                       20, 0.05, "the job to run")
    wait_for(ledger.exists, 10, 0.05, "the step to start")
    code, took = _stop_group(launcher, signal.SIGINT, DRAIN_TIMEOUT + 30)
    output = launcher.output()
    print(f"\nlauncher stopped in {took:.2f} s (drain {DRAIN_TIMEOUT:g} s):\n"
          + output[output.index("\nstopping "):])

    assert code == 0, output
    progress = PROGRESS.findall(output)
    assert progress and progress[0][0] == running["node"], output
    assert f"{running['node']} exited with 3: its drain timed out" in output, output
    assert "killed" not in output and "second signal" not in output, output
    assert took >= DRAIN_TIMEOUT, took
    job = _job_row(data_dir, job_id)
    assert (job.state.value, job.attempt) == ("READY", 1), job
    last = _events(data_dir, job_id)[-1]
    assert (last.step, last.from_state, last.to_state) == (None, "RUNNING", "READY"), last
    assert last.message.startswith(f"node {running['node']} drained: still running after "
                                   f"server.drain_timeout ({DRAIN_TIMEOUT:g} s)"), last

    # 2. Started again (a supervisor's SIGTERM this time): the job runs once more.
    launcher = harness.spawn("launcher", harness.cluster_args(3), env)
    api = Api(f"http://127.0.0.1:{port}", _wait_banner(launcher))
    done = api.wait_job(job_id, timeout=STEP_SECONDS + 30)
    assert done["attempt"] == 2, done
    assert ledger.read_text().split() == ["run", "run"]
    messages = [event.message or "" for event in _events(data_dir, job_id)]
    assert not [m for m in messages if "died" in m or "left running" in m], messages

    # 3. A second signal during the drain stops at once: every node process is gone
    # within HALT_GRACE (the launcher's own exit adds its interpreter's teardown).
    long_id = api.submit({"name": "longer", "steps": [
        {"name": "s", "type": "shell", "argv": ["sleep", "60"]}]})
    wait_for(lambda: api.job(long_id)["state"] == "RUNNING", 20, 0.05, "the job to run")
    nodes = [info for info in descendants(launcher.pid) if info.ppid == launcher.pid]
    os.killpg(launcher.pid, signal.SIGTERM)
    wait_for(lambda: PROGRESS.search(launcher.output()), 10, 0.05, "drain progress")
    second = time.monotonic()
    os.killpg(launcher.pid, signal.SIGTERM)
    wait_for(lambda: not [info for info in nodes if info.running()],
             SECOND_SIGNAL_EXIT_BOUND + 10, 0.02, "the nodes to exit")
    took = time.monotonic() - second
    code = launcher.wait_exit(30)
    harness.wait_all_gone()  # the API processes and the killed step too
    print(f"nodes gone {took:.2f} s after the second signal")
    # Asked for, so no error: exit 0, naming the nodes that did not drain.
    assert code == 0 and "second signal: stopping at once" in launcher.output(), \
        launcher.output()
    assert "stopped at once, as asked: node-1, node-2, node-3 did not drain" \
        in launcher.output(), launcher.output()
    assert len(nodes) == 3 and took <= SECOND_SIGNAL_EXIT_BOUND, (nodes, took)
    assert not listeners(port)


# -- each node's own address --------------------------------------------------------------
def _get(url: str, token: str | None = None) -> tuple[int, str]:
    """Status and ``X-Jobserver-Node`` of one GET (error answers too)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.headers["X-Jobserver-Node"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["X-Jobserver-Node"]


def _answers(url: str) -> bool:
    try:
        return _get(url)[0] == 200
    except OSError:  # not listening yet
        return False


@pytest.mark.timeout(180)
def test_each_node_answers_on_its_own_port_and_names_itself(harness: Harness,
                                                            tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    own = [free_port() for _ in range(3)]
    launcher = harness.spawn("launcher", ["cluster", "--nodes", "3", "--node-ports",
                                          ",".join(map(str, own))],
                             _env(harness, port, data_dir))
    token = _wait_banner(launcher)
    addresses = ", ".join(f"node-{i} http://127.0.0.1:{p}" for i, p in enumerate(own, 1))
    assert f"  nodes:  {addresses}" in launcher.output(), launcher.output()
    for index, node_port in enumerate(own, 1):
        wait_for(lambda: _answers(f"http://127.0.0.1:{node_port}/healthz"), 30, 0.1,
                 f"node-{index}'s own port")

    for index, node_port in enumerate(own, 1):
        base, node = f"http://127.0.0.1:{node_port}", f"node-{index}"
        assert _get(base + "/healthz") == (200, node)
        assert _get(base + "/api/v1/cluster", token) == (200, node)
        assert _get(base + "/api/v1/cluster") == (401, node)
        assert _get(base + "/api/v1/jobs/999999", token) == (404, node)
        assert _get(base + "/metrics", token) == (200, node)

    # The shared port: any node answers, and says which.
    shared = [_get(f"http://127.0.0.1:{port}/api/v1/cluster", token) for _ in range(30)]
    answered = {node for status, node in shared if status == 200}
    assert len(shared) == 30 and answered <= {"node-1", "node-2", "node-3"}, shared
    assert len(answered) >= 2, f"one node answered every request on the shared port: {shared}"

    # A node's own /metrics count its own requests: a submit through node-2's port shows
    # on node-2's scrapes and on no other node's.
    Api(f"http://127.0.0.1:{own[1]}", token).submit(
        {"name": "hi", "steps": [{"name": "s", "type": "noop"}]})
    posts = [value(scrape(f"http://127.0.0.1:{p}", token), "jobserver_api_requests_total",
                   0.0, route="/api/v1/jobs", method="POST", status="201") for p in own]
    assert posts == [0.0, 1.0, 0.0], posts
    assert harness.terminate(launcher, timeout=45) == 0, launcher.tail()
