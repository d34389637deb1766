"""A shell step's CPU time and peak RSS are its own process tree's, not the node's.

A process's peak RSS carries the peak of the process it was forked from across
``exec``: measured on the node's child, ``echo`` reported the node's memory. The steps
here run from this test process with a large allocation of its own, standing in for
a node's memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.config import ShellStepConfig
from jobserver.states import State
from jobserver.steps.shell import REAPER, SETPRIV, _command, run_shell
from tests.conftest import missing_service
from tests.helpers import process_alive, shell_context, wait_for

NODE_MEMORY = 160 << 20  # what this process holds while the steps run


@pytest.fixture(scope="module")
def node_memory() -> Iterator[None]:
    if REAPER is None:
        missing_service("no Python interpreter path (sys.executable) for the reaper")
    held = b"n" * NODE_MEMORY  # every page written: resident
    yield
    del held


def test_echo_reports_a_few_megabytes_not_the_nodes_memory(node_memory: None) -> None:
    outcome = run_shell({"argv": ["echo", "hi"]}, shell_context())
    assert outcome.state is State.SUCCEED and outcome.output == "hi\n"
    assert outcome.peak_rss_kb is not None
    assert 0 < outcome.peak_rss_kb < 20 * 1024, outcome.peak_rss_kb


def test_a_step_that_allocates_100_mb_reports_at_least_that(node_memory: None) -> None:
    argv = [sys.executable, "-c", "data = b'x' * (100 << 20)"]
    outcome = run_shell({"argv": argv}, shell_context())
    assert outcome.state is State.SUCCEED, outcome.error
    assert outcome.peak_rss_kb is not None
    assert 100 * 1024 <= outcome.peak_rss_kb < 100 * 1024 + NODE_MEMORY // 1024
    assert outcome.cpu_seconds is not None and outcome.cpu_seconds > 0


def test_a_step_stopped_by_sigterm_reports_the_signal() -> None:
    ctx = shell_context()
    timer = threading.Timer(0.5, ctx.cancelled.set)
    timer.start()
    outcome = run_shell({"argv": ["sleep", "30"]}, ctx)
    timer.cancel()
    assert outcome.state is State.STOPPED and outcome.exit_code == -signal.SIGTERM


def test_a_step_dies_with_its_reaper(tmp_path: Path) -> None:
    """The reaper dies with the node (its own death signal); the step must die with
    the reaper, or a killed node would leave its step running."""
    if SETPRIV is None:
        missing_service("setpriv (util-linux) is not installed")
    pid_file = tmp_path / "pid"
    argv = _command(["sh", "-c", f'echo $$ > "{pid_file}"; exec sleep 60'], dict(os.environ),
                    tmp_path / "usage.json")
    reaper = subprocess.Popen(argv, start_new_session=True)
    try:
        step = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                            what="the step to start"))
        assert step != reaper.pid  # the step is the reaper's child, not the node's
        os.kill(reaper.pid, signal.SIGKILL)
        reaper.wait(10)
        wait_for(lambda: not process_alive(step), what=f"step {step} to die with its reaper")
    finally:
        try:
            os.killpg(reaper.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("env", [{}, {"LC_CTYPE": "C"}, {"LANG": "C"}])
def test_the_step_gets_the_environment_it_was_given(env: dict[str, str]) -> None:
    """The reaper is Python, which sets LC_CTYPE in a C locale (PEP 538): the step
    must not inherit that."""
    ctx = shell_context()
    ctx.shell = ShellStepConfig(env_passthrough=["PATH"])
    outcome = run_shell({"argv": ["env"], "env": env}, ctx)
    lines = set((outcome.output or "").splitlines())
    assert {f"{name}={value}" for name, value in env.items()} <= lines
    assert any(line.startswith("LC_CTYPE=") for line in lines) == ("LC_CTYPE" in env), lines
