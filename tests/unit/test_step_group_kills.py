"""Who signals a shell step's process group, and when.

A group's id is its leader's pid, which the kernel may give to a new process once the
leader is reaped and the group is empty. So a group is only signalled by the leader's
parent, before that parent reaps it: the fork server for its steps (the node asks it
to, or it does so itself when a step ends), the node for a reaper it started. These
tests watch the node's ``os.killpg`` calls and the state of the pid each one names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.states import State
from jobserver.steps import forkclient
from jobserver.steps.shell import run_shell
from tests.conftest import missing_service
from tests.helpers import proc_stat, process_alive, shell_context, wait_for

ROOT = Path(__file__).resolve().parents[2]
#: A step whose child stays in its group after the step itself has ended.
LEAVES_A_CHILD = {"argv": ["sh", "-c", "sleep 60 & echo $!"]}


def _state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (Z: ended, not reaped); None: no such pid."""
    stat = proc_stat(pid)
    return None if stat is None else stat[1]


def _killed(pid: int) -> bool:
    """Gone, ended, or with a SIGKILL on its way (pending until it is scheduled)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return fields["State"][0] in "ZX" or bool(pending & (1 << 8))


@pytest.fixture
def node_kills(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int, str | None]]]:
    """Every ``os.killpg`` of this process (the node): group, signal, and the state of
    the pid of that number when it was sent."""
    calls: list[tuple[int, int, str | None]] = []
    real = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        calls.append((pgid, int(sig), _state(pgid)))
        real(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    yield calls


@pytest.fixture
def server() -> forkclient.ForkServer:
    if sys.executable is None:
        missing_service("no Python interpreter path (sys.executable) for the fork server")
    return forkclient.SERVER


def test_the_server_kills_what_a_step_left_in_its_group(
        server: forkclient.ForkServer, node_kills: list[tuple[int, int, str | None]]) -> None:
    outcome = run_shell(LEAVES_A_CHILD, shell_context(kill_grace=1))
    assert outcome.state is State.SUCCEED, outcome.error
    left = int(outcome.output or "0")
    assert _killed(left), f"{left} was not killed when the step's end reached the node"
    wait_for(lambda: not process_alive(left), what=f"the step's child {left} to die")
    assert node_kills == [], "the node signalled a group the server may have reaped"


def test_a_cancelled_step_is_signalled_through_the_server(
        server: forkclient.ForkServer, node_kills: list[tuple[int, int, str | None]]) -> None:
    ctx = shell_context(kill_grace=1)
    ctx.cancelled.set()
    outcome = run_shell({"argv": ["sleep", "30"]}, ctx)
    assert outcome.state is State.STOPPED and outcome.exit_code == -15, outcome
    assert node_kills == []


def test_a_step_that_ignores_sigterm_times_out_with_sigkill_through_the_server(
        server: forkclient.ForkServer, node_kills: list[tuple[int, int, str | None]]) -> None:
    outcome = run_shell({"argv": ["sh", "-c", "trap '' TERM; sleep 30"], "timeout": 0.2},
                        shell_context(kill_grace=1))
    assert outcome.state is State.ERROR and outcome.exit_code == -9, outcome
    assert node_kills == []


def test_under_the_reaper_the_node_kills_the_group_before_reaping_its_leader(
        monkeypatch: pytest.MonkeyPatch,
        node_kills: list[tuple[int, int, str | None]]) -> None:
    monkeypatch.setattr(forkclient, "SERVER", forkclient.ForkServer(None))
    outcome = run_shell(LEAVES_A_CHILD, shell_context(kill_grace=1))
    assert outcome.state is State.SUCCEED, outcome.error
    left = int(outcome.output or "0")
    assert _killed(left)
    assert node_kills and all(state == "Z" for _, _, state in node_kills), node_kills


def test_a_server_the_node_abandons_kills_its_steps_groups(server: forkclient.ForkServer,
                                                           tmp_path: Path) -> None:
    """The step dies with the server (its death signal); its group's other processes
    have none, and the server kills them as it leaves."""
    pid_file = tmp_path / "pid"
    read_end, write_end = os.pipe()
    try:
        run = server.start(["sh", "-c", f'sleep 60 & echo $! > "{pid_file}"; exec sleep 60'],
                           dict(os.environ), write_end)
    finally:
        os.close(write_end)
    try:
        assert run is not None
        left = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                            what="the step to start"))
        run.abandon()
        assert run.done.wait(10) and run.result is not None
        assert run.result["status"] == -9
        wait_for(lambda: not process_alive(left), what=f"the step's child {left} to die")
    finally:
        os.close(read_end)


#: Stands in for the fork server: a step (leader of its group) leaves a child in it
#: and ends; the server's reaping of it is watched. Run apart, so that the server's
#: wait for any child sees this one only.
REAP = textwrap.dedent("""
    import json, os, time
    from jobserver.steps import forkserver
    calls, real_killpg, real_wait4 = [], os.killpg, os.wait4

    def state(pid):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            return None
        return stat[stat.rindex(")") + 2]

    def killpg(pgid, sig):
        calls.append(["killpg", sig, state(pgid)])
        real_killpg(pgid, sig)

    def wait4(pid, options):
        calls.append(["wait4", options, state(pid)])
        return real_wait4(pid, options)

    os.killpg, os.wait4 = killpg, wait4
    step = os.fork()
    if step == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(1)  # the test's pipe: its end does not wait for this one's
            time.sleep(60)
        os._exit(0)
    while state(step) != "Z":
        time.sleep(0.01)
    ended = forkserver.reap_ended()
    print(json.dumps({"pid": ended and ended[0], "step": step, "calls": calls}))
""")


def test_the_server_kills_a_steps_group_before_it_reaps_the_step() -> None:
    result = subprocess.run([sys.executable, "-c", REAP], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    report = json.loads(result.stdout or "{}")
    assert report.get("pid") == report.get("step"), result
    assert report["calls"] == [["killpg", 9, "Z"], ["wait4", 0, "Z"]], report
