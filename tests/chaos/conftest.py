"""Fixtures of the chaos tests: the harness, a lock backend with its database, and a
ZooKeeper or PostgreSQL server owned by one test (to stop and restart it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from jobserver.store import Store
from tests.chaos.cluster import Backend
from tests.conftest import _empty, missing_service, started_zookeeper
from tests.helpers import free_port
from tests.integration.nodes import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.cleanup()


LOG_TAIL_LINES = 80


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed chaos test shows the end of each node's log beside its traceback: a
    timing failure in CI is otherwise hard to tell from a bug."""
    outcome = yield
    report = outcome.get_result()
    harness = getattr(item, "funcargs", {}).get("harness")
    if report.when != "call" or not report.failed or harness is None:
        return
    for log in sorted(harness.log_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        report.sections.append((f"node log {log.name} (last {len(lines)} lines)",
                                "\n".join(lines)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``soak`` tests run only when a ``-m`` expression names them (``-m soak``):
    minutes-long runs, and the configurations of a matrix that CI leaves out (each
    named where its matrix is), more than a CI run can spend."""
    if "soak" in (config.getoption("markexpr", "") or ""):
        return
    skipped = [item for item in items if item.get_closest_marker("soak") is not None]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


def make_backend(request: pytest.FixtureRequest, lock: str,
                 zk_hosts: str | None = None) -> Backend:
    """``file``: SQLite in the cluster's data dir. ``postgres``/``zookeeper``: the
    session's PostgreSQL database, emptied; ZooKeeper under a root of this test's own."""
    if lock == "file":
        return Backend("file", None)
    store = request.getfixturevalue("pg_store_session")
    _empty(store)
    if lock == "postgres":
        return Backend("postgres", store.url)
    hosts = zk_hosts or request.getfixturevalue("zookeeper")
    return Backend("zookeeper", store.url, hosts, f"/chaos-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def own_zookeeper(tmp_path: Path):
    """A ZooKeeper server for this test alone: it may be stopped and restarted."""
    with started_zookeeper(tmp_path / "zookeeper") as server:
        yield server


# -- a PostgreSQL server owned by one test ----------------------------------------------------
POSTGRES_BIN_DIRS = "/usr/lib/postgresql/*/bin"
#: PostgreSQL refuses to run as root; under root the throw-away cluster belongs to this user.
POSTGRES_OS_USER = "postgres"


def postgres_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest version first), or None."""
    for candidate in sorted(glob.glob(POSTGRES_BIN_DIRS), reverse=True):
        if all((Path(candidate) / tool).exists() for tool in ("initdb", "pg_ctl")):
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


class PostgresServer:
    """A throw-away PostgreSQL cluster: ``initdb`` into a fresh directory, served on a
    free port of 127.0.0.1 with trust authentication and the default durability
    settings (fsync on), stopped and restarted with ``pg_ctl``.

    The directory is made under the system temp dir rather than ``tmp_path``: under
    root the server runs as :data:`POSTGRES_OS_USER`, who cannot enter pytest's
    private temp tree."""

    def __init__(self, bin_dir: Path, os_user: str | None) -> None:
        self.bin_dir = bin_dir
        self.os_user = os_user
        self.root = Path(tempfile.mkdtemp(prefix="jobserver-pg-"))
        self.data_dir = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        if os_user is not None:
            shutil.chown(self.root, os_user)

    def _run(self, tool: str, *args: str, timeout: float = 60.0) -> None:
        result = subprocess.run([str(self.bin_dir / tool), *args], user=self.os_user,
                                capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({result.returncode}):\n"
                               f"{result.stdout}{result.stderr}")

    def _pg_ctl(self, action: str, *args: str) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        self._run("pg_ctl", action, "-D", str(self.data_dir), "-l", str(self.log), "-w",
                  "-t", "60", "-o", options, *args)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8")

    def start(self) -> None:
        self._pg_ctl("start")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m <mode>``: every session ends, then the server is back."""
        self._pg_ctl("restart", "-m", mode)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create ``name``, migrated to the newest schema; return its URL."""
        admin = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        store = Store(self.url(name))
        try:
            store.upgrade()
        finally:
            store.dispose()
        return self.url(name)

    def close(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            try:
                self._pg_ctl("stop", "-m", "immediate")
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"could not stop the test's PostgreSQL server: {exc}")
        shutil.rmtree(self.root, ignore_errors=True)


def _postgres_os_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_OS_USER)
    except KeyError:
        missing_service(f"running as root and there is no {POSTGRES_OS_USER!r} user to run "
                        "a PostgreSQL server as")
    return POSTGRES_OS_USER


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test alone, with a migrated ``jobserver`` database
    (``own_postgres.url("jobserver")``): it may be restarted or stopped."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        missing_service("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    server = PostgresServer(bin_dir, _postgres_os_user())
    try:
        server.init()
        server.start()
        server.create_database("jobserver")
        yield server
    finally:
        server.close()
