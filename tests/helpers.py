"""Test helpers: waiting on conditions with a deadline, building job specs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
             what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def job_spec(name: str = "job", steps: list[dict[str, Any]] | None = None,
             **fields: Any) -> dict[str, Any]:
    return {"name": name, "steps": steps or [{"name": "s1", "type": "noop"}], **fields}


def spec_bytes(**kwargs: Any) -> bytes:
    return json.dumps(job_spec(**kwargs)).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeLease:
    """A lease stand-in for store tests: a key and a fence recorded as the newest."""

    def __init__(self, store: Any, key: str = "scheduler/global") -> None:
        self.key = key
        self.fence = store.epochs.bump(key)


@contextlib.contextmanager
def live_api(store: Any, data_dir: Path, token: str) -> Iterator[str]:
    """The API app on ``store`` served from a thread on a free port (``token`` its
    config token): its base URL, for clients that speak real HTTP (the CLI)."""
    from werkzeug.serving import make_server

    from jobserver.api import create_app
    from jobserver.config import load_config

    environ = {"JOBSERVER_DATA_DIR": str(data_dir), "JOBSERVER_API__TOKENS": token}
    server = make_server("127.0.0.1", 0, create_app(load_config(environ=environ), store=store),
                         threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie or a dead process does not): read from
    ``/proc``, so a process that is not this one's child can be watched too."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state letter, starttime) of ``pid`` from /proc, or None if it does not
    exist. The state is Z for a process that ended and was not reaped."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may contain spaces
    return int(fields[1]), fields[0], int(fields[19])


def shell_context(**shell: Any) -> Any:
    """A step context for running a step directly (job 1, attempt 1, node n1), with
    ``shell`` as its ``steps.shell`` settings."""
    from jobserver.config import ShellStepConfig
    from jobserver.steps import StepContext

    return StepContext(job_id=1, job_name="j", step="s", attempt=1, job_attempt=1, fence=1,
                       node="n1", params={}, shell=ShellStepConfig(**shell),
                       cancelled=threading.Event())


def stop_process_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """Ctrl-C for a launcher started in a process group of its own (``start_new_session``):
    SIGINT to the group, which drains its nodes; SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def write_postgres_cluster_config(path: Path, pg_url: str, data_dir: Path, token: str) -> Path:
    """A config file for ``jobserver cluster --config``: the PostgreSQL store at
    ``pg_url`` with its advisory locks, ``data_dir`` and one API token."""
    path.write_text(f'data_dir = "{data_dir}"\n'
                    f'[database]\nurl = "{pg_url}"\n'
                    '[lock]\nbackend = "postgres"\n'
                    f'[api]\ntokens = ["{token}"]\n')
    return path
