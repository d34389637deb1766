"""A throw-away ZooKeeper server (Debian's ``zookeeper`` package) for the tests."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from tests.helpers import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/*"
# Sessions expire in buckets of one tick: a short tick keeps expiry close to the
# session timeout, as on a tuned production ensemble.
TICK_MS = 500


def available() -> str | None:
    """None when a server can be started here, else why not."""
    if shutil.which("java") is None:
        return "java is not installed"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing (apt-get install zookeeper)"
    return None


class ZooKeeperServer:
    """``ZooKeeperServerMain`` on a free port with its own data dir; restartable."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "server.log", "ab")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
             "-Dzookeeper.4lw.commands.whitelist=ruok", "-cp", CLASSPATH,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.port),
             str(self.data_dir), str(TICK_MS)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from kazoo.client import KazooClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited; see {self.data_dir / 'server.log'}")
            client = KazooClient(hosts=self.hosts, timeout=2)
            try:
                client.start(timeout=1)
                client.stop()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
            finally:
                client.close()
        raise RuntimeError(f"ZooKeeper did not start within {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
