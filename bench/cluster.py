"""Real ``jobserver serve`` processes for the benchmark, and ways to submit to them.

Nodes are configured as an operator would, through ``JOBSERVER_*`` variables; jobs
go in over the HTTP API, one at a time or open-loop at a set rate.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import PYTHON, ROOT, TOKEN, stamp_job


# -- node processes -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class NodeProc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


class Cluster:
    """Real ``jobserver serve`` processes sharing one store and one lock backend.

    Each node runs in a process group of its own (its gunicorn API with it), so that
    :meth:`stop_all` ends exactly what was started here.
    """

    def __init__(self, work: Path, database_url: str, lock: str, mode: str,
                 **settings: Any) -> None:
        self.work = work
        self.database_url = database_url
        self.port = free_port()
        self.settings = {"LOCK__BACKEND": lock, "SCHEDULER__MODE": mode,
                         "API__TOKENS": TOKEN, "API__REUSE_PORT": "true",
                         "API__BIND": f"127.0.0.1:{self.port}",
                         "SERVER__HEARTBEAT_INTERVAL": "0.5", "SERVER__DEAD_AFTER": "3",
                         "SERVER__DRAIN_TIMEOUT": "5", "DATA_DIR": str(work / "data")}
        self.settings.update({key.upper(): str(value) for key, value in settings.items()})
        # A plain postgresql:// URL: the nodes use the driver a user's would (psycopg 3).
        self.settings["DATABASE__URL"] = database_url
        self.nodes: dict[str, NodeProc] = {}
        (work / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, name: str, **extra: Any) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
        env.update({f"JOBSERVER_{k}": v for k, v in self.settings.items()})
        env.update({f"JOBSERVER_{k.upper()}": str(v) for k, v in extra.items()})
        env["JOBSERVER_SERVER__ID"] = name
        # bench.steps (the stamp step) lives in the repository, not in the package.
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self, name: str, **extra: Any) -> NodeProc:
        path = self.work / "logs" / f"{name}.log"
        with open(path, "ab") as handle:
            popen = subprocess.Popen([PYTHON, "-P", "-m", "jobserver.cli", "--log-level",
                                      "WARNING", "serve"], env=self.env(name, **extra),
                                     cwd=self.work, stdin=subprocess.DEVNULL, stdout=handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        node = NodeProc(name, popen, path)
        self.nodes[name] = node
        return node

    def wait_registered(self, names: list[str] | None = None, timeout: float = 60.0,
                        api: bool = False) -> None:
        """Until each node's row is alive with its pid (and the API answers)."""
        from sqlalchemy import create_engine, text

        names = names or list(self.nodes)
        engine = create_engine(self.database_url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                for name in names:
                    if not self.nodes[name].running():
                        raise RuntimeError(f"node {name} exited during start-up:\n"
                                           f"{self.nodes[name].tail()}")
                try:
                    with engine.connect() as conn:
                        rows = dict(conn.execute(text(
                            "SELECT id, pid FROM servers WHERE state = 'alive'")).all())
                except Exception:  # noqa: BLE001 - the schema may not exist yet
                    rows = {}
                if all(rows.get(n) == self.nodes[n].pid for n in names) and (
                        not api or self.api_ready()):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nodes {names} not ready after {timeout} s")
                time.sleep(0.1)
        finally:
            engine.dispose()

    def api_ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def kill9(self, name: str) -> float:
        """SIGKILL the node process (its API follows through PR_SET_PDEATHSIG); returns
        the wall-clock time of the kill."""
        node = self.nodes[name]
        os.kill(node.pid, signal.SIGKILL)
        killed = time.time()
        node.popen.wait(5)
        return killed

    def stop_all(self, grace: float = 8.0) -> None:
        for node in self.nodes.values():
            if node.running():
                node.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for node in self.nodes.values():
            try:
                node.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for node in self.nodes.values():
            try:
                os.killpg(node.pid, signal.SIGKILL)  # the group we created for this node
            except (ProcessLookupError, PermissionError):
                pass
            try:
                node.popen.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()


# -- the HTTP API -------------------------------------------------------------------------
class ApiClient:
    """A keep-alive HTTP client for POST /api/v1/jobs (one per thread)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def submit(self, spec: dict[str, Any]) -> tuple[int, float]:
        """POST the job; returns (job id, wall time just before sending)."""
        body = json.dumps(spec).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        for attempt in range(3):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                sent = time.time()
                self.conn.request("POST", "/api/v1/jobs", body, headers)
                response = self.conn.getresponse()
                payload = response.read()
                if response.status != 201:
                    raise RuntimeError(f"submit failed: {response.status} {payload[:300]!r}")
                return int(json.loads(payload)["id"]), sent
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# -- submitting for latency: one at a time, or open-loop at a set rate ------------------
#: Submits job ``i``; returns (its key, wall time just before it was sent).
Submit = Callable[[int], "tuple[Any, float]"]


def stamped(call: Callable[[int], Any]) -> Submit:
    """``call(i)`` as a :data:`Submit`: stamped with the wall time before the call."""
    def submit(i: int) -> tuple[Any, float]:
        at = time.time()
        return call(i), at
    return submit


def one_at_a_time(submit: Submit, count: int) -> list[tuple[Any, float]]:
    """Submit ``count`` jobs with 20-60 ms between them: an idle system's latency."""
    sent = []
    for i in range(count):
        sent.append(submit(i))
        time.sleep(random.uniform(0.02, 0.06))
    return sent


def open_loop(submit: Submit, count: int, rate: float,
              threads: int = 16) -> tuple[list[tuple[Any, float]], float]:
    """Submit ``count`` jobs, job i due at start + i/rate, from ``threads`` threads (a
    slow submit does not delay the jobs due after it, up to ``threads`` at once).
    Returns the (key, sent) pairs and the rate achieved."""
    sent: list[tuple[Any, float]] = []
    lock = threading.Lock()
    counter = iter(range(count))
    start = time.monotonic() + 0.2

    def worker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            result = submit(i)
            with lock:
                sent.append(result)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sent, count / (time.monotonic() - start)


def post_all(port: int, count: int, clients: int) -> float:
    """POST ``count`` jobs as fast as the API answers, from ``clients`` keep-alive
    threads; the seconds it took. Each client connects and POSTs once before the clock
    starts; those POSTs are not counted (so ``count + clients`` jobs go in)."""
    left, lock = [count], threading.Lock()
    ready = threading.Barrier(clients + 1)

    def client_loop() -> None:
        client = ApiClient(port)
        try:
            client.submit(stamp_job())
            ready.wait()
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                client.submit(stamp_job())
        finally:
            client.close()

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started
