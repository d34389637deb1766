"""``jobserver cluster --nodes N``: N nodes on this host.

All nodes share the configured store and lock backend (by default, the embedded one:
one SQLite file and file locks under ``data_dir``; the banner names the ones in use)
and serve the API on one port (``SO_REUSEPORT``), so the API keeps answering when any node dies; each node
also serves it on a port of its own (``api.node_bind``: by default the ports after
``api.bind``'s), where its ``/metrics`` are that node's. The launcher generates an API
token on first use (kept in ``data_dir/api-token``, mode 0600), prints it, and
supervises the nodes until a signal stops it (see :mod:`jobserver.cluster_stop`).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from jobserver.client import Client
from sqlalchemy.engine import make_url

from jobserver.cluster_stop import NodeStop, StopSignals
from jobserver.config import Config
from jobserver.demo import batches as demo_batches
from jobserver.demo import place as demo_place
from jobserver.exceptions import ConfigError, JobServerError
from jobserver.serve import EXIT_CODES, EXIT_NOT_DRAINED
from jobserver.store import Store

START_TIMEOUT = 60.0


def new_cluster_token() -> str:
    """256 random bits in hex: a token that never starts with ``-``, which a command
    line would read as an option (``--token -x…`` is refused by argparse)."""
    return secrets.token_hex(32)


def cluster_token(config: Config) -> str:
    if config.api.tokens:
        return config.api.tokens[0]
    path = config.data_dir / "api-token"
    if path.exists():
        return path.read_text().strip()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    token = new_cluster_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def node_env(config: Config, index: int, token: str,
             node_bind: str | None = None) -> dict[str, str]:
    env = dict(os.environ,
               JOBSERVER_SERVER__ID=f"node-{index}",
               JOBSERVER_DATA_DIR=str(config.data_dir.resolve()),
               JOBSERVER_API__TOKENS=token,
               JOBSERVER_API__BIND=config.api.bind,
               JOBSERVER_API__REUSE_PORT="true")
    if node_bind is not None:
        env["JOBSERVER_API__NODE_BIND"] = node_bind
    return env


def node_binds(bind: str, count: int, ports: list[int] | None = None) -> list[str]:
    """Each node's own address: ``ports`` on ``bind``'s host, by default the ``count``
    ports after ``bind``'s (8081, 8082, ... for 127.0.0.1:8080); none for a Unix
    socket."""
    if bind.startswith("unix:"):
        return []
    host, port = bind.rsplit(":", 1)
    ports = ports or [int(port) + index for index in range(1, count + 1)]
    if len(ports) != count:
        raise ConfigError(f"--node-ports: {len(ports)} port(s) for {count} nodes; "
                          "give one port per node")
    return [f"{host}:{node_port}" for node_port in ports]


def port_in_use(bind: str) -> bool:
    """Whether something accepts connections on ``host:port``."""
    host, port = bind.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host.strip("[]"), int(port))) == 0


def describe_exit(index: int, code: int, log_dir: Path) -> str:
    """One line on a node that exited: its code, what the code means, where its log is."""
    meaning = EXIT_CODES.get(code, "killed by a signal" if code < 0 else "failed")
    return f"node-{index} exited with {code}: {meaning}; log: {log_dir}/node-{index}.log"


#: How the banner names each ``lock.backend``.
LOCK_BACKENDS = {"file": "file locks", "postgres": "PostgreSQL advisory locks",
                 "zookeeper": "ZooKeeper", "memory": "in-process locks"}


def describe_setup(config: Config) -> str:
    """The store, the lock backend and the mode the nodes run on, for the banner:
    what the config says (what every node loads too), never a password or a user."""
    locks = LOCK_BACKENDS.get(config.lock.backend, config.lock.backend)
    if config.lock.backend == "zookeeper":
        locks += f" {config.zookeeper.hosts}"
    elif config.lock.backend == "postgres" and config.lock.url:
        locks += f" on {describe_database(config.lock.url)}"
    return (f"store: {describe_database(config.database_url)}; locks: {locks}; "
            f"{config.scheduler.mode.value} mode")


def describe_database(database_url: str) -> str:
    """``SQLite /path/file.db`` or ``PostgreSQL host:port/database``: the URL's
    backend, host, port and database only."""
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return f"SQLite {url.database or ':memory:'}"
    port = f":{url.port}" if url.port else ""
    name = {"postgresql": "PostgreSQL"}.get(backend, backend)
    return f"{name} {url.host or 'localhost'}{port}/{url.database or ''}"


class LocalCluster:
    def __init__(self, config: Config, nodes: int, node_ports: list[int] | None = None) -> None:
        self.config = config
        self.count = nodes
        self.token = cluster_token(config)
        self.url = f"http://{config.api.bind}"
        #: each node's own API address, by index - 1
        self.node_binds = node_binds(config.api.bind, nodes, node_ports)
        self.log_dir = (config.data_dir / "logs").resolve()
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        #: Settings every node gets on top of the launcher's (the demo's connections).
        self.node_settings: dict[str, str] = {}
        self.signals = StopSignals()

    def run(self, demo: bool) -> int:
        """Start the nodes (and the demo), print the banner and supervise the nodes
        until a signal stops the cluster; then stop them. Returns the launcher's exit
        code: 0 when the nodes drained or the user asked to stop at once (a second
        signal: no error to report, and the launcher says which nodes did not drain),
        3 when a node had to be killed after its drain should have ended."""
        self.signals.install()
        try:
            self._start_and_supervise(demo)
        finally:
            stop = self.stop()
        return EXIT_NOT_DRAINED if stop.hurried and not stop.asked_at_once else 0

    def _start_and_supervise(self, demo: bool) -> None:
        self.check_ports()
        if demo:
            self.prepare_demo()
        self.start()
        if self.signals.stop_asked:
            return
        print(self.banner(self.place_demo() if demo else []), flush=True)
        self.supervise()

    def check_ports(self) -> None:
        """Refuse to start on an address something already listens on."""
        if not self.config.api.bind.startswith("unix:") and port_in_use(self.config.api.bind):
            raise ConfigError(f"api.bind: {self.config.api.bind} is already in use")
        for index, bind in enumerate(self.node_binds, 1):
            if port_in_use(bind):
                raise ConfigError(f"--node-ports: {bind} (node-{index}'s own address) is "
                                  "already in use")

    def start(self) -> None:
        store = Store(self.config.database_url)
        store.upgrade()
        store.dispose()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for index in range(1, self.count + 1):
            if self.signals.stop_asked:
                return
            self.start_node(index)
        self.wait_healthy()

    def start_node(self, index: int) -> None:
        # Each node in a process group of its own: Ctrl-C (SIGINT to the terminal's
        # foreground group) reaches only the launcher, whose stop() then sends each node
        # one SIGTERM. Had the nodes seen the SIGINT too, that SIGTERM would be their
        # second signal, and they would exit at once instead of draining.
        log = open(self.log_dir / f"node-{index}.log", "ab")
        self.processes[index] = subprocess.Popen(
            [sys.executable, "-P", "-m", "jobserver.cli", "serve"],
            env=dict(node_env(self.config, index, self.token, self.node_bind(index)),
                     **self.node_settings),
            stdout=log, stderr=subprocess.STDOUT,
            process_group=0)
        log.close()

    def node_bind(self, index: int) -> str | None:
        return self.node_binds[index - 1] if self.node_binds else None

    def wait_healthy(self) -> None:
        client = Client(self.url, self.token, timeout=2)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and not self.signals.stop_asked:
            if any(p.poll() is not None for p in self.processes.values()):
                raise JobServerError(f"a node exited during start-up; see {self.log_dir}")
            if client.healthy():
                return
            time.sleep(0.2)
        if self.signals.stop_asked:
            return
        raise JobServerError(f"the API did not answer on {self.url}; see {self.log_dir}")

    def prepare_demo(self) -> None:
        """Before :meth:`start`: the example batches' databases, and their connections
        in every node's settings."""
        self.node_settings.update(demo_batches.prepare(self.config.data_dir))

    def place_demo(self) -> list[str]:
        """Once the API answers, on the first start only (:mod:`jobserver.demo.place`):
        the demo's jobs, views, datasets and schedule, and a batch run; banner lines."""
        client = Client(self.url, self.token)
        placed = demo_place.place(client, self.config.views_root.resolve())
        return placed.lines if placed.already else placed.lines + demo_batches.start(client)

    def banner(self, demo_lines: list[str] | None = None) -> str:
        """What the launcher prints once the nodes answer: where everything is, the
        demo's lines (``demo_lines``, from :meth:`place_demo`) and what to try."""
        nodes = "1 node" if self.count == 1 else f"{self.count} nodes"
        lines = [f"jobserver cluster: {nodes} ({describe_setup(self.config)})",
                 f"  API:    {self.url}   (any node; its reference: {self.url}/ui/api, "
                 "signed in to the dashboard)"]
        if self.node_binds:
            lines.append("  nodes:  " + ", ".join(
                f"node-{index} http://{bind}" for index, bind in enumerate(self.node_binds, 1))
                + "   (one node each, its own /metrics; the X-Jobserver-Node header of "
                  "every answer names the node)")
        lines += [f"  token:  {self.token}",
                  f"  dashboard: {self.url}/ui/   (sign in with the token)",
                  f"  logs:   {self.log_dir}/node-*.log"]
        lines += demo_lines or []
        lines += self._tour()
        if demo_lines:
            lines += demo_place.commands(self.url)
            lines += demo_batches.commands(self.config.data_dir)
        lines.append(f"Ctrl-C stops the cluster. The nodes drain first (up to "
                     f"{self.config.server.drain_timeout:g} s, server.drain_timeout); "
                     "Ctrl-C again stops at once.")
        return "\n".join(lines)

    def _tour(self) -> list[str]:
        spec = json.dumps({"name": "hi", "steps": [{"name": "s", "type": "noop"}]})
        return ["", "Watch the jobs:",
                f"  export JOBSERVER_URL={self.url} JOBSERVER_TOKEN={self.token}",
                "  .venv/bin/jobserver jobs",
                f"  curl -H 'Authorization: Bearer {self.token}' {self.url}/api/v1/jobs",
                "Submit one:",
                f"  curl -H 'Authorization: Bearer {self.token}' "
                f"-H 'Content-Type: application/json' -d '{spec}' {self.url}/api/v1/jobs"]

    def supervise(self) -> None:
        """Report each node that exits, until all have or a signal asks to stop."""
        reported: set[int] = set()
        while not self.signals.stop_asked:
            for index, process in self.processes.items():
                if process.poll() is not None and index not in reported:
                    print(describe_exit(index, process.returncode, self.log_dir), flush=True)
                    reported.add(index)
            if len(reported) == len(self.processes):
                return
            time.sleep(0.2)

    def stop(self) -> NodeStop:
        """Drain the nodes still running (:class:`jobserver.cluster_stop.NodeStop`)."""
        stop = NodeStop(self.processes, self.config.database_url,
                        self.config.server.drain_timeout, self.signals,
                        lambda index, code: describe_exit(index, code, self.log_dir))
        stop.run()
        return stop
