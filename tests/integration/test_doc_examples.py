"""Every shell example of the README and ``docs/`` runs as written.

A user reads the README top to bottom: ``make run`` in one shell, the tour's exports in
another, then the examples of each section in turn. This test does the same in a fresh
directory holding what a checkout holds (``.venv``, ``examples/``): it starts ``make
run``'s cluster (``jobserver cluster --nodes 3 --demo``), then runs each page's shell
blocks in page order, each in ``bash -e -o pipefail`` with the tour's environment
(``JOBSERVER_URL``, ``JOBSERVER_TOKEN``, ``.venv/bin`` on ``PATH`` as after ``.
.venv/bin/activate``). A block fails the test when it exits non-zero; the message names
its page and line and shows what it printed. Markers (``tests/docs_examples.py``) say
which blocks only have their syntax checked, and why.

Two things differ from a user's machine, both because the suite runs beside other
tests: the fixed ports of the pages (8080 for ``make run``, 18080 for the PostgreSQL
example) are replaced by free ones, and the example database by a unique name.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import missing_service
from tests.docs_examples import ROOT, Block, Kind, blocks, pages
from tests.helpers import free_port, stop_process_group, wait_for

pytestmark = pytest.mark.slow

BLOCK_TIMEOUT = 180.0


@dataclass
class Workspace:
    """The directory the examples run in, the environment a user has there, and the
    replacements of fixed ports and names."""

    path: Path
    env: dict[str, str]
    replacements: dict[str, str]

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        text = block.text
        for fixed, free in self.replacements.items():
            text = re.sub(rf"\b{re.escape(fixed)}\b", free, text)
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=self.path,
                                env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT:.0f} s:\n{out}")
        finally:
            _kill_group(proc.pid)  # what the block left in the background
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def user_environment(workspace: Path) -> dict[str, str]:
    """The caller's environment without any jobserver setting, ``.venv/bin`` first on
    ``PATH``: a user's shell after ``. .venv/bin/activate``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
    env["PATH"] = f"{workspace / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(workspace / ".venv")
    return env


@contextmanager
def make_run(workspace: Path) -> Iterator[str]:
    """``make run``'s cluster started in ``workspace`` on a free port; its URL once the
    demo is in. Stopped as Ctrl-C stops it (SIGINT: the nodes drain)."""
    port = free_port()
    env = dict(user_environment(workspace), JOBSERVER_API__BIND=f"127.0.0.1:{port}",
               JOBSERVER_SERVER__DRAIN_TIMEOUT="3")
    node_ports = ",".join(str(free_port()) for _ in range(3))
    log_path = workspace / "make-run.log"
    with open(log_path, "wb") as log:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "jobserver.cli", "cluster", "--nodes", "3", "--demo",
             "--node-ports", node_ports], cwd=workspace, env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: launcher.poll() is not None
                     or b"Ctrl-C stops" in log_path.read_bytes(), 120, 0.3,
                     "make run's cluster to start")
            assert launcher.poll() is None, log_path.read_text()[-3000:]
            yield f"127.0.0.1:{port}"
        finally:
            stop_process_group(launcher, 40)


def checkout_copy(tmp_path: Path) -> Path:
    """A directory holding what a fresh checkout holds that the examples use."""
    workspace = tmp_path / "checkout"
    workspace.mkdir()
    for name in (".venv", "examples"):
        (workspace / name).symlink_to(ROOT / name)
    return workspace


def test_every_shell_example_is_shell_and_every_marker_is_known() -> None:
    """Each page parses (an unknown marker raises), each shell block is valid bash, and
    each block left unrun says why."""
    checked = 0
    for page in pages():
        for block in blocks(page):
            if block.kind is Kind.FILE:
                continue
            syntax = subprocess.run(["bash", "-n"], input=block.text, text=True,
                                    capture_output=True)
            assert syntax.returncode == 0, f"{block.where}: {syntax.stderr}"
            checked += 1
    assert checked >= 5, "the pages lost their shell examples"


def test_the_shell_examples_run_as_written(tmp_path: Path) -> None:
    """All pages on one cluster, as one user reads them one after the other."""
    found = [block for page in pages() for block in blocks(page)]
    for tool in ("curl", "jq", "openssl", "sqlite3", "psql", "createdb", "dropdb"):
        if shutil.which(tool) is None:
            missing_service(f"the examples use {tool}, which is not installed")
    workspace = checkout_copy(tmp_path)
    with make_run(workspace) as address:
        token = (workspace / ".jobserver" / "api-token").read_text().strip()
        env = dict(user_environment(workspace), JOBSERVER_URL=f"http://{address}",
                   JOBSERVER_TOKEN=token)
        runner = Workspace(workspace, env, {
            "127.0.0.1:8080": address, "localhost:8080": address,
            "18080": str(free_port()), "jobserver_demo": f"jobserver_doc_{secrets.token_hex(4)}"})
        for block in found:
            _follow(runner, block)
    assert sum(block.kind is Kind.RUN for block in found) >= 5, "the examples went missing"


def _follow(runner: Workspace, block: Block) -> None:
    if block.kind is Kind.FILE:
        (runner.path / block.argument).write_text(block.text)
        return
    if block.kind is Kind.NOT_RUN:
        return
    if block.kind is Kind.POSTGRES and not _postgres_answers(runner.env):
        missing_service(f"{block.where} needs PostgreSQL at 127.0.0.1:5432")
    done = runner.run(block)
    assert done.returncode == 0, (
        f"{block.where}: exit {done.returncode}\n--- the block ---\n{block.text}\n"
        f"--- what it printed ---\n{done.stdout[-4000:]}")


def _postgres_answers(env: dict[str, str]) -> bool:
    probe = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "select 1"],
                           env=env, capture_output=True, text=True)
    return probe.returncode == 0
