"""A three-node cluster of real ``jobserver serve`` processes for the chaos tests.

Built on :mod:`tests.integration.nodes` (processes, marker-based cleanup, the HTTP
client); this module adds what fault injection needs: the mode and lock-backend
settings, many ledger jobs submitted at once, direct reads of the store for exact
timing, ``SIGSTOP``/``SIGCONT``, and a TCP proxy that cuts one node off ZooKeeper.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from jobserver.store import Store
from jobserver.store.tables import epochs, events, jobs
from schedulers import ACTIVE_LOCK
from tests.chaos import ledger as ledger_mod
from tests.chaos.ledger import JobOutcome, Report
from tests.helpers import free_port, wait_for
from tests.integration.nodes import TOKEN, TRANSIENT, Api, Harness, HttpError, Proc

MODES = ("single", "distributed", "leader")
BACKENDS = ("file", "postgres", "zookeeper")
#: Every mode and every backend once: what CI runs of a scenario whose faults do not
#: single out one pairing (``-m soak`` runs the other pairings).
DIAGONAL = frozenset({("single", "file"), ("distributed", "postgres"), ("leader", "zookeeper")})


def matrix(pairs: Iterable[tuple[str, str]],
           in_ci: Iterable[tuple[str, str]]) -> list[Any]:
    """``(mode, lock)`` parameters for ``pairs``; those not ``in_ci`` carry the ``soak``
    mark, so that CI stays within its time while ``-m soak`` runs the full matrix."""
    chosen = set(in_ci)
    return [pytest.param(mode, lock, id=f"{mode}-{lock}",
                         marks=() if (mode, lock) in chosen else pytest.mark.soak)
            for mode, lock in pairs]


#: A planner's chaos configurations: every mode on PostgreSQL locks, and leader mode on
#: ZooKeeper (the planners need the PostgreSQL store).
PLANNER_PAIRS = [(mode, "postgres") for mode in MODES] + [("leader", "zookeeper")]
#: What CI runs of them: the planner seat is one lock in every mode, so one run per
#: lock backend; the soak runs all of :data:`PLANNER_PAIRS`.
PLANNER_CI = [("distributed", "postgres"), ("leader", "zookeeper")]


def planner_matrix(soak: bool = False) -> list[Any]:
    """``(mode, lock)`` parameters of a planner's chaos test: :data:`PLANNER_CI` for
    its CI test, every pair of :data:`PLANNER_PAIRS` for its ``soak`` test."""
    return matrix(PLANNER_PAIRS if soak else PLANNER_CI, PLANNER_CI)


POLL_INTERVAL = 0.2
HEARTBEAT_INTERVAL = 0.5
DEAD_AFTER = 3.0
ZK_SESSION_TIMEOUT = 4.0
PG_SESSION_TIMEOUT = 3.0
PREFETCH = 4

#: Settings every chaos node runs with (on top of nodes.NODE_DEFAULTS).
CHAOS_ENV = {
    "JOBSERVER_SCHEDULER__POLL_INTERVAL": str(POLL_INTERVAL),
    "JOBSERVER_SERVER__HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
    "JOBSERVER_SERVER__DEAD_AFTER": str(DEAD_AFTER),
    "JOBSERVER_API__WORKERS": "1",
    "JOBSERVER_LOCK__SESSION_TIMEOUT": str(PG_SESSION_TIMEOUT),
    "JOBSERVER_ZOOKEEPER__SESSION_TIMEOUT": str(ZK_SESSION_TIMEOUT),
    # Claim-ahead on (off by default): the ledgers then check that held jobs are
    # neither lost nor run twice when their holder is killed, stopped or fenced off.
    "JOBSERVER_SCHEDULER__PREFETCH": str(PREFETCH),
}

#: What a node logs when it becomes the holder of its mode's ``ACTIVE_LOCK``.
ACTIVE_LOG = {"single": "is the active scheduler", "leader": "is the leader"}
FENCED_LOG = "refused; the job now belongs to"
#: The two ways a node notices a job was taken from it: a write refused under its
#: fence, or (a job it had not written for yet) its watcher finding it fenced.
NOTICED_TAKEN = re.compile(rf"job (\d+) stopped: job \d+: write under fence \d+ "
                           rf"{re.escape(FENCED_LOG)}|job (\d+) must stop on this node: fenced")
PROBE_PRIORITY = 1000
#: scheduler.max_concurrent_jobs (the default): no node may run more at once
CAPACITY = 10


@dataclass
class Backend:
    """One lock backend and the database it runs with."""

    lock: str                       # file | postgres | zookeeper
    database_url: str | None        # None: the SQLite file in the shared data dir
    zk_hosts: str | None = None
    zk_root: str | None = None

    def failover_bound(self) -> float:
        """How soon scheduling must resume after the active node is killed (kill -9)."""
        return {"file": POLL_INTERVAL + 2.0, "postgres": 2.0,
                "zookeeper": ZK_SESSION_TIMEOUT + 2.0}[self.lock]

    def session_timeout(self) -> float:
        """How long a stopped-but-alive holder keeps its locks."""
        return {"postgres": PG_SESSION_TIMEOUT, "zookeeper": ZK_SESSION_TIMEOUT}[self.lock]


# -- the cluster ------------------------------------------------------------------------------
class ChaosCluster:
    def __init__(self, harness: Harness, tmp_path: Path, mode: str, backend: Backend,
                 size: int = 3, zk_hosts: dict[str, str] | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.harness = harness
        #: JOBSERVER_* settings of this test's own, over CHAOS_ENV
        self.settings = settings or {}
        self.mode = mode
        self.backend = backend
        self.ids = [f"node-{i}" for i in range(1, size + 1)]
        self.zk_hosts = zk_hosts or {}
        self.port = free_port()
        self.data_dir = tmp_path / "data"
        self.ledger = tmp_path / "ledger"
        self.gate = tmp_path / "gate"  # held jobs end once it exists
        self.api = Api(f"http://127.0.0.1:{self.port}", TOKEN, retry_for=20.0)
        self.nodes: dict[str, Proc] = {}
        self.lock_keys: dict[int, str] = {}
        self.accepted: list[int] = []
        #: the most jobs seen RUNNING at once on each node (store samples)
        self.max_running: dict[str, int] = {}
        self._store: Store | None = None
        self.label = f"{mode}/{backend.lock}"

    # -- processes --------------------------------------------------------------------
    def node_env(self, node_id: str) -> dict[str, str]:
        env = dict(CHAOS_ENV, JOBSERVER_SCHEDULER__MODE=self.mode,
                   JOBSERVER_LOCK__BACKEND=self.backend.lock, **self.settings)
        if self.backend.lock == "zookeeper":
            env["JOBSERVER_ZOOKEEPER__HOSTS"] = self.zk_hosts.get(node_id,
                                                                 self.backend.zk_hosts or "")
            env["JOBSERVER_ZOOKEEPER__ROOT"] = self.backend.zk_root or "/jobserver"
        return env

    def start(self) -> dict[str, Any]:
        for node_id in self.ids:
            self.start_node(node_id)
        return self.wait_ready()

    def restart(self, node_id: str) -> dict[str, Any]:
        """Start ``node_id`` again (after a kill); returns once the cluster is ready."""
        self.start_node(node_id)
        return self.wait_ready()

    def start_node(self, node_id: str) -> Proc:
        """A ``jobserver serve`` of ``node_id``, now the cluster's process of it (no
        wait: see :meth:`wait_ready`, :meth:`wait_registered`)."""
        extra = {"database_url": self.backend.database_url} if self.backend.database_url else {}
        proc = self.harness.start_node(node_id, self.port, self.data_dir, **extra,
                                       **self.node_env(node_id))
        self.nodes[node_id] = proc
        return proc

    def wait_registered(self, node_id: str, timeout: float = 30.0) -> None:
        """Until ``node_id``'s current process is registered alive in the store under
        its pid (a restarted or woken node); fails at once if the process exited."""
        proc = self.nodes[node_id]

        def alive() -> bool:
            assert proc.running(), f"{node_id} exited {proc.popen.returncode}:\n{proc.tail()}"
            return any(server.id == node_id and server.pid == proc.pid
                       and server.state == "alive" for server in self.store.servers.list())

        wait_for(alive, timeout, 0.1, f"{node_id} (pid {proc.pid}) to be alive")

    def stop_all(self) -> None:
        """SIGTERM every running node and wait for all to exit: the store is final
        afterwards (what a planner's audit reads)."""
        procs = [proc for proc in self.nodes.values() if proc.running()]
        for proc in procs:
            os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait_exit(30)

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        """Until every node is registered alive under its own pid and scheduling is on:
        one active node (single, leader) or every node active (distributed)."""
        def ready() -> dict[str, Any] | None:
            for proc in self.nodes.values():
                if not proc.running():
                    raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}"
                                         f" during start-up:\n{proc.tail()}")
            try:
                cluster = self.api.cluster()
            except (*TRANSIENT, HttpError):
                return None
            alive = {n["id"]: n for n in cluster["nodes"] if n["alive"]}
            if any(alive.get(i, {}).get("pid") != p.pid for i, p in self.nodes.items()):
                return None
            if self.mode == "distributed":
                return cluster if all(n["role"] == "active" for n in alive.values()) else None
            return cluster if cluster["active"] in self.nodes else None

        return wait_for(ready, timeout, 0.1, f"{self.label}: all nodes up, scheduling on")

    @property
    def store(self) -> Store:
        if self._store is None:
            url = self.backend.database_url or f"sqlite:///{self.data_dir / 'jobserver.db'}"
            self._store = Store(url, pool_size=2, notify=False)
        return self._store

    def close(self) -> None:
        self.release_held()  # a failed test leaves no step waiting for its gate
        if self._store is not None:
            self._store.dispose()

    def noticed_taken(self, node_id: str) -> set[int]:
        """The jobs ``node_id`` found taken from it (see :data:`NOTICED_TAKEN`)."""
        return {int(first or second)
                for first, second in NOTICED_TAKEN.findall(self.log(node_id))}

    def kill9(self, node_id: str) -> float:
        return self.harness.kill9(self.nodes[node_id])

    def sigstop(self, node_id: str) -> float:
        os.kill(self.nodes[node_id].pid, signal.SIGSTOP)
        return time.monotonic()

    def sigcont(self, node_id: str) -> float:
        os.kill(self.nodes[node_id].pid, signal.SIGCONT)
        return time.monotonic()

    def sigterm(self, node_id: str) -> float:
        """SIGTERM the node (not its group); return the monotonic time it was sent."""
        os.kill(self.nodes[node_id].pid, signal.SIGTERM)
        return time.monotonic()

    def log(self, node_id: str) -> str:
        return self.nodes[node_id].output()

    # -- jobs -------------------------------------------------------------------------
    def submit(self, count: int, keys: int = 10, sleep: float = 0.05,
               threads: int = 8, priority: int = 0) -> list[int]:
        """Submit ``count`` ledger jobs, several at a time: two in three with a
        lock_key drawn from ``keys`` keys, every third without one (``distributed``
        mode claims those in batches, without segment locks). Returns the ids the API
        accepted (2xx)."""
        start = len(self.accepted)
        wanted = [(f"chaos-{start + i}",
                   None if i % 3 == 2 else f"key-{random.randrange(keys)}")
                  for i in range(count)]

        def one(item: tuple[str, str | None]) -> tuple[int, str | None]:
            name, key = item
            spec = ledger_mod.job_spec(name, self.ledger, key, sleep, priority)
            return self.api.submit(spec), key

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(one, wanted))
        for job_id, key in results:
            if key is not None:
                self.lock_keys[job_id] = key
            self.accepted.append(job_id)
        return [job_id for job_id, _ in results]

    def submit_long(self, count: int, seconds: float, on: str | None = None) -> list[int]:
        """Submit ``count`` high-priority ledger jobs whose step sleeps ``seconds``, each
        with a ``lock_key`` of its own (none waits for another's segment); ``on`` pins
        them to one node (``assigned_servers``)."""
        return [self._submit_own_key(f"long-{on or 'any'}", seconds, on)
                for _ in range(count)]

    def submit_held(self, count: int) -> list[int]:
        """Submit ``count`` high-priority ledger jobs, each with a ``lock_key`` of its
        own, whose steps run until :meth:`release_held` (re-runs included). A fault
        test submits some before its load so that the node it hurts is surely running
        jobs then: a load of short jobs may have finished by the time it looks."""
        return [self._submit_own_key("held", 0, None, self.gate) for _ in range(count)]

    def release_held(self) -> None:
        """Let every held job's step (running or yet to run) end."""
        self.gate.touch()

    def _submit_own_key(self, prefix: str, seconds: float, on: str | None,
                        gate: Path | None = None) -> int:
        name = f"{prefix}-{len(self.accepted)}"
        spec = ledger_mod.job_spec(name, self.ledger, name, seconds, PROBE_PRIORITY - 1, gate)
        if on is not None:
            spec["assigned_servers"] = [on]
        job_id = self.api.submit(spec)
        self.accepted.append(job_id)
        self.lock_keys[job_id] = name
        return job_id

    def submit_probe(self) -> int:
        """A job that outranks every queued one: claimed by the next claim round."""
        job_id = self.api.submit(ledger_mod.job_spec("probe", self.ledger, sleep=0,
                                                     priority=PROBE_PRIORITY))
        self.accepted.append(job_id)
        return job_id

    def rows(self, ids: Iterable[int] | None = None) -> dict[int, Any]:
        query = select(jobs.c.id, jobs.c.state, jobs.c.node, jobs.c.fence, jobs.c.attempt,
                       jobs.c.lock_key)
        if ids is not None:
            query = query.where(jobs.c.id.in_(list(ids)))
        with self.store.tx.read() as conn:
            return {row.id: row for row in conn.execute(query)}

    def counts(self) -> dict[str, int]:
        """Jobs by state; also samples how many each node runs (see ``max_running``)."""
        with self.store.tx.read() as conn:
            per_node = conn.execute(select(jobs.c.node, func.count())
                                    .where(jobs.c.state == "RUNNING")
                                    .group_by(jobs.c.node)).all()
        for node_id, count in per_node:
            self.max_running[node_id] = max(self.max_running.get(node_id, 0), int(count))
        return self.store.jobs.count_by_state()

    def running_on(self, node_id: str, among: Iterable[int] | None = None) -> list[int]:
        query = select(jobs.c.id).where(jobs.c.state == "RUNNING", jobs.c.node == node_id)
        if among is not None:
            query = query.where(jobs.c.id.in_(list(among)))
        with self.store.tx.read() as conn:
            return [row[0] for row in conn.execute(query)]

    def busiest(self, among: Iterable[int] | None = None) -> str:
        """The live node running the most jobs (of ``among``, if given)."""
        among = None if among is None else list(among)
        load = {node_id: len(self.running_on(node_id, among))
                for node_id, proc in self.nodes.items() if proc.running()}
        return max(sorted(load), key=lambda node_id: load[node_id])

    def wait_progress(self, done: int, timeout: float = 60.0,
                      also: Callable[[], bool] = lambda: True) -> None:
        """Until ``done`` jobs succeeded (and ``also()`` holds)."""
        wait_for(lambda: self.counts().get("SUCCEED", 0) >= done and also(), timeout, 0.02,
                 f"{self.label}: {done} jobs to succeed")

    def wait_all_final(self, timeout: float = 90.0) -> bool:
        """Until every accepted job ended. On timeout, print the states and return
        False: the ledger check then counts the stragglers as lost."""
        def settled() -> bool:
            self.counts()
            rows = self.rows(self.accepted)
            return len(rows) == len(self.accepted) and all(
                row.state in ledger_mod.FINAL_STATES | {"ERROR"} for row in rows.values())

        try:
            wait_for(settled, timeout, 0.1, f"{self.label}: every accepted job to end")
        except AssertionError as exc:
            print(f"\n{exc}\nstates: {self.counts()}")
            return False
        return True

    def wait_claimed(self, job_id: int, timeout: float, not_node: str | None = None) -> float:
        """The monotonic time at which ``job_id`` was seen started (RUNNING or done) on
        a node other than ``not_node``."""
        def claimed() -> bool:
            row = self.rows([job_id]).get(job_id)
            return (row is not None and row.state != "READY" and row.node is not None
                    and row.node != not_node)

        wait_for(claimed, timeout, 0.01, f"{self.label}: job {job_id} to be claimed")
        return time.monotonic()

    def victim(self, among: Iterable[int] | None = None) -> str:
        """The node to hurt: the lock holder (single), the leader (leader), or the node
        running the most jobs (of ``among``, if given) in distributed mode."""
        if self.mode == "distributed":
            if among is not None:
                among = list(among)
                wait_for(lambda: any(self.running_on(n, among) for n in self.nodes), 30,
                         0.05, f"{self.label}: one of {among} to run")
            return self.busiest(among)
        holder = self.holder()
        assert holder in self.nodes, f"no active node: holder {holder!r}"
        return holder

    def wait_busy(self, node_id: str, done: int = 10, timeout: float = 60.0,
                  among: Iterable[int] | None = None) -> list[int]:
        """Until ``done`` jobs succeeded and ``node_id`` runs at least one (of
        ``among``, if given); returns the jobs it runs."""
        among = None if among is None else list(among)
        self.wait_progress(done, timeout, also=lambda: bool(self.running_on(node_id, among)))
        return self.running_on(node_id)

    def max_event_id(self) -> int:
        with self.store.tx.read() as conn:
            return int(conn.execute(select(func.max(events.c.id))).scalar() or 0)

    def outcomes(self) -> dict[int, JobOutcome]:
        result = {row.id: JobOutcome(row.id, row.state, row.fence, row.attempt, row.lock_key)
                  for row in self.rows().values()}
        with self.store.tx.read() as conn:
            for row in conn.execute(select(events.c.job_id, events.c.to_state, events.c.fence,
                                           events.c.attempt, events.c.message)
                                    .where(events.c.step.is_(None))):
                outcome = result.get(row.job_id)
                if outcome is None:
                    continue
                if row.to_state == "SUCCEED":
                    outcome.succeeded.append((row.fence, row.attempt))
                elif "died" in (row.message or "") and row.to_state in ("READY", "ERROR"):
                    outcome.rescues += 1
                elif row.to_state == "READY" and "re-queued" in (row.message or ""):
                    outcome.releases += 1
        return result

    def rescue_events(self, node_id: str, after_id: int = 0) -> list[Any]:
        """Audit rows of jobs moved off ``node_id`` because it was found dead."""
        with self.store.tx.read() as conn:
            return list(conn.execute(select(events).where(
                events.c.id > after_id, events.c.step.is_(None),
                events.c.from_state == "RUNNING",
                events.c.message.like(f"node {node_id} died%")).order_by(events.c.id)))

    def released_by(self, node_id: str) -> set[int]:
        """Jobs ``node_id`` gave back itself (RUNNING -> READY "...; re-queued"), e.g.
        after losing their segment lock."""
        with self.store.tx.read() as conn:
            return {row.job_id for row in conn.execute(select(events.c.job_id).where(
                events.c.step.is_(None), events.c.from_state == "RUNNING",
                events.c.to_state == "READY", events.c.node == node_id,
                events.c.message.like("%re-queued"),
                events.c.message.not_like("%died%")))}

    def writes_after_takeover(self, node_id: str) -> list[str]:
        """Audit rows that ``node_id`` wrote under a claim after that claim was rescued
        by another node: each one is a write that fencing should have refused."""
        rescued = {(e.job_id, e.fence, e.attempt): e.id for e in self.rescue_events(node_id)}
        if not rescued:
            return []
        with self.store.tx.read() as conn:
            rows = conn.execute(select(events).where(
                events.c.node == node_id, events.c.job_id.in_({k[0] for k in rescued})))
            return [f"event {row.id}: job {row.job_id} step {row.step} {row.from_state}->"
                    f"{row.to_state} fence {row.fence} attempt {row.attempt}"
                    for row in rows
                    if rescued.get((row.job_id, row.fence, row.attempt), 1 << 62) < row.id]

    def holder(self, mode: str | None = None) -> str | None:
        key = ACTIVE_LOCK.get(mode or self.mode)
        if key is None:
            return None
        with self.store.tx.read() as conn:
            return conn.execute(select(epochs.c.holder).where(epochs.c.key == key)).scalar()

    def report(self) -> Report:
        return ledger_mod.check(ledger_mod.parse(self.ledger), self.outcomes(), self.accepted,
                                self.lock_keys if self.mode == "distributed" else None)

    def wait_cluster_view(self, dead: Iterable[str] = (), timeout: float = 15.0) -> None:
        """Until ``GET /api/v1/cluster`` settles on a consistent view (right after a
        failover a node that has not noticed yet may still report itself active),
        checked with :meth:`check_cluster_view` against the newest lock holder."""
        dead = list(dead)

        def consistent() -> bool:
            try:
                self.check_cluster_view(self.api.cluster(), self.holder(), dead)
            except AssertionError:
                return False
            return True

        if not wait_for_quietly(consistent, timeout):
            self.check_cluster_view(self.api.cluster(), self.holder(), dead)  # say why

    def check_cluster_view(self, cluster: dict[str, Any], active: str | None,
                           dead: Iterable[str] = ()) -> None:
        """``GET /api/v1/cluster`` names the mode, the backend, the active node and each
        node's state and role, consistently with what the nodes themselves logged."""
        dead = set(dead)
        assert (cluster["mode"], cluster["lock_backend"]) == (self.mode, self.backend.lock), \
            cluster
        nodes = {n["id"]: n for n in cluster["nodes"]}
        assert set(self.ids) <= set(nodes), cluster
        for node_id in self.ids:
            node = nodes[node_id]
            if node_id in dead:
                assert not node["alive"] and node["role"] == "none", node
                continue
            assert node["alive"] and node["state"] == "alive", node
            assert node["pid"] == self.nodes[node_id].pid, node
            assert node["mode"] == self.mode, node
            if self.mode == "distributed":
                assert node["role"] == "active", node
            else:
                assert node["role"] == ("active" if node_id == active else "standby"), \
                    (node_id, active, cluster)
        if self.mode != "distributed":
            assert cluster["active"] == active, cluster
            assert ACTIVE_LOG[self.mode] in self.log(active), f"{active} never logged taking over"


@contextmanager
def started(harness: Harness, tmp_path: Path, mode: str, backend: Backend,
            title: str) -> Iterator[tuple[ChaosCluster, Figures]]:
    """A three-node :class:`ChaosCluster`, started and ready, with its figures (titled
    ``title`` and the cluster's label; ``start`` is how long starting took); closed on
    the way out, whether the test passed or not."""
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"{title} {cluster.label}")
    try:
        began = time.monotonic()
        cluster.start()
        figures["start"] = time.monotonic() - began
        yield cluster, figures
    finally:
        cluster.close()


def wait_for_quietly(condition: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_for(condition, timeout, 0.1)
    except AssertionError:
        return False
    return True


# -- a TCP proxy that can cut one node off ZooKeeper ------------------------------------------
class TcpProxy:
    """Forwards 127.0.0.1:<port> to an upstream port; :meth:`cut` drops every
    connection and refuses new ones until :meth:`heal`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"proxy-{self.port}")
        self._thread.start()

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 2)
            except OSError:
                client.close()
                continue
            with self._guard:
                self._conns |= {client, upstream}
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self._guard:
            self._conns.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def cut(self) -> None:
        self._cut.set()
        with self._guard:
            conns = list(self._conns)
        for sock in conns:
            self._drop(sock)

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._listener.close()


@dataclass
class Figures:
    """Measured seconds, printed by every test (``pytest -s``)."""

    label: str
    values: dict[str, float | int | str] = field(default_factory=dict)

    def __setitem__(self, name: str, value: float | int | str) -> None:
        self.values[name] = value

    def __str__(self) -> str:
        parts = [f"{k}={v:.2f}s" if isinstance(v, float) else f"{k}={v}"
                 for k, v in self.values.items()]
        return f"[{self.label}] " + " ".join(parts)
