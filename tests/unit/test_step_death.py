"""A shell step dies with its node, even when the node dies as the step starts.

``setpriv --pdeathsig`` asks the kernel to kill the step when its parent (the node)
dies; a node killed after the fork but before setpriv set that signal sends none. The
step's command then checks that its parent is still the node it names, and runs the
step only if so: what a step of a node killed at that moment does is what this test
does by naming, as the node, a process that is not the parent.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from jobserver.steps.shell import SETPRIV, _command
from tests.conftest import missing_service


def _step(marker: Path) -> list[str]:
    if SETPRIV is None:
        missing_service("setpriv (util-linux) is not installed")
    return _command(["sh", "-c", f"touch {marker}"], dict(os.environ))


def test_a_step_whose_node_is_gone_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = _step(marker)
    argv[argv.index(str(os.getpid()))] = "1"  # "the node" is not this step's parent
    assert subprocess.run(argv, timeout=30).returncode == 137
    assert not marker.exists()


def test_a_step_whose_node_lives_runs_as_itself(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = subprocess.run(_step(marker), timeout=30)
    assert proc.returncode == 0 and marker.exists()
