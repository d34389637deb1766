"""Chaos tests of what the nodes depend on: PostgreSQL, and the API node of a request.

- PostgreSQL goes away under a working cluster: the test's own server is restarted
  (``pg_ctl restart -m fast``), or every session of the nodes' database on the shared
  server is terminated (``pg_terminate_backend``). Every advisory lock vanishes with
  its session; the nodes reconnect, take their presence locks again, re-elect the
  active node (single, leader) and carry on. Nothing accepted is lost; no job of a
  live node is rescued (run again elsewhere); the only re-runs are jobs a node gave
  back itself, as the audit trail records (distributed mode: a lost segment lock stops
  its job); and a job submitted after the fault is claimed within
  :data:`RESUME_BOUND`.
- A client retries a submit with the same ``Idempotency-Key`` while the API node that
  received it is killed mid-request. Triggers the test installs hold chosen submits
  inside the store (see :class:`SubmitGate`), so the kill lands at a known point: many
  keys from many threads held in their COMMIT while a standby is ``kill -9``'d with
  its gunicorn; one request held in its INSERT while its gunicorn worker is killed;
  one held in its COMMIT while its node is killed. Every key maps to exactly one job,
  which runs once; a commit left behind by a dead node is what its client's retry gets
  (200, replayed); a request repeated after success returns the same job. (On
  PostgreSQL a submit is one statement that commits as it returns, so an INSERT held
  there also commits once let go, client or not: its retry either wins the key, 201,
  or replays the orphan's job, 200.)

Measured figures are printed: run with ``-s``.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from sqlalchemy import func, select

from jobserver.store.engine import libpq_params
from jobserver.store.tables import epochs, jobs
from locks.postgres import advisory_key
from schedulers import ACTIVE_LOCK
from schedulers.base import presence_key
from tests.chaos import ledger as ledger_mod
from tests.chaos.cluster import MODES, Backend, ChaosCluster, Figures
from tests.chaos.conftest import PostgresServer, make_backend
from tests.chaos.test_chaos import _check_capacity, _check_reruns
from tests.helpers import wait_for
from tests.integration.nodes import (TOKEN, TRANSIENT, Harness, descendants, http_call,
                                     listeners)

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


# -- PostgreSQL, seen from the side ------------------------------------------------------------
@contextmanager
def pg_session(url: str) -> Iterator[Any]:
    """A psycopg2 connection (autocommit) of the test's own, closed afterwards."""
    conn = psycopg2.connect(**libpq_params(url), application_name="chaos-test")
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


def pg_rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one statement, run on a connection of its own."""
    with pg_session(url) as conn, conn.cursor() as cursor:
        cursor.execute(sql, params or None)
        return cursor.fetchall()


def terminate_backends(url: str) -> int:
    """End every other session of the database of ``url`` and wait until they are all
    gone (``pg_terminate_backend`` only signals them); return how many there were."""
    pids = [pid for pid, _ in pg_rows(
        url, "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    wait_for(lambda: not pg_rows(url, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)",
                                 (pids,)), 10, 0.01, "the terminated sessions to end")
    return len(pids)


LOCK_SESSION_PREFIX = "jobserver-locks "  # locks.postgres: application_name of lock sessions


def advisory_holders(url: str, key: str) -> list[str]:
    """The node ids whose lock session holds the advisory lock of ``key``."""
    unsigned = advisory_key(key) & 0xFFFFFFFFFFFFFFFF
    rows = pg_rows(url, "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
                        "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                        "AND l.database = (SELECT oid FROM pg_database "
                        "WHERE datname = current_database()) "
                        "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1",
                   (unsigned >> 32, unsigned & 0xFFFFFFFF))
    return sorted(name.removeprefix(LOCK_SESSION_PREFIX) for (name,) in rows)


def active_fence(cluster: ChaosCluster) -> int:
    """The newest fence of the mode's active lock (0 in distributed mode)."""
    key = ACTIVE_LOCK.get(cluster.mode)
    with cluster.store.tx.read() as conn:
        return int(conn.execute(select(epochs.c.epoch).where(epochs.c.key == key))
                   .scalar() or 0)


# -- 5. PostgreSQL goes away -------------------------------------------------------------------
PG_JOBS = 40
PG_JOB_SECONDS = 0.8  # still running when the last one is submitted
RUNNING_AT_FAULT = 4  # the fault hits at least this many running jobs
#: How soon after PostgreSQL is back (restart done, sessions terminated) a job submitted
#: then must be claimed. Measured here: 0.1-1.3 s (a lock monitor notices its lost session
#: at its next ping, PING_INTERVAL = 1 s, and reconnects at the one after).
RESUME_BOUND = 10.0
LOCKS_BACK_TIMEOUT = 20.0


def _start_loaded(cluster: ChaosCluster, figures: Figures) -> None:
    """Start the cluster and get jobs running on it."""
    cluster.start()
    cluster.submit(PG_JOBS, sleep=PG_JOB_SECONDS)
    wait_for(lambda: cluster.counts().get("RUNNING", 0) >= RUNNING_AT_FAULT, 30, 0.02,
             f"{RUNNING_AT_FAULT} jobs to run at once")
    figures["running_at_fault"] = cluster.counts().get("RUNNING", 0)


def _inject(fault: Callable[[], Any], figures: Figures) -> tuple[float, float]:
    """Run ``fault``; return its wall-clock time and the monotonic time PostgreSQL was
    back (the restart done, the sessions terminated)."""
    wall_fault = time.time()
    began = time.monotonic()
    result = fault()
    back = time.monotonic()
    figures["fault"] = back - began
    if isinstance(result, int):
        figures["sessions_terminated"] = result
    return wall_fault, back


def _wait_locks_back(cluster: ChaosCluster, url: str, back: float, figures: Figures) -> None:
    """Until every node holds its presence lock again and, in single/leader mode,
    exactly one node holds the active lock: the one the store names."""
    def presences() -> bool:
        return all(advisory_holders(url, presence_key(n)) == [n] for n in cluster.ids)

    wait_for(presences, LOCKS_BACK_TIMEOUT, 0.05, "every node to hold its presence lock")
    figures["presence_back"] = time.monotonic() - back
    if cluster.mode == "distributed":
        return

    def one_active() -> bool:
        holders = advisory_holders(url, ACTIVE_LOCK[cluster.mode])
        return len(holders) == 1 and holders == [cluster.holder()]

    wait_for(one_active, LOCKS_BACK_TIMEOUT, 0.05, "exactly one holder of the active lock")
    figures["reelected"] = time.monotonic() - back


def _check_recovery(cluster: ChaosCluster, wall_fault: float, back: float,
                    figures: Figures) -> None:
    """Everything a user checks after the fault; prints the figures first."""
    cluster.wait_cluster_view(timeout=LOCKS_BACK_TIMEOUT)
    figures["cluster_view_ok"] = time.monotonic() - back
    cluster.wait_all_final()
    _check_capacity(cluster)
    report = cluster.report()
    _, problems = _check_reruns(cluster, None, wall_fault, figures)
    distributed = cluster.mode == "distributed"
    figures["violations"] = sum(report.violations(distributed).values())
    print(f"\n{figures}\n  {report.summary()}")

    report.assert_clean(lock_keys=distributed)
    assert not problems, "\n".join(problems[:20])
    # Every node lost its presence lock at once and took it back: none of them died,
    # so no job may be rescued (re-run elsewhere while its node still runs it).
    assert figures.values["rescued"] == 0, f"jobs of live nodes were rescued: {figures}"
    assert figures.values["scheduling_resumed"] <= RESUME_BOUND, figures
    if not distributed:
        assert cluster.holder() in cluster.nodes, f"no active node: {cluster.holder()!r}"


def _resume_after(cluster: ChaosCluster, back: float, figures: Figures) -> None:
    """A job that outranks every queued one, submitted once PostgreSQL is back, is
    claimed: how long that took is ``scheduling_resumed``."""
    probe = cluster.submit_probe()
    claimed_at = cluster.wait_claimed(probe, RESUME_BOUND + 20)
    figures["scheduling_resumed"] = claimed_at - back


RESTART_MATRIX = ([pytest.param(mode, "postgres", id=f"{mode}-postgres") for mode in MODES]
                  + [pytest.param("single", "zookeeper", id="single-zookeeper")])


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("mode", "lock"), RESTART_MATRIX)
def test_postgres_server_restart(own_postgres: PostgresServer, harness: Harness,
                                 tmp_path: Path, request: pytest.FixtureRequest, mode: str,
                                 lock: str) -> None:
    """The test's own PostgreSQL server is restarted (``-m fast``: every session ends)
    while jobs run. With PostgreSQL locks every lock vanishes: each node takes its
    presence lock again, one node is active again under a new fence, and the jobs
    carry on. With ZooKeeper locks only the store goes away and comes back."""
    url = own_postgres.url("jobserver")
    backend = (Backend("postgres", url) if lock == "postgres" else
               Backend("zookeeper", url, request.getfixturevalue("zookeeper"),
                       f"/chaos-{uuid.uuid4().hex[:10]}"))
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"PostgreSQL restart {cluster.label}")
    try:
        _start_loaded(cluster, figures)
        fence_before = active_fence(cluster)
        wall_fault, back = _inject(own_postgres.restart, figures)
        _resume_after(cluster, back, figures)
        if lock == "postgres":
            _wait_locks_back(cluster, url, back, figures)
            if mode != "distributed":
                assert active_fence(cluster) > fence_before, \
                    "the active lock survived a server restart?"
        else:  # ZooKeeper locks do not depend on PostgreSQL: nothing fails over
            assert active_fence(cluster) == fence_before, "the active node changed"
        _check_recovery(cluster, wall_fault, back, figures)
    finally:
        cluster.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES)
def test_postgres_sessions_terminated(harness: Harness, tmp_path: Path,
                                      request: pytest.FixtureRequest, mode: str) -> None:
    """Every session of the nodes' database on the shared server is terminated while
    jobs run (the server itself stays up): store pools, LISTEN and lock sessions alike.
    The nodes reconnect and carry on as after a restart."""
    backend = make_backend(request, "postgres")
    assert backend.database_url is not None
    url = backend.database_url
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"PostgreSQL sessions terminated {cluster.label}")
    try:
        _start_loaded(cluster, figures)
        wall_fault, back = _inject(lambda: terminate_backends(url), figures)
        _resume_after(cluster, back, figures)
        _wait_locks_back(cluster, url, back, figures)
        _check_recovery(cluster, wall_fault, back, figures)
    finally:
        cluster.close()


# -- 7. Idempotency-Key across a kill -9 of the API node --------------------------------------
SUBMIT_TIMEOUT = 15.0   # one HTTP attempt; held requests wait well below this
RETRY_FOR = 60.0        # how long a client keeps retrying one key
RETRY_DELAY = 0.05
STORM_KEYS = 150
STORM_THREADS = 16
STORM_STALLED = 8  # submits held in their COMMIT when a node is killed


@dataclass
class KeyedSubmit:
    """One client submitting one job under one Idempotency-Key, retrying on connection
    errors, 5xx and 429 with the same key and body until it gets a 2xx."""

    key: str
    spec: dict[str, Any]
    attempts: int = 0
    cut: int = 0            # attempts that failed at the connection level
    server_errors: int = 0  # attempts answered 5xx or 429
    status: int | None = None
    job_id: int | None = None

    def post(self, base_url: str) -> tuple[int, Any]:
        """One attempt: ``(status, body)``; connection-level failures raise."""
        return http_call(base_url + "/api/v1/jobs", "POST", self.spec, TOKEN,
                         {"Idempotency-Key": self.key}, timeout=SUBMIT_TIMEOUT)

    def until_accepted(self, base_url: str) -> KeyedSubmit:
        """Attempt until a 2xx (at most :data:`RETRY_FOR` seconds)."""
        deadline = time.monotonic() + RETRY_FOR
        while self.status is None:
            self.attempts += 1
            try:
                self._answer(*self.post(base_url))
            except TRANSIENT:
                self.cut += 1
            if self.status is None:
                assert time.monotonic() < deadline, \
                    f"{self.key}: no 2xx after {self.attempts} attempts"
                time.sleep(RETRY_DELAY)
        return self

    def _answer(self, status: int, body: Any) -> None:
        if status in (200, 201):
            self.status, self.job_id = status, int(body["id"])
        elif status >= 500 or status == 429:
            self.server_errors += 1
        else:
            raise AssertionError(f"{self.key}: HTTP {status}: {body}")

    def replay(self, base_url: str) -> tuple[int, int]:
        """The same request once more, after success: ``(status, job id)``."""
        again = KeyedSubmit(self.key, self.spec).until_accepted(base_url)
        return again.status or 0, again.job_id or 0


def keyed_submit(cluster: ChaosCluster, prefix: str) -> KeyedSubmit:
    """A ledger job under a fresh key starting with ``prefix``."""
    key = f"{prefix}-{uuid.uuid4().hex[:12]}"
    return KeyedSubmit(key, ledger_mod.job_spec(f"idem-{key}", cluster.ledger, sleep=0))


def cluster_pids(cluster: ChaosCluster) -> dict[int, str]:
    """Every live process of every node (the node, gunicorn, step subprocesses) -> node."""
    owners = {}
    for node_id, proc in cluster.nodes.items():
        if proc.running():
            owners[proc.pid] = node_id
            owners.update({info.pid: node_id for info in descendants(proc.pid)})
    return owners


def socket_owner(local_port: int, pids: Iterable[int]) -> int | None:
    """Which of ``pids`` owns the established TCP socket whose local port is
    ``local_port`` (e.g. a gunicorn worker's connection to PostgreSQL)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == local_port:
                inodes.add(f"socket:[{parts[9]}]")
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if inodes & set(links):
            return pid
    return None


def wait_all_serving(cluster: ChaosCluster) -> None:
    """Until the gunicorn of every node listens on the shared API port: a node is
    registered alive before its API is up, and a storm begun earlier would all land on
    the nodes that were serving then."""
    def serving() -> bool:
        listening = listeners(cluster.port)
        return all(listening & {info.pid for info in descendants(proc.pid)}
                   for proc in cluster.nodes.values())

    wait_for(serving, 30, 0.05, "every node to serve the API")


def kill9_tree(cluster: ChaosCluster, node_id: str) -> float:
    """SIGKILL a node and every process under it (its gunicorn arbiter and worker,
    its steps), as when its host dies; return the monotonic time. The processes under
    it go first: the arbiter, told of its node's death (PR_SET_PDEATHSIG), would
    otherwise stop gracefully and let the worker finish its requests."""
    killed_at = time.monotonic()
    for info in descendants(cluster.nodes[node_id].pid):
        if info.running():
            os.kill(info.pid, signal.SIGKILL)
    cluster.kill9(node_id)
    return killed_at


#: The advisory lock the test holds to stall chosen submits inside the store.
GATE_KEY = 0x6A0B_5E12
GATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION chaos_submit_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({GATE_KEY});
    RETURN NEW;
END $$"""
GATE_TRIGGERS = {
    # stalls the INSERT itself: nothing of the request is committed yet
    "chaos_gate_insert": "BEFORE INSERT ON jobs FOR EACH ROW "
                         "WHEN (NEW.idempotency_key LIKE 'gate-insert-%')",
    # stalls the COMMIT: the job is written and committed once the gate opens,
    # whether or not anyone is left to answer
    "chaos_gate_commit": "AFTER INSERT ON jobs DEFERRABLE INITIALLY DEFERRED "
                         "FOR EACH ROW WHEN (NEW.idempotency_key LIKE 'gate-commit-%')",
}


#: How a submit's statement reads in pg_stat_activity while held in its INSERT, or in
#: its COMMIT: a transaction's own INSERT and COMMIT, or PostgreSQL's one-statement
#: submit (``jobserver.store.pgsubmit``), whose deferred triggers run as it commits.
IN_INSERT = ("INSERT INTO jobs", "WITH job AS")
IN_COMMIT = ("COMMIT", "WITH job AS")


class SubmitGate:
    """Triggers on ``jobs`` that make chosen submits (by key prefix) wait on an
    advisory lock the test holds, so a request can be caught mid-flight in the store
    and its node killed there. Installed in the test's database, removed by
    :meth:`close`."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg2.connect(**libpq_params(url), application_name="chaos-gate")
        self._conn.autocommit = True
        self._execute(GATE_FUNCTION)
        for name, when in GATE_TRIGGERS.items():
            kind = "CONSTRAINT TRIGGER" if "DEFERRED" in when else "TRIGGER"
            self._execute(f"DROP TRIGGER IF EXISTS {name} ON jobs")
            self._execute(f"CREATE {kind} {name} {when} EXECUTE FUNCTION chaos_submit_gate()")

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._conn.cursor() as cursor:
            cursor.execute(sql, params or None)  # no parameters: "%" is no placeholder
            return cursor.fetchall() if cursor.description else []

    def hold(self) -> None:
        """Close the gate: gated submits wait from now on."""
        self._execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))

    def open(self) -> None:
        """Let every waiting submit go on."""
        self._execute("SELECT pg_advisory_unlock(%s)", (GATE_KEY,))

    def waiting(self, wait_event: str, statements: tuple[str, ...]) -> list[int]:
        """Client ports of the sessions waiting on a ``wait_event`` lock in a
        statement starting with one of ``statements``."""
        rows = self._execute(
            "SELECT client_port FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = %s AND query LIKE ANY(%s) "
            "ORDER BY backend_start", (wait_event, [s + "%" for s in statements]))
        return [port for (port,) in rows]

    def close(self) -> None:
        try:
            for name in GATE_TRIGGERS:
                self._execute(f"DROP TRIGGER IF EXISTS {name} ON jobs")
            self._execute("DROP FUNCTION IF EXISTS chaos_submit_gate()")
        finally:
            self._conn.close()


def _caught_in_store(cluster: ChaosCluster, gate: SubmitGate, submit: KeyedSubmit,
                     statement: tuple[str, ...], kill: Callable[[int, str], Any],
                     retry_waits_on: str) -> None:
    """Send ``submit`` with the gate held. Once its first attempt waits in
    ``statement``, call ``kill(pid, node)`` with the gunicorn worker serving it and its
    node; once the retry waits on a ``retry_waits_on`` lock, open the gate and let the
    client finish."""
    gate.hold()
    try:
        with ThreadPoolExecutor(1) as pool:
            client = pool.submit(submit.until_accepted, cluster.api.base_url)
            port = wait_for(lambda: gate.waiting("advisory", statement), 20, 0.02,
                            f"{submit.key} to wait in {statement[0]}")[0]
            owners = cluster_pids(cluster)
            worker = socket_owner(port, owners)
            assert worker is not None, f"no process of the cluster owns port {port}"
            kill(worker, owners[worker])
            wait_for(lambda: [p for p in gate.waiting(retry_waits_on, IN_INSERT)
                              if p != port], 30, 0.02,
                     f"the retry of {submit.key} to reach the store")
            gate.open()
            client.result()
    finally:
        gate.open()


def _standby_in_commit(cluster: ChaosCluster, gate: SubmitGate) -> tuple[str, int] | None:
    """Once :data:`STORM_STALLED` submits wait in their COMMIT: the standby node
    serving the most of them, and how many."""
    ports = gate.waiting("advisory", IN_COMMIT)
    if len(ports) < STORM_STALLED:
        return None
    owners = cluster_pids(cluster)
    served = Counter(owners.get(socket_owner(port, owners) or 0) for port in ports)
    standbys = [(node, count) for node, count in served.most_common()
                if node is not None and node != cluster.holder()]
    return standbys[0] if standbys else None


def _storm(cluster: ChaosCluster, gate: SubmitGate, figures: Figures) -> list[KeyedSubmit]:
    """:data:`STORM_KEYS` keyed submits from :data:`STORM_THREADS` threads, held in
    their COMMIT until the standby serving the most of them is killed (-9, with its
    gunicorn) and a client saw its request cut."""
    submits = [keyed_submit(cluster, "gate-commit-storm") for _ in range(STORM_KEYS)]
    began = time.monotonic()
    gate.hold()
    try:
        with ThreadPoolExecutor(STORM_THREADS) as pool:
            futures = [pool.submit(s.until_accepted, cluster.api.base_url) for s in submits]
            victim, stalled = wait_for(lambda: _standby_in_commit(cluster, gate), 30, 0.02,
                                       "submits to wait in their COMMIT on a standby")
            kill9_tree(cluster, victim)
            # Open once a client saw its request cut: waiting for its retry to reach the
            # store could wait forever, with every API thread left held in a COMMIT.
            wait_for(lambda: any(s.cut for s in submits), 30, 0.01, "a request to be cut")
            gate.open()
            for future in futures:
                future.result()
    finally:
        gate.open()
    figures["storm"] = time.monotonic() - began
    figures["storm_in_commit_on_victim"] = stalled
    figures["storm_attempts"] = sum(s.attempts for s in submits)
    figures["storm_cut"] = sum(s.cut for s in submits)
    figures["storm_5xx"] = sum(s.server_errors for s in submits)
    # first answered 200: the job was committed by an attempt whose answer was lost
    figures["storm_replayed_first"] = sum(1 for s in submits if s.status == 200)
    return submits


def _jobs_by_key(cluster: ChaosCluster, keys: list[str]) -> dict[str, tuple[int, int]]:
    """``{idempotency key: (job rows, smallest id)}`` as the store has them."""
    with cluster.store.tx.read() as conn:
        rows = conn.execute(select(jobs.c.idempotency_key, func.count(), func.min(jobs.c.id))
                            .where(jobs.c.idempotency_key.in_(keys))
                            .group_by(jobs.c.idempotency_key)).all()
    return {key: (int(count), int(job_id)) for key, count, job_id in rows}


def _check_one_job_per_key(cluster: ChaosCluster, submits: list[KeyedSubmit]) -> None:
    """Each key is one job row, the one its client was given, and a repeat of the
    request returns that job (200, replayed)."""
    by_key = _jobs_by_key(cluster, [s.key for s in submits])
    wrong = [(s.key, by_key.get(s.key), s.job_id) for s in submits
             if by_key.get(s.key) != (1, s.job_id)]
    assert not wrong, f"keys without exactly their one job (key, (rows, id), given): {wrong}"
    with ThreadPoolExecutor(STORM_THREADS) as pool:
        replays = list(pool.map(lambda s: s.replay(cluster.api.base_url), submits))
    mismatched = [(s.key, s.job_id, replay) for s, replay in zip(submits, replays)
                  if replay != (200, s.job_id)]
    assert not mismatched, f"repeated requests got another answer: {mismatched[:10]}"
    with cluster.store.tx.read() as conn:
        total = conn.execute(select(func.count()).select_from(jobs)).scalar()
    assert total == len(cluster.accepted), f"{total} jobs stored, {len(cluster.accepted)} sent"


def _accepted(cluster: ChaosCluster, submits: list[KeyedSubmit]) -> None:
    """Count ``submits`` as accepted and wait until every job ended: no job runs when
    the next node is killed, so none is re-run and each must have run exactly once."""
    cluster.accepted.extend(s.job_id for s in submits if s.job_id is not None)
    assert cluster.wait_all_final(), "accepted jobs did not end"


def _gated_submits(cluster: ChaosCluster, gate: SubmitGate,
                   figures: Figures) -> list[KeyedSubmit]:
    """The two submits caught mid-flight in the store while their node is killed."""
    # Caught in the INSERT: its worker is killed (the node lives on), so nothing of it
    # was committed; the retry, stalled at the same place, creates the job.
    in_insert = keyed_submit(cluster, "gate-insert")
    _caught_in_store(cluster, gate, in_insert, IN_INSERT,
                     lambda pid, _node: os.kill(pid, signal.SIGKILL), "advisory")
    _accepted(cluster, [in_insert])
    # Caught in the COMMIT: its whole node dies; the retry, on another node, waits on
    # the uniqueness of the key until the orphaned commit lands, then replays it.
    in_commit = keyed_submit(cluster, "gate-commit")
    _caught_in_store(cluster, gate, in_commit, IN_COMMIT,
                     lambda _pid, node: kill9_tree(cluster, node), "transactionid")
    _accepted(cluster, [in_commit])
    figures["insert_case"] = f"{in_insert.status}/cut={in_insert.cut}"
    figures["commit_case"] = f"{in_commit.status}/cut={in_commit.cut}"
    return [in_insert, in_commit]


@pytest.mark.timeout(120)
def test_idempotent_submit_across_a_kill_9_of_its_api_node(
        harness: Harness, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Clients retry each submit with its Idempotency-Key (same body) until a 2xx
    while the node serving them is killed: every key is exactly one job, run once,
    and the first attempt's outcome decides the answer (created by the retry when the
    first was cut before its commit, replayed when its commit landed unanswered)."""
    backend = make_backend(request, "postgres")
    assert backend.database_url is not None
    cluster = ChaosCluster(harness, tmp_path, "single", backend)
    figures = Figures(f"Idempotency-Key {cluster.label}")
    gate = SubmitGate(backend.database_url)
    try:
        cluster.start()
        wait_all_serving(cluster)
        submits = _storm(cluster, gate, figures)
        _accepted(cluster, submits)
        gated = _gated_submits(cluster, gate, figures)
        every = submits + gated
        _check_one_job_per_key(cluster, every)
        report = cluster.report()
        figures["violations"] = sum(report.violations(False).values())
        print(f"\n{figures}\n  {report.summary()}")

        report.assert_clean(lock_keys=False)
        assert report.jobs == report.runs == len(every) and report.reruns == 0, \
            f"not every job ran exactly once: {report.summary()}"
        in_commit_on_victim = figures.values["storm_in_commit_on_victim"]
        assert figures.values["storm_cut"] >= in_commit_on_victim, figures
        # every commit left behind by the killed node landed, and its retry replayed it
        assert figures.values["storm_replayed_first"] >= in_commit_on_victim, figures
        # held in its INSERT: the retry won the key (201) or replayed the job the
        # orphaned one-statement submit committed once let go (200); held in its COMMIT:
        # always a replay
        assert gated[0].status in (200, 201) and gated[1].status == 200, figures
        assert all(s.cut >= 1 for s in gated), figures
    finally:
        gate.close()
        cluster.close()
