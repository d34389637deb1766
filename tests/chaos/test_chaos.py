"""Chaos tests: three real nodes, every scheduler mode on every lock backend.

Each job's shell step appends ``start`` and ``end`` lines to a ledger (see
:mod:`tests.chaos.ledger`); the store's final word on each job is read directly.
The checker counts jobs completed under two claims, attempts started twice, runs of
one ``lock_key`` overlapping in time (asserted only in ``distributed`` mode, the one
that takes segment locks) and accepted jobs lost; every count must be zero.

Measured figures (takeover seconds, violation counts) are printed: run with ``-s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos import ledger as ledger_mod
from tests.chaos.cluster import (ACTIVE_LOG, BACKENDS, CAPACITY, DIAGONAL, FENCED_LOG,
                                 MODES, ZK_SESSION_TIMEOUT, ChaosCluster, Figures,
                                 TcpProxy, matrix, started)
from tests.chaos.conftest import make_backend
from tests.helpers import wait_for
from tests.integration.nodes import Harness

JOBS = 300

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

PAIRS = [(mode, lock) for mode in MODES for lock in BACKENDS]
#: No faults: every mode and backend once in CI.
MATRIX = matrix(PAIRS, DIAGONAL)
#: kill -9 of the active node: every mode and every backend once in CI, each a different
#: way of finding the node dead (an flock freed, a PostgreSQL session ended, a ZooKeeper
#: session expired) under a different takeover; ``-m soak`` runs the other six pairings.
KILL_MATRIX = matrix(PAIRS, DIAGONAL)


def _check_capacity(cluster: ChaosCluster) -> None:
    """No node ever held more RUNNING jobs than its runner allows: a claim takes only
    what the runner can start (CAPACITY executing), and at most CAPACITY more wait for
    their final write after giving back their slots (``Runner.free_slots``)."""
    assert max(cluster.max_running.values()) <= 2 * CAPACITY, (
        f"more than 2 x {CAPACITY} jobs RUNNING on one node: {cluster.max_running}")


# -- 1. no faults: 300 jobs, exactly once ------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("mode", "lock"), MATRIX)
def test_300_jobs_run_exactly_once(harness: Harness, tmp_path: Path,
                                   request: pytest.FixtureRequest, mode: str, lock: str) -> None:
    with started(harness, tmp_path, mode, make_backend(request, lock),
                 "exactly-once") as (cluster, figures):
        begun = time.monotonic()
        cluster.submit(JOBS)
        figures["submit"] = time.monotonic() - begun
        cluster.wait_all_final(timeout=90)
        figures["run"] = time.monotonic() - begun
        report = cluster.report()
        figures["violations"] = sum(report.violations(mode == "distributed").values())
        figures["max_running"] = max(cluster.max_running.values())
        print(f"\n{figures}\n  {report.summary()}")

        report.assert_clean(lock_keys=mode == "distributed")
        assert report.jobs == JOBS and report.runs == JOBS and report.reruns == 0, \
            report.summary()
        _check_capacity(cluster)

        # Who ran what, and what the cluster endpoint says about it.
        outcomes = cluster.outcomes()
        by_node: dict[str, int] = {}
        rows = cluster.rows(cluster.accepted)
        for row in rows.values():
            by_node[row.node] = by_node.get(row.node, 0) + 1
        print(f"  jobs per node: {dict(sorted(by_node.items()))}")
        active = cluster.holder()
        cluster.check_cluster_view(cluster.api.cluster(), active)
        if mode == "single":
            assert set(by_node) == {active}, f"single mode: jobs ran on {by_node}, " \
                                             f"active is {active}"
        else:
            assert len(by_node) > 1, f"{mode} mode: all jobs ran on one node: {by_node}"
        if mode != "distributed":
            for node_id in cluster.ids:
                if node_id != active:
                    assert ACTIVE_LOG[mode] not in cluster.log(node_id), \
                        f"{node_id} took over although nothing failed"
        assert len(outcomes) == JOBS


# -- 2. kill -9 of the active node -----------------------------------------------------------
FAULT_JOBS = 150
#: held jobs submitted before the fault load: the node about to be hurt surely runs some
HELD_JOBS = 6


def _check_reruns(cluster: ChaosCluster, victim: str | None, wall_fault: float,
                  figures: Figures) -> tuple[set[int], list[str]]:
    """The jobs rescued from ``victim`` ran exactly once more, elsewhere; every other
    job ran once (plus once per time its own node gave it back, which the audit trail
    records). Returns the rescued ids and the problems found, and records when the
    last re-run started."""
    rescued_events = [event for node_id in ([victim] if victim else cluster.ids)
                      for event in cluster.rescue_events(node_id)]
    rescued = {event.job_id for event in rescued_events}
    outcomes = cluster.outcomes()
    ledger = ledger_mod.parse(cluster.ledger)
    latest, released, problems = 0.0, 0, []
    for job_id, outcome in sorted(outcomes.items()):
        released += outcome.releases
        if outcome.attempt != 1 + outcome.rescues + outcome.releases:
            problems.append(f"job {job_id}: attempt {outcome.attempt} after "
                            f"{outcome.rescues} rescue(s), {outcome.releases} release(s)")
        if job_id in rescued:
            if outcome.rescues != 1:
                problems.append(f"job {job_id} rescued {outcome.rescues} times")
            rerun = [r for r in ledger.runs_of(job_id) if r.attempt > 1]
            if not rerun or (victim is not None and rerun[0].node == victim):
                problems.append(f"job {job_id} was not re-run on another node: {rerun}")
            else:
                latest = max(latest, rerun[0].start - wall_fault)  # type: ignore[operator]
        elif outcome.rescues and victim is not None:
            problems.append(f"job {job_id} rescued from another node than {victim}")
    figures["rescued"] = len(rescued)
    figures["released"] = released
    figures["reruns_started"] = latest
    return rescued, problems


def _busy_victim(cluster: ChaosCluster, held: int) -> tuple[list[int], str, list[int]]:
    """``held`` held jobs, then the fault load; the node to hurt, once it runs one of
    the held jobs. Returns the held jobs, the node and the jobs it runs."""
    held_jobs = cluster.submit_held(held)
    cluster.submit(FAULT_JOBS)
    victim = cluster.victim(among=held_jobs)
    return held_jobs, victim, cluster.wait_busy(victim, among=held_jobs)


@dataclass(frozen=True)
class Rejoined:
    """A node that lived through a fault (stopped, cut off) and rejoined: when the
    fault began (wall clock), the newest audit row before it rejoined, the bound
    scheduling had to resume within, the jobs rescued from it meanwhile and the jobs
    it lost (rescued or given back itself)."""

    victim: str
    how: str                        # "woken", "reconnected"
    wall_fault: float
    last_event: int
    bound: float
    rescued: set[int]
    lost: set[int]


def _judge_rejoined(cluster: ChaosCluster, node: Rejoined, figures: Figures) -> None:
    """Once every job ended: nothing lost or run twice, scheduling resumed within the
    bound, the node lost jobs and found each one rescued from it taken (a job claimed
    just before the fault and not yet started has no write to refuse: its watcher
    finds it fenced instead), none of its writes got through after a takeover, none
    of its jobs was rescued after it rejoined, and the cluster view agrees."""
    victim, distributed = node.victim, cluster.mode == "distributed"
    report = cluster.report()
    _, problems = _check_reruns(cluster, victim, node.wall_fault, figures)
    late_writes = cluster.writes_after_takeover(victim)
    late_rescues = cluster.rescue_events(victim, after_id=node.last_event)
    figures["refused_writes"] = cluster.log(victim).count(FENCED_LOG)
    figures["violations"] = sum(report.violations(distributed).values())
    print(f"\n{figures}\n  {report.summary()}")

    report.assert_clean(lock_keys=distributed)
    assert not problems, "\n".join(problems[:20])
    assert figures.values["scheduling_resumed"] <= node.bound, figures
    assert node.lost, f"nothing was taken from {victim} nor given back by it: {figures}"
    unnoticed = node.rescued - cluster.noticed_taken(victim)
    assert not unnoticed, (
        f"{victim} never found these jobs taken from it: {sorted(unnoticed)}")
    assert not late_writes, f"writes of {victim} got through after takeover: {late_writes}"
    assert not late_rescues, (
        f"jobs of the {node.how}, live {victim} were rescued as if it were dead: "
        f"{[(e.job_id, e.attempt, e.message) for e in late_rescues]}")
    if not distributed:
        assert cluster.holder() not in (None, victim), cluster.holder()
    cluster.wait_cluster_view()


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("mode", "lock"), KILL_MATRIX)
def test_kill_9_of_the_active_node(harness: Harness, tmp_path: Path,
                                   request: pytest.FixtureRequest, mode: str, lock: str) -> None:
    """Scheduling resumes within the backend's bound (ZooKeeper: session_timeout + 2 s;
    PostgreSQL: 2 s; file: poll_interval + 2 s), the dead node's running jobs are
    re-run exactly once elsewhere, nothing is lost or run twice."""
    backend = make_backend(request, lock)
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"kill -9 {cluster.label}")
    bound = backend.failover_bound()
    try:
        cluster.start()
        _, victim, running = _busy_victim(cluster, HELD_JOBS)
        wall_kill = time.time()
        killed_at = cluster.kill9(victim)
        cluster.release_held()
        probe = cluster.submit_probe()
        claimed_at = cluster.wait_claimed(probe, bound + 10, not_node=victim)
        figures["scheduling_resumed"] = claimed_at - killed_at
        wait_for(lambda: not cluster.running_on(victim), bound + 10, 0.02,
                 f"the jobs of {victim} to be re-queued")
        figures["requeued"] = time.monotonic() - killed_at
        figures["running_at_kill"] = len(running)
        cluster.wait_all_final()
        _check_capacity(cluster)
        report = cluster.report()
        rescued, problems = _check_reruns(cluster, victim, wall_kill, figures)
        figures["violations"] = sum(report.violations(mode == "distributed").values())
        print(f"\n{figures}\n  {report.summary()}")

        report.assert_clean(lock_keys=mode == "distributed")
        assert not problems, "\n".join(problems[:20])
        assert figures.values["scheduling_resumed"] <= bound, \
            f"scheduling resumed after more than {bound} s: {figures}"
        assert figures.values["requeued"] <= bound, \
            f"the dead node's jobs were re-queued after more than {bound} s: {figures}"
        assert rescued, f"no job of {victim} was re-run: {figures}"
        assert figures.values["reruns_started"] <= bound + 2, figures

        # The cluster endpoint: the victim is dead; another node is active.
        if mode != "distributed":
            assert cluster.holder() not in (None, victim), cluster.holder()
        cluster.wait_cluster_view(dead=[victim])
    finally:
        cluster.close()


# -- 3. SIGSTOP of the active node for twice the session timeout ------------------------------
# Only PostgreSQL and ZooKeeper locks: an flock stays held while its stopped holder is
# alive, so the file backend cannot tell a paused node from a busy one (by design).
STOP_MATRIX = matrix([(mode, lock) for mode in MODES for lock in ("postgres", "zookeeper")],
                     {("single", "postgres"), ("distributed", "zookeeper"),
                      ("leader", "postgres")})


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("mode", "lock"), STOP_MATRIX)
def test_sigstop_of_the_active_node(harness: Harness, tmp_path: Path,
                                    request: pytest.FixtureRequest, mode: str,
                                    lock: str) -> None:
    """Another node takes over while the active one is stopped; when it wakes, every
    write it attempts for the jobs taken from it is refused, and it rejoins as a
    healthy node whose new jobs are never rescued."""
    backend = make_backend(request, lock)
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"SIGSTOP {cluster.label}")
    timeout = backend.session_timeout()
    bound = timeout + 2
    try:
        cluster.start()
        _, victim, running = _busy_victim(cluster, HELD_JOBS)
        wall_stop = time.time()
        stopped_at = cluster.sigstop(victim)
        cluster.release_held()
        try:
            probe = cluster.submit_probe()
            claimed_at = cluster.wait_claimed(probe, 2 * timeout, not_node=victim)
            figures["scheduling_resumed"] = claimed_at - stopped_at
            wait_for(lambda: not cluster.running_on(victim),
                     max(0.1, stopped_at + 2 * timeout - time.monotonic()), 0.02,
                     f"the jobs of stopped {victim} to be taken over")
            figures["requeued"] = time.monotonic() - stopped_at
            active = cluster.holder()
            if mode != "distributed":
                assert active not in (None, victim), f"no takeover from {victim}: {active}"
            # Keep it stopped for twice the session timeout, as measured.
            time.sleep(max(0.0, stopped_at + 2 * timeout - time.monotonic()))
            rescued_while_stopped = {e.job_id for e in cluster.rescue_events(victim)}
            last_event = cluster.max_event_id()
        finally:
            woken_at = cluster.sigcont(victim)
        figures["stopped_for"] = woken_at - stopped_at
        figures["running_at_stop"] = len(running)

        # The woken node must rejoin and work again, without being taken for dead.
        wait_for(lambda: any(n["id"] == victim and n["alive"]
                             for n in cluster.api.cluster()["nodes"]), 15, 0.1,
                 f"{victim} to be alive again")
        cluster.submit(FAULT_JOBS // 3)
        cluster.wait_all_final()
        _check_capacity(cluster)
        _judge_rejoined(cluster, Rejoined(victim, "woken", wall_stop, last_event, bound,
                                          rescued_while_stopped, rescued_while_stopped),
                        figures)
    finally:
        cluster.close()


# -- 2b. leader mode: kill -9 of an idle follower, then work arrives --------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("lock", BACKENDS)
def test_leader_never_strands_jobs_on_a_dead_follower(harness: Harness, tmp_path: Path,
                                                      request: pytest.FixtureRequest,
                                                      lock: str) -> None:
    """A follower dies while idle, so it owns no RUNNING job; jobs submitted right after
    must not be assigned to it and left there (its heartbeat is still fresh for up to
    ``server.dead_after``). Every job succeeds, none on the dead node."""
    backend = make_backend(request, lock)
    cluster = ChaosCluster(harness, tmp_path, "leader", backend)
    figures = Figures(f"idle follower kill -9 {cluster.label}")
    try:
        cluster.start()
        leader = cluster.holder()
        victim = next(node_id for node_id in cluster.ids if node_id != leader)
        killed_at = cluster.kill9(victim)
        cluster.submit(30, threads=4)
        cluster.wait_all_final(timeout=backend.failover_bound() + 30)
        figures["all_done"] = time.monotonic() - killed_at
        report = cluster.report()
        print(f"\n{figures}\n  {report.summary()}")
        report.assert_clean(lock_keys=False)
        ran_on = {run.node for run in ledger_mod.parse(cluster.ledger).runs.values()}
        assert victim not in ran_on, f"jobs ran on the dead {victim}?"
    finally:
        cluster.close()


# -- 4. ZooKeeper: server restarts and a forced session expiry ---------------------------------
# These use a ZooKeeper server of the test's own (``own_zookeeper``), stopped and started
# again on the same port and data dir, with the PostgreSQL store.
EXPIRED_LOG = "Session has expired"
#: What a node logs when its ZooKeeper connection drops (it claims nothing from then on).
SUSPENDED_LOG = "ZooKeeper connection suspended"
LONG_JOBS = 6


def _zookeeper_cluster(harness: Harness, tmp_path: Path, request: pytest.FixtureRequest,
                       mode: str, server, proxies: dict[str, TcpProxy] | None = None
                       ) -> ChaosCluster:
    backend = make_backend(request, "zookeeper", zk_hosts=server.hosts)
    hosts = {node_id: proxy.hosts for node_id, proxy in (proxies or {}).items()}
    return ChaosCluster(harness, tmp_path, mode, backend, zk_hosts=hosts)


#: The outage lengths (in session timeouts) and the modes each runs in. Every mode rides
#: out a restart, its sessions kept. The longer outage outlasts the backend's local expiry:
#: every node counts its session lost, marks all its leases lost and, the session
#: surviving on the server, removes its abandoned lock nodes and takes its locks again.
#: That is the ZooKeeper backend's own machinery, the same lock recipe in every mode, so
#: CI runs it in the mode holding the most locks through it (a segment lock per running
#: job); each mode's recovery from losing every lock on every node at once is proven by
#: ``test_postgres_server_restart``. ``-m soak`` runs the longer outage in all modes.
RESTART_MATRIX = [pytest.param(mode, 0.0, id=f"{mode}-restart") for mode in MODES] + [
    pytest.param(mode, 1.5, id=f"{mode}-down-1.5x-session-timeout",
                 marks=() if mode == "distributed" else pytest.mark.soak) for mode in MODES]


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("mode", "gap"), RESTART_MATRIX)
def test_zookeeper_server_restart(harness: Harness, tmp_path: Path,
                                  request: pytest.FixtureRequest, own_zookeeper, mode: str,
                                  gap: float) -> None:
    """The ZooKeeper server is stopped while jobs run and started again on the same port
    and data dir, at once or after ``gap`` session timeouts. Nothing is lost or run
    twice, and scheduling resumes within session_timeout + 2 s of the server's return.
    (Whether sessions survive is reported: ZooKeeper restores them from its data dir,
    so only a client that reconnects too late finds its session expired.)"""
    cluster = _zookeeper_cluster(harness, tmp_path, request, mode, own_zookeeper)
    label = "restart" if not gap else f"down {gap}x session timeout"
    figures = Figures(f"ZooKeeper {label} {cluster.label}")
    try:
        cluster.start()
        held = cluster.submit_held(HELD_JOBS)
        cluster.submit(FAULT_JOBS)
        cluster.wait_busy(cluster.victim(among=held), among=held)
        wall_down = time.time()
        down_at = time.monotonic()
        own_zookeeper.stop()
        cluster.release_held()
        time.sleep(gap * ZK_SESSION_TIMEOUT)  # the outage itself: a measured, bounded gap
        own_zookeeper.start()
        up_at = time.monotonic()
        figures["zookeeper_down"] = up_at - down_at
        probe = cluster.submit_probe()
        figures["scheduling_resumed_after_up"] = cluster.wait_claimed(
            probe, 60, not_node=None) - up_at
        cluster.wait_all_final()
        report = cluster.report()
        _, problems = _check_reruns(cluster, None, wall_down, figures)
        figures["expired_sessions"] = sum(cluster.log(n).count(EXPIRED_LOG) for n in cluster.ids)
        figures["violations"] = sum(report.violations(mode == "distributed").values())
        print(f"\n{figures}\n  {report.summary()}")

        report.assert_clean(lock_keys=mode == "distributed")
        assert not problems, "\n".join(problems[:20])
        assert figures.values["scheduling_resumed_after_up"] <= ZK_SESSION_TIMEOUT + 2, figures
        cluster.wait_cluster_view()
    finally:
        cluster.close()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", MODES)
def test_forced_session_expiry_of_the_active_node(harness: Harness, tmp_path: Path,
                                                  request: pytest.FixtureRequest,
                                                  own_zookeeper, mode: str) -> None:
    """The active node alone is cut off ZooKeeper (a TCP proxy between it and the server
    drops its connection and refuses new ones) for twice the session timeout, so the
    server expires its session while the node runs on. Another node takes over; the
    cut-off node's jobs are taken from it or given back, never run beside a job of the
    same segment; when the cut heals, the node sees its session expired, its late
    writes are refused, and it rejoins as a healthy node."""
    proxies = {node_id: TcpProxy(own_zookeeper.port) for node_id in ("node-1", "node-2",
                                                                     "node-3")}
    cluster = _zookeeper_cluster(harness, tmp_path, request, mode, own_zookeeper, proxies)
    figures = Figures(f"forced session expiry {cluster.label}")
    bound = ZK_SESSION_TIMEOUT + 2
    try:
        cluster.start()
        # A few held jobs first (they run until released, after the heal): the cut-off
        # node is surely still running them when its session expires, however long the
        # load took to get going, and they are re-run elsewhere, so its final writes
        # must be refused. Then the usual load.
        long_jobs, victim, running = _busy_victim(cluster, LONG_JOBS)
        noticed_before = cluster.log(victim).count(SUSPENDED_LOG)
        wall_cut = time.time()
        cut_at = time.monotonic()
        proxies[victim].cut()
        try:
            # Until its client sees the connection drop, the victim schedules as before,
            # and rightly so: its session lives on in the server. A probe it claims in
            # those milliseconds would say nothing about the takeover, so the probe
            # goes in once the victim has noticed the cut.
            wait_for(lambda: cluster.log(victim).count(SUSPENDED_LOG) > noticed_before,
                     ZK_SESSION_TIMEOUT, 0.02, f"{victim} to notice the cut")
            probe = cluster.submit_probe()
            figures["scheduling_resumed"] = cluster.wait_claimed(
                probe, 2 * ZK_SESSION_TIMEOUT, not_node=victim) - cut_at
            if mode != "distributed":
                wait_for(lambda: cluster.holder() not in (None, victim),
                         max(0.1, cut_at + 2 * ZK_SESSION_TIMEOUT - time.monotonic()), 0.05,
                         f"another node to take over from {victim}")
                figures["took_over"] = time.monotonic() - cut_at
            time.sleep(max(0.0, cut_at + 2 * ZK_SESSION_TIMEOUT - time.monotonic()))
            last_event = cluster.max_event_id()
        finally:
            proxies[victim].heal()
        healed_at = time.monotonic()
        figures["cut_for"] = healed_at - cut_at
        figures["running_at_cut"] = len(running)
        wait_for(lambda: EXPIRED_LOG in cluster.log(victim), 20, 0.1,
                 f"{victim} to find its session expired")
        figures["expiry_seen_after_heal"] = time.monotonic() - healed_at
        cluster.release_held()

        cluster.submit(FAULT_JOBS // 3)
        cluster.wait_all_final()
        # The cut-off node's long jobs either were taken from it (rescued once its
        # session was gone; its late writes refused) or it gave them back itself when
        # it counted its session as lost (distributed mode: their segment locks).
        rescued = {e.job_id for e in cluster.rescue_events(victim)} & set(long_jobs)
        given_back = cluster.released_by(victim) & set(long_jobs)
        _judge_rejoined(cluster, Rejoined(victim, "reconnected", wall_cut, last_event, bound,
                                          rescued, rescued | given_back), figures)
    finally:
        cluster.close()
        for proxy in proxies.values():
            proxy.close()
