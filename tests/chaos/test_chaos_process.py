"""Chaos tests of the node process itself: three real nodes, signals sent to one.

- A SIGSTOP of the active node for half the lock session timeout is ridden out: the
  node keeps its locks, nothing fails over, nothing is rescued or run twice.
- SIGTERM drains: the node stops claiming at once, finishes what it runs, releases its
  locks and exits 0, and the other nodes schedule well before ``server.dead_after``.
  A second SIGTERM during the drain exits at once (code 3); the other nodes re-run
  what it left, exactly once, and nothing is lost.
- A healthy step running many heartbeat intervals (longer than ``server.dead_after``
  and than the ZooKeeper session) is never taken for an orphan.

Every run is judged by the ledger the jobs write (see :mod:`tests.chaos.ledger`).
Measured figures are printed: run with ``-s``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.chaos import ledger as ledger_mod
from tests.chaos.cluster import (ACTIVE_LOG, DEAD_AFTER, HEARTBEAT_INTERVAL, MODES,
                                 ZK_SESSION_TIMEOUT, ChaosCluster, Figures, matrix)
from tests.chaos.conftest import make_backend
from tests.chaos.ledger import Report
from tests.chaos.test_chaos import _check_reruns
from tests.helpers import wait_for
from tests.integration.nodes import Harness

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

#: What a node logs when a lease is gone without a release (``Lease.mark_lost``).
LOCK_LOST = re.compile(r"lock \S+ \(fence \S+\) lost: ")
DRAINING_LOG = "signal SIGTERM: draining"
SECOND_SIGNAL_LOG = "second signal: exiting now"
#: ``jobserver serve`` exit codes: drained; stopped without draining.
EXIT_DRAINED, EXIT_NOT_DRAINED = 0, 3
#: nodes.NODE_DEFAULTS: how long a drain may last before running jobs are cancelled
DRAIN_TIMEOUT = 10.0
#: How long a drained node may still take to exit: its stop joins each background loop
#: for up to 5 s and gives gunicorn up to 10 s (jobserver.node, jobserver.api_process),
#: and on a loaded machine its last commits (row stopped, presence released) wait on the
#: store. The drain itself is bounded by DRAIN_TIMEOUT and checked by the exit code.
EXIT_AFTER_DRAIN = 30.0


# -- helpers ----------------------------------------------------------------------------------
def _log_offsets(cluster: ChaosCluster) -> dict[str, int]:
    return {node_id: len(cluster.log(node_id)) for node_id in cluster.ids}


def _log_since(cluster: ChaosCluster, node_id: str, offsets: dict[str, int]) -> str:
    return cluster.log(node_id)[offsets[node_id]:]


def _all_rescues(cluster: ChaosCluster) -> list[str]:
    """Every orphan rescue in the audit trail, whichever node it was taken from."""
    return [f"job {event.job_id} attempt {event.attempt}: {event.message}"
            for node_id in cluster.ids for event in cluster.rescue_events(node_id)]


def _all_releases(cluster: ChaosCluster) -> set[int]:
    return {job_id for node_id in cluster.ids for job_id in cluster.released_by(node_id)}


def _settle(cluster: ChaosCluster, figures: Figures) -> Report:
    """Wait for every accepted job to end; the ledger's verdict, counted in ``figures``."""
    cluster.wait_all_final()
    report = cluster.report()
    figures["violations"] = sum(report.violations(cluster.mode == "distributed").values())
    figures["reruns"] = report.reruns
    return report


def _show(figures: Figures, report: Report) -> None:
    print(f"\n{figures}\n  {report.summary()}")


def _assert_nothing_rerun(cluster: ChaosCluster, report: Report) -> None:
    report.assert_clean(lock_keys=cluster.mode == "distributed")
    rescues = _all_rescues(cluster)
    assert not rescues, f"jobs of live nodes were rescued: {rescues[:10]}"
    released = _all_releases(cluster)
    assert not released, f"jobs were given back and re-queued: {sorted(released)[:10]}"
    assert report.reruns == 0, f"{report.reruns} job(s) ran more than once: {report.summary()}"


def _wait_draining(cluster: ChaosCluster, node_id: str, offsets: dict[str, int]) -> None:
    wait_for(lambda: DRAINING_LOG in _log_since(cluster, node_id, offsets), 10, 0.02,
             f"{node_id} to start draining")


# -- 3. SIGSTOP of the active node for half the session timeout --------------------------------
# Shorter than the lock session (PostgreSQL: idle_session_timeout; ZooKeeper: the
# session) and than server.dead_after: the paused node must keep everything. Not the
# file backend: it has no session to time out (an flock lasts as long as its holder).
STOP_SHARE = 0.5
BRIEF_STOP_MATRIX = matrix([(mode, lock) for mode in MODES
                            for lock in ("postgres", "zookeeper")],
                           {("single", "zookeeper"), ("distributed", "postgres"),
                            ("leader", "zookeeper")})
STOP_LONG_JOBS, STOP_LONG_SECONDS, STOP_JOBS = 4, 2.0, 30


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "lock"), BRIEF_STOP_MATRIX)
def test_brief_sigstop_of_the_active_node_is_ridden_out(harness: Harness, tmp_path: Path,
                                                        request: pytest.FixtureRequest,
                                                        mode: str, lock: str) -> None:
    """No failover, no rescue, no lost lock, no re-run: the paused node wakes as the
    same active node (single, leader) and finishes its jobs."""
    backend = make_backend(request, lock)
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"brief SIGSTOP {cluster.label}")
    try:
        cluster.start()
        victim, active = _active_node(cluster), cluster.holder()
        cluster.submit(STOP_JOBS)
        long_jobs = cluster.submit_long(STOP_LONG_JOBS, STOP_LONG_SECONDS, on=victim)
        figures["running_at_stop"] = len(cluster.wait_busy(victim, done=0, among=long_jobs))
        offsets = _log_offsets(cluster)
        probe, claimed_in_pause = _pause(cluster, victim,
                                         STOP_SHARE * backend.session_timeout(), figures)
        report = _settle(cluster, figures)
        lost = LOCK_LOST.findall(_log_since(cluster, victim, offsets))
        figures["locks_lost"] = len(lost)
        _show(figures, report)

        _assert_nothing_rerun(cluster, report)
        assert not lost, f"{victim} lost locks in a pause shorter than its session:\n" \
                         f"{_log_since(cluster, victim, offsets)[-3000:]}"
        _assert_no_failover(cluster, victim, active, offsets, probe, claimed_in_pause)
        cluster.wait_cluster_view()
    finally:
        cluster.close()


def _active_node(cluster: ChaosCluster) -> str:
    """The global lock holder (single), the leader (leader), or node-1 (distributed)."""
    return cluster.ids[0] if cluster.mode == "distributed" else cluster.victim()


def _pause(cluster: ChaosCluster, victim: str, pause: float,
           figures: Figures) -> tuple[int, bool]:
    """SIGSTOP ``victim`` for ``pause`` seconds (measured) and submit a probe job
    meanwhile. Returns the probe's id and whether it was claimed during the pause."""
    stopped_at = cluster.sigstop(victim)
    try:
        probe = cluster.submit_probe()
        claimed_at = _claimed_before(cluster, probe, stopped_at + pause)
        time.sleep(max(0.0, stopped_at + pause - time.monotonic()))  # the measured pause
    finally:
        woken_at = cluster.sigcont(victim)
    figures["stopped_for"] = woken_at - stopped_at
    figures["probe_claimed"] = (claimed_at or cluster.wait_claimed(probe, 15)) - stopped_at
    return probe, claimed_at is not None


def _claimed_before(cluster: ChaosCluster, job_id: int, deadline: float) -> float | None:
    """When ``job_id`` was seen claimed, polling until ``deadline`` (monotonic)."""
    try:
        return cluster.wait_claimed(job_id, max(0.0, deadline - time.monotonic()))
    except AssertionError:
        return None


def _assert_no_failover(cluster: ChaosCluster, victim: str, active: str | None,
                        offsets: dict[str, int], probe: int, claimed_in_pause: bool) -> None:
    """Distributed: the other nodes scheduled on during the pause. Single, leader: the
    paused node is still the active one, no other node took over, and (single) the
    probe waited for it."""
    if cluster.mode == "distributed":
        assert claimed_in_pause, "no other node claimed the probe during the pause"
        return
    assert cluster.holder() == active == victim, (cluster.holder(), active, victim)
    took_over = [node_id for node_id in cluster.ids if node_id != victim
                 and ACTIVE_LOG[cluster.mode] in _log_since(cluster, node_id, offsets)]
    assert not took_over, f"{took_over} took over from the paused {victim}"
    if cluster.mode == "single":
        assert cluster.rows([probe])[probe].node == victim, "the probe ran elsewhere"


# -- 6. SIGTERM: a drain, and a second SIGTERM during one ------------------------------------
DRAIN_MATRIX = [pytest.param(mode, "postgres", id=f"{mode}-postgres") for mode in MODES]
DRAIN_LONG_SECONDS, DRAIN_JOBS = 2.0, 40
#: The second-SIGTERM test needs the victim's long jobs still running when it exits:
#: from their start to its exit the test waits for the drain to show (1.4 s seen under
#: a loaded CI run) and the exit (0.8 s), which 2 s jobs did not always outlast.
SECOND_SIGNAL_LONG_SECONDS = 6.0
#: Scheduling must resume this soon after a SIGTERM: the drain lets the locks go at once.
HANDOVER_BOUND = DEAD_AFTER / 3
#: A second signal exits after giving the API child at most 1 s (jobserver.serve).
SECOND_SIGNAL_EXIT_BOUND = 2.0


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "lock"), DRAIN_MATRIX)
def test_sigterm_drains_and_hands_over(harness: Harness, tmp_path: Path,
                                       request: pytest.FixtureRequest, mode: str,
                                       lock: str) -> None:
    """The node claims nothing more, finishes the jobs it runs (attempt 1, there),
    releases its locks and exits 0; another node schedules a probe job within
    ``HANDOVER_BOUND``, far below ``server.dead_after``."""
    cluster = ChaosCluster(harness, tmp_path, mode, make_backend(request, lock))
    figures = Figures(f"SIGTERM drain {cluster.label}")
    try:
        cluster.start()
        cluster.submit(DRAIN_JOBS)
        victim, long_jobs = _place_long_jobs(cluster)
        running = cluster.wait_busy(victim, done=0, among=long_jobs)
        figures["running_at_sigterm"] = len(running)
        probe = _drain(cluster, victim, figures)
        report = _settle(cluster, figures)
        _show(figures, report)

        assert figures.values["exit_code"] == EXIT_DRAINED, cluster.nodes[victim].tail()
        _assert_nothing_rerun(cluster, report)
        _assert_finished_where_they_ran(cluster, running, victim)
        assert cluster.rows([probe])[probe].node != victim, f"draining {victim} took a job"
        assert figures.values["probe_claimed"] <= HANDOVER_BOUND, figures
        assert figures.values.get("took_over", 0.0) <= HANDOVER_BOUND, figures
        cluster.wait_cluster_view(dead=[victim])
    finally:
        cluster.close()


def _place_long_jobs(cluster: ChaosCluster) -> tuple[str, list[int]]:
    """The node to drain and the long jobs. Single mode: the active node runs them
    all. Otherwise the victim (the leader, or node-1) gets one and each other node
    two, so the victim has the most free slots: where a leader that took a draining
    node for an idle one would send new work, to wait there for the drain's end."""
    victim = _active_node(cluster)
    if cluster.mode == "single":
        return victim, cluster.submit_long(6, DRAIN_LONG_SECONDS)
    long_jobs = cluster.submit_long(1, DRAIN_LONG_SECONDS, on=victim)
    for node_id in cluster.ids:
        if node_id != victim:
            long_jobs += cluster.submit_long(2, DRAIN_LONG_SECONDS, on=node_id)
    return victim, long_jobs


def _drain(cluster: ChaosCluster, victim: str, figures: Figures) -> int:
    """SIGTERM ``victim``; once it drains, submit a probe job; wait for the probe to
    be claimed, another node to take over (single, leader) and ``victim`` to exit.
    Returns the probe's id."""
    offsets = _log_offsets(cluster)
    termed_at = cluster.sigterm(victim)
    if cluster.mode != "distributed":  # timed first: the waits below are the test's own
        wait_for(lambda: cluster.holder() not in (None, victim), DEAD_AFTER + 10, 0.02,
                 f"another node to take over from {victim}")
        figures["took_over"] = time.monotonic() - termed_at
    _wait_draining(cluster, victim, offsets)
    _wait_no_capacity(cluster, victim)
    submitted_at = time.monotonic()
    probe = cluster.submit_probe()
    # From the probe's submit: how long the API took to answer the waits above is the
    # machine's load, not the hand-over's.
    figures["probe_claimed"] = cluster.wait_claimed(probe, DEAD_AFTER + 10) - submitted_at
    figures["exit_code"] = cluster.nodes[victim].wait_exit(DRAIN_TIMEOUT + EXIT_AFTER_DRAIN)
    figures["exited"] = time.monotonic() - termed_at
    return probe


def _wait_no_capacity(cluster: ChaosCluster, node_id: str) -> None:
    """Until ``GET /api/v1/cluster`` shows ``node_id`` draining: alive, capacity 0
    (it claims nothing more and a leader assigns it nothing)."""
    def drained_of_capacity() -> bool:
        nodes = {node["id"]: node for node in cluster.api.cluster()["nodes"]}
        return nodes[node_id]["alive"] and nodes[node_id]["capacity"] == 0

    wait_for(drained_of_capacity, 10, 0.02, f"{node_id} to advertise no capacity")


def _assert_finished_where_they_ran(cluster: ChaosCluster, job_ids: list[int],
                                    node_id: str) -> None:
    rows = cluster.rows(job_ids)
    moved = {job_id: (row.state, row.node, row.attempt) for job_id, row in rows.items()
             if (row.state, row.node, row.attempt) != ("SUCCEED", node_id, 1)}
    assert not moved, f"jobs {node_id} ran at SIGTERM did not finish there: {moved}"


#: A second signal ends the process the same way in every mode, and the jobs it leaves
#: go back through the rescue every mode shares; CI runs one mode, ``-m soak`` all three.
SECOND_SIGNAL_MATRIX = matrix([("single", "postgres"), ("distributed", "postgres"),
                               ("leader", "postgres")], {("distributed", "postgres")})


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "lock"), SECOND_SIGNAL_MATRIX)
def test_second_sigterm_exits_at_once_and_loses_nothing(harness: Harness, tmp_path: Path,
                                                        request: pytest.FixtureRequest,
                                                        mode: str, lock: str) -> None:
    """A second SIGTERM while the node drains: it exits at once with code 3; the jobs
    it was still running are re-run elsewhere exactly once (the audit trail records
    each re-run), every accepted job succeeds, the ledger is clean."""
    backend = make_backend(request, lock)
    cluster = ChaosCluster(harness, tmp_path, mode, backend)
    figures = Figures(f"second SIGTERM {cluster.label}")
    try:
        cluster.start()
        cluster.submit(DRAIN_JOBS)
        # The long jobs come once the short ones are done: with every node's slots free,
        # a leader spreads them two to a node and so keeps two itself. Sent while its own
        # slots are full of short jobs, it gives them all to the others, and the leader
        # (the victim) would run none of the jobs this test needs it to hand over.
        cluster.wait_progress(DRAIN_JOBS)
        long_jobs = cluster.submit_long(6, SECOND_SIGNAL_LONG_SECONDS)
        victim = cluster.victim(among=long_jobs)
        cluster.wait_busy(victim, done=0, among=long_jobs)
        wall_fault = time.time()
        _sigterm_twice(cluster, victim, backend.failover_bound(), figures)
        report = _settle(cluster, figures)
        rescued, problems = _check_reruns(cluster, victim, wall_fault, figures)
        _show(figures, report)

        assert figures.values["exit_code"] == EXIT_NOT_DRAINED, cluster.nodes[victim].tail()
        assert SECOND_SIGNAL_LOG in cluster.log(victim), cluster.nodes[victim].tail()
        report.assert_clean(lock_keys=mode == "distributed")
        assert not problems, "\n".join(problems[:20])
        assert rescued, f"nothing {victim} ran was re-run: {figures}"
        assert report.reruns == len(rescued | _all_releases(cluster)), report.summary()
        assert figures.values["exited"] <= SECOND_SIGNAL_EXIT_BOUND, figures
        assert figures.values["requeued_after_exit"] <= backend.failover_bound(), figures
        cluster.wait_cluster_view(dead=[victim])
    finally:
        cluster.close()


def _sigterm_twice(cluster: ChaosCluster, victim: str, bound: float,
                   figures: Figures) -> None:
    """SIGTERM ``victim``; once it drains (claims nothing more), SIGTERM it again while
    it still runs jobs; wait for it to exit and for its jobs to be re-queued (within
    ``bound`` + 10 s)."""
    offsets = _log_offsets(cluster)
    first_at = cluster.sigterm(victim)
    _wait_draining(cluster, victim, offsets)
    _wait_no_capacity(cluster, victim)
    running = cluster.running_on(victim)
    assert running, f"{victim} finished its jobs before the second SIGTERM"
    second_at = cluster.sigterm(victim)
    figures["second_after_first"] = second_at - first_at
    figures["running_at_second"] = len(running)
    figures["exit_code"] = cluster.nodes[victim].wait_exit(5)
    exited_at = time.monotonic()
    figures["exited"] = exited_at - second_at
    wait_for(lambda: not cluster.running_on(victim), bound + 10, 0.02,
             f"the jobs {victim} left behind to be re-queued")
    figures["requeued_after_exit"] = time.monotonic() - exited_at


# -- 8. a healthy step running many heartbeat intervals ---------------------------------------
#: Twelve heartbeat intervals: twice server.dead_after, 1.5 ZooKeeper session timeouts.
HEALTHY_STEP = 12 * HEARTBEAT_INTERVAL
HEALTHY_MATRIX = [pytest.param("single", "file", id="single-file"),
                  pytest.param("distributed", "postgres", id="distributed-postgres"),
                  pytest.param("leader", "zookeeper", id="leader-zookeeper")]
HEALTHY_LONG_JOBS, HEALTHY_JOBS = 4, 30


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "lock"), HEALTHY_MATRIX)
def test_a_long_healthy_step_is_never_rescued(harness: Harness, tmp_path: Path,
                                              request: pytest.FixtureRequest, mode: str,
                                              lock: str) -> None:
    """Steps of ``HEALTHY_STEP`` seconds on live nodes, beside short jobs: each runs
    once, attempt 1, to its end; nothing is rescued or given back."""
    assert HEALTHY_STEP >= 10 * HEARTBEAT_INTERVAL
    assert HEALTHY_STEP > max(DEAD_AFTER, ZK_SESSION_TIMEOUT)
    cluster = ChaosCluster(harness, tmp_path, mode, make_backend(request, lock))
    figures = Figures(f"long healthy step {cluster.label}")
    try:
        cluster.start()
        began = time.monotonic()
        long_jobs = cluster.submit_long(HEALTHY_LONG_JOBS, HEALTHY_STEP)
        cluster.submit(HEALTHY_JOBS)
        report = _settle(cluster, figures)
        figures["all_done"] = time.monotonic() - began
        attempts_and_runs = _attempts_and_runs(cluster, long_jobs, figures)
        _show(figures, report)

        _assert_nothing_rerun(cluster, report)
        assert all(value == (1, 1) for value in attempts_and_runs.values()), \
            f"(attempt, ledger runs) of the long jobs: {attempts_and_runs}"
        assert figures.values["shortest_long_step"] >= HEALTHY_STEP, figures
    finally:
        cluster.close()


def _attempts_and_runs(cluster: ChaosCluster, job_ids: list[int],
                       figures: Figures) -> dict[int, tuple[int, int]]:
    """Each job's attempt and number of ledger runs; records the shortest run and
    the nodes they ran on in ``figures``."""
    ledger = ledger_mod.parse(cluster.ledger)
    runs = {job_id: ledger.runs_of(job_id) for job_id in job_ids}
    rows = cluster.rows(job_ids)
    figures["shortest_long_step"] = min(
        (run.end - run.start for job_runs in runs.values() for run in job_runs
         if run.start is not None and run.end is not None), default=0.0)
    figures["ran_on"] = ",".join(sorted({row.node for row in rows.values()}))
    return {job_id: (rows[job_id].attempt, len(runs[job_id])) for job_id in job_ids}


# -- 9. a node restarted at once after kill -9 ------------------------------------------------
#: What a node logs while its dead process's session still holds its presence lock.
PRESENCE_WAIT_LOG = "perhaps by this node's last process"
#: The ZooKeeper session of this test's nodes: the restarted process must come up while
#: its dead predecessor's session still lives. With the chaos default (4 s) a loaded
#: machine took that long to start the new interpreter, and the gap under test was gone.
RESTART_SESSION_TIMEOUT = 12.0


@pytest.mark.timeout(90)
def test_a_node_restarted_at_once_after_kill_9_takes_back_its_id(
        harness: Harness, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A supervisor restarts a killed node within a second, while ZooKeeper still holds
    the dead process's session and so its presence lock: the new process waits for that
    session to expire and starts, rather than taking its own id for another live node's.
    (File and PostgreSQL locks die with the process, so only ZooKeeper has the gap.)"""
    cluster = ChaosCluster(harness, tmp_path, "leader", make_backend(request, "zookeeper"),
                           settings={"JOBSERVER_ZOOKEEPER__SESSION_TIMEOUT":
                                     str(RESTART_SESSION_TIMEOUT)})
    figures = Figures(f"restart at once after kill -9 {cluster.label}")
    try:
        cluster.start()
        victim = next(node for node in cluster.ids if node != cluster.holder())
        killed_at = cluster.kill9(victim)
        cluster.restart(victim)
        figures["back_after"] = time.monotonic() - killed_at
        print(f"\n{figures}")

        assert PRESENCE_WAIT_LOG in cluster.log(victim), cluster.log(victim)[-3000:]
        job = cluster.submit_probe()
        wait_for(lambda: cluster.rows([job])[job].state == "SUCCEED", 30, 0.05,
                 "a job submitted after the restart to succeed")
    finally:
        cluster.close()
