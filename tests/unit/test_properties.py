"""Hypothesis property tests: the job state machine and config parsing.

**Job lifecycle** (a ``RuleBasedStateMachine`` over the store layer, on SQLite and on
PostgreSQL, where submits, claims and group commits take the one-statement paths).
Any interleaving of submits (chains, parallel steps and DAGs; with and without a
``lock_key`` and allowed nodes), claims (by two nodes, with fresh and stale leases, of
any job, of jobs without a ``lock_key``, of given ids, and of jobs a leader assigned;
a claim starts the job's first step), step starts and ends, job ends, group commits
of step ends fused with job ends, drain releases, operator actions (pause, resume,
rerun, discard) and orphan rescue must keep:

* the audit trail complete and legal: for the job and for each step, the events form a
  chain (each ``from_state`` is the previous ``to_state``; a step starts READY), every
  change is one of Kylin's legal transitions, and the last event is the current state;
* job and steps consistent: a SUCCEED job has only SUCCEED steps; no RUNNING step in a
  READY, ERROR or DISCARDED job; DISCARDED steps only in a DISCARDED job, whose steps
  are all SUCCEED or DISCARDED; a RUNNING job has a node, a READY one has none; the
  job's attempt counts its claims;
* fencing: a runner whose claim token no longer matches the job row (rescued,
  resumed, rerun or re-claimed since) never gets a write accepted; a stale lease
  claims nothing;
* claims: a claim takes only jobs its filters allow, and starts exactly the step
  ``first_runnable`` names (so the PostgreSQL statement and the Python rule agree);
* operator actions succeed exactly from the states Kylin allows.

The runners follow ``jobserver.execution``'s protocol: steps in dependency order, no
job end while a step it started is unfinished, and release only with no step running.

**Config parsing**: any set of ``JOBSERVER_*`` variables either loads into typed
values or raises :class:`ConfigError` naming the key or the variable, never anything
else.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition, rule,
                                 run_state_machine_as_test)
from pydantic import BaseModel, SecretStr
from sqlalchemy import select

from jobserver.config import Config, env_name, load_config
from jobserver.exceptions import ConfigError, FencedOff, IllegalTransition
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State, can_transition
from jobserver.store import Store
from jobserver.store.records import (ClaimToken, Completion, JobRecord, StepOutcome,
                                     first_runnable)
from jobserver.store.tables import events, jobs, steps
from tests.conftest import _empty
from tests.helpers import FakeLease

NODES = ("node-a", "node-b")
POLICY = Policy(lambda name: False, None)


# -- the job lifecycle ---------------------------------------------------------------------
@dataclass
class Run:
    """What one runner knows of the job it claimed (``jobserver.execution``'s view)."""

    token: ClaimToken
    steps: dict[str, Any]  # name -> StepRecord at claim time
    done: set[str]
    in_flight: dict[str, int] = field(default_factory=dict)  # name -> attempt
    failed: bool = False
    over: bool = False  # concluded, cancelled, or fenced off: the runner stopped

    def runnable(self) -> list[str]:
        return [name for name, step in self.steps.items()
                if name not in self.done and name not in self.in_flight
                and all(dep in self.done for dep in step.depends_on)]


class JobLifecycle(RuleBasedStateMachine):
    store: Store  # set by the test: one store, emptied for every example

    def __init__(self) -> None:
        super().__init__()
        _empty(self.store)
        self.leases = {node: FakeLease(self.store, f"lease/{node}") for node in NODES}
        self.leader = FakeLease(self.store, "lease/leader")
        self.stale_leases: list[tuple[str, FakeLease]] = []
        self.runs: list[Run] = []
        self.job_ids: list[int] = []
        self.assigned: dict[int, str] = {}  # job id -> the node a leader gave it to

    # -- helpers ---------------------------------------------------------------------------
    def _row(self, job_id: int) -> Any:
        with self.store.tx.read() as conn:
            return conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one()

    def _is_current(self, run: Run) -> bool:
        row = self._row(run.token.job_id)
        return (row["node"], row["fence"], row["attempt"]) == (
            run.token.node, run.token.fence, run.token.attempt)

    def _live_runs(self) -> list[Run]:
        return [run for run in self.runs if not run.over]

    # -- submit and claim ------------------------------------------------------------------
    @rule(data=st.data(), count=st.integers(1, 4),
          shape=st.sampled_from(["chain", "parallel", "dag"]),
          retryable=st.lists(st.booleans(), min_size=4, max_size=4), keyed=st.booleans(),
          allowed=st.sampled_from([None, [NODES[0]], [NODES[1]], list(NODES)]))
    def submit(self, data: st.DataObject, count: int, shape: str, retryable: list[bool],
               keyed: bool, allowed: list[str] | None) -> None:
        specs: list[dict[str, Any]] = [
            {"name": f"s{i}", "type": "noop", "retryable": retryable[i]} for i in range(count)]
        # A DAG's steps depend on steps before them in a drawn order, not in list order:
        # a step may wait for one listed after it.
        order = data.draw(st.permutations(range(count))) if shape == "dag" else []
        for rank, i in enumerate(order):
            earlier = [f"s{j}" for j in order[:rank]]
            specs[i]["depends_on"] = data.draw(
                st.lists(st.sampled_from(earlier), unique=True) if earlier else st.just([]))
        if shape == "parallel":
            for spec in specs:
                spec["depends_on"] = []
        spec = parse_job(json.dumps({"name": "j", "steps": specs, "lock_key":
                                     "k" if keyed else None, "assigned_servers": allowed}))
        job, created = self.store.jobs.submit(spec, validate_job(spec, POLICY))
        assert created and job.state is State.READY
        self.job_ids.append(job.id)

    def _ready(self) -> dict[int, JobRecord]:
        return {j.id: j for j in self.store.jobs.list(State.READY, limit=500)[0]}

    @rule(node=st.sampled_from(NODES), how=st.sampled_from(["any", "keyless", "ids"]),
          data=st.data())
    def claim(self, node: str, how: str, data: st.DataObject) -> None:
        ready_before = self._ready()
        job_ids = (data.draw(st.lists(st.sampled_from(self.job_ids), max_size=3))
                   if how == "ids" and self.job_ids else None)
        claimed = self.store.runs.claim(node, self.leases[node], limit=1, job_ids=job_ids,
                                        keyless=how == "keyless")
        for job in claimed:
            before = ready_before.get(job.id)
            assert before is not None and before.node is None, "claimed a job not waiting"
            assert before.assigned_servers is None or node in before.assigned_servers
            assert how != "keyless" or before.lock_key is None
            assert job_ids is None or job.id in job_ids
            assert (job.node, job.fence) == (node, self.leases[node].fence)
            self._claimed(job)

    @precondition(lambda self: self.job_ids)
    @rule(node=st.sampled_from(NODES), data=st.data())
    def assign(self, node: str, data: st.DataObject) -> None:
        """Leader mode: a leader gives waiting jobs to a node (they stay READY)."""
        job_ids = data.draw(st.lists(st.sampled_from(self.job_ids), min_size=1, max_size=3,
                                     unique=True))
        waiting = {job_id for job_id, job in self._ready().items() if job.node is None}
        assert self.store.runs.assign(self.leader, {node: job_ids}) == len(
            waiting & set(job_ids))
        self.assigned.update({job_id: node for job_id in waiting & set(job_ids)})

    @rule(node=st.sampled_from(NODES))
    def claim_assigned(self, node: str) -> None:
        ready_before = self._ready()
        for job in self.store.runs.claim_assigned(node, limit=1):
            before = ready_before.get(job.id)
            assert before is not None and before.node == node, "claimed another's job"
            assert (job.node, job.fence) == (node, before.fence)
            self._claimed(job)

    def _claimed(self, job: JobRecord) -> None:
        assert job.state is State.RUNNING
        steps_ = job.steps or []
        # The claim starts the first runnable step in its own transaction: the one
        # the rule names for the steps as they were (a READY job runs no step).
        started = [s for s in steps_ if s.state is State.RUNNING]
        as_before = [dataclasses.replace(s, state=State.READY) if s in started else s
                     for s in steps_]
        first = first_runnable(as_before)
        assert [s.name for s in started] == ([first.name] if first else []), (
            f"job {job.id}: started {[s.name for s in started]}, the rule says {first}")
        self.runs.append(Run(job.token(), {s.name: s for s in steps_},
                             {s.name for s in steps_ if s.state is State.SUCCEED},
                             {s.name: s.attempt for s in started}))

    @rule(node=st.sampled_from(NODES))
    def new_lease(self, node: str) -> None:
        """The node's lock is taken over (or re-taken): a newer fence for its key."""
        self.stale_leases.append((node, self.leases[node]))
        self.leases[node] = FakeLease(self.store, f"lease/{node}")

    @precondition(lambda self: self.stale_leases)
    @rule(data=st.data())
    def claim_with_stale_lease(self, data: st.DataObject) -> None:
        node, lease = data.draw(st.sampled_from(self.stale_leases))
        assert self.store.runs.claim(node, lease, limit=5) == []

    # -- a runner's steps and end ------------------------------------------------------------
    @precondition(lambda self: any(run.runnable() and not run.failed
                                   for run in self._live_runs()))
    @rule(data=st.data())
    def start_step(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from([r for r in self._live_runs()
                                         if r.runnable() and not r.failed]))
        name = data.draw(st.sampled_from(run.runnable()))
        current = self._is_current(run)
        try:
            attempt = self.store.runs.start_step(run.token, run.steps[name])
        except FencedOff:
            assert not current, "a current owner was fenced off"
            run.over = True
            return
        if attempt is None:  # an operator stopped the job: the runner cancels
            run.over = not run.in_flight
            run.failed = True
            return
        assert current, "a stale claim token started a step"
        run.in_flight[name] = attempt

    @precondition(lambda self: any(run.in_flight for run in self.runs))
    @rule(data=st.data(), state=st.sampled_from([State.SUCCEED, State.ERROR, State.STOPPED,
                                                 State.READY]))
    def finish_step(self, data: st.DataObject, state: State) -> None:
        run = data.draw(st.sampled_from([r for r in self.runs if r.in_flight]))
        name = data.draw(st.sampled_from(sorted(run.in_flight)))
        attempt = run.in_flight.pop(name)
        current = self._is_current(run)
        try:
            accepted = self.store.runs.finish_step(run.token, run.steps[name], attempt,
                                                   StepOutcome(state, error="e"))
        except FencedOff:
            assert not current, "a current owner was fenced off"
            run.over = True
            return
        assert current or not accepted, "a stale claim token finished a step"
        if state is State.SUCCEED:
            run.done.add(name)
        elif state is not State.READY:  # READY: recorded for a retry
            run.failed = True
        if not accepted:
            run.failed = True  # the watcher cancels the job on this node

    @precondition(lambda self: any(not run.in_flight and (run.failed or not run.runnable())
                                   for run in self._live_runs()))
    @rule(data=st.data())
    def finish_job(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from([r for r in self._live_runs() if not r.in_flight and
                                         (r.failed or not r.runnable())]))
        run.over = True
        all_done = set(run.steps) <= run.done
        state = State.SUCCEED if all_done and not run.failed else State.ERROR
        current = self._is_current(run)
        try:
            accepted = self.store.runs.finish_job(run.token, state, None if all_done else "e")
        except FencedOff:
            assert not current
            return
        assert current or not accepted, "a stale claim token finished a job"

    @precondition(lambda self: any(run.in_flight for run in self._live_runs()))
    @rule(data=st.data(), outcomes=st.lists(st.sampled_from([State.SUCCEED, State.ERROR,
                                                             State.STOPPED]),
                                            min_size=1, max_size=3))
    def complete(self, data: st.DataObject, outcomes: list[State]) -> None:
        """The group commit: several runs' step ends in one transaction, each fused with
        its job's end when it is the job's last step (``RunRepository.complete``)."""
        batch, runs = [], []
        candidates = [r for r in self._live_runs() if r.in_flight]
        for outcome in outcomes:
            run = data.draw(st.sampled_from(candidates))
            if run in runs or not run.in_flight:
                continue
            name = data.draw(st.sampled_from(sorted(run.in_flight)))
            attempt = run.in_flight.pop(name)
            if outcome is State.SUCCEED:
                run.done.add(name)
            else:
                run.failed = True
            job_state = None
            if not run.in_flight and (run.failed or not run.runnable()):
                job_state = State.ERROR if run.failed else State.SUCCEED
                run.over = True
            batch.append(Completion(run.token, run.steps[name], attempt,
                                    StepOutcome(outcome, error=None if outcome is State.SUCCEED
                                                else "e"), job_state,
                                    "e" if job_state is State.ERROR else None))
            runs.append(run)
        current = [self._is_current(run) for run in runs]
        results = self.store.runs.complete(batch)
        for run, was_current, result in zip(runs, current, results):
            if isinstance(result, FencedOff):
                assert not was_current, "a current owner was fenced off"
                run.over = True
            elif result:
                assert was_current, "a stale claim token completed a step"
            else:
                run.failed = True

    @precondition(lambda self: self._live_runs())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Drain: the node gives a claimed job back; its started steps go back too."""
        run = data.draw(st.sampled_from(self._live_runs()))
        run.over = True
        run.in_flight.clear()
        current = self._is_current(run)
        accepted = self.store.runs.release(run.token, "node stopping")
        assert current or not accepted, "a stale claim token released a job"

    # -- operators and rescue ----------------------------------------------------------------
    @precondition(lambda self: self.job_ids)
    @rule(data=st.data(), operation=st.sampled_from(list(Operation)))
    def operate(self, data: st.DataObject, operation: Operation) -> None:
        job_id = data.draw(st.sampled_from(self.job_ids))
        before = State(self._row(job_id)["state"])
        try:
            after = self.store.jobs.apply(job_id, operation)
        except IllegalTransition as exc:
            assert before not in operation.accepted_from, f"{operation.value} refused: {exc}"
            assert State(self._row(job_id)["state"]) is before
            return
        assert before in operation.accepted_from, f"{operation.value} from {before} allowed"
        assert after.state is operation.target

    @rule(data=st.data())
    def rerun_a_finished_job(self, data: st.DataObject) -> None:
        """Reruns of SUCCEED jobs are rare by chance alone: pick one on purpose."""
        finished = [j.id for j in self.store.jobs.list(State.SUCCEED, limit=500)[0]]
        if finished:
            job_id = data.draw(st.sampled_from(finished))
            assert self.store.jobs.apply(job_id, Operation.RERUN).state is State.READY
            assert {s.state for s in self.store.jobs.get(job_id).steps or []} == {State.READY}

    @rule(node=st.sampled_from(NODES))
    def rescue(self, node: str) -> None:
        """The node is declared dead: its RUNNING jobs are re-queued (or failed)."""
        running = {j.id for j in self.store.jobs.list(State.RUNNING, limit=500)[0]
                   if j.node == node}
        moved = self.store.servers.requeue_orphans(node, "rescuer")
        assert {job_id for job_id, _ in moved} == running
        assert self.store.servers.requeue_orphans(node, "rescuer") == []  # exactly once

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def audit_trail_and_steps_agree_with_the_jobs(self) -> None:
        with self.store.tx.read() as conn:  # one snapshot of everything
            job_rows = {row["id"]: row for row in conn.execute(select(jobs)).mappings()}
            step_rows = conn.execute(select(steps)).mappings().all()
            trail = conn.execute(select(events).order_by(events.c.id)).mappings().all()
        self._check_trail(job_rows, step_rows, trail)
        by_job: dict[int, list[str]] = {job_id: [] for job_id in job_rows}
        for row in step_rows:
            by_job[row["job_id"]].append(row["state"])
        for job_id, row in job_rows.items():
            self._check_job(job_id, row, {State(state) for state in by_job[job_id]},
                            self.assigned)

    @staticmethod
    def _check_trail(job_rows: dict[int, Any], step_rows: list[Any], trail: list[Any]) -> None:
        """Complete and legal: each event starts where the previous one ended."""
        job_state: dict[int, str | None] = {job_id: None for job_id in job_rows}
        claims = {job_id: 0 for job_id in job_rows}
        step_state = {(row["job_id"], row["name"]): State.READY.value for row in step_rows}
        for event in trail:
            job_id, old, new = event["job_id"], event["from_state"], event["to_state"]
            if event["step"] is None:
                assert old == job_state[job_id], f"job {job_id}: gap in the trail at {event}"
                if old is None:
                    assert new == State.READY.value
                else:
                    assert can_transition(State(old), State(new)), f"illegal {old}->{new}"
                    claims[job_id] += (old, new) == ("READY", "RUNNING")
                job_state[job_id] = new
            else:
                key = (job_id, event["step"])
                assert old == step_state[key], f"step {key}: gap in the trail at {event}"
                assert can_transition(State(old), State(new)), f"illegal step {old}->{new}"
                step_state[key] = new
        for job_id, row in job_rows.items():
            assert job_state[job_id] == row["state"], f"job {job_id}: trail ends elsewhere"
            assert row["attempt"] == claims[job_id], f"job {job_id}: attempt != claims"
        for row in step_rows:
            assert step_state[(row["job_id"], row["name"])] == row["state"]

    @staticmethod
    def _check_job(job_id: int, row: Any, states: set[State],
                   assigned: dict[int, str]) -> None:
        state = State(row["state"])
        where = f"job {job_id} {state.value} with steps {sorted(s.value for s in states)}"
        if state is State.SUCCEED:
            assert states == {State.SUCCEED}, where
            assert row["finished_at"] is not None, where
        if state in (State.READY, State.ERROR, State.DISCARDED):
            assert State.RUNNING not in states, where
        if state is State.DISCARDED:
            assert states <= {State.SUCCEED, State.DISCARDED}, where
            assert row["finished_at"] is not None, where
        else:
            assert State.DISCARDED not in states, where
        if state is State.RUNNING:
            assert row["node"] is not None and row["started_at"] is not None, where
        if state is State.READY:  # unassigned, or given to a node by the leader
            assert row["node"] is None or row["node"] == assigned.get(job_id), where


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def lifecycle_store(request: pytest.FixtureRequest) -> Any:
    if request.param == "postgres":  # the session's database; skips (fails in CI) without
        yield request.getfixturevalue("pg_store_session")
        return
    shm = Path("/dev/shm")  # a RAM disk where there is one: commits without fsync waits
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as scratch:
        store = Store(f"sqlite:///{scratch}/properties.db")
        store.create_all()
        yield store
        store.dispose()


#: Sequences per store. They are derandomized, so PostgreSQL replays the first 30 of
#: SQLite's 60: what it adds is its own locking and dialect, which those exercise; the
#: rest would repeat the same operations at twenty times SQLite's cost per step.
EXAMPLES = {"sqlite": 60, "postgres": 30}


def test_any_sequence_of_operations_keeps_the_state_machine(
        lifecycle_store: Store, request: pytest.FixtureRequest) -> None:
    JobLifecycle.store = lifecycle_store
    run_state_machine_as_test(JobLifecycle, settings=settings(
        max_examples=EXAMPLES[request.node.callspec.params["lifecycle_store"]], stateful_step_count=40, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))


# -- config parsing ----------------------------------------------------------------------------
def _leaves(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    found = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.update(_leaves(annotation, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = annotation
    return found


LEAVES = _leaves(Config)
ENV_NAMES = sorted(env_name(key) for key in LEAVES)
ODD_NAMES = ["JOBSERVER_API__", "JOBSERVER___BIND", "JOBSERVER_API__BIND__DEEP",
             "JOBSERVER_NOPE__X", "JOBSERVER_DATA_DIR__X", "JOBSERVER_SCHEDULER",
             "JOBSERVER_STEPS__SHELL", "JOBSERVER_URL", "JOBSERVER_JOB_ID"]
VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", " ", "true", "false", "yes", "0", "1", "2", "100", "-1", "1e309",
                     "nan", "[]", "[1, 2]", '["a", "b"]', "[", "a,b", ",", "single", "leader",
                     "distributed", "file", "postgres", "zookeeper", "memory",
                     "digest:u:p", "127.0.0.1:8080", "unix:/tmp/s", "/tmp", "{}", "null"]),
    st.lists(st.text(max_size=20), max_size=3).map(json.dumps),
)
ENVIRON = st.dictionaries(st.sampled_from(ENV_NAMES + ODD_NAMES) | st.text(max_size=12).map(
    lambda suffix: "JOBSERVER_" + suffix.upper()), VALUES, max_size=6)


def _check_type(value: Any, annotation: Any, key: str) -> None:
    union = get_origin(annotation) in (Union, UnionType)
    options = [a for a in (get_args(annotation) if union else (annotation,))
               if a is not type(None)]
    if value is None:
        assert union and type(None) in get_args(annotation), f"{key} is None"
        return
    for option in options:
        if get_origin(option) is list:
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return
        elif get_origin(option) is dict:  # named sections, e.g. connections.<name>
            if isinstance(value, dict) and all(isinstance(v, get_args(option)[1])
                                               for v in value.values()):
                return
        elif isinstance(option, type) and isinstance(value, option):
            if option is int and isinstance(value, bool):
                continue
            return
        elif option is float and isinstance(value, int) and not isinstance(value, bool):
            return
    raise AssertionError(f"{key} = {value!r} is not a {annotation}")


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(environ=ENVIRON)
def test_env_overrides_parse_to_types_or_name_the_key(environ: dict[str, str]) -> None:
    environ.pop("JOBSERVER_CONFIG", None)  # that one names a file, not a value
    try:
        config = load_config(environ=environ)
    except ConfigError as exc:
        assert any(name in exc.message for name in environ), exc.message
        return
    for key, annotation in LEAVES.items():
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part)
        _check_type(value, annotation, key)
        if isinstance(value, enum.Enum):
            assert isinstance(value.value, str)
        if isinstance(value, SecretStr):
            assert value.get_secret_value() not in repr(config)
    assert isinstance(config.data_dir, Path)


@settings(max_examples=200, deadline=None)
@given(jobs=st.integers(1, 1000), poll=st.floats(0.001, 300), workers=st.integers(1, 64),
       rate=st.floats(0.001, 1_000_000), notify=st.booleans(), auth=st.booleans())
def test_valid_values_come_through_typed(jobs: int, poll: float, workers: int, rate: float,
                                         notify: bool, auth: bool) -> None:
    config = load_config(environ={
        "JOBSERVER_SCHEDULER__MAX_CONCURRENT_JOBS": f" {jobs} ",
        "JOBSERVER_SCHEDULER__POLL_INTERVAL": repr(poll),
        "JOBSERVER_API__WORKERS": str(workers), "JOBSERVER_API__SUBMIT_RATE": repr(rate),
        "JOBSERVER_SCHEDULER__NOTIFY": str(notify).lower(),
        "JOBSERVER_API__AUTH": "true" if auth else "false"})
    assert config.scheduler.max_concurrent_jobs == jobs and config.capacity == jobs
    assert config.scheduler.poll_interval == poll and config.api.submit_rate == rate
    assert config.api.workers == workers
    assert config.scheduler.notify is notify and config.api.auth is auth


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(sorted(k for k, a in LEAVES.items()
                                  if a in (int, float, bool) or a == (int | None))),
       junk=st.sampled_from(["abc", "1.5.6", "", "[1]", "{}", "10**9"]))
def test_a_bad_number_names_its_key_and_variable(key: str, junk: str) -> None:
    assume(not (LEAVES[key] is float and junk == ""))
    try:
        load_config(environ={env_name(key): junk})
    except ConfigError as exc:
        assert key in exc.message and env_name(key) in exc.message
    else:
        assert LEAVES[key] == (int | None) and junk == "", (key, junk)
