"""Shell steps through the node's fork server: started by it, measured by it, and
killed with it and with the node.

The server is real (this test process stands in for the node); the steps are real
processes whose parents the tests read from /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.states import State
from jobserver.steps import forkclient
from jobserver.steps.shell import run_shell
from tests.conftest import missing_service
from tests.helpers import proc_stat, process_alive, shell_context, wait_for

NODE_MEMORY = 160 << 20  # what this process holds while the steps run
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> forkclient.ForkServer:
    if sys.executable is None:
        missing_service("no Python interpreter path (sys.executable) for the fork server")
    return forkclient.SERVER


def _ppid(pid: int) -> int | None:
    stat = proc_stat(pid)
    return None if stat is None else stat[0]


def test_the_step_is_the_servers_child_not_the_nodes(server: forkclient.ForkServer) -> None:
    outcome = run_shell({"argv": ["sh", "-c", "echo $PPID"]}, shell_context())
    assert outcome.state is State.SUCCEED, outcome.error
    assert int(outcome.output or "0") == server.pid() != os.getpid()


@pytest.fixture
def node_memory() -> Iterator[None]:
    held = b"n" * NODE_MEMORY  # every page written: resident
    yield
    del held


def test_a_step_reports_its_own_peak_rss(server: forkclient.ForkServer,
                                         node_memory: None) -> None:
    outcome = run_shell({"argv": ["echo", "hi"]}, shell_context())
    assert outcome.state is State.SUCCEED and outcome.output == "hi\n"
    assert outcome.peak_rss_kb is not None
    assert 0 < outcome.peak_rss_kb < 20 * 1024, outcome.peak_rss_kb
    assert outcome.cpu_seconds is not None


def test_the_server_is_restarted_after_it_is_killed(server: forkclient.ForkServer) -> None:
    assert run_shell({"argv": ["true"]}, shell_context()).state is State.SUCCEED
    first = server.pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: server.pid() != first, what="the node to notice its server died")
    outcome = run_shell({"argv": ["sh", "-c", "echo $PPID"]}, shell_context())
    assert outcome.state is State.SUCCEED, outcome.error
    assert int(outcome.output or "0") == server.pid() not in (None, first)


def test_a_step_dies_with_the_server(server: forkclient.ForkServer, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    outcomes = []
    runner = threading.Thread(target=lambda: outcomes.append(run_shell(
        {"argv": ["sh", "-c", f'echo $$ > "{pid_file}"; exec sleep 60']}, shell_context())))
    runner.start()
    step = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                        what="the step to start"))
    serving = _ppid(step)
    assert serving is not None and serving == server.pid()
    os.kill(serving, signal.SIGKILL)
    runner.join(30)
    # The step's group is killed as its server goes; the signal lands a moment after
    # the runner hears of it, so its end is waited for, not read at once.
    wait_for(lambda: not process_alive(step), 10, what="the step to end with its server")
    assert outcomes[0].state is State.ERROR and outcomes[0].exit_code == -signal.SIGKILL


def test_two_steps_at_once_end_with_their_own_exit_codes(server: forkclient.ForkServer,
                                                         tmp_path: Path) -> None:
    """Each step waits until the other has started: they run at the same time."""
    def step(me: str, other: str, code: int) -> dict[str, object]:
        script = (f'touch "{tmp_path / me}"; while [ ! -e "{tmp_path / other}" ]; '
                  f'do sleep 0.01; done; echo {me}; exit {code}')
        return {"argv": ["sh", "-c", script], "timeout": 30}

    outcomes: dict[str, object] = {}
    threads = [threading.Thread(target=lambda m=m, o=o, c=c: outcomes.__setitem__(
        m, run_shell(step(m, o, c), shell_context()))) for m, o, c in (("a", "b", 3), ("b", "a", 5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    a, b = outcomes["a"], outcomes["b"]
    assert (a.exit_code, a.output, b.exit_code, b.output) == (3, "a\n", 5, "b\n")  # type: ignore[attr-defined]


def test_without_a_server_the_step_runs_under_the_reaper(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkclient, "SERVER", forkclient.ForkServer(None))
    outcome = run_shell({"argv": ["sh", "-c", "echo $PPID"]}, shell_context())
    assert outcome.state is State.SUCCEED, outcome.error
    reaper = int(outcome.output or "0")
    assert reaper != os.getpid() and reaper != forkclient.SERVER.pid()
    assert outcome.peak_rss_kb is not None and outcome.peak_rss_kb < 20 * 1024


#: A node's shell-step context, for a script that stands in for the node.
NODE_CTX = textwrap.dedent("""
    import sys, threading
    from jobserver.config import ShellStepConfig
    from jobserver.steps import StepContext, forkclient
    from jobserver.steps.shell import run_shell
    ctx = StepContext(job_id=1, job_name="j", step="s", attempt=1, job_attempt=1, fence=1,
                      node="n1", params={}, shell=ShellStepConfig(),
                      cancelled=threading.Event())
""")
NODE = NODE_CTX + """
run_shell({"argv": ["sh", "-c", 'echo $$ > "$0"; exec sleep 60', sys.argv[1]]}, ctx)
"""


def test_a_node_killed_with_sigkill_leaves_no_step_running(tmp_path: Path) -> None:
    if sys.executable is None:
        missing_service("no Python interpreter path (sys.executable) for the fork server")
    pid_file = tmp_path / "pid"
    node = subprocess.Popen([sys.executable, "-c", NODE, str(pid_file)], cwd=ROOT)
    try:
        step = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                            timeout=30, what="the step to start"))
        serving = _ppid(step)
        assert serving is not None and _ppid(serving) == node.pid  # node -> server -> step
        node.kill()
        node.wait(10)
        wait_for(lambda: not process_alive(serving), what=f"the server {serving} to die with the node")
        wait_for(lambda: not process_alive(step), what=f"step {step} to die with the node")
    finally:
        node.kill()
        node.wait(10)


def test_a_step_cancelled_as_it_starts_gets_sigterm(server: forkclient.ForkServer) -> None:
    """The pid comes once the step has exec'd: its group exists for the first signal."""
    ctx = shell_context()
    ctx.cancelled.set()
    outcome = run_shell({"argv": ["sleep", "30"]}, ctx)
    assert outcome.state is State.STOPPED and outcome.exit_code == -signal.SIGTERM


def _step_cwd(server: forkclient.ForkServer) -> str:
    """The directory a step runs in, as the kernel names it, checking that the
    node's fork server started it."""
    outcome = run_shell({"argv": ["sh", "-c", 'echo $PPID; readlink /proc/$$/cwd']}, shell_context())
    assert outcome.state is State.SUCCEED, outcome.error
    parent, cwd = (outcome.output or "").splitlines()[-2:]  # after any getcwd warning
    assert int(parent) == server.pid()
    return cwd


def test_a_step_runs_where_the_node_is_now(server: forkclient.ForkServer, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """As a child of the node would: the node's directory at the step's start, not
    the one the server was started in."""
    _step_cwd(server)  # the server runs, started wherever this process was
    monkeypatch.chdir(tmp_path)
    assert _step_cwd(server) == str(tmp_path)


def test_a_step_starts_in_the_nodes_deleted_directory(server: forkclient.ForkServer,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A node whose directory was deleted (getcwd fails) still starts its steps,
    which run there, as its own children would."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(FileNotFoundError):
        os.getcwd()
    assert _step_cwd(server) == f"{gone} (deleted)"


def test_a_node_in_a_deleted_directory_starts_its_server_and_steps(tmp_path: Path) -> None:
    """The server's own start, from a node whose directory is gone, works too."""
    if sys.executable is None:
        missing_service("no Python interpreter path (sys.executable) for the fork server")
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import json, os, sys; sys.path.insert(0, {str(ROOT)!r}); os.rmdir(os.getcwd())" + \
        NODE_CTX + """
outcome = run_shell({"argv": ["sh", "-c", "echo $PPID; readlink /proc/$$/cwd"]}, ctx)
print(json.dumps([outcome.state.value, forkclient.SERVER.pid(), outcome.output]))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=gone, capture_output=True,
                            text=True, timeout=60)
    state, server_pid, output = json.loads(result.stdout or '[null, null, ""]')
    assert state == "SUCCEED", result
    assert output.endswith(f"\n{server_pid}\n{gone} (deleted)\n"), result  # after sh's warning
