"""Chaos scenario 9: a randomized soak.

One three-node cluster on the PostgreSQL store with PostgreSQL locks takes 500
ledger jobs over ninety seconds (``CHAOS_SOAK_SECONDS``: longer, with as many jobs a
second; CI runs the default), submitted at a steady rate by a thread of their own
(two in three with a ``lock_key``, steps sleeping 0.05-0.3 s), while every 3-6 s a
fault drawn from the other scenarios hits it:

- ``kill9``: ``kill -9`` of a node, restarted under the same id after a short pause;
- ``stop_short``: ``SIGSTOP`` of a node for half the lock session timeout;
- ``stop_long``: ``SIGSTOP`` of a node for twice the lock session timeout;
- ``drain``: ``SIGTERM`` of a node (a drain), restarted once it exited;
- ``pg_terminate``: every session of the nodes' database ended (``pg_terminate_backend``).

At least two nodes are up at any time: a node fault waits until the node hit before
is back (restarted or woken, registered under its pid, holding its presence lock).
Each fault's recovery time runs from the fault until a probe job submitted right
after it is claimed by a live node. At the end every accepted job must have succeeded
exactly once by the ledger; every re-run must be accounted for by a rescue or a
release in the audit trail; every rescue must be of a node that was killed or stopped
past its session then. The recovery-time distribution is printed (``pytest -s``).

A restarted node that exits during start-up because a ``pg_terminate`` ended its
sessions meanwhile is started again, as a supervisor would; such exits are printed,
and one with no PostgreSQL fault to explain it fails the soak.

Faults are drawn from a seed printed at the start: ``CHAOS_SOAK_SEED=<seed>`` replays
the same sequence of faults. ``CHAOS_SOAK_MODES`` lists the scheduler modes to soak
(default ``leader``; e.g. ``single,distributed,leader``).
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg2
import pytest
from sqlalchemy.exc import DBAPIError, DisconnectionError

from jobserver.exceptions import StoreUnavailable
from jobserver.store.records import ServerRecord
from schedulers.base import presence_key
from tests.chaos import ledger as ledger_mod
from tests.chaos.cluster import (DEAD_AFTER, MODES, PG_SESSION_TIMEOUT, PROBE_PRIORITY,
                                 ChaosCluster, Figures)
from tests.chaos.conftest import make_backend
from tests.chaos.test_chaos import _check_capacity
from tests.chaos.test_chaos_services import KeyedSubmit, advisory_holders, terminate_backends
from tests.helpers import wait_for
from tests.integration.nodes import Harness, Proc

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.long]

T = TypeVar("T")

#: How long faults are injected, and how many jobs are submitted meanwhile.
SOAK_SECONDS = float(os.environ.get("CHAOS_SOAK_SECONDS", "90"))
JOBS = round(SOAK_SECONDS * 50 / 9)
#: Jobs are submitted in batches of three: two with a lock_key, the third without.
BATCH = 3
KEYS = 10
STEP_SECONDS = (0.05, 0.3)
#: Seconds from one fault to the next, and a killed node's time down before its restart.
FAULT_GAP = (3.0, 6.0)
KILL_PAUSE = (1.0, 3.0)
STOP_SHORT = 0.5 * PG_SESSION_TIMEOUT
STOP_LONG = 2.0 * PG_SESSION_TIMEOUT
KINDS = ("kill9", "stop_short", "stop_long", "drain", "pg_terminate")
NODE_KINDS = frozenset(KINDS) - {"pg_terminate"}
#: Faults whose victim's running jobs other nodes must rescue.
RESCUING_KINDS = frozenset({"kill9", "stop_long"})
#: A rescue of a node counts as caused by its fault until this long after it was back.
RESCUE_SLACK = 5.0
PROBE_DEADLINE = 30.0
#: A faulted node is back (restarted or woken, registered, present) within this.
RESTORE_DEADLINE = 60.0
#: drain_timeout (nodes.NODE_DEFAULTS) + 10 s
DRAIN_EXIT_DEADLINE = 20.0
EXIT_DRAINED = 0
POLL = 0.02
#: Store and lock-table reads of the test that may meet a terminated session.
DB_ERRORS = (StoreUnavailable, DBAPIError, DisconnectionError, psycopg2.Error)


def soak_modes() -> list[str]:
    """The modes named by ``CHAOS_SOAK_MODES`` (default: leader)."""
    modes = [mode.strip() for mode in os.environ.get("CHAOS_SOAK_MODES", "leader").split(",")
             if mode.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"CHAOS_SOAK_MODES: unknown mode(s) {unknown}; known: {MODES}")
    return modes


def soak_seed() -> int:
    """``CHAOS_SOAK_SEED`` if set (a replay), else a fresh random seed."""
    raw = os.environ.get("CHAOS_SOAK_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(1 << 32)


def quietly(read: Callable[[], T], default: T) -> T:
    """``read()``, or ``default`` if it met a session ended under it (pg_terminate)."""
    try:
        return read()
    except DB_ERRORS:
        return default


class SoakAborted(Exception):
    """Another part of the soak failed first; this wait gave up."""


@dataclass
class Fault:
    """One injected fault and what was measured of it."""

    kind: str
    node: str | None        # None: the fault hits every node (pg_terminate)
    pause: float            # seconds down before the restart (kill9), stopped (stop_*)
    gap: float              # seconds from this fault to the next
    at: float = 0.0         # seconds into the soak
    wall: float = 0.0       # time.time() of the injection
    began: float = 0.0      # time.monotonic() of the injection
    recovery: float | None = None   # until the probe was claimed
    restored: float | None = None   # time.time() the node was back
    note: str = ""

    def __str__(self) -> str:
        recovery = "-" if self.recovery is None else f"{self.recovery:.2f}s"
        back = "" if self.restored is None else f" back=+{self.restored - self.wall:.1f}s"
        node = f" {self.node}" if self.node else ""
        return (f"{self.at:6.1f}s {self.kind}{node} pause={self.pause:.1f}s "
                f"recovery={recovery}{back} {self.note}").rstrip()


# -- the jobs -------------------------------------------------------------------------------
class Submitter:
    """Submits :data:`JOBS` ledger jobs evenly over :data:`SOAK_SECONDS` from a thread
    of its own, each under an Idempotency-Key retried until a 2xx (see KeyedSubmit)."""

    def __init__(self, cluster: ChaosCluster, seed: int, abort: threading.Event) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.abort = abort
        self.submits: list[KeyedSubmit] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="soak-submitter", daemon=True)

    def start(self) -> None:
        """Begin submitting (the pace counts from now)."""
        self.thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the last job to be accepted."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the submitter still runs after {timeout} s"

    def _run(self) -> None:
        """The thread: a failure is kept for the fault loop, which stops the soak."""
        try:
            self._submit_all()
        except BaseException as exc:  # reported by the fault loop and at the end
            self.error = exc
            self.abort.set()

    def _submit_all(self) -> None:
        """Batch after batch, each due at its slot of the soak; counts sampled after each."""
        batches = math.ceil(JOBS / BATCH)
        spacing = SOAK_SECONDS / batches
        began = time.monotonic()
        base_url = self.cluster.api.base_url
        with ThreadPoolExecutor(BATCH, thread_name_prefix="soak-submit") as pool:
            for batch in range(batches):
                if self.abort.wait(max(0.0, began + batch * spacing - time.monotonic())):
                    return
                wanted = [self._job(index) for index in
                          range(batch * BATCH, min(JOBS, (batch + 1) * BATCH))]
                for submit, key in zip(pool.map(lambda w: w[0].until_accepted(base_url),
                                                wanted), (key for _, key in wanted)):
                    self._accept(submit, key)
                quietly(self.cluster.counts, {})  # samples jobs RUNNING per node

    def _job(self, index: int) -> tuple[KeyedSubmit, str | None]:
        """Job ``index``: its submit (a key of its own) and its lock_key, if any."""
        key = None if index % BATCH == BATCH - 1 else f"key-{self.rng.randrange(KEYS)}"
        sleep = round(self.rng.uniform(*STEP_SECONDS), 2)
        spec = ledger_mod.job_spec(f"soak-{index}", self.cluster.ledger, key, sleep)
        return KeyedSubmit(f"soak-{index}-{uuid.uuid4().hex[:8]}", spec), key

    def _accept(self, submit: KeyedSubmit, key: str | None) -> None:
        """Count an accepted (2xx) job in for the ledger check."""
        assert submit.job_id is not None
        if key is not None:
            self.cluster.lock_keys[submit.job_id] = key
        self.cluster.accepted.append(submit.job_id)
        self.submits.append(submit)

    def record(self, figures: Figures) -> None:
        """Attempts of all submits, those cut at the connection level, 5xx answers."""
        figures["submit_attempts"] = sum(s.attempts for s in self.submits)
        figures["submit_cut"] = sum(s.cut for s in self.submits)
        figures["submit_5xx"] = sum(s.server_errors for s in self.submits)


# -- the faults -----------------------------------------------------------------------------
class Soak:
    """Draws and injects the faults; each fault's probe and restore run in threads."""

    def __init__(self, cluster: ChaosCluster, url: str, seed: int) -> None:
        self.cluster = cluster
        self.url = url
        self.rng = random.Random(seed)
        self.abort = threading.Event()
        self.faults: list[Fault] = []
        self.failed_starts: list[str] = []
        self._deck: list[str] = []
        self._down: set[str] = set()
        self._stopped: set[str] = set()
        self._failures: list[BaseException] = []
        self._futures: list[Future[None]] = []
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="soak-fault")
        self._began = time.monotonic()

    # -- the loop ---------------------------------------------------------------------
    def run(self, until: float, submitter: Submitter) -> None:
        """Inject faults until ``until`` (monotonic); raise the first failure of any
        part of the soak."""
        try:
            self._loop(until, submitter)
        except SoakAborted:
            self.raise_failure(submitter)
            raise

    def _loop(self, until: float, submitter: Submitter) -> None:
        """Each fault comes :attr:`Fault.gap` after the one before; a node fault first
        waits for the node hit before to be back (two nodes up at any time)."""
        self._began = time.monotonic()
        next_at = self._began + self.rng.uniform(*FAULT_GAP)
        while True:
            self.abort.wait(max(0.0, next_at - time.monotonic()))  # the drawn gap
            self.raise_failure(submitter)
            if time.monotonic() >= until:
                return
            fault = self._draw()
            if fault.node is not None:
                self._wait(lambda: not self._down, RESTORE_DEADLINE, "every node to be back")
            self._inject(fault)
            print(f"  fault {fault.at:6.1f}s {fault.kind} {fault.node or ''}", flush=True)
            self._spawn(self._probe, fault)
            self._spawn(self._restore, fault)
            next_at = fault.began + fault.gap

    def _draw(self) -> Fault:
        """The next fault. Kinds come from a shuffled deck of all five, so each kind
        hits about as often; every draw takes the same values from the generator."""
        if not self._deck:
            self._deck = list(KINDS)
            self.rng.shuffle(self._deck)
        kind = self._deck.pop()
        node = self.rng.choice(self.cluster.ids)
        kill_pause = self.rng.uniform(*KILL_PAUSE)
        gap = self.rng.uniform(*FAULT_GAP)
        pause = {"kill9": kill_pause, "stop_short": STOP_SHORT,
                 "stop_long": STOP_LONG}.get(kind, 0.0)
        return Fault(kind, node if kind in NODE_KINDS else None, pause, gap)

    def _inject(self, fault: Fault) -> None:
        """Hit the cluster; the fault is on record (timed) before it strikes."""
        fault.wall, fault.began = time.time(), time.monotonic()
        fault.at = fault.began - self._began
        node = fault.node
        with self._guard:
            self.faults.append(fault)
            if node is not None:
                self._down.add(node)
        if fault.kind == "kill9":
            self.cluster.kill9(node)  # type: ignore[arg-type]
        elif fault.kind in ("stop_short", "stop_long"):
            self._stopped.add(node)  # type: ignore[arg-type]
            self.cluster.sigstop(node)  # type: ignore[arg-type]
        elif fault.kind == "drain":
            self.cluster.sigterm(node)  # type: ignore[arg-type]
        else:
            fault.note = f"sessions={terminate_backends(self.url)}"

    # -- per fault, in threads ----------------------------------------------------------
    def _probe(self, fault: Fault) -> None:
        """A probe job submitted right after the fault; its recovery time is until a
        live node claimed it. A draining node claims nothing once it advertises no
        capacity: the probe waits for that, so that it cannot land there."""
        if fault.kind == "drain":
            node = fault.node
            assert node is not None
            self._wait(lambda: self._drain_advertised(node), 10, f"{node} to drain")
        probe = self._submit_probe()
        self._wait(lambda: self._claimed(probe), PROBE_DEADLINE,
                   f"probe {probe} after {fault.kind} {fault.node or ''} at "
                   f"{fault.at:.1f}s to be claimed")
        fault.recovery = time.monotonic() - fault.began

    def _restore(self, fault: Fault) -> None:
        """Bring the node back: wake it after its pause, or restart it (after the
        pause, or once its drain ended), and wait until it is back."""
        node = fault.node
        if node is None:
            return
        if fault.kind == "drain":
            self._wait_drained(fault, node)
        elif self.abort.wait(max(0.0, fault.began + fault.pause - time.monotonic())):
            if fault.kind == "kill9":
                raise SoakAborted(f"restart of {node}")
        if fault.kind in ("stop_short", "stop_long"):
            woken_at = self.cluster.sigcont(node)
            self._stopped.discard(node)
            fault.note = f"stopped_for={woken_at - fault.began:.2f}s"
        else:
            self._restart(node)
        self._wait(lambda: self._back(node), RESTORE_DEADLINE, f"{node} back after {fault.kind}")
        fault.restored = time.time()
        with self._guard:
            self._down.discard(node)

    def _wait_drained(self, fault: Fault, node: str) -> None:
        """Until the SIGTERMed node exited; a drain of short jobs must end in exit 0."""
        code = self.cluster.nodes[node].wait_exit(DRAIN_EXIT_DEADLINE)
        fault.note = f"exit={code} drained_in={time.monotonic() - fault.began:.2f}s"
        assert code == EXIT_DRAINED, f"{node} exited {code} after SIGTERM:\n" \
                                     f"{self.cluster.nodes[node].tail()}"

    def _restart(self, node: str) -> None:
        """Start ``node`` again under the same id, port and data dir. A start-up that
        fails because its PostgreSQL sessions were terminated meanwhile is tried again
        (``jobserver serve`` exits when its lock session is down as it takes a lock)."""
        deadline = time.monotonic() + RESTORE_DEADLINE
        while True:
            proc = self._start(node)
            self._wait(lambda: not proc.running() or self._registered(node, proc),
                       RESTORE_DEADLINE, f"{node} to start")
            if proc.running():
                return
            failed = (f"{node} exited {proc.popen.returncode} while starting:\n"
                      f"{proc.tail(15)}")
            self.failed_starts.append(failed)
            assert self._pg_fault_since(proc.started), \
                f"no PostgreSQL fault explains this failed start: {failed}"
            assert time.monotonic() < deadline, "\n".join(self.failed_starts)

    def _pg_fault_since(self, started: float) -> bool:
        """Whether every PostgreSQL session was terminated after ``started``
        (monotonic, give or take the terminating query itself)."""
        with self._guard:
            return any(fault.kind == "pg_terminate" and fault.began >= started - 1.0
                       for fault in self.faults)

    def _start(self, node: str) -> Proc:
        """One ``jobserver serve`` of ``node``, now the cluster's process of it."""
        cluster = self.cluster
        proc = cluster.harness.start_node(node, cluster.port, cluster.data_dir,
                                          database_url=self.url, **cluster.node_env(node))
        cluster.nodes[node] = proc
        return proc

    # -- conditions ---------------------------------------------------------------------
    def _claimed(self, job_id: int) -> bool:
        """Started by some node. Whichever it is, it lives: the probe was submitted
        after a killed node died, and after a draining node stopped claiming (a node
        restarted under the same id is another, live process)."""
        row = quietly(lambda: self.cluster.rows([job_id]).get(job_id), None)
        return row is not None and row.state != "READY" and row.node is not None

    def _server(self, node: str) -> ServerRecord | None:
        """The store's row of ``node`` (None if unreadable just now)."""
        servers = quietly(self.cluster.store.servers.list, [])
        return next((server for server in servers if server.id == node), None)

    def _registered(self, node: str, proc: Proc) -> bool:
        """``proc`` registered itself alive as ``node``."""
        server = self._server(node)
        return server is not None and server.pid == proc.pid and server.state == "alive"

    def _drain_advertised(self, node: str) -> bool:
        """``node`` advertises no capacity (it claims nothing more) or has exited."""
        server = self._server(node)
        return not self.cluster.nodes[node].running() or (server is not None
                                                           and server.capacity == 0)

    def _back(self, node: str) -> bool:
        """Running, registered alive under its pid with a fresh heartbeat, holding
        its presence lock."""
        proc = self.cluster.nodes[node]
        server = self._server(node)
        if not proc.running() or server is None or server.pid != proc.pid:
            return False
        if server.state != "alive" or server.heartbeat_age > DEAD_AFTER / 2:
            return False
        return quietly(lambda: advisory_holders(self.url, presence_key(node)), []) == [node]

    def _submit_probe(self) -> int:
        """A job that outranks every queued one, accepted under a key of its own."""
        spec = ledger_mod.job_spec("probe", self.cluster.ledger, sleep=0,
                                   priority=PROBE_PRIORITY)
        submit = KeyedSubmit(f"probe-{uuid.uuid4().hex[:12]}", spec)
        submit.until_accepted(self.cluster.api.base_url)
        assert submit.job_id is not None
        self.cluster.accepted.append(submit.job_id)
        return submit.job_id

    # -- threads and failures -----------------------------------------------------------
    def _wait(self, condition: Callable[[], object], timeout: float, what: str) -> None:
        """:func:`wait_for`, given up (:class:`SoakAborted`) once the soak fails."""
        def checked() -> object:
            if self.abort.is_set():
                raise SoakAborted(what)
            return condition()

        wait_for(checked, timeout, POLL, what)

    def _spawn(self, task: Callable[[Fault], None], fault: Fault) -> None:
        """Run ``task(fault)`` in the pool; a failure of it stops the soak."""
        future = self._pool.submit(task, fault)
        future.add_done_callback(self._done)
        self._futures.append(future)

    def _done(self, future: Future[None]) -> None:
        """Keep a failed task's exception and stop the soak."""
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            with self._guard:
                self._failures.append(exc)
            self.abort.set()

    def raise_failure(self, submitter: Submitter) -> None:
        """Raise the first failure of a fault's thread or of the submitter."""
        with self._guard:
            failures = [exc for exc in self._failures if not isinstance(exc, SoakAborted)]
        if submitter.error is not None:
            raise submitter.error
        if failures:
            raise failures[0]
        if self._failures:
            raise self._failures[0]

    def finish(self, submitter: Submitter, timeout: float) -> None:
        """Wait for every fault's probe and restore to end; raise the first failure."""
        _, pending = wait_futures(self._futures, timeout)
        self.raise_failure(submitter)
        assert not pending, f"{len(pending)} fault task(s) still run after {timeout} s"

    def close(self) -> None:
        """Stop every thread; wake every node still stopped (cleanup then stops them)."""
        self.abort.set()
        for node in list(self._stopped):
            self.cluster.sigcont(node)
        self._pool.shutdown(wait=False, cancel_futures=True)


# -- the verdict ----------------------------------------------------------------------------
def rerun_problems(cluster: ChaosCluster) -> list[str]:
    """Every claim after the first follows a rescue or a release that the audit trail
    records (a job may be rescued more than once here: its node may be hit again), and
    no run in the ledger carries an attempt the store never gave the job."""
    ledger = ledger_mod.parse(cluster.ledger)
    problems = []
    for job_id, outcome in sorted(cluster.outcomes().items()):
        if outcome.attempt != 1 + outcome.rescues + outcome.releases:
            problems.append(f"job {job_id}: attempt {outcome.attempt} after "
                            f"{outcome.rescues} rescue(s), {outcome.releases} release(s)")
        attempts = [run.attempt for run in ledger.runs_of(job_id)]
        if attempts and max(attempts) > outcome.attempt:
            problems.append(f"job {job_id}: ran as attempt {max(attempts)}, the store "
                            f"says {outcome.attempt}")
    return problems


def unexplained_rescues(cluster: ChaosCluster, faults: list[Fault]) -> tuple[int, list[str]]:
    """How many jobs were rescued, and the rescues of a node that was neither killed
    nor stopped past its session just then: jobs of a live node, run twice."""
    windows = [(fault.node, fault.wall, (fault.restored or time.time()) + RESCUE_SLACK)
               for fault in faults if fault.kind in RESCUING_KINDS]
    count, problems = 0, []
    for node in cluster.ids:
        for event in cluster.rescue_events(node):
            count += 1
            at = event.at.timestamp()
            if not any(victim == node and start <= at <= end
                       for victim, start, end in windows):
                problems.append(f"job {event.job_id} attempt {event.attempt} rescued at "
                                f"{at:.3f}: {event.message}")
    return count, problems


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def distribution(faults: list[Fault]) -> str:
    """Recovery times per fault kind and overall: count, p50, p90, max (seconds)."""
    lines = [f"  {'recovery (s)':<14}{'n':>4}{'p50':>8}{'p90':>8}{'max':>8}"]
    groups = [(kind, [f.recovery for f in faults if f.kind == kind]) for kind in KINDS]
    groups.append(("overall", [f.recovery for f in faults]))
    for name, values in groups:
        seconds = [value for value in values if value is not None]
        if not seconds:
            lines.append(f"  {name:<14}{0:>4}")
            continue
        lines.append(f"  {name:<14}{len(seconds):>4}{percentile(seconds, 0.5):>8.2f}"
                     f"{percentile(seconds, 0.9):>8.2f}{max(seconds):>8.2f}")
    return "\n".join(lines)


def _verdict(cluster: ChaosCluster, soak: Soak, figures: Figures) -> None:
    """Wait for every accepted job to end, print the figures, check the invariants."""
    settled_from = time.monotonic()
    assert cluster.wait_all_final(timeout=120), "accepted jobs did not end"
    figures["settled"] = time.monotonic() - settled_from
    report = cluster.report()
    reruns = rerun_problems(cluster)
    figures["rescued"], rescues = unexplained_rescues(cluster, soak.faults)
    figures["released"] = sum(o.releases for o in cluster.outcomes().values())
    distributed = cluster.mode == "distributed"
    figures["violations"] = sum(report.violations(distributed).values())
    print(f"\n{figures}\n  faults:\n    " + "\n    ".join(map(str, soak.faults))
          + f"\n{distribution(soak.faults)}\n  {report.summary()}", flush=True)
    if soak.failed_starts:
        print("  restarts that failed during start-up:\n" + "\n".join(soak.failed_starts))

    report.assert_clean(lock_keys=distributed)
    assert report.jobs == len(cluster.accepted) == JOBS + len(soak.faults), report.summary()
    assert not reruns, "\n".join(reruns[:20])
    assert not rescues, "jobs of live nodes were rescued:\n" + "\n".join(rescues[:20])
    _check_capacity(cluster)
    missing = {kind for kind in KINDS} - {fault.kind for fault in soak.faults}
    assert not missing, f"fault kinds never drawn: {missing}"
    assert all(fault.recovery is not None for fault in soak.faults), soak.faults


@pytest.mark.timeout(420)
@pytest.mark.parametrize("mode", soak_modes())
def test_randomized_soak(harness: Harness, tmp_path: Path, request: pytest.FixtureRequest,
                         mode: str) -> None:
    """1,000 jobs over three minutes, a random fault every 3-6 s: zero invariant
    violations, nothing lost, every fault recovered from within the probe deadline."""
    backend = make_backend(request, "postgres")
    assert backend.database_url is not None
    seed = soak_seed()
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"soak {cluster.label}")
    figures["seed"] = seed
    print(f"\n[soak {cluster.label}] seed={seed} (replay: CHAOS_SOAK_SEED={seed})", flush=True)
    soak = Soak(cluster, backend.database_url, seed)
    began = time.monotonic()
    try:
        cluster.start()
        submitter = Submitter(cluster, seed + 1, soak.abort)
        submitter.start()
        soak.run(time.monotonic() + SOAK_SECONDS, submitter)
        submitter.join(SOAK_SECONDS)
        soak.finish(submitter, PROBE_DEADLINE + RESTORE_DEADLINE + DRAIN_EXIT_DEADLINE)
        figures["soak"] = time.monotonic() - began
        figures["faults"] = len(soak.faults)
        submitter.record(figures)
        _verdict(cluster, soak, figures)
        cluster.wait_cluster_view()
        figures["total"] = time.monotonic() - began
        print(f"  total={figures.values['total']:.1f}s seed={seed}", flush=True)
    finally:
        soak.close()
        cluster.close()
