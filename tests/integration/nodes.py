"""A harness for integration tests that run real ``jobserver`` processes.

:class:`Harness` starts node (``jobserver serve``) and launcher (``jobserver cluster``)
processes with logs under ``tmp_path/logs``, kills them for real, and in its
:meth:`Harness.cleanup` (registered as a finalizer by the tests' fixture) stops every
process it started *and everything they started*: gunicorn arbiters and workers, and
shell-step subprocesses, even when they were re-parented after a ``kill -9``.

Finding descendants after their parent died is done with a marker: every process the
harness starts gets ``JSTEST_HARNESS=<uuid>`` in its environment, gunicorn inherits it,
and shell steps get it through ``steps.shell.env_passthrough``. Cleanup scans
``/proc/*/environ`` for the marker. Everything here reads ``/proc`` (Linux only, no
psutil). Waits are deadline-based (:func:`tests.helpers.wait_for`), never bare sleeps.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import proc_stat as _stat
from tests.helpers import free_port, wait_for

MARK_VAR = "JSTEST_HARNESS"
JOBSERVER = [sys.executable, "-m", "jobserver.cli"]
TOKEN = "integration-test-token-0123456789"

#: What every node started by :meth:`Harness.start_node` gets unless overridden.
NODE_DEFAULTS = {
    "JOBSERVER_API__REUSE_PORT": "true",
    "JOBSERVER_SCHEDULER__POLL_INTERVAL": "0.2",
    "JOBSERVER_SERVER__HEARTBEAT_INTERVAL": "0.5",
    "JOBSERVER_SERVER__DEAD_AFTER": "3",
    "JOBSERVER_SERVER__DRAIN_TIMEOUT": "10",
}


# -- /proc ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcInfo:
    """A process identified by pid *and* start time, so pid reuse cannot fool us."""

    pid: int
    ppid: int
    starttime: int
    cmdline: str = field(compare=False)

    def running(self) -> bool:
        """True while this very process exists and is not a zombie."""
        stat = _stat(self.pid)
        return stat is not None and stat[2] == self.starttime and stat[1] not in "ZX"

    def __str__(self) -> str:
        return f"{self.pid} ({self.cmdline[:100]})"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def process_info(pid: int) -> ProcInfo | None:
    stat = _stat(pid)
    if stat is None:
        return None
    return ProcInfo(pid, stat[0], stat[2], _cmdline(pid))


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(pid: int) -> list[ProcInfo]:
    """Every live descendant of ``pid`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for other in all_pids():
        stat = _stat(other)
        if stat is not None and stat[1] not in "ZX":
            children.setdefault(stat[0], []).append(other)
    found: list[ProcInfo] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        info = process_info(child)
        if info is not None:
            found.append(info)
        todo.extend(children.get(child, []))
    return found


def marked_processes(mark: str) -> list[ProcInfo]:
    """Live processes whose environment carries ``JSTEST_HARNESS=mark``."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            info = process_info(pid)
            if info is not None and info.running():
                found.append(info)
    return found


def listeners(port: int) -> set[int]:
    """Pids holding a TCP socket in LISTEN state on ``port`` (any address)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], parts[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    pids = set()
    if not inodes:
        return pids
    for pid in all_pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    pids.add(pid)
                    break
            except OSError:
                continue
    return pids


# -- HTTP -----------------------------------------------------------------------------
TRANSIENT = (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError)


class HttpError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


def http_call(url: str, method: str = "GET", body: Any = None, token: str | None = None,
              headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    """One plain urllib request; returns ``(status, decoded JSON)`` (HTTP errors too)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw or b"null")
        except ValueError:
            return exc.code, raw.decode(errors="replace")


class Api:
    """The HTTP API of a cluster, retrying connection-level failures for a while.

    With ``SO_REUSEPORT`` a request may land on the API of a node that is being
    killed; such a request fails at the connection level and is simply retried.
    Submits carry an ``Idempotency-Key`` so a retried POST never creates two jobs.
    """

    def __init__(self, base_url: str, token: str, retry_for: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retry_for = retry_for

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None, expect: tuple[int, ...] = (200,)) -> Any:
        deadline = time.monotonic() + self.retry_for
        while True:
            try:
                status, payload = http_call(self.base_url + path, method, body, self.token,
                                            headers)
                break
            except TRANSIENT:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        if status not in expect:
            raise HttpError(status, payload)
        return payload

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def cluster(self) -> dict[str, Any]:
        return self.get("/api/v1/cluster")

    def job(self, job_id: int) -> dict[str, Any]:
        return self.get(f"/api/v1/jobs/{job_id}")

    def jobs(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/jobs?limit=500")["jobs"]

    def submit(self, spec: dict[str, Any]) -> int:
        key = uuid.uuid4().hex
        job = self.call("POST", "/api/v1/jobs", spec, {"Idempotency-Key": key},
                        expect=(200, 201))
        return int(job["id"])

    def wait_job(self, job_id: int, states: tuple[str, ...] = ("SUCCEED",),
                 timeout: float = 30.0) -> dict[str, Any]:
        final = {"SUCCEED", "ERROR", "DISCARDED", "STOPPED"}

        def done() -> dict[str, Any] | None:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            if job["state"] in final:
                raise AssertionError(f"job {job_id} ended {job['state']}: {job}")
            return None

        return wait_for(done, timeout, 0.1, f"job {job_id} to reach {'/'.join(states)}")


# -- processes ------------------------------------------------------------------------
@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._dump_stacks()
            raise AssertionError(f"{self.name} (pid {self.pid}) still runs after {timeout} s;"
                                 f" log tail:\n{self.tail(300)}") from None

    def _dump_stacks(self) -> None:
        """Ask a ``jobserver serve`` that overstays for its threads' stacks (SIGUSR1,
        see jobserver.serve), so the failure shows where it is stuck."""
        if self.popen.poll() is not None or "serve" not in self.popen.args:
            return
        size = len(self.output())
        os.kill(self.popen.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while len(self.output()) == size and time.monotonic() < deadline:
            time.sleep(0.1)  # the dump is best effort: the failure is raised either way


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.log_dir = tmp_path / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.mark = uuid.uuid4().hex
        self.procs: list[Proc] = []

    # -- environment ------------------------------------------------------------------
    def base_env(self, **env: str) -> dict[str, str]:
        """The caller's environment without any ``JOBSERVER_*`` setting, plus ``env``."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
        clean.update({
            MARK_VAR: self.mark,
            "PYTHONUNBUFFERED": "1",
            # Shell steps get only allow-listed variables; pass the marker so that
            # cleanup finds step subprocesses too.
            "JOBSERVER_STEPS__SHELL__ENV_PASSTHROUGH": json.dumps(
                ["PATH", "HOME", "LANG", "TZ", MARK_VAR]),
        })
        clean.update(env)
        return {k: v for k, v in clean.items() if v is not None}

    def node_env(self, server_id: str, port: int, data_dir: Path, token: str | None = TOKEN,
                 database_url: str | None = None, **extra: str) -> dict[str, str]:
        env = dict(NODE_DEFAULTS, JOBSERVER_SERVER__ID=server_id,
                   JOBSERVER_DATA_DIR=str(data_dir), JOBSERVER_API__BIND=f"127.0.0.1:{port}")
        if token is not None:
            env["JOBSERVER_API__TOKENS"] = token
        if database_url is not None:
            env["JOBSERVER_DATABASE__URL"] = database_url
        env.update(extra)
        return self.base_env(**env)

    # -- starting -----------------------------------------------------------------------
    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        log = self.log_dir / f"{name}.log"
        counter = 1
        while log.exists():
            counter += 1
            log = self.log_dir / f"{name}.{counter}.log"
        with open(log, "wb") as handle:
            popen = subprocess.Popen(JOBSERVER + args, env=env, cwd=self.tmp_path,
                                     stdin=subprocess.DEVNULL, stdout=handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(name, popen, log, time.monotonic())
        self.procs.append(proc)
        return proc

    @staticmethod
    def cluster_args(nodes: int, *extra: str) -> list[str]:
        """``cluster --nodes N`` with a free port of its own for every node: the default
        (the ports after ``api.bind``'s) may be another test's port under xdist."""
        ports = ",".join(str(free_port()) for _ in range(nodes))
        return ["cluster", "--nodes", str(nodes), "--node-ports", ports, *extra]

    @staticmethod
    def wait_banner(launcher: Proc, timeout: float = 90.0) -> str:
        """The launcher's output once its banner is out (fails at once, with its
        output, when it exits first). The bound is wide: a loaded two-core machine
        starts N nodes, and their demo, slowly."""
        def banner() -> str | None:
            text = launcher.output()
            if "Ctrl-C stops the cluster." in text:
                return text
            if not launcher.running():
                raise AssertionError(f"the launcher exited with {launcher.popen.returncode}"
                                     f" before its banner:\n{launcher.tail()}")
            return None

        return wait_for(banner, timeout, 0.1, "the launcher's banner")

    def start_node(self, server_id: str, port: int, data_dir: Path, **kwargs: Any) -> Proc:
        return self.spawn(server_id, ["serve"], self.node_env(server_id, port, data_dir,
                                                              **kwargs))

    def wait_nodes_ready(self, api: Api, nodes: list[Proc], port: int,
                         timeout: float = 40.0) -> dict[str, Any]:
        """Until every node is registered alive under its own pid, serves the port with
        its own gunicorn, and one node is active. Fails early if a node exits."""
        by_id = {proc.name: proc for proc in nodes}

        def ready() -> dict[str, Any] | None:
            for proc in nodes:
                if not proc.running():
                    raise AssertionError(f"{proc.name} exited with {proc.popen.returncode} "
                                         f"during start-up; log tail:\n{proc.tail()}")
            try:
                cluster = api.cluster()
            except (*TRANSIENT, HttpError):
                return None
            seen = {n["id"]: n for n in cluster["nodes"] if n["alive"]}
            if any(seen.get(i, {}).get("pid") != p.pid for i, p in by_id.items()):
                return None
            if cluster["active"] not in by_id:
                return None
            serving = listeners(port)
            for proc in nodes:
                if not serving & {d.pid for d in descendants(proc.pid)}:
                    return None
            return cluster

        return wait_for(ready, timeout, 0.1, "all nodes registered, serving and one active")

    # -- stopping -----------------------------------------------------------------------
    @staticmethod
    def kill9(proc: Proc) -> float:
        """SIGKILL the process (not its group); return the monotonic time of the kill."""
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.popen.wait(5)
        return killed_at

    @staticmethod
    def terminate(proc: Proc, timeout: float = 30.0) -> int:
        """SIGTERM the process (not its group) and wait for it to exit."""
        if proc.running():
            proc.popen.send_signal(signal.SIGTERM)
        return proc.wait_exit(timeout)

    def leftovers(self) -> list[ProcInfo]:
        return marked_processes(self.mark)

    def wait_all_gone(self, timeout: float = 15.0) -> None:
        wait_for(lambda: not self.leftovers(), timeout, 0.1,
                 "every process started by the harness to exit")

    def cleanup(self) -> None:
        """Stop everything this harness started, whatever state the test left it in:
        SIGKILL to every process that carries the marker (nodes, gunicorn, shell steps,
        a launcher and its nodes, stopped ones too), until none does. How a node stops
        is asserted only where a test stops it itself (:meth:`terminate`, the drain
        tests); here a drain would only add its seconds to every test. Raises if
        something survives, naming it.
        """
        deadline = time.monotonic() + 10.0
        while (remaining := self.leftovers()) and time.monotonic() < deadline:
            for info in remaining:
                try:
                    os.kill(info.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for proc in self.procs:
            try:
                proc.popen.wait(5)
            except subprocess.TimeoutExpired:
                pass
        remaining = self.leftovers()
        if remaining:
            raise AssertionError("processes survived cleanup: "
                                 + ", ".join(str(info) for info in remaining))
