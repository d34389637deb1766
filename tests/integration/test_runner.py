"""The runner and the single-mode scheduler in-process, on SQLite and PostgreSQL.

Real steps (subprocesses, sleeps, python callables) and a real store; only the
scheduler's lock backend is the in-process ``memory`` one, so that a lost lease can
be simulated. Cross-process behaviour is covered by ``test_cluster.py``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.config import load_config
from jobserver.runner import Runner
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.steps import step_types
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from locks import create_lock_backend
from schedulers.base import SchedulerContext, Ticker, presence_key
from schedulers.distributed import DistributedScheduler, segment_key
from schedulers.leader import ELECTION, LeaderScheduler
from schedulers.single import SingleScheduler
from tests.helpers import FakeLease, job_spec, wait_for

CONFIG = load_config(environ={"JOBSERVER_SCHEDULER__POLL_INTERVAL": "0.05",
                              "JOBSERVER_SERVER__HEARTBEAT_INTERVAL": "0.2"})


def python_steps() -> PythonSteps:
    steps = PythonSteps.with_entry_points()
    steps.register("test.records", lambda ctx, n=0: {"records_written": n})
    steps.register("test.boom", lambda ctx: 1 / 0)
    return steps


PYTHON_STEPS = python_steps()


def submit(store: Store, **fields) -> int:
    spec = parse_job(json.dumps(job_spec(**fields)))
    job, _ = store.jobs.submit(spec, validate_job(spec, Policy(PYTHON_STEPS.is_registered,
                                                                None)))
    return job.id


class Harness:
    """A runner fed by hand (``claim``) or by a real single-mode scheduler."""

    def __init__(self, store: Store, node: str = "n1", config=CONFIG) -> None:
        self.store, self.node = store, node
        self.runner = Runner(store, step_types(PYTHON_STEPS), config.steps.shell, 4)
        self.runner.start()

    def context(self, locks) -> SchedulerContext:
        """A scheduler context for this node and runner, with the lock backend ``locks``."""
        return SchedulerContext(config=CONFIG, node_id=self.node, store=self.store,
                                locks=locks, runner=self.runner)

    def claim(self, fence: int = 1) -> None:
        for job in self.store.runs.claim(self.node, FakeLease(self.store), 10):
            self.runner.submit(job)

    def finished(self, job_id: int, timeout: float = 15):
        return wait_for(lambda: (job := self.store.jobs.get(job_id)).state
                        not in (State.READY, State.RUNNING) and job, timeout,
                        what=f"job {job_id} to finish")

    def close(self) -> None:
        self.runner.cancel_all("test over")
        self.runner.wait_idle(10)
        self.runner.shutdown()


@pytest.fixture
def harness(store: Store) -> Iterator[Harness]:
    h = Harness(store)
    yield h
    h.close()


def test_dag_runs_parallel_branches_and_records_audit(harness: Harness, tmp_path: Path) -> None:
    job_id = submit(harness.store, parallelism=2, params={"n": 3}, steps=[
        {"name": "start", "type": "noop"},
        {"name": "left", "type": "sleep", "seconds": 0.4, "depends_on": ["start"]},
        {"name": "right", "type": "shell", "depends_on": ["start"], "argv": [
            "sh", "-c", 'echo job=$JOBSERVER_JOB_ID attempt=$JOBSERVER_ATTEMPT; sleep 0.4; '
                        'echo \'{"rows": 42}\' > "$JOBSERVER_METRICS_FILE"']},
        {"name": "end", "type": "python", "callable": "test.records", "args": {"n": 7},
         "depends_on": ["left", "right"]}])
    harness.claim()
    job = harness.finished(job_id)
    steps = {step.name: step for step in job.steps}
    assert job.state is State.SUCCEED and (job.steps_done, job.steps_total) == (4, 4)
    assert steps["left"].started_at < steps["right"].finished_at
    assert steps["right"].started_at < steps["left"].finished_at, "branches did not overlap"
    assert steps["end"].started_at >= max(steps["left"].finished_at, steps["right"].finished_at)
    right = steps["right"]
    assert right.output.strip() == f"job={job_id} attempt=1" and right.exit_code == 0
    assert right.metrics == {"rows": 42} and right.peak_rss_kb > 0
    assert right.cpu_seconds is not None and right.wall_seconds >= 0.4
    assert steps["end"].metrics == {"records_written": 7}
    transitions = [(e.step, e.to_state) for e in harness.store.jobs.events(job_id)]
    assert transitions[0] == (None, "READY") and transitions[-1] == (None, "SUCCEED")
    assert transitions.count(("left", "RUNNING")) == 1


def test_retries_with_backoff_then_success(harness: Harness) -> None:
    job_id = submit(harness.store, steps=[{"name": "flaky", "type": "python",
                                           "callable": "demo.fail_once", "retries": 2,
                                           "retry_backoff": 0.1}])
    harness.claim()
    job = harness.finished(job_id)
    assert job.state is State.SUCCEED and job.steps[0].attempt == 2
    messages = [e.message or "" for e in harness.store.jobs.events(job_id)]
    assert any("attempt 1 failed" in m and "retrying in 0.1 s" in m for m in messages)


def test_failure_stops_the_job_with_the_step_named(harness: Harness) -> None:
    job_id = submit(harness.store, steps=[
        {"name": "bad", "type": "python", "callable": "test.boom", "retries": 1,
         "retry_backoff": 0},
        {"name": "never", "type": "noop"}])
    harness.claim()
    job = harness.finished(job_id)
    assert job.state is State.ERROR and "step bad failed: ZeroDivisionError" in job.error
    assert [(s.state, s.attempt) for s in job.steps] == [(State.ERROR, 2), (State.READY, 0)]
    assert "Traceback" in job.steps[0].output


def test_shell_timeout_and_bad_exit(harness: Harness) -> None:
    slow = submit(harness.store, steps=[{"name": "s", "type": "shell",
                                         "argv": ["sleep", "30"], "timeout": 0.3}])
    failing = submit(harness.store, steps=[{"name": "s", "type": "shell",
                                            "argv": ["sh", "-c", "echo oops >&2; exit 3"]}])
    missing = submit(harness.store, steps=[{"name": "s", "type": "shell",
                                            "argv": ["/nonexistent/tool"]}])
    harness.claim()
    assert "timed out after 0.3 s" in harness.finished(slow).error
    failed = harness.finished(failing)
    assert failed.steps[0].exit_code == 3 and failed.steps[0].output.strip() == "oops"
    assert "exit status 3" in failed.error
    assert "cannot start '/nonexistent/tool'" in harness.finished(missing).error


def test_output_is_capped_keeping_head_and_tail(harness: Harness) -> None:
    limit = CONFIG.steps.shell.output_limit_bytes
    job_id = submit(harness.store, steps=[{"name": "s", "type": "shell", "argv": [
        "sh", "-c", f"echo FIRST; head -c {limit * 3} /dev/zero | tr '\\0' x; echo; echo LAST"]}])
    harness.claim()
    output = harness.finished(job_id).steps[0].output
    assert output.startswith("FIRST") and output.rstrip().endswith("LAST")
    assert "bytes cut" in output and len(output) < limit + 200


def _pid_when_started(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), timeout=10,
                        what="the step to start"))


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split()[2] == "Z"


def test_pause_kills_the_step_and_resume_skips_succeeded_steps(harness: Harness,
                                                               tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job_id = submit(harness.store, steps=[
        {"name": "first", "type": "noop"},
        {"name": "long", "type": "shell",
         "argv": ["sh", "-c", f"echo $$ > {pid_file}; sleep 30"]}])
    harness.claim()
    pid = _pid_when_started(pid_file)
    harness.store.jobs.apply(job_id, Operation.PAUSE)
    wait_for(lambda: _process_gone(pid), timeout=1.5, what="the paused step's process to die")
    job = wait_for(lambda: (j := harness.store.jobs.get(job_id)).steps[1].state
                   is State.STOPPED and j, timeout=5, what="the step to be recorded STOPPED")
    assert job.state is State.STOPPED
    pid_file.unlink()
    resumed = harness.store.jobs.apply(job_id, Operation.RESUME)
    assert [s.state for s in resumed.steps] == [State.SUCCEED, State.READY]
    harness.claim()
    _pid_when_started(pid_file)
    job = harness.store.jobs.get(job_id)
    assert job.attempt == 2 and job.steps[0].attempt == 1 and job.steps[1].attempt == 2
    harness.store.jobs.apply(job_id, Operation.DISCARD)
    job = harness.finished(job_id)
    assert job.state is State.DISCARDED and job.steps[1].state is State.DISCARDED


def test_rerun_starts_over(harness: Harness) -> None:
    job_id = submit(harness.store, steps=[{"name": "a", "type": "noop"},
                                          {"name": "b", "type": "noop"}])
    harness.claim()
    harness.finished(job_id)
    harness.store.jobs.apply(job_id, Operation.RERUN)
    harness.claim()
    job = harness.finished(job_id)
    assert job.state is State.SUCCEED and job.attempt == 2
    assert [s.attempt for s in job.steps] == [1, 1]


def _scheduler(store: Store, locks, node: str) -> tuple[SingleScheduler, Harness, threading.Thread]:
    harness = Harness(store, node)
    scheduler = SingleScheduler(harness.context(locks))
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    return scheduler, harness, thread


def test_single_mode_one_active_takeover_and_fencing(store: Store, tmp_path: Path) -> None:
    """A loses its lease while a job runs; B takes over, re-runs it, A is fenced off."""
    locks = create_lock_backend("memory", record_fence=store.epochs.advance)
    for node in ("A", "B"):
        store.servers.register(node, "h", 1, "single", 4)
    a, a_harness, a_thread = _scheduler(store, locks, "A")
    b, b_harness, b_thread = None, None, None
    try:
        wait_for(lambda: a.active, what="A to become active")
        b, b_harness, b_thread = _scheduler(store, locks, "B")
        ledger = tmp_path / "ledger"
        job_id = submit(store, steps=[{"name": "s", "type": "shell", "argv": [
            "sh", "-c", f"echo $JOBSERVER_JOB_ATTEMPT $JOBSERVER_FENCE >> {ledger}; sleep 1"]}])
        wait_for(lambda: ledger.exists(), what="the job to start on A")
        assert not b.active
        # A is cut off: its heartbeat row says stopped, its session expires, and it
        # cannot reach the lock service again (its scheduler loop ends). Its runner
        # goes on with the job, believing it still owns it.
        store.servers.mark_stopped("A")
        a.ctx.stopping.set()
        locks.expire("scheduler/global")
        wait_for(lambda: b.active, timeout=2, what="B to take over")
        job = wait_for(lambda: (j := store.jobs.get(job_id)).state is State.SUCCEED and j,
                       timeout=10, what="the job to succeed on B")
        assert job.node == "B" and job.attempt == 2
        wait_for(lambda: a_harness.runner.fenced_off_count == 1, timeout=5,
                 what="A's execution to be fenced off")
        lines = [tuple(map(int, line.split())) for line in ledger.read_text().splitlines()]
        assert [attempt for attempt, _ in lines] == [1, 2] and lines[0][1] < lines[1][1]
    finally:
        for scheduler, harness, thread in ((a, a_harness, a_thread), (b, b_harness, b_thread)):
            if scheduler is not None:
                scheduler.ctx.stopping.set()
                scheduler.ctx.wake.set()
                thread.join(5)
                harness.close()


class _ComesBackWhenChecked:
    """A lock backend on which node ``B`` is absent when its presence is checked, and
    comes back right after: it takes its presence lock again and claims a job, before
    the rescuer re-queues what it found."""

    def __init__(self, locks, store: Store) -> None:
        self._locks, self._store = locks, store
        self.claimed_after_check: list[int] = []

    def is_held(self, key: str) -> bool | None:
        if key != presence_key("B"):
            return self._locks.is_held(key)
        self.claimed_after_check += [job.id for job in
                                     self._store.runs.claim("B", FakeLease(self._store), 1)]
        return False

    def __getattr__(self, name: str):
        return getattr(self._locks, name)


def test_a_rescue_takes_only_what_the_dead_node_ran_when_judged_dead(store: Store) -> None:
    """B lost its presence lock and is found dead; meanwhile it comes back and claims
    another job. The rescuer re-queues the job B ran before, never the new one."""
    for node in ("A", "B"):
        store.servers.register(node, "h", 1, "single", 4)
    before, after = submit(store), submit(store)
    assert [job.id for job in store.runs.claim("B", FakeLease(store), 1)] == [before]
    locks = _ComesBackWhenChecked(create_lock_backend("memory"), store)
    harness = Harness(store, "A")
    try:
        rescuer = SingleScheduler(harness.context(locks))
        assert rescuer.rescue_orphans() == 1
    finally:
        harness.close()
    assert locks.claimed_after_check == [after]
    assert store.jobs.get(before).state is State.READY
    job = store.jobs.get(after)
    assert (job.state, job.node) == (State.RUNNING, "B")


class _PresenceLostWhileAcquiring:
    """A lock backend whose acquisitions return only after this node's presence lock
    was lost, as a kazoo call waits out a ZooKeeper outage."""

    def __init__(self, locks, present: threading.Event) -> None:
        self._locks, self._present = locks, present

    def acquire(self, key: str, blocking: bool = True, timeout: float | None = None):
        lease = self._locks.acquire(key, blocking=blocking, timeout=timeout)
        self._present.clear()
        return lease

    def __getattr__(self, name: str):
        return getattr(self._locks, name)


def test_a_segment_lock_that_outlived_the_presence_lock_claims_nothing(store: Store) -> None:
    """A distributed claim round began while the node was present; its segment lock
    came back after the presence lock was lost. Other nodes take the node for dead
    then, so it must claim nothing and let the segment go."""
    store.servers.register("A", "h", 1, "distributed", 4)
    first, second = submit(store, lock_key="one"), submit(store, lock_key="two")
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    harness = Harness(store, "A")
    try:
        ctx = harness.context(memory)
        ctx.locks = _PresenceLostWhileAcquiring(memory, ctx.present)
        assert DistributedScheduler(ctx)._claim_round() == 0
    finally:
        harness.close()
    assert [store.jobs.get(job).state for job in (first, second)] == [State.READY] * 2
    assert memory.is_held(segment_key("one")) is False
    assert memory.is_held(segment_key("two")) is False


def _stubborn_step(started: Path) -> list[dict]:
    """A shell step that notes its job id and, in the job's first attempt, ignores
    SIGTERM: only the SIGKILL after the kill grace stops it, so its job is seen while
    it is being stopped. A later attempt stops at once when the test ends."""
    return [{"name": "s", "type": "shell", "argv": [
        "sh", "-c", f'[ "$JOBSERVER_JOB_ATTEMPT" = 1 ] && trap "" TERM; '
                    f"echo $JOBSERVER_JOB_ID >> {started}; sleep 30"]}]


def test_a_segment_lost_before_its_job_started_still_stops_it(store: Store, tmp_path: Path,
                                                               monkeypatch) -> None:
    """The segment lease is lost between the claim and the runner taking the job: the
    job must still be stopped and re-queued, not left to run on without the lock."""
    store.servers.register("A", "h", 1, "distributed", 4)
    started = tmp_path / "started"
    job_id = submit(store, lock_key="one", steps=_stubborn_step(started))
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    claim = store.runs.claim

    def claim_then_lose(*args, **kwargs):
        claimed = claim(*args, **kwargs)
        memory.expire(segment_key("one"))
        return claimed

    monkeypatch.setattr(store.runs, "claim", claim_then_lose)
    harness = Harness(store, "A")
    try:
        assert DistributedScheduler(harness.context(memory))._claim_round() == 1
        job = wait_for(lambda: (j := store.jobs.get(job_id)).state is State.READY and j,
                       what="the job to be put back to READY")
        wait_for(lambda: harness.runner.running_count() == 0, what="the runner to let go")
    finally:
        harness.close()
    assert job.node is None and job.attempt == 1


def test_a_segment_whose_job_is_still_stopping_is_not_taken_again(store: Store,
                                                                  tmp_path: Path) -> None:
    """A lost segment lock is free in the lock service at once, but its job stops only
    after the kill grace: until then this node starts no other job of the segment."""
    store.servers.register("A", "h", 1, "distributed", 4)
    started = tmp_path / "started"
    first = submit(store, lock_key="one", steps=_stubborn_step(started))
    second = submit(store, lock_key="one", steps=[{"name": "s", "type": "noop"}])
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    slow_kill = load_config(environ={"JOBSERVER_STEPS__SHELL__KILL_GRACE": "3"})
    harness = Harness(store, "A", slow_kill)
    try:
        scheduler = DistributedScheduler(harness.context(memory))
        assert scheduler._claim_round() == 1
        wait_for(started.exists, what="the first job's step to start")
        memory.expire(segment_key("one"))
        assert memory.is_held(segment_key("one")) is False
        assert scheduler._claim_round() == 0, "a second job of a stopping segment started"
        assert harness.runner.running_count() == 1
        wait_for(lambda: store.jobs.get(first).state is State.READY, what="the first job's stop")
        wait_for(lambda: scheduler._claim_round() == 1, what="the segment to be taken again")
    finally:
        harness.close()
    assert store.jobs.get(second).state in (State.READY, State.RUNNING, State.SUCCEED)


def _run_scheduler(scheduler) -> threading.Thread:
    scheduler.ctx.present.set()
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    return thread


def _stop_scheduler(scheduler, thread: threading.Thread) -> None:
    scheduler.ctx.stopping.set()
    scheduler.ctx.wake.set()
    thread.join(5)


def test_a_job_whose_segment_another_node_holds_is_looked_at_once_a_poll(
        store: Store, monkeypatch) -> None:
    """A busy segment is no reason to claim again at once: the scheduler would only find
    it busy again, in a loop as fast as the store answers."""
    store.servers.register("A", "h", 1, "distributed", 4)
    submit(store, lock_key="one")
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    held_elsewhere = memory.acquire(segment_key("one"))
    peeks: list[float] = []
    peek = store.runs.peek
    monkeypatch.setattr(store.runs, "peek",
                        lambda *args, **kwargs: (peeks.append(time.monotonic()),
                                                 peek(*args, **kwargs))[1])
    harness = Harness(store, "A")
    scheduler = DistributedScheduler(harness.context(memory))
    thread = _run_scheduler(scheduler)
    try:
        wait_for(lambda: len(peeks) >= 11, what="ten more looks at the queue")
    finally:
        _stop_scheduler(scheduler, thread)
        harness.close()
        held_elsewhere.release()
    poll = CONFIG.scheduler.poll_interval
    assert peeks[10] - peeks[0] >= 10 * poll * 0.8, "the scheduler looked without waiting"


def test_a_segment_given_back_here_wakes_the_job_waiting_for_it(store: Store,
                                                                tmp_path: Path) -> None:
    """Two jobs of one segment on one node: the second starts as soon as the first
    gives the segment back, not at the next poll."""
    store.servers.register("A", "h", 1, "distributed", 4)
    first = submit(store, lock_key="one", steps=[
        {"name": "s", "type": "shell", "argv": ["sleep", "0.3"]}])
    second = submit(store, lock_key="one")
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    slow_poll = load_config(environ={"JOBSERVER_SCHEDULER__POLL_INTERVAL": "60",
                                     "JOBSERVER_SERVER__HEARTBEAT_INTERVAL": "60"})
    harness = Harness(store, "A")
    scheduler = DistributedScheduler(harness.context(memory))
    scheduler.ctx.config = slow_poll
    thread = _run_scheduler(scheduler)
    try:
        assert harness.finished(first).state is State.SUCCEED
        assert harness.finished(second, timeout=20).state is State.SUCCEED
    finally:
        _stop_scheduler(scheduler, thread)
        harness.close()


def leading(harness: Harness, locks) -> LeaderScheduler:
    """A leader-mode scheduler of ``harness``'s node that has just won the election."""
    scheduler = LeaderScheduler(harness.context(locks))
    lease = locks.elect(ELECTION, harness.node)
    assert lease is not None and scheduler.record_lease(lease)
    scheduler.lease = lease
    return scheduler


def test_the_leader_starts_its_own_share_in_the_assignment_round(store: Store) -> None:
    """The leader shares READY jobs among live nodes by free slots. Its own share runs
    at once, claimed under its lease; the other node's share waits, assigned to it."""
    for node in ("A", "B"):
        store.servers.register(node, "h", 1, "leader", 4)
    # Long enough to be still running when counted on a loaded machine.
    job_ids = [submit(store, steps=[{"name": "s", "type": "sleep", "seconds": 5}])
               for _ in range(6)]
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    memory.acquire(presence_key("B"))
    harness = Harness(store, "A")
    try:
        scheduler = leading(harness, memory)
        lease = scheduler.lease
        assert scheduler._assign() == (6, False)  # none waits assigned to A
        jobs = [store.jobs.get(job_id) for job_id in job_ids]
        own = [job for job in jobs if job.node == "A"]
        others = [job for job in jobs if job.node == "B"]
        assert len(own) == len(others) == 3
        assert all(job.state is not State.READY and job.fence == lease.fence for job in own)
        assert all(job.state is State.READY and job.fence == lease.fence for job in others)
        assert harness.runner.running_count() == 3
    finally:
        harness.close()


def test_a_new_leader_starts_what_an_earlier_leader_assigned_to_it(store: Store) -> None:
    """A leader never assigns jobs to itself, and its rounds look for jobs assigned to
    it only while the load they read shows some. Those an earlier leader gave it before
    it took over must still start."""
    store.servers.register("A", "h", 1, "leader", 4)
    job_ids = [submit(store) for _ in range(3)]
    memory = create_lock_backend("memory", record_fence=store.epochs.advance)
    earlier = memory.elect(ELECTION, "B")
    assert earlier is not None and earlier.fence  # drawn, so recorded, before assigning
    assert store.runs.assign(earlier, {"A": job_ids}) == 3
    earlier.release()
    harness = Harness(store, "A")
    try:
        scheduler = leading(harness, memory)
        assert scheduler._round(Ticker(60)) == 3
        for job_id in job_ids:
            job = harness.finished(job_id)
            assert job.state is State.SUCCEED and job.node == "A"
        assert scheduler._round(Ticker(60)) == 0
    finally:
        harness.close()


def test_a_job_waiting_for_its_final_write_frees_its_slot(harness: Harness, monkeypatch) -> None:
    """The next claim overlaps the group commit: a job whose steps are done gives its
    slot back while its final write waits, yet stays known to the runner (cancels,
    drains) until the write is committed."""
    release = threading.Event()
    complete = harness.store.runs.complete

    def held_complete(completions):
        release.wait(10)
        return complete(completions)

    monkeypatch.setattr(harness.store.runs, "complete", held_complete)
    job_ids = [submit(harness.store, steps=[{"name": "s", "type": "noop"}]) for _ in range(4)]
    harness.claim()
    wait_for(lambda: harness.runner.free_slots() == 4, 10,
             what="the slots of jobs waiting for their final write")
    assert harness.runner.running_count() == 4
    assert harness.store.jobs.get(job_ids[0]).state is State.RUNNING
    release.set()
    assert all(harness.finished(job_id).state is State.SUCCEED for job_id in job_ids)
    wait_for(lambda: harness.runner.running_count() == 0, 10, what="the runner to empty")
