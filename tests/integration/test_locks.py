"""The lock-backend contract, run against every backend.

Cross-process exclusion and liveness use real processes, real PostgreSQL and a real
ZooKeeper server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from jobserver.config import load_config
from jobserver.exceptions import ConfigError, LockError
from jobserver.node import make_lock_backend
from jobserver.store import Store
from jobserver.store.tables import epochs
from locks import create_lock_backend
from locks.base import LockBackend
from tests.helpers import wait_for


@dataclass
class Setup:
    """How to reach one backend: the environment a node (or a holder process) reads."""

    name: str
    env: dict[str, str]
    store: Store | None

    def config(self, node: str = "test-node"):
        return load_config(environ={**self.env, "JOBSERVER_SERVER__ID": node})

    def backend(self, node: str = "test-node") -> LockBackend:
        return make_lock_backend(self.config(node), self.store)

    def recorded(self, key: str) -> tuple[int, str | None] | None:
        """The newest fence of ``key`` in the store, and its holder."""
        with self.store.tx.read() as conn:
            row = conn.execute(select(epochs.c.epoch, epochs.c.holder)
                               .where(epochs.c.key == key)).first()
        return None if row is None else (row.epoch, row.holder)


@pytest.fixture(params=["file", "memory", "postgres", "zookeeper"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    env = {"JOBSERVER_LOCK__BACKEND": request.param, "JOBSERVER_DATA_DIR": str(tmp_path)}
    if request.param == "postgres":
        store = request.getfixturevalue("store_on_postgres")
        env["JOBSERVER_DATABASE__URL"] = store.url
        yield Setup(request.param, env, store)
        return
    if request.param == "zookeeper":
        env["JOBSERVER_ZOOKEEPER__HOSTS"] = request.getfixturevalue("zookeeper")
        env["JOBSERVER_ZOOKEEPER__ROOT"] = f"/test-{uuid.uuid4().hex[:8]}"
    store = Store(f"sqlite:///{tmp_path / 'locks.db'}")
    store.upgrade()
    env["JOBSERVER_DATABASE__URL"] = store.url
    yield Setup(request.param, env, store)
    store.dispose()


@pytest.fixture
def backend(setup: Setup) -> Iterator[LockBackend]:
    backend = setup.backend()
    yield backend
    backend.close()


def test_acquire_is_exclusive_and_release_frees(backend: LockBackend) -> None:
    lease = backend.acquire("a", blocking=False)
    assert lease is not None and lease.is_valid()
    assert backend.is_held("a") is True
    assert backend.acquire("a", blocking=False) is None
    assert backend.acquire("b", blocking=False) is not None
    lease.release()
    assert not lease.is_valid()
    assert backend.is_held("a") is False
    again = backend.acquire("a", blocking=False)
    assert again is not None
    again.release()


def test_fence_grows_with_every_acquisition(backend: LockBackend) -> None:
    fences = []
    for _ in range(3):
        with backend.acquire("k") as lease:
            fences.append(lease.fence)
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_drawing_a_fence_records_it_as_the_newest(setup: Setup, backend: LockBackend) -> None:
    lease = backend.acquire("k")
    assert setup.recorded("k") is None  # drawn on first use: a lock fencing nothing
    fence = lease.fence
    assert setup.recorded("k") == (fence, "test-node")
    assert lease.fence == fence  # drawn once
    lease.release()
    elected = backend.elect("scheduler", "node-1")
    fence = elected.fence
    assert setup.recorded("election/scheduler") == (fence, "node-1")
    elected.release()


#: Backends that draw fences from the store, above anything recorded there.
DRAW_FROM_STORE = {"file", "postgres"}


def test_a_fence_older_than_the_newest_recorded_is_refused(setup: Setup,
                                                          backend: LockBackend) -> None:
    """Another holder recorded a newer lease of the key after this one was taken: a
    backend drawing from the store draws above it, one with its own fence finds its
    fence superseded, and the lease is lost and its lock given up."""
    lease = backend.acquire("k")
    lost = threading.Event()
    lease.on_lost(lambda _lease: lost.set())
    newer = 1 << 62
    assert setup.store.epochs.advance("k", newer, "elsewhere")
    if setup.name in DRAW_FROM_STORE:
        assert lease.fence > newer and setup.recorded("k") == (lease.fence, "test-node")
        lease.release()
        return
    with pytest.raises(LockError, match="superseded"):
        lease.fence  # noqa: B018
    assert not lease.is_valid() and lost.is_set()
    with pytest.raises(LockError):
        lease.fence  # noqa: B018 - refused for good
    assert setup.recorded("k") == (newer, "elsewhere")
    assert backend.is_held("k") is False
    again = backend.acquire("k", blocking=False)
    assert again is not None
    again.release()


def test_a_fence_is_not_drawn_for_a_released_lease(setup: Setup,
                                                   backend: LockBackend) -> None:
    lease = backend.acquire("k")
    lease.release()
    with pytest.raises(LockError):
        lease.fence  # noqa: B018
    assert setup.recorded("k") is None


def test_blocking_timeout_and_handover(backend: LockBackend) -> None:
    holder = backend.acquire("k")
    holder_fence = holder.fence
    started = time.monotonic()
    assert backend.acquire("k", blocking=True, timeout=0.3) is None
    assert time.monotonic() - started >= 0.29
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(backend.acquire("k", timeout=5)))
    waiter.start()
    time.sleep(0.1)  # let the waiter block on the held lock
    holder.release()
    waiter.join(5)
    assert got and got[0] is not None and got[0].fence > holder_fence
    got[0].release()


def test_release_is_idempotent(backend: LockBackend) -> None:
    lease = backend.acquire("k")
    lease.release()
    lease.release()
    assert backend.is_held("k") is False


def test_election_hand_over(backend: LockBackend) -> None:
    assert backend.leader("scheduler") is None
    first = backend.elect("scheduler", "node-1")
    first_fence = first.fence
    assert backend.leader("scheduler") == "node-1"
    assert backend.elect("scheduler", "node-2", blocking=False) is None
    first.release()
    assert backend.leader("scheduler") is None
    second = backend.elect("scheduler", "node-2", timeout=1)
    assert second is not None and second.fence > first_fence
    assert backend.leader("scheduler") == "node-2"
    second.release()


def _force_loss(setup: Setup, backend: LockBackend) -> None:
    if setup.name == "memory":
        backend.expire("k")
    elif setup.name == "postgres":
        with setup.store.engine.connect() as conn:
            killed = conn.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'jobserver-locks test-node' "
                "AND datname = current_database()").scalar()  # not another run's
        assert killed == 1
    else:  # a second client on the same session closes it: the session expires
        from kazoo.client import KazooClient

        client = backend._client
        twin = KazooClient(hosts=setup.env["JOBSERVER_ZOOKEEPER__HOSTS"],
                           client_id=client.client_id)
        twin.start(timeout=5)
        twin.stop()
        twin.close()


@pytest.mark.parametrize("setup", ["memory", "postgres", "zookeeper"], indirect=True)
def test_loss_is_exposed(setup: Setup, backend: LockBackend) -> None:
    lease = backend.acquire("k")
    lost = threading.Event()
    lease.on_lost(lambda _lease: lost.set())
    _force_loss(setup, backend)
    assert lost.wait(5), "the backend did not report the lost lease"
    assert not lease.is_valid()
    with pytest.raises(LockError):
        lease.fence  # noqa: B018 - a lost lease fences nothing
    late = threading.Event()
    lease.on_lost(lambda _lease: late.set())  # registering after the loss still reports it
    assert late.is_set()
    again = wait_for(lambda: _try(backend), timeout=10, what="the lock to be acquirable again")
    assert again.fence > 0
    again.release()


def test_postgres_fence_drawn_after_the_session_ended_is_refused(
        store_on_postgres: Store, tmp_path: Path) -> None:
    """The lock session ends between the acquisition and the first read of the fence:
    the fence is refused, whether the draw or the session monitor finds out first."""
    from locks.postgres import PostgresLockBackend

    backend = PostgresLockBackend(store_on_postgres.url, "stalled",
                                  next_fence=store_on_postgres.epochs.bump,
                                  holder_of=store_on_postgres.epochs.holder)
    try:
        lease = backend.acquire("k")
        with store_on_postgres.engine.connect() as conn:
            conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'jobserver-locks stalled' "
                "AND datname = current_database()")
        with pytest.raises(LockError):
            lease.fence  # noqa: B018
        assert not lease.is_valid()
    finally:
        backend.close()


def _terminate_lock_session(store: Store, identity: str) -> None:
    with store.engine.connect() as conn:
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = 'jobserver-locks {identity}' "
            "AND datname = current_database()")


def test_postgres_lock_freed_by_a_burst_of_terminations_is_not_called_free(
        store_on_postgres: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends the holder's session, then the observer's a moment later (as
    a restart or an operator terminating every session does): in between, the
    holder's lock is free in pg_locks. The observer must not answer "free" (a rescue
    would run the live holder's jobs twice); "unknown" is right."""
    from locks import postgres

    # The pause is long here so that the test's own burst, 0.05 s into it, lands
    # within it whatever the machine's load; the server's bursts take milliseconds.
    monkeypatch.setattr(postgres, "FREE_SETTLE", 1.0)

    def node(identity: str) -> postgres.PostgresLockBackend:
        return postgres.PostgresLockBackend(store_on_postgres.url, identity,
                                            next_fence=store_on_postgres.epochs.bump,
                                            holder_of=store_on_postgres.epochs.holder)

    holder, observer = node("burst-holder"), node("burst-observer")
    try:
        holder.acquire("presence")
        _terminate_lock_session(store_on_postgres, "burst-holder")
        wait_for(lambda: observer._held_on_server("presence") is False, timeout=5,
                 what="the holder's lock to be free on the server")
        answers: list[bool | None] = []
        asking = threading.Thread(target=lambda: answers.append(observer.is_held("presence")))
        asking.start()
        time.sleep(0.05)  # the burst reaches the observer well within the pause
        _terminate_lock_session(store_on_postgres, "burst-observer")
        asking.join(10)
        assert answers == [None]
    finally:
        holder.close()
        observer.close()


def test_postgres_lock_of_a_dead_holder_is_free(store_on_postgres: Store) -> None:
    """A holder whose session ended for good: the observer, its own session
    untouched, answers "free" after the settle's pause, and at once when asked again;
    once the key was held again, a new pause."""
    from locks.postgres import FREE_SETTLE, PostgresLockBackend

    holder = PostgresLockBackend(store_on_postgres.url, "dead-holder",
                                 next_fence=store_on_postgres.epochs.bump,
                                 holder_of=store_on_postgres.epochs.holder)
    observer = PostgresLockBackend(store_on_postgres.url, "live-observer",
                                   next_fence=store_on_postgres.epochs.bump,
                                   holder_of=store_on_postgres.epochs.holder)
    try:
        holder.acquire("presence")
        assert observer.is_held("presence") is True
        holder.close()
        began = time.monotonic()
        assert observer.is_held("presence") is False
        assert time.monotonic() - began >= FREE_SETTLE  # looked twice
        began = time.monotonic()
        assert observer.is_held("presence") is False  # found free: no second pause
        assert time.monotonic() - began < FREE_SETTLE
        again = PostgresLockBackend(store_on_postgres.url, "dead-holder",
                                    next_fence=store_on_postgres.epochs.bump,
                                    holder_of=store_on_postgres.epochs.holder)
        try:
            again.acquire("presence")  # the node came back: held, then free again
            assert observer.is_held("presence") is True
        finally:
            again.close()
        began = time.monotonic()
        assert observer.is_held("presence") is False
        assert time.monotonic() - began >= FREE_SETTLE
    finally:
        observer.close()


def _try(backend: LockBackend):
    try:
        return backend.acquire("k", blocking=False)
    except Exception:  # noqa: BLE001 - reconnecting
        return None


def _start_holder(setup: Setup, key: str) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, **setup.env, "JOBSERVER_SERVER__ID": "holder"}
    holder = subprocess.Popen([sys.executable, "-m", "tests.lock_holder", key], env=env,
                              stdout=subprocess.PIPE, text=True)
    line = holder.stdout.readline().split()
    assert line and line[0] == "held", f"holder did not start ({holder.poll()})"
    return holder, int(line[1])


CROSS_PROCESS = ["file", "postgres", "zookeeper"]


@pytest.mark.parametrize("setup", CROSS_PROCESS, indirect=True)
def test_exclusion_across_processes_and_release_on_death(setup: Setup) -> None:
    bound = 2.0
    holder, holder_fence = _start_holder(setup, "shared")
    backend = setup.backend("observer")
    try:
        assert backend.acquire("shared", blocking=False) is None
        assert backend.is_held("shared") is True
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        killed = time.monotonic()
        # ZooKeeper frees the lock when the dead client's session times out.
        limit = bound + (setup.config().zookeeper.session_timeout
                         if setup.name == "zookeeper" else 0)
        lease = wait_for(lambda: backend.acquire("shared", blocking=False), timeout=limit,
                         what=f"{setup.name} to free a dead holder's lock")
        print(f"{setup.name}: lock free {time.monotonic() - killed:.2f} s after kill -9")
        assert lease.fence > holder_fence
        lease.release()
    finally:
        holder.kill()
        holder.wait()
        backend.close()


def test_unknown_and_missing_backends() -> None:
    with pytest.raises(ConfigError, match="unknown backend 'etcd'"):
        create_lock_backend("etcd")


def test_zookeeper_backend_closes_while_the_server_is_down(tmp_path: Path) -> None:
    """A node stopping during a ZooKeeper outage releases its locks and exits: kazoo
    would retry each delete until the server came back. Once the server is back, the
    locks are free again after the session timeout at most."""
    from locks.memory import record_nowhere
    from locks.zookeeper import ZooKeeperLockBackend
    from tests.conftest import started_zookeeper

    session = 4.0
    with started_zookeeper(tmp_path / "zookeeper") as server:
        holder = ZooKeeperLockBackend(server.hosts, "holder", record_nowhere, root="/close",
                                      session_timeout=session)
        presence, scheduler = holder.acquire("node/holder"), holder.acquire("scheduler")
        assert presence is not None and scheduler is not None
        server.stop()
        wait_for(lambda: not holder.can_claim(), 10, 0.05, "the holder to see the outage")
        closing = threading.Thread(target=lambda: (presence.release(), holder.close()),
                                   daemon=True)
        began = time.monotonic()
        closing.start()
        closing.join(session)
        assert not closing.is_alive(), "release and close waited for ZooKeeper"
        assert time.monotonic() - began < 2.0
        server.start()
        other = ZooKeeperLockBackend(server.hosts, "other", record_nowhere, root="/close",
                                     session_timeout=session)
        try:
            lease = other.acquire("scheduler", timeout=session + 5)
            assert lease is not None, "the stopped node's lock outlived its session"
            assert other.acquire("node/holder", timeout=2) is not None
        finally:
            other.close()


def test_zookeeper_release_cut_off_midway_ends_within_a_session_timeout(
        tmp_path: Path) -> None:
    """The connection drops while a release is under way (simulated: the backend has
    not yet heard of the drop): the delete waits for ZooKeeper at most one session
    timeout, then leaves the node to the session."""
    from locks.memory import record_nowhere
    from locks.zookeeper import ZooKeeperLockBackend
    from tests.conftest import started_zookeeper

    session = 3.0
    with started_zookeeper(tmp_path / "zookeeper") as server:
        holder = ZooKeeperLockBackend(server.hosts, "holder", record_nowhere, root="/cut",
                                      session_timeout=session)
        lease = holder.acquire("scheduler")
        assert lease is not None
        server.stop()
        wait_for(lambda: not holder.can_claim(), 10, 0.05, "the holder to see the outage")
        holder._connected.set()  # the release starts before the drop is noticed
        releasing = threading.Thread(target=lease.release, daemon=True)
        began = time.monotonic()
        releasing.start()
        releasing.join(session + 3)
        assert not releasing.is_alive(), "the release waited for ZooKeeper"
        assert time.monotonic() - began >= session - 0.5  # it did wait for the delete
        holder._connected.clear()
        holder.close()


def test_zookeeper_standby_waiting_for_a_lock_gives_up_when_stopped_during_an_outage(
        tmp_path: Path) -> None:
    """A standby is waiting for the scheduling lock when ZooKeeper goes away. kazoo
    keeps that acquisition waiting for the connection, past its timeout; when the node
    stops, ``abort_waits`` ends it at once and the backend closes."""
    from jobserver.exceptions import LockError
    from locks.memory import record_nowhere
    from locks.zookeeper import ZooKeeperLockBackend
    from tests.conftest import started_zookeeper

    session = 4.0
    with started_zookeeper(tmp_path / "zookeeper") as server:
        holder = ZooKeeperLockBackend(server.hosts, "holder", record_nowhere, root="/standby",
                                      session_timeout=session)
        standby = ZooKeeperLockBackend(server.hosts, "standby", record_nowhere, root="/standby",
                                       session_timeout=session)
        assert holder.acquire("scheduler") is not None
        outcome: list[object] = []

        def wait_for_the_lock() -> None:
            try:
                outcome.append(standby.acquire("scheduler", timeout=1.0))
            except LockError as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=wait_for_the_lock, daemon=True)
        waiting.start()
        wait_for(lambda: standby.lock_children("scheduler") == 2, 10, 0.02,
                 "the standby to queue behind the holder")
        server.stop()
        wait_for(lambda: not standby.can_claim(), 10, 0.05, "the standby to see the outage")
        waiting.join(2.0)
        assert waiting.is_alive(), "kazoo no longer waits for the connection: drop abort_waits?"
        began = time.monotonic()
        standby.abort_waits()
        waiting.join(2.0)
        assert not waiting.is_alive(), "the acquisition still waits for ZooKeeper"
        assert outcome and (outcome[0] is None or isinstance(outcome[0], LockError)), outcome
        closing = threading.Thread(target=standby.close, daemon=True)
        closing.start()
        closing.join(2.0)
        assert not closing.is_alive(), "close waited for ZooKeeper"
        assert time.monotonic() - began < 2.0
        holder.close()
